/*
 * program_mem.c — device memory the program manages itself, and allocations with a shape.
 *
 * gpumem serves plain device allocations; some memory the program (or a library inside it:
 * NCCL, PyTorch's expandable segments, a framework's own pool) manages on its own. gpumem does
 * not try to serve that memory; it records it as what it is, so that reports can count it as
 * memory held outside gpumem's allocator, at its call site:
 *
 *   - the program's own virtual memory: cuMemCreate / cuMemRelease are physical handles created
 *     and released (kinds vmm_create / vmm_release), cuMemMap / cuMemUnmap are mappings with
 *     their address ranges (vmm_map carries the handle). Physical memory is held from the
 *     create until the handle is released *and* no longer mapped (the driver's rule), so the
 *     common "map, then release the handle at once" keeps it held until the unmap;
 *   - the program's own memory pools: cuMemPoolCreate / cuMemPoolDestroy (pool_create /
 *     pool_destroy) and every allocation from a pool it chose (cuMemAllocFromPoolAsync: passed
 *     through, recorded with flag REC_F_POOL); a pool it made a device's current one
 *     (cuDeviceSetMemPool, cuMemSetMemPool: gm_pm_chosen_pool) is such a choice too, so the
 *     stream-ordered allocations on that device (cudaMallocAsync, cuMemAllocAsync) come from it:
 *     passed through in both modes and recorded with flag REC_F_POOL, as the driver serves them,
 *     until the program destroys that pool (the device's default pool is current again, and
 *     gpumem serves them again: pm_unchoose);
 *   - CUDA arrays (cuArrayCreate_v2, cuArray3DCreate_v2, cuArrayDestroy): passed through,
 *     recorded with the bytes of their elements (array_alloc / array_free).
 *
 * Pitched and 3D allocations are plain device memory with an alignment: in replace mode gpumem
 * serves cuMemAllocPitch_v2 itself (the runtime's cudaMallocPitch and cudaMalloc3D reach it
 * through cuGetProcAddress), the pitch being the width rounded up to the device's texture
 * pitch alignment; in record mode the real function serves it. Either way it is recorded once,
 * as an allocation with flag REC_F_PITCHED.
 *
 * Each entry point is reached through cuGetProcAddress / dlsym (driver.c's table) and by
 * symbol (driver_sym.c); a thread inside gpumem (a runtime-level hook) passes straight through.
 */
#include "preload/gm_internal.h"
#include "snapshot/record/rec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct gm_real_pm gm_real_pm;

static int pm_pass(void) { return gm_inside || gm_forked_child || gm_mode() == GM_MODE_OFF; }

static int ctx_dev(void)
{
    CUdevice d = 0;
    if (gm_real.cuCtxGetDevice && gm_real.cuCtxGetDevice(&d) != CUDA_SUCCESS)
        return -1;
    return (int)d;
}

/* ---- the program's physical handles and mappings -----------------------------------------
 * Plain arrays under one lock: programs create handles by the hundreds at most (a library's
 * expandable segment maps one per page of growth), and VMM calls cost tens of microseconds in
 * the driver anyway. */
struct pm_handle {
    uint64_t h;
    size_t size;
    int device;
    int released;
    unsigned nmaps;
};
struct pm_map {
    uint64_t va; /* a mapping's address, or a CUarray */
    size_t size;
    uint64_t h;  /* the handle mapped there (mappings) */
    int array;   /* 1: a CUarray's entry, not a mapping */
    int device;  /* the unmap or destroy is recorded on it: the thread that makes it may have no
                  * current device, or another one */
};
static pthread_mutex_t pm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pm_handle *hs;
static size_t nhs, caphs;
static struct pm_map *ms;
static size_t nms, capms;

static struct pm_handle *handle_find(uint64_t h)
{
    for (size_t i = 0; i < nhs; i++)
        if (hs[i].h == h)
            return &hs[i];
    return NULL;
}

/* Drops a handle whose memory is gone; its bytes leave the device count. */
static void handle_drop(struct pm_handle *p)
{
    if (p->device >= 0)
        gm_devused_change(p->device, -(long long)p->size);
    *p = hs[--nhs];
}

/* The order of the program's VMM, pool and array calls in the recording. Handles, pools and
 * arrays are values the driver hands out again once released, and a mapping's address is free
 * for another mapping once unmapped: a release recorded after the real call returned could come
 * after another thread's creation of the same value (the two recorded the wrong way round,
 * and the reading side pairs them by value). Each recorded call runs, real call and event,
 * under this lock; these calls are rare and cost tens of microseconds in the driver. */
