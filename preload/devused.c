/*
 * devused.c — what the driver itself says is used on the device, sampled for the report.
 *
 * nvidia-smi shows what the driver has handed out: gpumem's reserved memory, memory the
 * program holds outside gpumem's allocator (its own VMM, pools, arrays, pass-through), and what
 * nobody records (the CUDA context, library workspaces, other processes). The report explains
 * that sum; it needs the driver's own figure at the moments that matter, which only the real
 * cuMemGetInfo gives (gpumem's cuMemGetInfo answers with its own view). It is sampled:
 *
 *   - at the start: per device, before gpumem's allocator maps its first segment there (its
 *     allocator for the device is made, gm_devused_start) or before the program's first VMM
 *     handle on it, with that device's context current; else (memory passed through to the
 *     driver, a pool, an array: sampled after the call) the first time device memory gpumem
 *     knows of changes with that device's context current. Whatever was recorded before is
 *     subtracted by the report, so what is left of the start sample is the context and other
 *     processes: the "CUDA context size". The report's "at start" column is this sample: taken
 *     after the first 256 MiB segment, it showed that segment as held "at start";
 *   - at every new high of the device memory gpumem knows of (its segments + what it recorded
 *     outside its allocator), right after the event that made it: the report takes the highest;
 *   - at exit, for every device whose primary context is active.
 *
 * Each sample is one REC_DEVICE_INFO event (addr = free, size = used, requested = total,
 * alloc_id = REC_DEVINFO_*). A new high only happens when memory grows past every earlier
 * level (a segment grows, a pass-through allocation): one driver query next to calls that cost
 * far more. Samples are taken on the calling thread's context only (a device whose context is
 * not current on that thread waits for the next change or the exit).
 */
#include "preload/gm_internal.h"
#include "snapshot/record/rec.h"

#define DU_MAX 64
static _Atomic long long known[DU_MAX]; /* bytes gpumem knows of on each device */
static _Atomic long long high[DU_MAX];  /* highest `known` sampled */
static _Atomic int seen[DU_MAX];        /* device had a change (sampled at exit) */
static _Atomic int started[DU_MAX]; /* the start was sampled on the device */

static int current_device(void)
{
    CUcontext c = NULL;
    CUdevice d = 0;
    if (!gm_real.cuCtxGetCurrent || gm_real.cuCtxGetCurrent(&c) != CUDA_SUCCESS || !c)
        return -1;
    if (!gm_real.cuCtxGetDevice || gm_real.cuCtxGetDevice(&d) != CUDA_SUCCESS)
        return -1;
    return (int)d;
}

/* One sample of the current context's device. 0, or -1 when the driver could not answer. */
static int sample(int device, unsigned when)
{
    size_t free_b = 0, total_b = 0;
    if (!gm_real.cuMemGetInfo_v2 ||
        GM_DRV(GM_DRV_MEM_GET_INFO, gm_real.cuMemGetInfo_v2(&free_b, &total_b)) != CUDA_SUCCESS ||
        free_b > total_b)
        return -1;
    gm_event_raw(REC_DEVICE_INFO, device, 0, free_b, total_b - free_b, total_b, when);
    return 0;
}

void gm_devused_change(int device, long long delta)
{
    if (!gm_rec_opened() || gm_forked_child)
        return;
    int cur = current_device();
    if (device < 0)
        device = cur;
    if (device < 0 || device >= DU_MAX)
        return;
    atomic_store_explicit(&seen[device], 1, memory_order_relaxed);
    if (cur >= 0 && cur < DU_MAX && !atomic_load_explicit(&started[cur], memory_order_acquire) &&
        !atomic_exchange(&started[cur], 1) && sample(cur, REC_DEVINFO_START) != 0)
        atomic_store(&started[cur], 0);
    long long now = atomic_fetch_add(&known[device], delta) + delta;
    if (delta <= 0 || device != cur)
        return;
    long long h = atomic_load(&high[device]);
    while (now > h)
        if (atomic_compare_exchange_weak(&high[device], &h, now)) {
            sample(device, REC_DEVINFO_PEAK);
            break;
        }
}

void gm_devused_start(int device)
{
    if (!gm_rec_opened() || gm_forked_child || device < 0 || device >= DU_MAX)
        return;
    /* the driver answers for the current context's device only: another device's start is
     * sampled at its first change, as before */
    if (current_device() != device || atomic_load_explicit(&started[device], memory_order_acquire))
        return;
    if (!atomic_exchange(&started[device], 1) && sample(device, REC_DEVINFO_START) != 0)
        atomic_store(&started[device], 0);
}

void gm_devused_event(int ev, unsigned flags, int device, size_t size, uint64_t id)
{
    /* served allocations live inside gpumem's segments (counted by their maps) and carry a
     * cache flag; their frees carry the allocator's id */
    if (ev == GM_EV_ALLOC || ev == GM_EV_ALLOC_ASYNC) {
        if (!(flags & (GM_EVF_CACHE_HIT | GM_EVF_CACHE_MISS)))
            gm_devused_change(device, (long long)size);
    } else if (ev == GM_EV_FREE || ev == GM_EV_FREE_ASYNC) {
        if (!id)
            gm_devused_change(device, -(long long)size);
    }
}

void gm_devused_exit(void)
{
    /* once: the final handler's second write of the stats comes after the main one has been
     * flushed, and a second exit sample there was a driver call no recording counted */
    static _Atomic int done;
    if (!gm_rec_opened() || gm_forked_child || atomic_exchange(&done, 1))
        return;
    int cur = current_device();
    if (cur >= 0 && cur < DU_MAX) {
        atomic_store(&seen[cur], 1);
        sample(cur, REC_DEVINFO_EXIT);
    }
    /* other devices the program used: through their primary context, only when it is active
     * (retaining an inactive one would create a context, which takes memory) */
    for (int d = 0; d < DU_MAX; d++) {
        if (d == cur || !atomic_load(&seen[d]))
            continue;
        unsigned fl = 0;
        int active = 0;
        CUcontext c = NULL, old = NULL;
        if (!gm_real_pm.cuDevicePrimaryCtxGetState || !gm_real_pm.cuCtxPushCurrent_v2 ||
            !gm_real_pm.cuCtxPopCurrent_v2 || !gm_real_pm.cuDevicePrimaryCtxRelease_v2 ||
            gm_real_pm.cuDevicePrimaryCtxGetState((CUdevice)d, &fl, &active) != CUDA_SUCCESS ||
            !active || gm_real.cuDevicePrimaryCtxRetain(&c, (CUdevice)d) != CUDA_SUCCESS)
            continue;
        if (gm_real_pm.cuCtxPushCurrent_v2(c) == CUDA_SUCCESS) {
            sample(d, REC_DEVINFO_EXIT);
            gm_real_pm.cuCtxPopCurrent_v2(&old);
        }
        gm_real_pm.cuDevicePrimaryCtxRelease_v2((CUdevice)d);
    }
}
