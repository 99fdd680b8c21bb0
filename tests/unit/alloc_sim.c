/* alloc_sim.c — the allocator over the virtual GPU's driver (build/sim/libcuda.so.1), reached
 * the way the preload reaches a real driver: dlopen + cuGetProcAddress_v2, no link-time cu*
 * symbols. The backend below is a complete alloc_backend_t over CUDA driver calls.
 *
 * Properties checked:
 *   - with the sim's delayed-completion events, a block freed with cudaFree semantics is not
 *     handed out again while an event recorded at the free is pending, and is reused once the
 *     context is synchronized;
 *   - expandable segments really map memory: blocks are writable and hold their contents;
 *   - classic segments (cuMemAlloc) work the same way;
 *   - at the device's capacity the allocator fails with OOM forensics instead of crashing, and
 *     recovers after frees;
 *   - release before growth under queued work makes no synchronization and unmaps no page a
 *     queued kernel may still use.
 * Skipped (not failed) only when the sim library was not built. */
#include <dlfcn.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda.h>

#include "alloc/alloc.h"
#include "sim/sim.h"

#define MiB ((size_t)1 << 20)

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);

static struct {
    void *lib;
    CUdevice dev;
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*AddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*AddressFree)(CUdeviceptr, size_t);
    CUresult (*Create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*Release)(CUmemGenericAllocationHandle);
    CUresult (*Map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*SetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*Unmap)(CUdeviceptr, size_t);
    CUresult (*Granularity)(size_t *, const CUmemAllocationProp *,
                            CUmemAllocationGranularity_flags);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventQuery)(CUevent);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    void (*set_event_delay)(unsigned);
    size_t (*events_pending)(void);
    CUresult (*set_capacity)(size_t);
    void (*stats_get)(sim_stats *);
} cu;

/* ---- the backend over driver calls --------------------------------------------------------- */

static int be_code(CUresult r)
{
    if (r == CUDA_SUCCESS) return ALLOC_BE_OK;
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return ALLOC_BE_OOM;
    if (r == CUDA_ERROR_NOT_READY) return ALLOC_BE_NOT_READY;
    return 1000 + (int)r;
}

static CUmemAllocationProp prop(void)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = cu.dev;
    return p;
}

static int b_reserve(void *c, size_t size, size_t align, uint64_t *addr)
{
    (void)c;
    CUdeviceptr p = 0;
    int rc = be_code(cu.AddressReserve(&p, size, align, 0, 0));
    *addr = p;
    return rc;
}
static int b_free_range(void *c, uint64_t addr, size_t size)
{
    (void)c;
    return be_code(cu.AddressFree(addr, size));
}
static int b_create(void *c, size_t size, uint64_t *h)
{
    (void)c;
    CUmemAllocationProp p = prop();
    CUmemGenericAllocationHandle hh = 0;
    int rc = be_code(cu.Create(&hh, size, &p, 0));
    *h = hh;
    return rc;
}
static int b_release(void *c, uint64_t h)
{
    (void)c;
    return be_code(cu.Release(h));
}
static int b_map(void *c, uint64_t addr, size_t size, uint64_t h)
{
    (void)c;
    return be_code(cu.Map(addr, size, 0, h, 0));
}
static int b_set_access(void *c, uint64_t addr, size_t size)
{
    (void)c;
    CUmemAccessDesc d;
    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = cu.dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return be_code(cu.SetAccess(addr, size, &d, 1));
}
static int b_unmap(void *c, uint64_t addr, size_t size)
{
    (void)c;
    return be_code(cu.Unmap(addr, size));
}
static size_t b_granularity(void *c)
{
    (void)c;
    CUmemAllocationProp p = prop();
    size_t g = 0;
    return cu.Granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS ? g : 0;
}
static int b_seg_alloc(void *c, size_t size, uint64_t *addr)
{
    (void)c;
    CUdeviceptr p = 0;
    int rc = be_code(cu.MemAlloc(&p, size));
    *addr = p;
    return rc;
}
static int b_seg_free(void *c, uint64_t addr, size_t size)
{
    (void)c;
    (void)size;
    return be_code(cu.MemFree(addr));
}
static int b_event_create(void *c, void **ev)
{
    (void)c;
    CUevent e = NULL;
    int rc = be_code(cu.EventCreate(&e, CU_EVENT_DISABLE_TIMING));
    *ev = e;
    return rc;
}
static int b_event_record(void *c, void *ev, uintptr_t s)
{
    (void)c;
    return be_code(cu.EventRecord((CUevent)ev, (CUstream)s));
}
static int b_event_query(void *c, void *ev)
{
    (void)c;
    return be_code(cu.EventQuery((CUevent)ev));
}
static int b_event_destroy(void *c, void *ev)
{
    (void)c;
    return be_code(cu.EventDestroy((CUevent)ev));
}
static int b_sync(void *c)
{
    (void)c;
    return be_code(cu.CtxSynchronize());
}
static int b_mem_info(void *c, size_t *f, size_t *t)
{
    (void)c;
    return be_code(cu.MemGetInfo(f, t));
}