static pthread_mutex_t pm_order = PTHREAD_MUTEX_INITIALIZER;

/* Not held across fork: the locks are only taken after gpumem initialised, and a child forked
 * after that runs with gpumem off (pm_pass), so it never takes them; fresh ones are enough. */
void gm_pm_fork_child(void)
{
    pthread_mutex_init(&pm_lock, NULL);
    pthread_mutex_init(&pm_order, NULL);
}

static CUresult pm_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                           const CUmemAllocationProp *prop, unsigned long long flags)
{
    /* the device before the program's first handle on it: report's "at start" column */
    if (!pm_pass() && prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        gm_devused_start(prop->location.id);
    CUresult r = gm_real.cuMemCreate(h, size, prop, flags);
    if (pm_pass())
        return r;
    gm_stat_add(GM_ST_VMM, 1);
    if (r != CUDA_SUCCESS || !h)
        return r;
    int dev = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : -1;
    pthread_mutex_lock(&pm_lock);
    if (nhs == caphs) {
        size_t c = caphs ? caphs * 2 : 64;
        struct pm_handle *n = realloc(hs, c * sizeof *n);
        if (n)
            hs = n, caphs = c;
    }
    if (nhs < caphs)
        hs[nhs++] = (struct pm_handle){(uint64_t)*h, size, dev, 0, 0};
    pthread_mutex_unlock(&pm_lock);
    gm_settings_program_mem();
    gm_event_raw(REC_VMM_CREATE, dev, 0, (uint64_t)*h, size, size, 0);
    if (dev >= 0)
        gm_devused_change(dev, (long long)size);
    return r;
}

static CUresult pm_cuMemRelease(CUmemGenericAllocationHandle h)
{
    CUresult r = gm_real.cuMemRelease(h);
    if (pm_pass())
        return r;
    gm_stat_add(GM_ST_VMM, 1);
    if (r != CUDA_SUCCESS)
        return r;
    size_t size = 0;
    int dev = -1;
    pthread_mutex_lock(&pm_lock);
    struct pm_handle *p = handle_find((uint64_t)h);
    if (p) {
        size = p->size, dev = p->device;
        p->released = 1;
    }
    pthread_mutex_unlock(&pm_lock);
    gm_event_raw(REC_VMM_RELEASE, dev, 0, (uint64_t)h, size, 0, 0);
    pthread_mutex_lock(&pm_lock);
    p = handle_find((uint64_t)h);
    if (p && p->released && !p->nmaps)
        handle_drop(p);
    pthread_mutex_unlock(&pm_lock);
    return r;
}

static CUresult pm_cuMemMap(CUdeviceptr va, size_t size, size_t off, CUmemGenericAllocationHandle h,
                        unsigned long long flags)
{
    CUresult r = gm_real.cuMemMap(va, size, off, h, flags);
    if (pm_pass())
        return r;
    gm_stat_add(GM_ST_VMM, 1);
    if (r != CUDA_SUCCESS)
        return r;
    int dev = -1;
    pthread_mutex_lock(&pm_lock);
    struct pm_handle *p = handle_find((uint64_t)h);
    if (p) {
        p->nmaps++;
        dev = p->device;
    }
    if (nms == capms) {
        size_t c = capms ? capms * 2 : 64;
        struct pm_map *n = realloc(ms, c * sizeof *n);
        if (n)
            ms = n, capms = c;
    }
    if (nms < capms)
        ms[nms++] = (struct pm_map){(uint64_t)va, size, (uint64_t)h, 0, dev};
    pthread_mutex_unlock(&pm_lock);
    gm_event_id(GM_EV_VMM, dev, 0, va, size, size, (uint64_t)h);
    return r;
}

static CUresult pm_cuMemUnmap(CUdeviceptr va, size_t size)
{
    CUresult r = gm_real.cuMemUnmap(va, size);
    if (pm_pass())
        return r;
    gm_stat_add(GM_ST_VMM, 1);
    if (r != CUDA_SUCCESS)
        return r;
    int dev = -1;
    pthread_mutex_lock(&pm_lock);
    for (size_t i = 0; i < nms && dev < 0; i++)
        if (!ms[i].array && ms[i].va >= (uint64_t)va && ms[i].va - (uint64_t)va < size)
            dev = ms[i].device;
    pthread_mutex_unlock(&pm_lock);
    gm_event(GM_EV_VMM, dev, 0, va, size, 0);
    /* every mapping inside [va, va + size) is gone; a released handle with no mapping left
     * gives its memory back */
    pthread_mutex_lock(&pm_lock);
    for (size_t i = 0; i < nms;) {
        if (!ms[i].array && ms[i].va >= (uint64_t)va && ms[i].va - (uint64_t)va < size) {
            struct pm_handle *p = handle_find(ms[i].h);
            if (p && p->nmaps && --p->nmaps == 0 && p->released)
                handle_drop(p);
            ms[i] = ms[--nms];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&pm_lock);
    return r;
}

CUresult gm_pm_cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                                   unsigned long long flags)
{
    if (!pm_pass())
        gm_stat_add(GM_ST_VMM, 1);
    return gm_real.cuMemAddressReserve(p, size, align, addr, flags);
}
CUresult gm_pm_cuMemAddressFree(CUdeviceptr p, size_t size)
{
    if (!pm_pass())
        gm_stat_add(GM_ST_VMM, 1);
    return gm_real.cuMemAddressFree(p, size);
}
CUresult gm_pm_cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n)
{
    if (!pm_pass())
        gm_stat_add(GM_ST_VMM, 1);
    return gm_real.cuMemSetAccess(p, size, d, n);
}

