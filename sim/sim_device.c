/* sim_device.c — initialization, the one device, the primary context, cuGetProcAddress and
 * error strings.
 *
 * The virtual GPU has GPUMEM_SIM_DEVICES devices (default 1), each described by the device
 * profile in use (GPUMEM_SIM_PROFILE, sim_profile.c; by default A100-80GB attributes under the
 * sim's own name) with the profile's memory or GPUMEM_SIM_MEMORY. Each
 * device has one context, its primary context; cuCtxCreate is not supported. The current context
 * (per thread) decides the device of memory calls and default streams; without one they return
 * CUDA_ERROR_INVALID_CONTEXT, as the real driver does.
 *
 * cuGetProcAddress answers by the base name, as the real driver does ("cuMemAlloc" gives
 * cuMemAlloc_v2): the table is generated at build time from the toolkit's cuda.h
 * (sim/gen_procs.sh), so every driver function the header declares is reachable. Functions the
 * sim implements resolve to the implementation; the others to a stub that returns
 * CUDA_ERROR_NOT_SUPPORTED with a note on stderr the first time.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"
#include "sim_procs.h" /* generated: sim_cu_procs[], sim_cu_nprocs, SIM_CU_ERRORS */

static __thread CUcontext tls_ctx;
static __thread CUcontext tls_stack[8];
static __thread int tls_depth;

CUresult cuInit(unsigned int flags)
{
    sim_ensure_config();
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    __atomic_store_n(&sim.initialized, true, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *v)
{
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = CUDA_VERSION;
    return CUDA_SUCCESS;
}

/* ---- devices ----------------------------------------------------------------------------- */

static CUresult check_dev(CUdevice d)
{
    SIM_CHECK_INIT();
    return d >= 0 && d < sim.ndevices ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuDeviceGetCount(int *count)
{
    SIM_CHECK_INIT();
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = sim.ndevices;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    SIM_CHECK_INIT();
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= sim.ndevices) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc) return rc;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", sim.profile->name);
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc) return rc;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    *bytes = sim.dev[dev].capacity;
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc) return rc;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    char u[17];
    snprintf(u, sizeof u, "gpumem-sim-dev%02u", (unsigned)dev % 100u);
    memcpy(uuid->bytes, u, 16);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc) return rc;
    if (!id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(id, (size_t)len, "0000:%02x:00.0", (unsigned)dev);
    return CUDA_SUCCESS;
}

CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc) return rc;
    if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
    *major = sim.profile->cc_major;
    *minor = sim.profile->cc_minor;
    return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    CUresult rc = check_dev(dev);
    if (rc) return rc;
    if (peer < 0 || peer >= sim.ndevices) return CUDA_ERROR_INVALID_DEVICE;
    if (!can) return CUDA_ERROR_INVALID_VALUE;
    *can = peer != dev; /* every pair of virtual devices can (host memory is shared) */
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attr, CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc) return rc;
    if (!pi || attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
    const sim_profile *p = sim.profile;
    int v = 0;
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        v = 64;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        v = 2147483647;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        v = 65535;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        v = 49152;
        break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
        v = SIM_MAX_PITCH;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        v = p->clock_khz;
        break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
        v = SIM_TEXTURE_ALIGNMENT;
        break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
        v = SIM_TEXTURE_PITCH_ALIGNMENT;
        break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        v = p->sm_count;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
        v = p->mem_clock_khz;
        break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
        v = p->bus_width;
        break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
        v = p->l2_bytes;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        v = p->threads_per_sm;
        break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
        v = p->copy_engines;
        break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        v = p->cc_major;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        v = p->cc_minor;
        break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        v = p->smem_per_sm;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        v = p->smem_optin;
        break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
        v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
        v = p->cc_major >= 9;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
        v = 1; /* under every backing: cuMemCreate accepts the type (see sim_mem.c) */
        break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
        v = p->fabric; /* the hardware can; creating one needs an IMEX channel (sim_mem.c) */
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        v = dev; /* as cuDeviceGetPCIBusId writes it: 0000:<dev>:00.0 */
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
        v = p->blocks_per_sm;
        break;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
        v = 0;
        break;
    default:
        v = 0;
        break; /* a valid attribute the sim has no figure for: "not present" */
    }
    *pi = v;
    return CUDA_SUCCESS;
}

/* ---- the primary contexts ---------------------------------------------------------------- */

bool sim_ctx_valid(CUcontext c)
{
    for (int d = 0; d < sim.ndevices; d++)
        if (c == &sim.dev[d].primary) return true;
    return false;
}

static bool ctx_valid(CUcontext c)
{
    return sim_ctx_valid(c);
}

