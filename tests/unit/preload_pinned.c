/*
 * preload_pinned — the pinned-host pool (preload/pinned.c) against a fake driver that keeps
 * the list of registered ranges, the way the real cuMemHostRegister/cuMemHostUnregister do.
 *
 * Properties checked:
 *   - every pointer handed out lies entirely inside one registered range, with the promised
 *     alignment (4 KiB from 4 KiB up, 256 B below);
 *   - pinning is cached: many allocations and frees cost few registrations, and freeing then
 *     allocating again registers nothing new;
 *   - live allocations never overlap;
 *   - a double free or an interior pointer is answered with CUDA_ERROR_INVALID_VALUE, a pointer
 *     the pool never gave out is reported as not owned — never a crash;
 *   - when the driver refuses to pin, the allocation fails cleanly;
 *   - four threads allocating and freeing at once keep all of the above (run under TSan).
 */
#include "preload/gm_internal.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- the pieces of libgpumem.so pinned.c uses, stubbed --------------------------------- */
struct gm_real gm_real;
_Atomic unsigned long long gm_stats[GM_ST_COUNT];
_Atomic unsigned long long gm_drv_calls[GM_DRV_COUNT]; /* core.c's, counted by pinned.c's pins */
void gm_warn(const char *fmt, ...) { (void)fmt; }
void gm_event(enum gm_ev ev, int device, CUstream stream, uintptr_t addr, size_t size,
              size_t requested)
{
    (void)ev, (void)device, (void)stream, (void)addr, (void)size, (void)requested;
}
int gm_test_yield_on; /* GPUMEM_TEST_FREE_YIELD: off here */
void gm_rec_interior_free(int device, CUstream stream, uintptr_t ptr, uint64_t alloc_id)
{
    (void)device, (void)stream, (void)ptr, (void)alloc_id;
}
void gm_pt_add(uintptr_t ptr, size_t size, enum gm_pt_kind kind, int device) { (void)ptr, (void)size, (void)kind, (void)device; }
int gm_capture_relax(CUstreamCaptureMode *saved)
{
    *saved = CU_STREAM_CAPTURE_MODE_GLOBAL;
    return 0; /* no capture in these tests */
}
void gm_capture_unrelax(int relaxed, CUstreamCaptureMode saved) { (void)relaxed, (void)saved; }

/* ---- fake driver: registered ranges --------------------------------------------------- */
#define MAXR 1024
static struct {
    uintptr_t base;
    size_t size;
} reg[MAXR];
static int nreg, registrations, unregistrations, refuse;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult fake_register(void *p, size_t size, unsigned flags)
{
    (void)flags;
    pthread_mutex_lock(&reg_lock);
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < nreg; i++) /* overlapping registrations are an error in CUDA */
        if ((uintptr_t)p < reg[i].base + reg[i].size && reg[i].base < (uintptr_t)p + size)
            r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if (refuse)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && nreg < MAXR) {
        reg[nreg].base = (uintptr_t)p;
        reg[nreg].size = size;
        nreg++;
        registrations++;
    }
    pthread_mutex_unlock(&reg_lock);
    return r;
}

static CUresult fake_unregister(void *p)
{
    pthread_mutex_lock(&reg_lock);
    CUresult r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    for (int i = 0; i < nreg; i++)
        if (reg[i].base == (uintptr_t)p) {
            reg[i] = reg[--nreg];
            unregistrations++;
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    return r;
}

static CUresult fake_alloc_host(void **p, size_t size)
{
    (void)p, (void)size;
    return CUDA_ERROR_NOT_SUPPORTED; /* the pool must not fall back while the arena works */
}

static int inside_registration(const void *p, size_t n)
{
    int ok = 0;
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < nreg; i++)
        if ((uintptr_t)p >= reg[i].base && (uintptr_t)p + n <= reg[i].base + reg[i].size)
            ok = 1;
    pthread_mutex_unlock(&reg_lock);
    return ok;
}

static int setup(void **state)
{
    (void)state;
    gm_real.cuMemHostRegister_v2 = fake_register;
    gm_real.cuMemHostUnregister = fake_unregister;
    gm_real.cuMemAllocHost_v2 = fake_alloc_host;
    return 0;
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_pointers_pinned_aligned_disjoint(void **state)
{
    (void)state;
    enum { N = 200 };
    void *p[N];
    size_t sz[N];
    for (int i = 0; i < N; i++) {
        sz[i] = (size_t)(1 + (i * 7919) % 300000);
        assert_int_equal(gm_pinned_alloc(&p[i], sz[i]), CUDA_SUCCESS);
        assert_non_null(p[i]);
        assert_true(inside_registration(p[i], sz[i]));
        assert_true(gm_pinned_owns(p[i]));
        uintptr_t align = sz[i] >= 4096 ? 4096 : 256;
        assert_int_equal((uintptr_t)p[i] % align, 0);
        memset(p[i], i & 0xff, sz[i]); /* writable host memory */
    }
    for (int i = 0; i < N; i++) /* no overlap: each still holds its own byte */
        for (size_t k = 0; k < sz[i]; k += 997)
            assert_int_equal(((unsigned char *)p[i])[k], i & 0xff);
    assert_true(registrations < N / 4); /* pages are pinned in extents, not per allocation */
    for (int i = 0; i < N; i++) {
        CUresult r;
        assert_int_equal(gm_pinned_free(p[i], &r), 1);
        assert_int_equal(r, CUDA_SUCCESS);
    }
}

static void test_reuse_registers_nothing_new(void **state)
{
    (void)state;
    void *p[64];
    for (int i = 0; i < 64; i++)
        assert_int_equal(gm_pinned_alloc(&p[i], 50000), CUDA_SUCCESS);
    CUresult r;
    for (int i = 0; i < 64; i++)
        assert_int_equal(gm_pinned_free(p[i], &r), 1);
    int before = registrations;
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < 64; i++)
            assert_int_equal(gm_pinned_alloc(&p[i], 50000), CUDA_SUCCESS);
        for (int i = 0; i < 64; i++)
            assert_int_equal(gm_pinned_free(p[i], &r), 1);
    }
    assert_int_equal(registrations, before);
    assert_int_equal(unregistrations, 0); /* cached: stays pinned */
}