/* ---- the program's own pools ---------------------------------------------------------------
 * An allocation from an explicit pool is the program's choice of allocator: passed through,
 * recorded with REC_F_POOL (its free is matched through the pass-through table). It is on the
 * pool's device (a pool the program created: its location; a device's default pool: that
 * device), whatever the stream's or the calling thread's current device is (gm_pm_pool_device). */
struct pm_pool {
    uint64_t pool;
    int device;
};
static struct pm_pool *pools;
static size_t npools, cappools;

/* The device of a pool the program created, or -1 (and *i its index, when found). */
static int pool_device(uint64_t pool, size_t *i)
{
    for (size_t j = 0; j < npools; j++)
        if (pools[j].pool == pool) {
            if (i)
                *i = j;
            return pools[j].device;
        }
    return -1;
}

int gm_pm_pool_device(CUmemoryPool pool, CUstream s)
{
    pthread_mutex_lock(&pm_lock);
    int dev = pool_device((uint64_t)(uintptr_t)pool, NULL);
    pthread_mutex_unlock(&pm_lock);
    if (dev < 0)
        dev = gm_default_pool_device(pool);
    CUdevice d;
    if (dev < 0 && gm_stream_device(s, &d))
        dev = (int)d;
    return dev >= 0 ? dev : ctx_dev();
}

static __attribute__((noinline)) CUresult pool_alloc(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s,
                           CUresult (*real)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))
{
    if (!real)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (pm_pass())
        return real(dptr, size, pool, s);
    gm_stat_add(GM_ST_DRV_ALLOC_ASYNC, 1);
    CUresult r = real(dptr, size, pool, s);
    if (r == CUDA_SUCCESS) {
        int dev = gm_pm_pool_device(pool, s);
        gm_stat_add(GM_ST_PASSTHROUGH, 1);
        gm_pt_add(*dptr, size, GM_PT_POOL, dev);
        gm_settings_program_mem();
        gm_next_alloc_flags = GM_EVF_POOL;
        gm_event(GM_EV_ALLOC_ASYNC, dev, s, *dptr, size, size);
        gm_next_alloc_flags = 0;
    } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        gm_stat_add(GM_ST_OOM, 1);
        gm_event(GM_EV_OOM, gm_pm_pool_device(pool, s), s, 0, 0, size);
    }
    return r;
}
CUresult gm_pm_cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s)
{
    return GM_SCRUBBED(mem, pool_alloc(d, n, p, s, gm_real.cuMemAllocFromPoolAsync));
}
CUresult gm_pm_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s)
{
    return GM_SCRUBBED(mem, pool_alloc(d, n, p, s ? s : CU_STREAM_PER_THREAD,
                                       gm_real.cuMemAllocFromPoolAsync_ptsz
                                           ? gm_real.cuMemAllocFromPoolAsync_ptsz
                                           : gm_real.cuMemAllocFromPoolAsync));
}