static const alloc_backend_t sim_backend = {
    .reserve = b_reserve,
    .free_range = b_free_range,
    .create = b_create,
    .release = b_release,
    .map = b_map,
    .set_access = b_set_access,
    .unmap = b_unmap,
    .granularity = b_granularity,
    .seg_alloc = b_seg_alloc,
    .seg_free = b_seg_free,
    .event_create = b_event_create,
    .event_record = b_event_record,
    .event_query = b_event_query,
    .event_destroy = b_event_destroy,
    .synchronize = b_sync,
    .mem_info = b_mem_info,
};

/* ---- loading the sim ----------------------------------------------------------------------- */

static int load_sim(void **state)
{
    (void)state;
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    *slash = 0; /* <build>/tests/unit */
    snprintf(path, sizeof(path), "%s/../../sim/libcuda.so.1", exe);
    if (access(path, R_OK) != 0) {
        print_message("virtual GPU not built (%s): tests skipped\n", path);
        return 0;
    }
    cu.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!cu.lib) {
        print_error("dlopen %s: %s\n", path, dlerror());
        return -1;
    }
    getproc_fn gp = (getproc_fn)dlsym(cu.lib, "cuGetProcAddress_v2");
    if (!gp) return -1;
#define GET(field, name) GETV(field, name, 13000)
        /* CUDA 13's cuCtxSynchronize (v13000) takes a context; ask for the 2000 signature */