/* A free made while a capture is underway (no implied synchronization then) is not handed out
 * again until a later synchronized free says the device is done with it; it is a free for the
 * program at once (a second free is a double free). */
static void test_deferred_free(void **state)
{
    (void)state;
    void *p, *q[16];
    CUresult r;
    assert_int_equal(gm_pinned_alloc(&p, 8192), CUDA_SUCCESS);
    assert_int_equal(gm_pinned_free_deferred(p, &r), 1);
    assert_int_equal(r, CUDA_SUCCESS);
    assert_int_equal(gm_pinned_free_deferred(p, &r), 1);
    assert_int_equal(r, CUDA_ERROR_INVALID_VALUE);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(gm_pinned_alloc(&q[i], 8192), CUDA_SUCCESS);
        assert_ptr_not_equal(q[i], p);
    }
    gm_pinned_release_deferred();
    int seen = 0;
    void *again;
    assert_int_equal(gm_pinned_alloc(&again, 8192), CUDA_SUCCESS);
    seen = again == p;
    assert_true(seen); /* back in the pool, the first fit again */
    assert_int_equal(gm_pinned_free(again, &r), 1);
    for (int i = 0; i < 16; i++)
        assert_int_equal(gm_pinned_free(q[i], &r), 1);
}

static void test_bad_frees_answered(void **state)
{
    (void)state;
    void *p;
    CUresult r = CUDA_SUCCESS;
    assert_int_equal(gm_pinned_alloc(&p, 10000), CUDA_SUCCESS);
    assert_int_equal(gm_pinned_free((char *)p + 16, &r), 1); /* interior pointer */
    assert_int_equal(r, CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(gm_pinned_free(p, &r), 1);
    assert_int_equal(r, CUDA_SUCCESS);
    r = CUDA_SUCCESS;
    assert_int_equal(gm_pinned_free(p, &r), 1); /* double free */
    assert_int_equal(r, CUDA_ERROR_INVALID_VALUE);
    void *foreign = malloc(64);
    assert_int_equal(gm_pinned_free(foreign, &r), 0); /* not the pool's: caller passes it on */
    assert_false(gm_pinned_owns(foreign));
    free(foreign);
    assert_int_equal(gm_pinned_free(NULL, &r), 0);
    void *z = (void *)1;
    assert_int_equal(gm_pinned_alloc(&z, 0), CUDA_SUCCESS); /* size 0: NULL, like the runtime */
    assert_null(z);
    assert_int_equal(gm_pinned_alloc(NULL, 10), CUDA_ERROR_INVALID_VALUE);
}

static void test_driver_refuses(void **state)
{
    (void)state;
    refuse = 1;
    void *p = NULL;
    /* bigger than anything cached: needs a new extent, which the driver will not pin */
    CUresult r = gm_pinned_alloc(&p, (size_t)512 << 20);
    refuse = 0;
    assert_int_equal(r, CUDA_ERROR_OUT_OF_MEMORY);
    assert_null(p);
    assert_int_equal(gm_pinned_alloc(&p, 1000), CUDA_SUCCESS); /* and it recovers */
    CUresult fr;
    assert_int_equal(gm_pinned_free(p, &fr), 1);
}

static void *thread_body(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *mine[16] = {0};
    unsigned char tag[16];
    int bad = 0;
    for (int op = 0; op < 2000; op++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % 16);
        CUresult r;
        if (mine[k]) {
            if (*(unsigned char *)mine[k] != tag[k])
                bad++;
            if (gm_pinned_free(mine[k], &r) != 1 || r != CUDA_SUCCESS)
                bad++;
            mine[k] = NULL;
        } else {
            size_t n = 1 + (seed >> 12) % 70000;
            if (gm_pinned_alloc(&mine[k], n) != CUDA_SUCCESS || !inside_registration(mine[k], n)) {
                bad++;
                mine[k] = NULL;
                continue;
            }
            tag[k] = (unsigned char)(seed >> 3);
            memset(mine[k], tag[k], n);
        }
    }
    for (int k = 0; k < 16; k++) {
        CUresult r;
        if (mine[k])
            gm_pinned_free(mine[k], &r);
    }
    return (void *)(intptr_t)bad;
}

static void test_threads(void **state)
{
    (void)state;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, thread_body, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < 4; i++) {
        void *bad;
        pthread_join(t[i], &bad);
        assert_int_equal((intptr_t)bad, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pointers_pinned_aligned_disjoint),
        cmocka_unit_test(test_reuse_registers_nothing_new),
        cmocka_unit_test(test_bad_frees_answered),
        cmocka_unit_test(test_deferred_free),
        cmocka_unit_test(test_driver_refuses),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