/* The pool each device's stream-ordered allocations come from since the program chose it (NULL:
 * never chosen: gpumem serves them, standing in for the default pool). Set whatever the mode, so
 * that a mode's allocations know it; any pool counts, the default one too (the program asked for
 * the driver's pool by name, as cuMemAllocFromPoolAsync on it does). */
#define PM_MAX_DEVICES 64
static CUmemoryPool _Atomic chosen_pool[PM_MAX_DEVICES];
static _Atomic int any_chosen; /* the allocation paths' fast answer: no program chose one */

int gm_pm_any_chosen_pool(void)
{
    return atomic_load_explicit(&any_chosen, memory_order_relaxed);
}

CUmemoryPool gm_pm_chosen_pool(int dev)
{
    return dev >= 0 && dev < PM_MAX_DEVICES ? atomic_load_explicit(&chosen_pool[dev], memory_order_acquire)
                                            : NULL;
}

static void pm_choose(int dev, CUmemoryPool pool)
{
    if (dev >= 0 && dev < PM_MAX_DEVICES && pool) {
        atomic_store_explicit(&chosen_pool[dev], pool, memory_order_release);
        atomic_store_explicit(&any_chosen, 1, memory_order_relaxed);
    }
}

CUresult gm_pm_cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    if (!gm_real_pm.cuDeviceSetMemPool)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = gm_real_pm.cuDeviceSetMemPool(dev, pool);
    if (r == CUDA_SUCCESS)
        pm_choose((int)dev, pool);
    return r;
}

CUresult gm_pm_cuMemSetMemPool(CUmemLocation *loc, CUmemAllocationType type, CUmemoryPool pool)
{
    if (!gm_real_pm.cuMemSetMemPool)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = gm_real_pm.cuMemSetMemPool(loc, type, pool);
    /* a device's pool for device memory: the one cuMemAllocAsync on that device takes */
    if (r == CUDA_SUCCESS && loc && loc->type == CU_MEM_LOCATION_TYPE_DEVICE &&
        type == CU_MEM_ALLOCATION_TYPE_PINNED)
        pm_choose(loc->id, pool);
    return r;
}

static CUresult pm_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (!gm_real_pm.cuMemPoolCreate)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = gm_real_pm.cuMemPoolCreate(pool, props);
    if (!pm_pass() && r == CUDA_SUCCESS && pool) {
        int dev = props && props->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                      ? props->location.id
                      : -1;
        pthread_mutex_lock(&pm_lock);
        if (npools == cappools) {
            size_t c = cappools ? cappools * 2 : 16;
            struct pm_pool *n = realloc(pools, c * sizeof *n);
            if (n)
                pools = n, cappools = c;
        }
        if (npools < cappools)
            pools[npools++] = (struct pm_pool){(uint64_t)(uintptr_t)*pool, dev};
        pthread_mutex_unlock(&pm_lock);
        gm_event_raw(REC_POOL_CREATE, dev, 0, (uint64_t)(uintptr_t)*pool, 0, 0, 0);
    }
    return r;
}
/* A destroyed pool that was a device's current one gives that place back to the device's
 * default pool (the driver's rule): that device's stream-ordered allocations are no longer a
 * choice of the program, so gpumem serves them again. */
static void pm_unchoose(CUmemoryPool pool)
{
    for (int d = 0; d < PM_MAX_DEVICES; d++) {
        CUmemoryPool was = pool;
        atomic_compare_exchange_strong_explicit(&chosen_pool[d], &was, NULL,
                                                memory_order_acq_rel, memory_order_relaxed);
    }
}

static CUresult pm_cuMemPoolDestroy(CUmemoryPool pool)
{
    if (!gm_real_pm.cuMemPoolDestroy)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = gm_real_pm.cuMemPoolDestroy(pool);
    if (r == CUDA_SUCCESS && pool)
        pm_unchoose(pool);
    if (!pm_pass() && r == CUDA_SUCCESS) {
        size_t i = 0;
        pthread_mutex_lock(&pm_lock);
        int dev = pool_device((uint64_t)(uintptr_t)pool, &i);
        if (npools && pools[i].pool == (uint64_t)(uintptr_t)pool)
            pools[i] = pools[--npools];
        pthread_mutex_unlock(&pm_lock);
        gm_event_raw(REC_POOL_DESTROY, dev, 0, (uint64_t)(uintptr_t)pool, 0, 0, 0);
    }
    return r;
}

/* ---- pitched allocations ------------------------------------------------------------------ */