CUresult sim_current_dev(int *dev)
{
    CUcontext c = tls_ctx;
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = c->dev;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc) return rc;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_device *d = &sim.dev[dev];
    /* Activating the context takes its memory (GPUMEM_SIM_CONTEXT_BYTES) from the device. */
    if (d->primary.refs == 0 && d->ctx_bytes > d->capacity - d->used)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else
        d->primary.refs++;
    sim_unlock();
    if (rc) return rc;
    *pctx = &d->primary;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc) return rc;
    sim_lock();
    if (sim.dev[dev].primary.refs > 0)
        sim.dev[dev].primary.refs--;
    else
        rc = CUDA_ERROR_INVALID_CONTEXT;
    sim_unlock();
    return rc;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = check_dev(dev);
    if (rc) return rc;
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    *flags = sim.dev[dev].primary.flags;
    *active = sim.dev[dev].primary.refs > 0;
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    CUresult rc = check_dev(dev);
    if (rc) return rc;
    sim_lock();
    sim.dev[dev].primary.flags = flags;
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    /* "Destroys all allocations and resets all state on the primary context": after the device
     * has drained, its device allocations are gone (sim_device_reset_memory says which); the
     * context itself stays usable, as the runtime expects after cudaDeviceReset. */
    CUresult rc = check_dev(dev);
    if (rc) return rc;
    sim_lock();
    double wait = sim_device_drain(dev);
    sim_device_reset_memory(dev);
    sim_cost_wait(SIM_OP_CTX_SYNC, wait);
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    SIM_CHECK_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = tls_ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    SIM_CHECK_INIT();
    if (ctx && !ctx_valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    tls_ctx = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    SIM_CHECK_INIT();
    if (!ctx_valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth >= (int)(sizeof tls_stack / sizeof tls_stack[0])) return CUDA_ERROR_INVALID_VALUE;
    tls_stack[tls_depth++] = tls_ctx;
    tls_ctx = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    SIM_CHECK_INIT();
    if (!tls_ctx) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx) *pctx = tls_ctx;
    tls_ctx = tls_depth > 0 ? tls_stack[--tls_depth] : NULL;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *dev)
{
    SIM_CHECK_INIT();
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    int d;
    CUresult rc = sim_current_dev(&d);
    if (rc) return rc;
    *dev = d;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetFlags(unsigned int *flags)
{
    SIM_CHECK_INIT();
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    if (!tls_ctx) return CUDA_ERROR_INVALID_CONTEXT;
    sim_lock();
    *flags = tls_ctx->flags;
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    SIM_CHECK_INIT();
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    if (!ctx) ctx = tls_ctx;
    if (!ctx_valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    *id = ctx->id;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    SIM_CHECK_INIT();
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    if (ctx && !ctx_valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    *version = CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    SIM_CHECK_INIT();
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return CUDA_SUCCESS;
}

static CUresult ctx_sync(CUcontext c)
{
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    sim_lock();
    /* "invalid to ... synchronize a broader handle which encompasses an active stream capture,
     * such as a device or context handle" */
    if (sim.ncaptures && sim_capture_on_device(c->dev, false, true)) {
        sim_unlock();
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    double wait = sim_device_drain(c->dev);
    sim_cost(SIM_OP_CTX_SYNC, 0);
    sim_cost_wait(SIM_OP_CTX_SYNC, wait);
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
    SIM_CHECK_INIT();
    return ctx_sync(tls_ctx);
}

/* CUDA 13.0's variant takes the context to synchronize (NULL: the current one). */
CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    SIM_CHECK_INIT();
    if (ctx && !ctx_valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    return ctx_sync(ctx ? ctx : tls_ctx);
}

/* Peer access: every pair of virtual devices can reach each other's memory (it is all host
 * memory); enabling is bookkeeping with the real error codes. */
CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    SIM_CHECK_INIT();
    if (flags) return CUDA_ERROR_INVALID_VALUE;
    if (!tls_ctx) return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx_valid(peer)) return CUDA_ERROR_INVALID_VALUE;
    if (peer == tls_ctx) return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    uint64_t bit = (uint64_t)1 << peer->dev;
    sim_device *d = &sim.dev[tls_ctx->dev];
    CUresult rc = (d->peer_mask & bit) ? CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED : CUDA_SUCCESS;
    d->peer_mask |= bit;
    sim_unlock();
    return rc;
}

CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
    SIM_CHECK_INIT();
    if (!tls_ctx) return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx_valid(peer)) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    uint64_t bit = (uint64_t)1 << peer->dev;
    sim_device *d = &sim.dev[tls_ctx->dev];
    CUresult rc = (d->peer_mask & bit) ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    d->peer_mask &= ~bit;
    sim_unlock();
    return rc;
}

CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attr, CUdevice src, CUdevice dst)
{
    CUresult rc = check_dev(src);
    if (!rc) rc = check_dev(dst);
    if (rc) return rc;
    if (!value || src == dst) return CUDA_ERROR_INVALID_DEVICE;
    switch (attr) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
        *value = 0;
        break;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
        *value = 1;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ---- cuGetProcAddress -------------------------------------------------------------------- */

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);

/* The CUDA 11.3 signature (no status), which callers reach by asking for "cuGetProcAddress"
 * with a version below 12000. Exported as "cuGetProcAddress" next to cuGetProcAddress_v2. */
CUresult sim_cuGetProcAddress_v1(const char *symbol, void **pfn, int cudaVersion,
                                 cuuint64_t flags) __asm__("cuGetProcAddress");