#define GETV(field, name, ver)                                                                     \
    do {                                                                                           \
        CUdriverProcAddressQueryResult st;                                                         \
        if (gp(name, (void **)&cu.field, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || \
            !cu.field) {                                                                           \
            print_error("cuGetProcAddress(%s) failed\n", name);                                    \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)
    GET(Init, "cuInit");
    GET(DeviceGet, "cuDeviceGet");
    GET(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    GET(CtxSetCurrent, "cuCtxSetCurrent");
    GETV(CtxSynchronize, "cuCtxSynchronize", 12000);
    GET(AddressReserve, "cuMemAddressReserve");
    GET(AddressFree, "cuMemAddressFree");
    GET(Create, "cuMemCreate");
    GET(Release, "cuMemRelease");
    GET(Map, "cuMemMap");
    GET(SetAccess, "cuMemSetAccess");
    GET(Unmap, "cuMemUnmap");
    GET(Granularity, "cuMemGetAllocationGranularity");
    GET(MemAlloc, "cuMemAlloc");
    GET(MemFree, "cuMemFree");
    GET(MemGetInfo, "cuMemGetInfo");
    GET(EventCreate, "cuEventCreate");
    GET(EventRecord, "cuEventRecord");
    GET(EventQuery, "cuEventQuery");
    GET(EventDestroy, "cuEventDestroy");
    GET(StreamCreate, "cuStreamCreate");
#undef GET
#undef GETV
    cu.set_event_delay = (void (*)(unsigned))dlsym(cu.lib, "sim_set_event_delay");
    cu.events_pending = (size_t(*)(void))dlsym(cu.lib, "sim_events_pending");
    cu.set_capacity = (CUresult(*)(size_t))dlsym(cu.lib, "sim_set_capacity");
    cu.stats_get = (void (*)(sim_stats *))dlsym(cu.lib, "sim_stats_get");
    if (!cu.set_event_delay || !cu.events_pending || !cu.set_capacity || !cu.stats_get) return -1;
    CUcontext ctx;
    if (cu.Init(0) || cu.DeviceGet(&cu.dev, 0) || cu.PrimaryCtxRetain(&ctx, cu.dev) ||
        cu.CtxSetCurrent(ctx))
        return -1;
    return 0;
}

#define NEED_SIM()                                                                                 \
    do {                                                                                           \
        if (!cu.lib) skip();                                                                       \
    } while (0)

static alloc_t *make(const char *preset)
{
    alloc_config_t cfg;
    alloc_config_preset(&cfg, preset);
    alloc_t *a = NULL;
    assert_int_equal(alloc_create(&sim_backend, &cfg, &a), ALLOC_OK);
    return a;
}

static void check(alloc_t *a)
{
    char err[256];
    if (alloc_check(a, err, sizeof(err))) fail_msg("alloc_check: %s", err);
}

/* cudaFree semantics on the sim's delayed events: no reuse while the free's events are pending. */
static void test_free_not_reused_while_event_pending(void **state)
{
    (void)state;
    NEED_SIM();
    for (int classic = 0; classic < 2; classic++) {
        alloc_t *a = make(classic ? "pytorch" : "gpumem");
        CUstream s1, s2;
        assert_int_equal(cu.StreamCreate(&s1, 0), CUDA_SUCCESS);
        assert_int_equal(cu.StreamCreate(&s2, 0), CUDA_SUCCESS);
        cu.set_event_delay(1000000); /* events stay pending until a synchronize */
        uint64_t p, q, r;
        assert_int_equal(alloc_malloc(a, 64 * 1024, 0, &p), ALLOC_OK);
        assert_int_equal(alloc_malloc(a, 4096, (uintptr_t)s2, &q), ALLOC_OK);
        size_t before = cu.events_pending();
        assert_int_equal(alloc_free(a, p), ALLOC_OK);
        assert_true(cu.events_pending() >= before + 2); /* an event on each stream seen */
        for (int i = 0; i < 3; i++) {
            assert_int_equal(alloc_malloc(a, 64 * 1024, 0, &r), ALLOC_OK);
            assert_true(r != p);
            assert_int_equal(alloc_free_async(a, r, 0), ALLOC_OK);
        }
        check(a);
        assert_int_equal(cu.CtxSynchronize(), CUDA_SUCCESS);
        assert_int_equal(cu.events_pending(), 0);
        assert_int_equal(alloc_malloc(a, 64 * 1024, 0, &r), ALLOC_OK);
        assert_true(r == p); /* events done: the block is back */
        cu.set_event_delay(0);
        alloc_free(a, r);
        alloc_free(a, q);
        check(a);
        alloc_destroy(a);
    }
}

/* Blocks of expandable and classic segments are real memory that keeps what is written. */
static void test_blocks_hold_data(void **state)
{
    (void)state;
    NEED_SIM();
    for (int classic = 0; classic < 2; classic++) {
        alloc_t *a = make(classic ? "pytorch" : "gpumem");
        uint64_t p[16];
        size_t sz[16];
        for (int i = 0; i < 16; i++) {
            sz[i] = (size_t)(i + 1) * 300 * 1024;
            assert_int_equal(alloc_malloc(a, sz[i], 0, &p[i]), ALLOC_OK);
            memset((void *)(uintptr_t)p[i], i + 1, sz[i]);
        }
        for (int i = 0; i < 16; i++) {
            const unsigned char *c = (const unsigned char *)(uintptr_t)p[i];
            assert_true(c[0] == i + 1 && c[sz[i] - 1] == i + 1 && c[sz[i] / 2] == i + 1);
        }
        for (int i = 0; i < 16; i += 2)
            alloc_free(a, p[i]);
        assert_int_equal(alloc_empty_cache(a), ALLOC_OK); /* unmaps the freed pages */
        check(a);
        for (int i = 1; i < 16; i += 2) { /* survivors untouched by the unmapping */
            const unsigned char *c = (const unsigned char *)(uintptr_t)p[i];
            assert_true(c[0] == i + 1 && c[sz[i] - 1] == i + 1);
            alloc_free(a, p[i]);
        }
        alloc_empty_cache(a);
        alloc_stats_t st;
        alloc_get_stats(a, &st);
        assert_int_equal(st.reserved_bytes.current, 0);
        alloc_destroy(a);
    }
}

/* At capacity: OOM with forensics, no crash; frees make room again. */
static void test_oom_at_capacity(void **state)
{
    (void)state;
    NEED_SIM();
    size_t f0, t0;
    assert_int_equal(cu.MemGetInfo(&f0, &t0), CUDA_SUCCESS);
    size_t used = t0 - f0;
    assert_int_equal(cu.set_capacity(used + 64 * MiB), CUDA_SUCCESS);
    alloc_t *a = make("gpumem");
    uint64_t p[64];
    int n, rc = ALLOC_OK;
    for (n = 0; n < 63; n++)
        if ((rc = alloc_malloc(a, 6 * MiB, 0, &p[n])) != ALLOC_OK) break;
    assert_int_equal(rc, ALLOC_ERR_OOM);
    assert_true(n >= 8 && n <= 11);
    alloc_oom_info_t o;
    assert_true(alloc_last_oom(a, &o));
    assert_int_equal(o.requested, 6 * MiB);
    assert_true(o.device_free < 6 * MiB + 2 * MiB);
    check(a);
    alloc_free(a, p[0]);
    alloc_free(a, p[1]);
    uint64_t q;
    assert_int_equal(alloc_malloc(a, 12 * MiB, 0, &q), ALLOC_OK);
    for (int i = 2; i < n; i++)
        alloc_free(a, p[i]);
    alloc_free(a, q);
    alloc_destroy(a);
    assert_int_equal(cu.set_capacity(t0), CUDA_SUCCESS);
}

/* Release before growth under queued work (issue 41), on the virtual GPU: a kernel still queued
 * on s (an event the test records there, pending until a synchronize) may read the block freed
 * after it. The growth past the peak makes no cuCtxSynchronize (the sim's counters) and leaves
 * that block's pages mapped: the sim maps real memory and unmapped addresses fault, so its
 * contents are read back intact. After the program synchronizes, the next growth gives them
 * back, still without a synchronize of its own. */
static void test_grow_never_synchronizes(void **state)
{
    (void)state;
    NEED_SIM();
    alloc_t *a = make("gpumem");
    CUstream s;
    assert_int_equal(cu.StreamCreate(&s, 0), CUDA_SUCCESS);
    uint64_t x, y, z, w;
    assert_int_equal(alloc_malloc(a, 30 * MiB, (uintptr_t)s, &x), ALLOC_OK);
    assert_int_equal(alloc_malloc(a, 30 * MiB, (uintptr_t)s, &y), ALLOC_OK);
    memset((void *)(uintptr_t)x, 0x5a, 30 * MiB);
    cu.set_event_delay(1000000); /* the work queued on s stays unfinished */
    CUevent kernel;
    assert_int_equal(cu.EventCreate(&kernel, 0), CUDA_SUCCESS);
    assert_int_equal(cu.EventRecord(kernel, s), CUDA_SUCCESS);
    assert_int_equal(alloc_free_async(a, x, (uintptr_t)s), ALLOC_OK);
    sim_stats st0, st1;
    cu.stats_get(&st0);
    assert_int_equal(alloc_malloc(a, 40 * MiB, (uintptr_t)s, &z), ALLOC_OK); /* fits no hole */
    cu.stats_get(&st1);
    assert_int_equal(st1.op[SIM_OP_CTX_SYNC].calls, st0.op[SIM_OP_CTX_SYNC].calls);
    assert_int_equal(st1.op[SIM_OP_STREAM_SYNC].calls, st0.op[SIM_OP_STREAM_SYNC].calls);
    assert_int_equal(st1.op[SIM_OP_MEM_UNMAP].calls, st0.op[SIM_OP_MEM_UNMAP].calls);
    const unsigned char *c = (const unsigned char *)(uintptr_t)x;
    assert_true(c[0] == 0x5a && c[15 * MiB] == 0x5a && c[30 * MiB - 1] == 0x5a);
    assert_int_equal(cu.CtxSynchronize(), CUDA_SUCCESS); /* the program waits (loss.item()) */
    cu.set_event_delay(0);
    cu.stats_get(&st0);
    assert_int_equal(alloc_malloc(a, 50 * MiB, (uintptr_t)s, &w), ALLOC_OK); /* past the peak */
    cu.stats_get(&st1);
    assert_int_equal(st1.op[SIM_OP_CTX_SYNC].calls, st0.op[SIM_OP_CTX_SYNC].calls);
    assert_int_equal(st1.op[SIM_OP_MEM_UNMAP].calls - st0.op[SIM_OP_MEM_UNMAP].calls, 15);
    alloc_stats_t as;
    alloc_get_stats(a, &as);
    assert_int_equal(as.num_syncs, 0);
    assert_int_equal(as.reserved_bytes.current, 120 * MiB); /* 30 + 40 + 50 */
    check(a);
    alloc_free(a, y);
    alloc_free(a, z);
    alloc_free(a, w);
    cu.EventDestroy(kernel);
    alloc_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_not_reused_while_event_pending),
        cmocka_unit_test(test_blocks_hold_data),
        cmocka_unit_test(test_oom_at_capacity),
        cmocka_unit_test(test_grow_never_synchronizes),
    };
    return cmocka_run_group_tests(tests, load_sim, NULL);
}