/* The pitch gpumem gives a row of `width` bytes: the width rounded up to the device's texture
 * alignment (CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512 B on current GPUs), which is what the
 * driver's cuMemAllocPitch gives (NVIDIA's forums, and the virtual GPU, which takes it from its
 * device description); CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT (32 on an A100) is the
 * hardware's minimum for a pitched texture, not the allocator's choice. 512 when the device
 * gives no power of two. */
static size_t pitch_align(int dev)
{
    int v = 0;
    if (!gm_real_pm.cuDeviceGetAttribute ||
        gm_real_pm.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT,
                                        (CUdevice)dev) != CUDA_SUCCESS)
        v = 0;
    size_t a = v > 0 ? (size_t)v : 512;
    return (a & (a - 1)) ? 512 : a;
}

/* CU_DEVICE_ATTRIBUTE_MAX_PITCH, or SIZE_MAX when the device does not say. */
static size_t max_pitch(int dev)
{
    int v = 0;
    if (!gm_real_pm.cuDeviceGetAttribute ||
        gm_real_pm.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_PITCH, (CUdevice)dev) !=
            CUDA_SUCCESS ||
        v <= 0)
        return SIZE_MAX;
    return (size_t)v;
}

static __attribute__((noinline)) CUresult pm_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                  unsigned int elem)
{
    CUresult (*real)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) =
        gm_real_pm.cuMemAllocPitch_v2;
    if (pm_pass())
        return real ? real(dptr, pitch, width, height, elem) : CUDA_ERROR_NOT_SUPPORTED;
    gm_stat_add(GM_ST_DRV_ALLOC, 1);
    /* the driver's own argument rules (element size 4, 8 or 16 bytes) */
    if (!dptr || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    /* gpumem serves what the driver would: anything it would refuse (a pitch above the
     * device's maximum, a size that overflows) or that the capture rules forbid now goes to the
     * driver, whose answer is the program's */
    size_t p = 0;
    int serve = gm_mode() == GM_MODE_REPLACE && !gm_capture_prohibited();
    CUdevice dev = 0;
    if (serve && gm_real.cuCtxGetDevice) {
        CUresult r = gm_real.cuCtxGetDevice(&dev);
        if (r != CUDA_SUCCESS)
            return r;
    }
    if (serve) {
        size_t a = pitch_align((int)dev);
        serve = width <= SIZE_MAX - a;
        p = serve ? (width + a - 1) & ~(a - 1) : 0;
        serve = serve && p <= max_pitch((int)dev) && height <= SIZE_MAX / p;
    }
    if (serve) {
        gm_next_alloc_flags = GM_EVF_PITCHED;
        CUresult r = gm_heap_alloc(dptr, p * height, dev, 0, GM_ALLOC_SYNC);
        gm_next_alloc_flags = 0;
        if (r == CUDA_SUCCESS)
            *pitch = p;
        return r;
    }
    if (!real)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = real(dptr, pitch, width, height, elem);
    if (r == CUDA_SUCCESS) {
        size_t bytes = *pitch * height;
        int d = ctx_dev();
        gm_stat_add(GM_ST_PASSTHROUGH, 1);
        gm_pt_add(*dptr, bytes, GM_PT_DEVICE, d);
        gm_next_alloc_flags = GM_EVF_PITCHED;
        gm_event(GM_EV_ALLOC, d, 0, *dptr, bytes, width * height);
        gm_next_alloc_flags = 0;
    } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        gm_stat_add(GM_ST_OOM, 1);
        gm_event(GM_EV_OOM, ctx_dev(), 0, 0, 0, width * height);
    }
    return r;
}

CUresult gm_pm_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                  unsigned int elem)
{
    return GM_SCRUBBED(mem, pm_alloc_pitch(dptr, pitch, width, height, elem));
}

/* ---- CUDA arrays: passed through, recorded -------------------------------------------------
 * The driver lays an array out in its own (tiled) way; what gpumem knows is the bytes of its
 * elements, which is what is recorded. */