CUresult sim_cuGetProcAddress_v1(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    sim_ensure_config();
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    /* Flags choose legacy or per-thread default-stream variants (sim_ptds.c). */
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    if (!strcmp(symbol, "cuGetProcAddress")) {
        *pfn = cudaVersion >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)sim_cuGetProcAddress_v1;
        if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    if (!strcmp(symbol, "cuEventElapsedTime") && cudaVersion < 12080) {
        *pfn = (void *)sim_cuEventElapsedTime_v1;
        if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    /* Several variants can share a base name (cuCtxSynchronize since 2.0, cuCtxSynchronize_v2
     * since 13.0): the answer is the newest one introduced at or before the requested version. */
    const sim_cu_proc *best = NULL;
    bool exists = false;
    for (size_t i = 0; i < sim_cu_nprocs; i++) {
        const sim_cu_proc *e = &sim_cu_procs[i];
        if (strcmp(e->base, symbol)) continue;
        exists = true;
        if (e->since > cudaVersion) continue;
        if (!best || e->since > best->since ||
            (e->since == best->since && e->suffix > best->suffix))
            best = e;
    }
    /* A versioned name ("cuMemAlloc_v2") is answered too: the real driver (580, CUDA 13.0)
     * returns that variant with CUDA_SUCCESS (tests/gpu/sim_parity.sh). */
    const char *v = exists ? NULL : strrchr(symbol, '_');
    if (v && v[1] == 'v' && v[2] >= '1' && v[2] <= '9') {
        char *end;
        long suffix = strtol(v + 2, &end, 10);
        for (size_t i = 0; !*end && i < sim_cu_nprocs; i++) {
            const sim_cu_proc *e = &sim_cu_procs[i];
            if (e->suffix != suffix || strncmp(e->base, symbol, (size_t)(v - symbol)) ||
                e->base[v - symbol])
                continue;
            exists = true;
            if (e->since <= cudaVersion) best = e;
        }
    }
    if (!best) {
        if (!exists) return CUDA_ERROR_NOT_FOUND;
        /* the real driver: CUDA_SUCCESS, no function, the status says why */
        if (status) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_SUCCESS;
    }
    /* The per-thread default-stream flag answers the _ptsz / _ptds variant where there is one. */
    *pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? sim_ptds_variant(best->fn)
                                                                   : best->fn;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
    (void)id;
    if (table) *table = NULL;
    /* The callers are CUDA runtimes linked statically: nvcc's default for a program, and the one
     * NVIDIA's libraries embed (cuBLAS, cuBLASLt, cuDNN, NCCL). They cannot start without
     * NVIDIA's private tables: say, once, which object asked (the caller's, by its return
     * address) and what to do about it — never blame the program for a library's runtime. */
    static atomic_flag hinted = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&hinted)) {
        Dl_info di;
        const char *who = dladdr(__builtin_return_address(0), &di) && di.dli_fname ? di.dli_fname : NULL;
        const char *base = who && strrchr(who, '/') ? strrchr(who, '/') + 1 : who;
        int is_prog = base && !strstr(base, ".so"); /* the executable, not a shared library */
        if (!who)
            sim_note("a statically linked CUDA runtime (nvcc's default for a program; cuBLAS, cuDNN and "
                     "NCCL embed one) asks for the driver's private export tables, which only NVIDIA's "
                     "driver has");
        else if (is_prog)
            sim_note("%s, built with nvcc's default static CUDA runtime, asks for the driver's private "
                     "export tables, which only NVIDIA's driver has: on the virtual GPU, build it with "
                     "-cudart shared (as PyTorch links the runtime)", who);
        else
            sim_note("%s embeds a static CUDA runtime that asks for the driver's private export tables, "
                     "which only NVIDIA's driver has: it cannot run on the virtual GPU (a stand-in with "
                     "its soname must be loaded instead, sim/README.md); the program's own runtime is "
                     "not the cause", who);
    }
    return sim_unsupported("cuGetExportTable");
}

/* ---- error strings ----------------------------------------------------------------------- */

static const struct {
    CUresult code;
    const char *text;
} error_text[] = {
    {CUDA_SUCCESS, "no error"},
    {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"},
    {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "device not ready"},
    {CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_NOT_PERMITTED, "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "operation not supported"},
    {CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"},
    {CUDA_ERROR_NOT_MAPPED, "resource not mapped"},
    {CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"},
    {CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_UNKNOWN, "unknown error"},
};

static const struct {
    CUresult code;
    const char *name;
} error_names[] = {
#define SIM_X(n) {n, #n},
    SIM_CU_ERRORS
#undef SIM_X
};

CUresult cuGetErrorName(CUresult error, const char **str)
{
    if (!str) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof error_names / sizeof error_names[0]; i++)
        if (error_names[i].code == error) {
            *str = error_names[i].name;
            return CUDA_SUCCESS;
        }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **str)
{
    if (!str) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof error_text / sizeof error_text[0]; i++)
        if (error_text[i].code == error) {
            *str = error_text[i].text;
            return CUDA_SUCCESS;
        }
    /* A valid code without its own text reads as its name, rather than failing. */
    return cuGetErrorName(error, str);
}