static size_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    default:
        return 4;
    }
}
static size_t array_bytes(size_t w, size_t h, size_t d, unsigned ch, CUarray_format f)
{
    return w * (h ? h : 1) * (d ? d : 1) * (ch ? ch : 1) * format_bytes(f);
}
static void array_record(CUresult r, CUarray *a, size_t bytes)
{
    if (r != CUDA_SUCCESS || !a)
        return;
    int dev = ctx_dev();
    gm_settings_program_mem();
    gm_event_raw(REC_ARRAY_ALLOC, dev, 0, (uint64_t)(uintptr_t)*a, bytes, bytes, 0);
    if (dev >= 0)
        gm_devused_change(dev, (long long)bytes);
    pthread_mutex_lock(&pm_lock);
    if (nms == capms) {
        size_t c = capms ? capms * 2 : 64;
        struct pm_map *n = realloc(ms, c * sizeof *n);
        if (n)
            ms = n, capms = c;
    }
    if (nms < capms) /* arrays share the mapping table, marked */
        ms[nms++] = (struct pm_map){(uint64_t)(uintptr_t)*a, bytes, 0, 1, dev};
    pthread_mutex_unlock(&pm_lock);
}
static CUresult pm_cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!gm_real_pm.cuArrayCreate_v2)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = gm_real_pm.cuArrayCreate_v2(a, d);
    if (!pm_pass() && d)
        array_record(r, a, array_bytes(d->Width, d->Height, 1, d->NumChannels, d->Format));
    return r;
}
static CUresult pm_cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (!gm_real_pm.cuArray3DCreate_v2)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = gm_real_pm.cuArray3DCreate_v2(a, d);
    if (!pm_pass() && d)
        array_record(r, a,
                     array_bytes(d->Width, d->Height, d->Depth, d->NumChannels, d->Format));
    return r;
}
static CUresult pm_cuArrayDestroy(CUarray a)
{
    if (!gm_real_pm.cuArrayDestroy)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = gm_real_pm.cuArrayDestroy(a);
    if (pm_pass() || r != CUDA_SUCCESS)
        return r;
    size_t bytes = 0;
    int found = 0, dev = -1;
    pthread_mutex_lock(&pm_lock);
    for (size_t i = 0; i < nms; i++)
        if (ms[i].array && ms[i].va == (uint64_t)(uintptr_t)a) {
            bytes = ms[i].size, found = 1, dev = ms[i].device;
            ms[i] = ms[--nms];
            break;
        }
    pthread_mutex_unlock(&pm_lock);
    gm_event_raw(REC_ARRAY_FREE, dev, 0, (uint64_t)(uintptr_t)a, bytes, 0, 0);
    if (found)
        gm_devused_change(dev, -(long long)bytes);
    return r;
}

/* ---- the entry points: each recorded call under pm_order (above) ---- */
/* the call as it is where nothing is recorded (pm_pass), else the call and its event under pm_order */
#define PM_ORDERED(call)                                                                           \
    do {                                                                                           \
        if (pm_pass())                                                                             \
            return call;                                                                           \
        int held_ = gm_rec_stack_hold(); /* the walk outside pm_order */                           \
        pthread_mutex_lock(&pm_order);                                                             \
        CUresult r_ = call;                                                                        \
        pthread_mutex_unlock(&pm_order);                                                           \
        gm_rec_stack_release(held_);                                                               \
        return r_;                                                                                 \
    } while (0)

CUresult gm_pm_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, unsigned long long flags)
{
    PM_ORDERED(pm_cuMemCreate(h, size, prop, flags));
}

CUresult gm_pm_cuMemRelease(CUmemGenericAllocationHandle h)
{
    PM_ORDERED(pm_cuMemRelease(h));
}

CUresult gm_pm_cuMemMap(CUdeviceptr va, size_t size, size_t off, CUmemGenericAllocationHandle h, unsigned long long flags)
{
    PM_ORDERED(pm_cuMemMap(va, size, off, h, flags));
}

CUresult gm_pm_cuMemUnmap(CUdeviceptr va, size_t size)
{
    PM_ORDERED(pm_cuMemUnmap(va, size));
}

CUresult gm_pm_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    PM_ORDERED(pm_cuMemPoolCreate(pool, props));
}

CUresult gm_pm_cuMemPoolDestroy(CUmemoryPool pool)
{
    PM_ORDERED(pm_cuMemPoolDestroy(pool));
}

CUresult gm_pm_cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    PM_ORDERED(pm_cuArrayCreate_v2(a, d));
}

CUresult gm_pm_cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    PM_ORDERED(pm_cuArray3DCreate_v2(a, d));
}

CUresult gm_pm_cuArrayDestroy(CUarray a)
{
    PM_ORDERED(pm_cuArrayDestroy(a));
}
