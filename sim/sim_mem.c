/* sim_mem.c — device, host and managed memory; the virtual memory (VMM) calls; pointer
 * queries; copies and memsets.
 *
 * Device memory is host address space. cuMemAlloc gets its own anonymous mapping (read/write;
 * PROT_NONE with GPUMEM_SIM_BACKING=virtual). cuMemAddressReserve reserves PROT_NONE,
 * MAP_NORESERVE space. cuMemCreate takes a slice of the sparse backing memfd (nothing in
 * virtual mode); cuMemMap maps the slice MAP_SHARED|MAP_FIXED into the reservation, with no
 * access until cuMemSetAccess mprotects it, as on a GPU; cuMemUnmap puts PROT_NONE reserved
 * space back. Capacity is charged by cuMemAlloc (size rounded up to 512 B) and cuMemCreate
 * (its size); reservations, host and managed memory are not charged.
 *
 * Copies, memsets and cuMemFreeAsync are stream work (see sim_exec.c): run at issue time in
 * synchronous mode, queued for the stream's worker in asynchronous mode. cuMemFree implies a
 * synchronization of the memory's device, as the real one does: pending (delayed) events
 * complete. Capacity is per device (the current context's, or prop.location.id for VMM).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/sim_internal.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* A pool's handle is its sim_pool: each device's default pool lives in its sim_device, the
 * program's own (cuMemPoolCreate) on sim.pools. */
#define POOL_HANDLE(p) ((CUmemoryPool)(void *)(p))

/* The live pool a handle names (a default pool, or a created one not destroyed), or NULL. Lock
 * held. */
static sim_pool *pool_find(CUmemoryPool handle)
{
    for (int d = 0; d < sim.ndevices; d++)
        if (handle == POOL_HANDLE(&sim.dev[d].pool)) return &sim.dev[d].pool;
    for (sim_pool *p = sim.pools; p; p = p->next)
        if (handle == POOL_HANDLE(p) && !p->destroyed) return p;
    return NULL;
}

static size_t round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

/* ---- the range table --------------------------------------------------------------------- */

/* Index of the first range whose base is > p. */
static size_t range_upper(uintptr_t p)
{
    size_t lo = 0, hi = sim.nranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sim.ranges[mid]->base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

sim_range *sim_range_find(uintptr_t p)
{
    size_t i = range_upper(p);
    if (i == 0) return NULL;
    sim_range *r = sim.ranges[i - 1];
    return p - r->base < r->size ? r : NULL;
}

/* The mapping of reservation r that covers p, or NULL: one slot lookup, whatever the number of
 * mappings. */
static sim_mapping *map_at(const sim_range *r, uintptr_t p)
{
    if (!r->slots || p < r->base || p - r->base >= r->size) return NULL;
    return r->slots[(p - r->base) / SIM_GRANULARITY];
}

static bool range_overlaps(uintptr_t base, size_t size)
{
    size_t i = range_upper(base);
    if (i > 0) {
        sim_range *r = sim.ranges[i - 1];
        if (base - r->base < r->size) return true;
    }
    return i < sim.nranges && sim.ranges[i]->base < base + size;
}

static bool range_insert(sim_range *r)
{
    if (sim.nranges == sim.capranges) {
        size_t cap = sim.capranges ? sim.capranges * 2 : 64;
        sim_range **v = realloc(sim.ranges, cap * sizeof *v);
        if (!v) return false;
        sim.ranges = v;
        sim.capranges = cap;
    }
    size_t i = range_upper(r->base);
    memmove(sim.ranges + i + 1, sim.ranges + i, (sim.nranges - i) * sizeof *sim.ranges);
    sim.ranges[i] = r;
    sim.nranges++;
    return true;
}

static void range_remove(sim_range *r)
{
    size_t i = range_upper(r->base);
    if (i > 0 && sim.ranges[i - 1] == r) {
        memmove(sim.ranges + i - 1, sim.ranges + i, (sim.nranges - i) * sizeof *sim.ranges);
        sim.nranges--;
    }
}

/* Says once why an mmap failed: address space or the kernel's mapping count (vm.max_map_count)
 * ran out. The call itself reports CUDA_ERROR_OUT_OF_MEMORY. */
static void note_map_failure(int err)
{
    static bool noted;
    if (noted) return;
    noted = true;
    sim_note("mmap failed (%s): host address space or vm.max_map_count exhausted; allocations "
             "report CUDA_ERROR_OUT_OF_MEMORY",
             strerror(err));
}

/* mmap `size` bytes (a multiple of the page size) aligned to `align` (a power of two). Page
 * alignment needs no slack, so neighbouring allocations with the same protection stay adjacent
 * and the kernel merges them into one mapping: live allocations cost few entries of the
 * process's mapping table (vm.max_map_count). */
static void *map_aligned(size_t size, size_t align, int prot, int flags, void **map_base,
                         size_t *map_size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (align <= page) {
        void *p = mmap(NULL, size, prot, flags, -1, 0);
        if (p == MAP_FAILED) {
            note_map_failure(errno);
            return NULL;
        }
        *map_base = p;
        *map_size = size;
        return p;
    }
    size_t total = size + align;
    char *p = mmap(NULL, total, prot, flags, -1, 0);
    if (p == MAP_FAILED) {
        note_map_failure(errno);
        return NULL;
    }
    uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    size_t head = a - (uintptr_t)p, tail = total - head - size;
    if (head) munmap(p, head);
    if (tail) munmap((char *)a + size, tail);
    *map_base = (void *)a;
    *map_size = size;
    return (void *)a;
}

static sim_range *range_new(int kind, uintptr_t base, size_t size, void *map_base, size_t map_size)
{
    sim_range *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->kind = kind;
    r->base = base;
    r->size = size;
    r->map_base = map_base;
    r->map_size = map_size;
    r->id = sim.next_id++;
    return r;
}

static void range_destroy(sim_range *r)
{
    if (r->map_base) munmap(r->map_base, r->map_size);
    if (r->ipc) close(r->ipc_fd);
    if (r->slots) /* each mapping once: from its first slot */
        for (size_t i = 0, n = r->size / SIM_GRANULARITY; i < n; i++) {
            sim_mapping *m = r->slots[i];
            if (m && m->va == r->base + i * SIM_GRANULARITY) free(m);
        }
    free(r->slots);
    free(r);
}

/* ---- cuMemAlloc family ------------------------------------------------------------------- */

/* Host backing of freed cuMemAlloc* memory is kept for reuse by a later allocation of the same
 * page-rounded size (up to BACKING_CACHE_BYTES in all). A fresh anonymous mapping makes the
 * host take a page fault per 4 KiB on first touch and a TLB shootdown on munmap — costs a real
 * GPU never has, which would make a program that allocates per tensor (a framework without a
 * cache) look several times slower on the virtual GPU than it is. Device-memory accounting,
 * addresses' validity and the cost model are unchanged: a freed range is gone for the program
 * (the range table forgets it), only its host pages are recycled. Like real device memory, a
 * new allocation's contents are undefined. Under fork the child inherits a consistent cache. */
#define BACKING_CACHE_SLOTS 256
#define BACKING_CACHE_BYTES ((size_t)512 << 20)
static struct {
    void *base;
    size_t size;
} backing_cache[BACKING_CACHE_SLOTS];
static int backing_cache_n;
static size_t backing_cache_bytes;

static void *backing_cache_take(size_t size) /* under the sim lock */
{
    for (int i = backing_cache_n - 1; i >= 0; i--)
        if (backing_cache[i].size == size) {
            void *p = backing_cache[i].base;
            backing_cache[i] = backing_cache[--backing_cache_n];
            backing_cache_bytes -= size;
            return p;
        }
    return NULL;
}

static bool backing_cache_put(void *base, size_t size) /* under the sim lock */
{
    if (backing_cache_n == BACKING_CACHE_SLOTS || backing_cache_bytes + size > BACKING_CACHE_BYTES)
        return false;
    backing_cache[backing_cache_n].base = base;
    backing_cache[backing_cache_n].size = size;
    backing_cache_n++;
    backing_cache_bytes += size;
    return true;
}

/* The pool gives reserved memory back to the device down to `keep` bytes (whole chunks, at
 * least `keep`), never below what backs its allocations; nothing when it holds `keep` or less.
 * CUDA's rule for cuMemPoolTrimTo(keep), and for the release threshold, which the driver applies
 * at the next synchronization and the sim at the free itself. Lock held. */
static void pool_settle(sim_pool *p, uint64_t keep)
{
    if (p->reserved <= keep) return;
    size_t want = round_up(p->used, SIM_POOL_CHUNK);
    size_t kept = round_up((size_t)keep, SIM_POOL_CHUNK); /* keep < reserved: no overflow */
    if (kept > want) want = kept;
    if (want >= p->reserved) return;
    sim_uncharge(p->dev, p->reserved - want);
    p->reserved = want;
}

/* A destroyed pool goes when its last allocation does (its memory back to the device). */
static void pool_release_if_gone(sim_pool *p)
{
    if (!p->destroyed || p->used) return;
    pool_settle(p, 0);
    for (sim_pool **pp = &sim.pools; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    free(p);
}

/* The pool's used bytes change by delta (an allocation's charge taken or given back). Growth
 * first takes the memory the pool holds unused; beyond it the reservation grows in
 * SIM_POOL_CHUNK steps, the device charged for them (a growth the device or the pool's maxSize
 * cannot hold changes nothing: CUDA_ERROR_OUT_OF_MEMORY). A shrink keeps up to the release
 * threshold (pool_settle) and never fails. Lock held. */
static CUresult pool_use(sim_pool *p, int64_t delta)
{
    if (delta < 0) {
        p->used -= (size_t)-delta < p->used ? (size_t)-delta : p->used;
        pool_settle(p, p->destroyed ? 0 : p->release_threshold);
        return CUDA_SUCCESS;
    }
    size_t used = p->used + (size_t)delta;
    size_t want = round_up(used, SIM_POOL_CHUNK);
    if (want > p->reserved) {
        if (p->max_size && want > p->max_size) return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult rc = sim_charge(p->dev, want - p->reserved, true);
        if (rc) return rc;
        p->reserved = want;
    }
    p->used = used;
    if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
    if (used > p->used_high) p->used_high = used;
    return CUDA_SUCCESS;
}

/* A device allocation on dev: cuMemAlloc's (pool NULL) or from a pool of dev's. */
static CUresult device_alloc(int dev, CUdeviceptr *dptr, size_t size, sim_pool *from_pool)
{
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    /* a pool allocation's charge is its share of the pool (pool_use charges the device) */
    size_t charge = from_pool ? round_up(size, SIM_ALLOC_ROUND) : round_up(size, SIM_ALLOC_PAGE);
    CUresult rc = from_pool ? pool_use(from_pool, (int64_t)charge) : sim_charge(dev, charge, true);
    if (rc) return rc;
    int prot = sim.virtual_backing ? PROT_NONE : PROT_READ | PROT_WRITE;
    size_t msize = round_up(size, 4096);
    void *mb;
    size_t ms;
    void *p = sim.virtual_backing ? NULL : backing_cache_take(msize);
    if (p)
        mb = p, ms = msize;
    else
        p = map_aligned(msize, 4096, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, &mb, &ms);
    sim_range *r = p ? range_new(SIM_R_DEVICE, (uintptr_t)p, size, mb, ms) : NULL;
    if (!r || !range_insert(r)) {
        if (r)
            range_destroy(r);
        else if (p)
            munmap(mb, ms);
        if (from_pool)
            pool_use(from_pool, -(int64_t)charge);
        else
            sim_uncharge(dev, charge);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->charged = charge;
    r->pool = from_pool;
    r->dev = dev;
    *dptr = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

/* Every allocation entry point clears its out-parameter first, so a refused call (a bad size,
 * out of memory, a capture that forbids it) leaves 0 there, as the real driver does
 * (tests/diff/gpu-h200/drv_api.out, capture_modes.out). */
#define CLEAR_OUT(p)                                                                               \
    do {                                                                                           \
        if (p) *(p) = 0;                                                                           \
    } while (0)

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    CLEAR_OUT(dptr);
    SIM_CHECK_INIT();
    sim_lock();
    int dev;
    CUresult rc = sim_current_dev(&dev);
    if (!rc && sim_capture_prohibits_unsafe()) rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!rc) rc = device_alloc(dev, dptr, size, NULL);
    sim_cost(SIM_OP_MEM_ALLOC, size);
    sim_unlock();
    return rc;
}

/* Pitched memory: one cuMemAlloc of pitch x height, the pitch being the width rounded up to the
 * device's texture alignment (SIM_TEXTURE_ALIGNMENT, 512 B: the multiple NVIDIA GPUs are
 * observed to return, which also meets CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32).
 * ElementSizeBytes must be 4, 8 or 16, as CUDA documents; a pitch above
 * CU_DEVICE_ATTRIBUTE_MAX_PITCH and a size that overflows are CUDA_ERROR_INVALID_VALUE. */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                            unsigned int elem)
{
    CLEAR_OUT(dptr);
    SIM_CHECK_INIT();
    if (!dptr || !pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    if (width > SIM_MAX_PITCH) return CUDA_ERROR_INVALID_VALUE;
    size_t p = round_up(width, SIM_TEXTURE_ALIGNMENT);
    if (p > SIM_MAX_PITCH || height > SIZE_MAX / p) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    int dev;
    CUresult rc = sim_current_dev(&dev);
    if (!rc && sim_capture_prohibits_unsafe()) rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!rc) rc = device_alloc(dev, dptr, p * height, NULL);
    if (!rc) *pitch = p;
    sim_cost(SIM_OP_MEM_ALLOC, p * height);
    sim_unlock();
    return rc;
}

CUresult sim_device_free(CUdeviceptr dptr, bool async, size_t *freed)
{
    sim_range *r = sim_range_find((uintptr_t)dptr);
    if (!r || r->base != (uintptr_t)dptr) return CUDA_ERROR_INVALID_VALUE;
    if (r->kind != SIM_R_DEVICE && r->kind != SIM_R_MANAGED) return CUDA_ERROR_INVALID_VALUE;
    if (async && r->kind != SIM_R_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (r->ipc_import) return CUDA_ERROR_INVALID_VALUE; /* cuIpcCloseMemHandle's to release */
    if (r->graph) return CUDA_ERROR_INVALID_VALUE;      /* graph_mem_free's */
    *freed = r->size;
    sim_pool *pool = r->kind == SIM_R_DEVICE ? r->pool : NULL;
    if (pool)
        pool_use(pool, -(int64_t)r->charged);
    else if (r->kind == SIM_R_DEVICE)
        sim_uncharge(r->dev, r->charged);
    range_remove(r);
    if (r->kind == SIM_R_DEVICE && !sim.virtual_backing && r->map_base == (void *)r->base &&
        !r->ipc && backing_cache_put(r->map_base, r->map_size))
        r->map_base = NULL; /* recycled, not unmapped */
    range_destroy(r);
    if (pool) pool_release_if_gone(pool);
    return CUDA_SUCCESS;
}

/* A primary context reset (cuDevicePrimaryCtxReset, cudaDeviceReset), with the lock held and the
 * device drained: every device allocation of dev made through the context is freed, from
 * cuMemAlloc (pitched too) and the stream-ordered pools, as an H200 frees them
 * (tests/diff/gpu-h200/reset.out). What the context does not own stays: VMM memory (handles and
 * mappings belong to the process), graph memory (its graphs own it), memory opened from another
 * process (cuIpcCloseMemHandle's), and host and managed memory. */
void sim_device_reset_memory(int dev)
{
    for (size_t i = sim.nranges; i > 0; i--) {
        sim_range *r = sim.ranges[i - 1];
        size_t freed;
        if (r->kind == SIM_R_DEVICE && r->dev == dev && !r->graph && !r->ipc_import)
            (void)sim_device_free((CUdeviceptr)r->base, false, &freed);
    }
}

static CUresult graph_mem_free(sim_range *r, sim_stream *st);

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    SIM_CHECK_INIT();
    sim_lock();
    size_t freed = 0;
    int cur;
    CUresult rc = sim_current_dev(&cur);
    double wait = 0;
    if (!rc && sim_capture_prohibits_unsafe()) rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!rc && dptr) {
        /* Like the real driver: freeing synchronizes the memory's device first. */
        sim_range *r = sim_range_find((uintptr_t)dptr);
        wait = sim_device_drain(r && r->kind == SIM_R_DEVICE ? r->dev : cur);
        r = sim_range_find((uintptr_t)dptr); /* the drain may have let others run */
        if (r && r->freeing)
            rc = CUDA_ERROR_INVALID_VALUE;
        else if (r && r->graph) /* "immediately upon the freeing call to cudaFree()" */
            rc = r->base == (uintptr_t)dptr ? graph_mem_free(r, NULL) : CUDA_ERROR_INVALID_VALUE;
        else
            rc = sim_device_free(dptr, false, &freed);
    }
    sim_cost(SIM_OP_MEM_FREE, freed);
    sim_cost_wait(SIM_OP_MEM_FREE, wait);
    sim_unlock();
    return rc;
}

/* ---- graph allocations (memory nodes; the graph semantics are in sim_graph.c) -------------
 * A graph allocation's address is reserved when its allocation node is created (PROT_NONE
 * address space, not charged) and stays fixed while any node names it (g_refs). A launch that
 * reaches the node makes the memory exist: charged to the device and read/write (g_live); a free
 * (a free node, cuMemFreeAsync, cuMemFree) ends that: the bytes are dropped and the address is
 * inaccessible again, as a GPU's would fault. Like the driver, the device keeps freed graph
 * memory reserved for later graph allocations (graph_reserved - graph_used) until
 * cuDeviceGraphMemTrim gives it back. */
sim_range *sim_graph_mem_new(int dev, size_t size)
{
    if (size == 0) return NULL;
    void *mb;
    size_t ms;
    void *p = map_aligned(round_up(size, 4096), 4096, PROT_NONE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, &mb, &ms);
    sim_range *r = p ? range_new(SIM_R_DEVICE, (uintptr_t)p, size, mb, ms) : NULL;
    if (!r || !range_insert(r)) {
        if (r)
            range_destroy(r);
        else if (p)
            munmap(mb, ms);
        return NULL;
    }
    r->graph = true;
    r->dev = dev;
    r->charged = round_up(size, SIM_ALLOC_ROUND);
    return r;
}

static void graph_mem_maybe_destroy(sim_range *r)
{
    if (r->g_refs || r->g_live || r->g_outstanding) return;
    range_remove(r);
    range_destroy(r);
}

void sim_graph_mem_ref(sim_range *r)
{
    r->g_refs++;
}

void sim_graph_mem_unref(sim_range *r)
{
    if (r->g_refs) r->g_refs--;
    graph_mem_maybe_destroy(r);
}

/* Bytes a device can give graph allocations now: its free memory and what it keeps reserved. */
size_t sim_graph_mem_avail(int dev)
{
    sim_device *d = &sim.dev[dev];
    return sim_dev_free(dev) + (d->graph_reserved - d->graph_used);
}

/* The allocation's lifetime begins (an allocation node ran). Capacity was checked by the launch. */
static void graph_mem_begin(sim_range *r)
{
    if (r->g_live) return;
    sim_device *d = &sim.dev[r->dev];
    size_t cached = d->graph_reserved - d->graph_used;
    if (r->charged > cached) {
        size_t more = r->charged - cached;
        d->used += more;
        if (d->used > d->peak) d->peak = d->used;
        d->graph_reserved += more;
        if (d->graph_reserved > d->graph_reserved_high) d->graph_reserved_high = d->graph_reserved;
    }
    d->graph_used += r->charged;
    if (d->graph_used > d->graph_high) d->graph_high = d->graph_used;
    if (!sim.virtual_backing) mprotect((void *)r->base, r->map_size, PROT_READ | PROT_WRITE);
    r->g_live = true;
}

/* The allocation's lifetime ends: its bytes are gone, the address faults again. */
void sim_graph_mem_end(sim_range *r)
{
    if (!r->g_live) return;
    sim_device *d = &sim.dev[r->dev];
    d->graph_used -= r->charged < d->graph_used ? r->charged : d->graph_used;
    if (!sim.virtual_backing) {
        madvise((void *)r->base, r->map_size, MADV_DONTNEED);
        mprotect((void *)r->base, r->map_size, PROT_NONE);
    }
    r->g_live = false;
    graph_mem_maybe_destroy(r);
}

/* cuDeviceGraphMemTrim: reserved graph memory no allocation uses goes back to the device. */
void sim_graph_mem_trim(int dev)
{
    sim_device *d = &sim.dev[dev];
    sim_uncharge(dev, d->graph_reserved - d->graph_used);
    d->graph_reserved = d->graph_used;
}

/* Runs an allocation or free node (lock held). */
void sim_graph_mem_run(sim_work *w)
{
    sim_range *r = w->user;
    if (w->kind == SIM_W_GALLOC)
        graph_mem_begin(r);
    else
        sim_graph_mem_end(r);
}

/* A free of a graph allocation outside a capture (cuMemFreeAsync on st; st NULL: cuMemFree, at
 * once). Only an allocation a launch made and nobody freed yet can be freed this way. */
static CUresult graph_mem_free(sim_range *r, sim_stream *st)
{
    if (!r->g_outstanding) return CUDA_ERROR_INVALID_VALUE;
    r->g_outstanding = false;
    if (!st) {
        sim_graph_mem_end(r);
        return CUDA_SUCCESS;
    }
    sim_work *w = calloc(1, sizeof *w);
    if (!w) {
        r->g_outstanding = true;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    w->kind = SIM_W_GFREE;
    w->user = r;
    sim_graph_mem_ref(r);
    sim_submit(st, w);
    return CUDA_SUCCESS;
}

/* A stream-ordered allocation on st from pool (its stream checked); lock held. */
static CUresult stream_alloc(sim_stream *st, sim_pool *pool, CUdeviceptr *dptr, size_t size)
{
    if (st->capture)
        return !dptr || !size ? CUDA_ERROR_INVALID_VALUE : sim_capture_mem_alloc(st, size, dptr);
    if (dptr && !size) return CUDA_SUCCESS; /* and 0, as the real driver answers (drv_api.out) */
    /* a stream not captured while the capture rules forbid it: 900 on an H200 (capture_modes) */
    if (sim_capture_prohibits_unsafe()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return device_alloc(pool->dev, dptr, size, pool);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s)
{
    CLEAR_OUT(dptr);
    SIM_CHECK_INIT();
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_for_work(s, &st);
    if (!rc) rc = stream_alloc(st, sim.dev[st->dev].current_pool, dptr, size);
    sim_cost(SIM_OP_MEM_ALLOC_ASYNC, size);
    sim_unlock();
    return rc;
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s)
{
    CLEAR_OUT(dptr);
    SIM_CHECK_INIT();
    sim_lock();
    sim_pool *p = pool_find(pool);
    sim_stream *st;
    CUresult rc = !p ? CUDA_ERROR_INVALID_VALUE : sim_stream_for_work(s, &st);
    if (!rc) rc = stream_alloc(st, p, dptr, size);
    sim_cost(SIM_OP_MEM_ALLOC_ASYNC, size);
    sim_unlock();
    return rc;
}

/* Synchronous mode: frees at once (the work issued before it already ran). Asynchronous mode:
 * the free is queued on the stream and happens when the stream reaches it, so the memory stays
 * valid (and charged) for the work issued before it. */
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    SIM_CHECK_INIT();
    sim_lock();
    size_t freed = 0;
    sim_stream *st;
    CUresult rc = sim_stream_for_work(s, &st);
    if (!rc && !st->capture && sim_capture_prohibits_unsafe())
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* as an H200 (capture_modes.out) */
    else if (!rc && !dptr && !st->capture)
        ; /* freeing 0 succeeds, as cuMemFree_v2(0) does (drv_api.out) */
    else if (!rc && !dptr)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!rc && st->capture) {
        rc = sim_capture_mem_free(st, dptr);
    } else if (!rc) {
        sim_range *r = sim_range_find((uintptr_t)dptr);
        if (!r || r->base != (uintptr_t)dptr || r->kind != SIM_R_DEVICE || r->freeing)
            rc = CUDA_ERROR_INVALID_VALUE;
        else if (r->graph)
            rc = graph_mem_free(r, st);
        else if (sim_is_async()) {
            sim_work *w = calloc(1, sizeof *w);
            if (!w)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            else {
                w->kind = SIM_W_FREE;
                w->ptr = dptr;
                r->freeing = true;
                freed = r->size;
                sim_issue(st, w, NULL);
            }
        } else {
            rc = sim_device_free(dptr, true, &freed);
            if (!rc) sim_issue(st, NULL, NULL);
        }
    }
    sim_cost(SIM_OP_MEM_FREE_ASYNC, freed);
    sim_unlock();
    return rc;
}

/* Maps fresh read/write host memory as a range of `kind` (managed memory, pinned host memory)
 * and enters it in the range table; CUDA_ERROR_OUT_OF_MEMORY when either fails, with nothing
 * left behind. Caller holds the sim lock. */
static CUresult host_range_map(int kind, size_t size, unsigned flags, int mmap_flags, void **out)
{
    void *mb;
    size_t ms;
    void *p = map_aligned(round_up(size, 4096), 4096, PROT_READ | PROT_WRITE, mmap_flags, &mb, &ms);
    sim_range *r = p ? range_new(kind, (uintptr_t)p, size, mb, ms) : NULL;
    if (!r || !range_insert(r)) {
        if (r)
            range_destroy(r);
        else if (p)
            munmap(mb, ms);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->flags = flags;
    *out = p;
    return CUDA_SUCCESS;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
    CLEAR_OUT(dptr);
    SIM_CHECK_INIT();
    if (!dptr || size == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    void *p = NULL;
    int dev;
    CUresult rc = sim_current_dev(&dev);
    if (!rc && sim_capture_prohibits_unsafe()) rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!rc)
        rc = host_range_map(SIM_R_MANAGED, size, flags, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                            &p);
    if (rc == CUDA_SUCCESS) *dptr = (CUdeviceptr)p;
    sim_cost(SIM_OP_MEM_ALLOC_MANAGED, size);
    sim_unlock();
    return rc;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    SIM_CHECK_INIT();
    if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    int dev;
    CUresult rc = sim_current_dev(&dev);
    if (!rc) {
        *total = sim.dev[dev].capacity;
        *free_bytes = sim_dev_free(dev);
    }
    sim_cost(SIM_OP_MEM_GET_INFO, 0);
    sim_unlock();
    return rc;
}

/* ---- memory pools ----------------------------------------------------------------------- */

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    SIM_CHECK_INIT();
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= sim.ndevices) return CUDA_ERROR_INVALID_DEVICE;
    *pool = POOL_HANDLE(&sim.dev[dev].pool);
    return CUDA_SUCCESS;
}

/* The device's current pool: its default one until the program sets another
 * (cuDeviceSetMemPool), and again once that one is destroyed. cuMemAllocAsync allocates from
 * it. */
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    SIM_CHECK_INIT();
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= sim.ndevices) return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    *pool = POOL_HANDLE(sim.dev[dev].current_pool);
    sim_unlock();
    return CUDA_SUCCESS;
}

/* Setting the current pool: a live pool located on that device, else CUDA_ERROR_INVALID_VALUE,
 * as the driver refuses a pool located elsewhere. */
CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    SIM_CHECK_INIT();
    if (dev < 0 || dev >= sim.ndevices) return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    sim_pool *p = pool_find(pool);
    CUresult rc = p && p->dev == dev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!rc) sim.dev[dev].current_pool = p;
    sim_unlock();
    return rc;
}

/* CUDA 13's per-location form: a device's pool for device memory only (host locations and
 * managed memory have no pool here) */
CUresult cuMemSetMemPool(CUmemLocation *loc, CUmemAllocationType type, CUmemoryPool pool)
{
    SIM_CHECK_INIT();
    if (!loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE || type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return sim_unsupported("cuMemSetMemPool for a location other than a device's device memory");
    return cuDeviceSetMemPool(loc->id, pool);
}

/* A pool of device memory on one device (CUmemPoolProps: allocType PINNED, a device location;
 * handle types none or a POSIX descriptor, whose export is not modelled; maxSize bounds its
 * reservation). Host-located pools and other handle types are not modelled. */
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    SIM_CHECK_INIT();
    if (!pool || !props) return CUDA_ERROR_INVALID_VALUE;
    if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) {
        if (props->allocType == CU_MEM_ALLOCATION_TYPE_MANAGED)
            return sim_unsupported("cuMemPoolCreate of a managed-memory pool");
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (props->location.type == CU_MEM_LOCATION_TYPE_HOST ||
        props->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
        return sim_unsupported("cuMemPoolCreate of a host-memory pool");
    if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id < 0 ||
        props->location.id >= sim.ndevices)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
        props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return sim_unsupported("cuMemPoolCreate with a handle type other than none or POSIX fd");
    sim_pool *p = calloc(1, sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    p->magic = sim.dev[0].pool.magic;
    p->dev = props->location.id;
    p->created = true;
    p->max_size = props->maxSize;
    sim_lock();
    p->next = sim.pools;
    sim.pools = p;
    *pool = POOL_HANDLE(p);
    sim_unlock();
    return CUDA_SUCCESS;
}

/* A device's default pool cannot be destroyed (CUDA_ERROR_INVALID_VALUE). A destroyed pool that
 * was its device's current one gives that place back to the default pool; its handle is invalid
 * at once, but its allocations stay valid until they are freed, and the memory it holds goes
 * back to the device with the last of them (at once when it holds none), as CUDA documents. */
CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_pool *p = pool_find(pool);
    CUresult rc = p && p->created ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        if (sim.dev[p->dev].current_pool == p) sim.dev[p->dev].current_pool = &sim.dev[p->dev].pool;
        p->destroyed = true;
        pool_settle(p, 0);
        pool_release_if_gone(p);
    }
    sim_unlock();
    return rc;
}

/* Gives the pool's unused memory back to the device down to `keep` bytes (pool_settle). */
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_pool *p = pool_find(pool);
    if (p) pool_settle(p, keep);
    sim_unlock();
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The release threshold is how much reserved memory a pool keeps when its allocations are
 * freed (pool_settle); lowering it gives the excess back at the next free or trim, as the
 * driver does at the next synchronization. The high-water marks are the highest figures since
 * the start or since the program reset them by setting them to 0 (the only value CUDA accepts
 * for them). */
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    SIM_CHECK_INIT();
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    sim_pool *p = pool_find(pool);
    switch (p ? (int)attr : -1) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        p->release_threshold = *(cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        break; /* accepted; the sim's pool has no reuse policy to tune */
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            p->reserved_high = p->reserved;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            p->used_high = p->used;
        break;
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
        break;
    }
    sim_unlock();
    return rc;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    SIM_CHECK_INIT();
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_pool *p = pool_find(pool);
    sim_pool now = p ? *p : (sim_pool){0};
    sim_unlock();
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *(cuuint64_t *)value = now.release_threshold;
        break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = 1;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        *(cuuint64_t *)value = now.reserved;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *(cuuint64_t *)value = now.used;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        *(cuuint64_t *)value = now.reserved_high;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = now.used_high;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ---- virtual memory management ----------------------------------------------------------- */

/* Fibonacci hashing: the top bits of the product, as many as the table has (ids are sequential) */
static size_t handle_bucket(uint64_t id)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> (64 - __builtin_ctzll(sim.nhandle_buckets)));
}

static sim_handle *handle_find(CUmemGenericAllocationHandle id)
{
    if (!sim.nhandle_buckets) return NULL;
    sim_handle *h = sim.handle_buckets[handle_bucket(id)];
    while (h && h->id != id)
        h = h->hnext;
    return h;
}

/* Adds h (its id set) to the table, which grows to keep about one handle a bucket. False when
 * out of host memory (h not added). */
static bool handle_insert(sim_handle *h)
{
    if (sim.nhandles >= sim.nhandle_buckets) {
        size_t n = sim.nhandle_buckets ? sim.nhandle_buckets * 2 : 64;
        sim_handle **v = calloc(n, sizeof *v);
        if (!v) return false;
        sim_handle **old = sim.handle_buckets;
        size_t nold = sim.nhandle_buckets;
        sim.handle_buckets = v;
        sim.nhandle_buckets = n;
        for (size_t i = 0; i < nold; i++)
            for (sim_handle *x = old[i], *next; x; x = next) {
                next = x->hnext;
                size_t b = handle_bucket(x->id);
                x->hnext = v[b];
                v[b] = x;
            }
        free(old);
    }
    size_t b = handle_bucket(h->id);
    h->hnext = sim.handle_buckets[b];
    sim.handle_buckets[b] = h;
    sim.nhandles++;
    return true;
}

static void handle_remove(sim_handle *h)
{
    sim_handle **pp = &sim.handle_buckets[handle_bucket(h->id)];
    while (*pp != h)
        pp = &(*pp)->hnext;
    *pp = h->hnext;
    sim.nhandles--;
}

/* Frees the handle's memory once nothing refers to it: no reference and no mapping. */
static void handle_maybe_destroy(sim_handle *h)
{
    if (h->refs > 0 || h->nmaps > 0) return;
    if (h->own_fd)
        close(h->fd); /* its own memfd: the memory goes when the last mapping or importer does */
    else if (h->fd >= 0 && !h->inherited)
        fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)h->file_off,
                  (off_t)h->size);
    if (!h->imported) sim_uncharge(h->dev, h->size);
    handle_remove(h);
    free(h);
}

CUresult cuMemGetAllocationGranularity(size_t *gran, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    SIM_CHECK_INIT();
    if (!gran || !prop) return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
        option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.id < 0 || prop->location.id >= sim.ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    *gran = SIM_GRANULARITY;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    SIM_CHECK_INIT();
    if (!ptr || size == 0 || size % SIM_GRANULARITY || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (alignment == 0) alignment = SIM_GRANULARITY;
    if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
    if (alignment < SIM_GRANULARITY) alignment = SIM_GRANULARITY;
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void *p = NULL, *mb = NULL;
    size_t ms = 0;
    /* The address is a hint, as on a GPU: used when free and aligned, else ignored. */
    if (addr && addr % alignment == 0) {
        void *q = mmap((void *)addr, size, PROT_NONE, mflags | MAP_FIXED_NOREPLACE, -1, 0);
        if (q == (void *)addr) {
            p = q;
            mb = q;
            ms = size;
        } else if (q != MAP_FAILED)
            munmap(q, size);
    }
    if (!p) p = map_aligned(size, alignment, PROT_NONE, mflags, &mb, &ms);
    sim_range *r = p ? range_new(SIM_R_RESERVE, (uintptr_t)p, size, mb, ms) : NULL;
    if (!r || !range_insert(r)) {
        if (r)
            range_destroy(r);
        else if (p)
            munmap(mb, ms);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        *ptr = (CUdeviceptr)p;
    }
    sim_cost(SIM_OP_ADDRESS_RESERVE, size);
    sim_unlock();
    return rc;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    SIM_CHECK_INIT();
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    sim_range *r = sim_range_find((uintptr_t)ptr);
    if (!r || r->kind != SIM_R_RESERVE || r->base != (uintptr_t)ptr || r->size != size)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (r->nmaps > 0)
        rc = CUDA_ERROR_INVALID_VALUE; /* still mapped: cuMemUnmap first (strict, documented) */
    else {
        range_remove(r);
        range_destroy(r);
    }
    sim_cost(SIM_OP_ADDRESS_FREE, size);
    sim_unlock();
    return rc;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    SIM_CHECK_INIT();
    if (!handle || !prop || size == 0 || size % SIM_GRANULARITY || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.id < 0 || prop->location.id >= sim.ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    /* Shareable handles: POSIX file descriptors (a memfd of its own where the device memory has
     * bytes; with virtual backing the handle is made, and exporting it is not supported). Fabric
     * handles need an IMEX channel, which a machine without a multi-node NVLink fabric does not
     * have: a part that supports them (the profile's CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_
     * SUPPORTED) then refuses with CUDA_ERROR_NOT_PERMITTED, another with NOT_SUPPORTED. PyTorch's
     * expandable segments and NCCL try fabric first and fall back to POSIX descriptors on both. */
    if (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC)
        return sim.profile->fabric ? CUDA_ERROR_NOT_PERMITTED : CUDA_ERROR_NOT_SUPPORTED;
    bool shareable = (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) &&
                     !sim.virtual_backing;
    if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return sim_unsupported("cuMemCreate with this shareable handle type");
    sim_lock();
    CUresult rc = sim_charge(prop->location.id, size, true);
    sim_handle *h = NULL;
    if (!rc) {
        h = calloc(1, sizeof *h);
        if (h) h->id = sim.next_id++;
        if (!h || !handle_insert(h))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else if (shareable) {
            h->fd = memfd_create("gpumem-sim-shareable", MFD_CLOEXEC);
            if (h->fd < 0 || ftruncate(h->fd, (off_t)size)) {
                if (h->fd >= 0) close(h->fd);
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            } else
                h->own_fd = true;
        } else if (sim.memfd >= 0 && ftruncate(sim.memfd, (off_t)(sim.next_file_off + size)))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (rc) {
            if (h && handle_find(h->id) == h) handle_remove(h);
            free(h);
            h = NULL;
            sim_uncharge(prop->location.id, size);
        }
    }
    if (h) {
        h->size = size;
        if (!h->own_fd) {
            h->file_off = sim.next_file_off;
            h->fd = sim.memfd;
            sim.next_file_off += size;
        }
        h->refs = 1;
        h->dev = prop->location.id;
        h->prop = *prop;
        *handle = h->id;
    }
    sim_cost(SIM_OP_MEM_CREATE, size);
    sim_unlock();
    return rc;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_handle *h = handle_find(handle);
    CUresult rc = CUDA_SUCCESS;
    size_t size = 0;
    if (!h || h->refs <= 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    else {
        size = h->size;
        h->refs--;
        handle_maybe_destroy(h);
    }
    sim_cost(SIM_OP_MEM_RELEASE, size);
    sim_unlock();
    return rc;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    SIM_CHECK_INIT();
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    sim_range *r = sim_range_find((uintptr_t)addr);
    if (r && r->kind == SIM_R_RESERVE) {
        sim_mapping *m = map_at(r, (uintptr_t)addr);
        if (m) {
            m->h->refs++;
            *handle = m->h->id;
            rc = CUDA_SUCCESS;
        }
    }
    sim_unlock();
    return rc;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                CUmemGenericAllocationHandle handle)
{
    SIM_CHECK_INIT();
    if (!prop) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_handle *h = handle_find(handle);
    if (h) *prop = h->prop;
    sim_unlock();
    return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    SIM_CHECK_INIT();
    /* CUDA: "offset - Offset into the memory represented by handle from which to start
     * mapping - Note: currently must be zero." */
    if (flags != 0 || size == 0 || size % SIM_GRANULARITY || offset != 0 ||
        (uintptr_t)ptr % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    uintptr_t va = (uintptr_t)ptr;
    sim_range *r = sim_range_find(va);
    sim_handle *h = handle_find(handle);
    if (!r || r->kind != SIM_R_RESERVE || va + size < va || va + size > r->base + r->size)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!h || h->refs <= 0 || offset > h->size || size > h->size - offset)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (size != h->size)
        rc = CUDA_ERROR_NOT_SUPPORTED; /* a part of a handle: an H200's driver refuses it */
    sim_mapping *m = NULL;
    size_t first = 0, n = size / SIM_GRANULARITY;
    if (!rc) {
        first = (va - r->base) / SIM_GRANULARITY;
        if (!r->slots) r->slots = calloc(r->size / SIM_GRANULARITY, sizeof *r->slots);
        for (size_t k = 0; r->slots && k < n && !rc; k++)
            if (r->slots[first + k])
                rc = CUDA_ERROR_INVALID_VALUE; /* over a mapping: the H200's code */
        if (!rc && sim_fault_map())
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else if (!rc && (!r->slots || !(m = malloc(sizeof *m))))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (!rc && h->fd >= 0) {
            void *q = mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd,
                           (off_t)(h->file_off + offset));
            if (q == MAP_FAILED) rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (!rc) {
            *m = (sim_mapping){.va = va,
                               .size = size,
                               .offset = offset,
                               .h = h,
                               .access = CU_MEM_ACCESS_FLAGS_PROT_NONE};
            for (size_t k = 0; k < n; k++)
                r->slots[first + k] = m;
            r->nmaps++;
            h->nmaps++;
        } else
            free(m);
    }
    sim_cost(SIM_OP_MEM_MAP, size);
    sim_unlock();
    return rc;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    SIM_CHECK_INIT();
    if (size == 0 || size % SIM_GRANULARITY || (uintptr_t)ptr % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    uintptr_t va = (uintptr_t)ptr, end = va + size;
    sim_range *r = sim_range_find(va);
    if (!r || r->kind != SIM_R_RESERVE || end < va || end > r->base + r->size) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        /* The range must be exactly a run of whole, contiguous mappings. */
        uintptr_t at = va;
        sim_mapping *m;
        while (at < end && (m = map_at(r, at)) && m->va == at)
            at += m->size;
        if (at != end) rc = CUDA_ERROR_INVALID_VALUE;
        if (!rc) {
            if (sim.memfd >= 0)
                mmap((void *)va, size, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
            else
                mprotect((void *)va, size, PROT_NONE);
            for (at = va; at < end;) {
                m = map_at(r, at);
                size_t first = (at - r->base) / SIM_GRANULARITY, n = m->size / SIM_GRANULARITY;
                for (size_t k = 0; k < n; k++)
                    r->slots[first + k] = NULL;
                at += m->size;
                r->nmaps--;
                sim_handle *h = m->h;
                free(m);
                h->nmaps--;
                handle_maybe_destroy(h);
            }
        }
    }
    sim_cost(SIM_OP_MEM_UNMAP, size);
    sim_unlock();
    return rc;
}

static int prot_of(unsigned access)
{
    switch (access) {
    case CU_MEM_ACCESS_FLAGS_PROT_READ:
        return PROT_READ;
    case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
        return PROT_READ | PROT_WRITE;
    default:
        return PROT_NONE;
    }
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    SIM_CHECK_INIT();
    if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
    unsigned access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].location.id < 0 || desc[i].location.id >= sim.ndevices) return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
        access = desc[i].flags;
    }
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    uintptr_t va = (uintptr_t)ptr, end = va + size;
    sim_range *r = sim_range_find(va);
    if (!r || r->kind != SIM_R_RESERVE || end < va || end > r->base + r->size) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        /* Every byte of the range must be mapped. */
        uintptr_t at = va;
        sim_mapping *m;
        while (at < end && (m = map_at(r, at)))
            at = m->va + m->size;
        if (at < end)
            rc = CUDA_ERROR_INVALID_VALUE;
        else {
            if (sim.memfd >= 0 && mprotect((void *)va, size, prot_of(access)))
                rc = CUDA_ERROR_UNKNOWN;
            for (at = va; at < end && !rc; at = m->va + m->size) {
                m = map_at(r, at);
                m->access = access;
            }
        }
    }
    sim_cost(SIM_OP_MEM_SET_ACCESS, size);
    sim_unlock();
    return rc;
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *loc, CUdeviceptr ptr)
{
    SIM_CHECK_INIT();
    if (!flags || !loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    sim_range *r = sim_range_find((uintptr_t)ptr);
    sim_mapping *m = r && r->kind == SIM_R_RESERVE ? map_at(r, (uintptr_t)ptr) : NULL;
    if (m) {
        *flags = m->access;
        rc = CUDA_SUCCESS;
    }
    sim_unlock();
    return rc;
}

/* ---- host memory ------------------------------------------------------------------------- */

CUresult cuMemHostAlloc(void **pp, size_t size, unsigned int flags)
{
    if (pp) *pp = NULL;
    SIM_CHECK_INIT();
    const unsigned known =
        CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    if (!pp || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0) return CUDA_SUCCESS; /* and NULL, as the real driver answers (drv_api.out) */
    sim_lock();
    int dev;
    CUresult rc = sim_current_dev(&dev);
    if (!rc && sim_capture_prohibits_unsafe()) rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!rc) rc = host_range_map(SIM_R_HOST, size, flags, MAP_PRIVATE | MAP_ANONYMOUS, pp);
    sim_cost(SIM_OP_HOST_ALLOC, size);
    sim_unlock();
    return rc;
}

CUresult cuMemAllocHost_v2(void **pp, size_t size)
{
    return cuMemHostAlloc(pp, size, 0);
}

/* Forgets the host range of `kind` that starts at p (cuMemFreeHost, cuMemHostUnregister):
 * `missing` when there is none; the cost is charged either way. */
static CUresult host_range_drop(void *p, int kind, CUresult missing, sim_op op)
{
    SIM_CHECK_INIT();
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    size_t size = 0;
    sim_range *r = sim_range_find((uintptr_t)p);
    if (!r || r->kind != kind || r->base != (uintptr_t)p)
        rc = missing;
    else {
        size = r->size;
        range_remove(r);
        range_destroy(r);
    }
    sim_cost(op, size);
    sim_unlock();
    return rc;
}

CUresult cuMemFreeHost(void *p)
{
    if (!p) return CUDA_SUCCESS; /* as the real driver answers (drv_api.out) */
    return host_range_drop(p, SIM_R_HOST, CUDA_ERROR_INVALID_VALUE, SIM_OP_HOST_FREE);
}

CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags)
{
    SIM_CHECK_INIT();
    if (!p || size == 0 ||
        (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                             CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    int dev;
    CUresult rc = sim_current_dev(&dev);
    if (rc)
        ;
    else if (range_overlaps((uintptr_t)p, size))
        rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    else {
        sim_range *r = range_new(SIM_R_REGISTERED, (uintptr_t)p, size, NULL, 0);
        if (!r || !range_insert(r)) {
            free(r);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else
            r->flags = flags;
    }
    sim_cost(SIM_OP_HOST_REGISTER, size);
    sim_unlock();
    return rc;
}

CUresult cuMemHostUnregister(void *p)
{
    return host_range_drop(p, SIM_R_REGISTERED, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                           SIM_OP_HOST_UNREGISTER);
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pd, void *p, unsigned int flags)
{
    SIM_CHECK_INIT();
    if (!pd || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_range *r = sim_range_find((uintptr_t)p);
    bool ok = r && (r->kind == SIM_R_HOST || r->kind == SIM_R_REGISTERED);
    sim_unlock();
    if (!ok) return CUDA_ERROR_INVALID_VALUE;
    *pd = (CUdeviceptr)p; /* unified addressing: the device sees host memory at its host address */
    return CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
    SIM_CHECK_INIT();
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_range *r = sim_range_find((uintptr_t)p);
    bool ok = r && r->kind == SIM_R_HOST;
    if (ok) *flags = r->flags;
    sim_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

size_t sim_host_registered_count(void)
{
    sim_ensure_config();
    size_t n = 0;
    sim_lock();
    for (size_t i = 0; i < sim.nranges; i++)
        n += sim.ranges[i]->kind == SIM_R_REGISTERED;
    sim_unlock();
    return n;
}

int sim_host_registered_find(const void *p, void **base, size_t *size)
{
    sim_ensure_config();
    sim_lock();
    sim_range *r = sim_range_find((uintptr_t)p);
    int found = r && r->kind == SIM_R_REGISTERED;
    if (found) {
        if (base) *base = (void *)r->base;
        if (size) *size = r->size;
    }
    sim_unlock();
    return found;
}

/* ---- pointer queries --------------------------------------------------------------------- */

/* Device-visible extent of p: the cuMemAlloc allocation, the VMM mapping, or the host
 * allocation it lies in. */
static bool extent_of(uintptr_t p, sim_range **pr, uintptr_t *base, size_t *size, sim_mapping **pm)
{
    sim_range *r = sim_range_find(p);
    if (pm) *pm = NULL;
    if (!r || (r->graph && !r->g_live && !r->g_outstanding))
        return false; /* a graph allocation outside its lifetime */
    *pr = r;
    if (r->kind == SIM_R_RESERVE) {
        sim_mapping *m = map_at(r, p);
        if (!m) return false;
        *base = m->va;
        *size = m->size;
        if (pm) *pm = m;
        return true;
    }
    *base = r->base;
    *size = r->size;
    return true;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_range *r;
    uintptr_t base;
    size_t size;
    sim_mapping *m = NULL;
    bool ok = extent_of((uintptr_t)dptr, &r, &base, &size, &m);
    sim_unlock();
    /* The real driver (580, CUDA 13.0) answers only for its own allocations: memory mapped into
     * a reserved range with cuMemMap is CUDA_ERROR_NOT_FOUND (tests/gpu/sim_parity.sh). */
    if (!ok || m) return CUDA_ERROR_NOT_FOUND;
    if (pbase) *pbase = (CUdeviceptr)base;
    if (psize) *psize = size;
    return CUDA_SUCCESS;
}

/* The device a range (or VMM mapping) belongs to. */
static int ptr_dev(const sim_range *r, const sim_mapping *m)
{
    if (m) return m->h->dev;
    return r->kind == SIM_R_DEVICE ? r->dev : 0;
}

/* The memory block ids: the driver numbers blocks apart from buffers (an H200's block id of an
 * allocation is not its buffer id: tests/diff/gpu-h200/ptr_query.out). */
#define SIM_BLOCK_ID_BIT (1ull << 40)

/* The mapping an address lies in, as an H200 reports it: whole 2 MiB pages for cuMemAlloc,
 * pinned and managed memory, the pool's 32 MiB chunks for a stream-ordered allocation, the
 * mapping itself for VMM; else the allocation's size. */
static size_t mapping_size(const sim_range *r, const sim_mapping *m, size_t size)
{
    if (m || r->graph) return size;
    if (r->kind == SIM_R_DEVICE && r->pool) return round_up(size, SIM_POOL_CHUNK);
    if (r->kind == SIM_R_DEVICE || r->kind == SIM_R_HOST || r->kind == SIM_R_MANAGED)
        return round_up(size, SIM_ALLOC_PAGE);
    return size;
}

/* One attribute for p; lock held. Unknown pointers: CUDA_ERROR_INVALID_VALUE. */
static CUresult pointer_attr(void *data, CUpointer_attribute attr, uintptr_t p)
{
    sim_range *r = NULL;
    sim_mapping *m = NULL;
    uintptr_t base = 0;
    size_t size = 0;
    if (!extent_of(p, &r, &base, &size, &m)) return CUDA_ERROR_INVALID_VALUE;
    bool device = r->kind == SIM_R_DEVICE || r->kind == SIM_R_RESERVE || r->kind == SIM_R_MANAGED;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = &sim.dev[ptr_dev(r, m)].primary;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = (CUdeviceptr)p;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (r->kind == SIM_R_DEVICE || r->kind == SIM_R_RESERVE) return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)p;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = m ? m->h->id : r->id;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(int *)data = r->kind == SIM_R_MANAGED;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = ptr_dev(r, m);
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: /* not pool memory (an H200's answer) */
        *(int *)data = r->kind == SIM_R_DEVICE && !r->graph && !r->pool;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)base;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = size;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(int *)data = 1;
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = m ? (unsigned long long)m->h->prop.requestedHandleTypes : 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        *(int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned *)data = m ? m->access : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = r->pool ? POOL_HANDLE(r->pool) : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = mapping_size(r, m, size);
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(void **)data = (void *)base;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: /* VMM: the handle; else a number of its own */
        *(unsigned long long *)data = m ? m->h->id : SIM_BLOCK_ID_BIT | r->id;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    SIM_CHECK_INIT();
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = pointer_attr(data, attr, (uintptr_t)ptr);
    sim_unlock();
    return rc;
}

CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                CUdeviceptr ptr)
{
    SIM_CHECK_INIT();
    if (!attrs || !data || n == 0) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_range *r;
    uintptr_t b;
    size_t s;
    bool known = extent_of((uintptr_t)ptr, &r, &b, &s, NULL);
    for (unsigned i = 0; i < n; i++) {
        if (!data[i]) continue;
        /* Like the real call: memory the driver does not know reads as zero / not managed
         * (memory type 0), and an attribute that does not apply is left zero, not an error. */
        if (!known || pointer_attr(data[i], attrs[i], (uintptr_t)ptr) != CUDA_SUCCESS) {
            switch (attrs[i]) {
            case CU_POINTER_ATTRIBUTE_CONTEXT:
            case CU_POINTER_ATTRIBUTE_HOST_POINTER:
            case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
            case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
                *(void **)data[i] = NULL;
                break;
            case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
            case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
            case CU_POINTER_ATTRIBUTE_BUFFER_ID:
            case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
            case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
            case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
            case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
                *(unsigned long long *)data[i] = 0;
                break;
            case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
                *(int *)data[i] = -2;
                break;
            default:
                *(int *)data[i] = 0;
                break;
            }
        }
    }
    sim_unlock();
    return CUDA_SUCCESS;
}

/* ---- copies and memsets ------------------------------------------------------------------ */

enum side { SIDE_HOST, SIDE_DEVICE };

/* Checks [p, p+n) for a device access. Memory the driver does not know is pageable host memory
 * and the caller's responsibility, as with the real driver. *dev: device memory (cuMemAlloc,
 * VMM, managed); *known: memory the device can address (device memory, or pinned/registered
 * host memory, which unified addressing makes usable as a "device" pointer); *skip: its bytes
 * do not exist (virtual backing). Lock held. */
static CUresult check_side(uintptr_t p, size_t n, bool write, bool capturing, bool *dev,
                           bool *known, bool *skip)
{
    *dev = *known = *skip = false;
    sim_range *r = sim_range_find(p);
    if (!r) return CUDA_SUCCESS;
    *known = true;
    if (n > r->base + r->size - p) return CUDA_ERROR_INVALID_VALUE;
    /* a graph allocation exists for stream work only between a launch that allocates it and a
     * free (as issued: in asynchronous mode the launch may not have run yet); work captured into
     * a graph runs later, in graph order, which is the program's to get right */
    if (r->graph && !r->g_outstanding && !capturing) return CUDA_ERROR_INVALID_VALUE;
    if (r->kind == SIM_R_HOST || r->kind == SIM_R_REGISTERED) return CUDA_SUCCESS;
    *dev = true;
    if (r->kind == SIM_R_MANAGED) return CUDA_SUCCESS; /* host memory in the sim, always real */
    *skip = sim.virtual_backing;
    if (r->kind == SIM_R_RESERVE) {
        unsigned need = write ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
        for (uintptr_t at = p, end = p + n; at < end;) {
            sim_mapping *m = map_at(r, at);
            if (!m || (m->access & need) != need) return CUDA_ERROR_INVALID_VALUE;
            at = m->va + m->size;
        }
    }
    return CUDA_SUCCESS;
}

/* The zeros a device -> host copy gives under virtual backing. Into the sim's own host
 * allocations (cuMemHostAlloc: private anonymous mappings) the whole pages are given back to the
 * kernel instead of written: they read as zeros and take no host memory until the program
 * writes them, so PyTorch offloading activations to pinned memory on a virtual 80 GB device does
 * not fill the host with zeros. The partial pages at either end are cleared. */
void sim_zero_host(const sim_work *w)
{
    uintptr_t a = w->dst, end = w->dst + w->n;
    uintptr_t pa = (a + 4095) & ~(uintptr_t)4095, pe = end & ~(uintptr_t)4095;
    if (!w->discard || pe <= pa || madvise((void *)pa, pe - pa, MADV_DONTNEED)) {
        memset((void *)a, 0, w->n);
        return;
    }
    memset((void *)a, 0, pa - a);
    memset((void *)pe, 0, end - pe);
}

/* Runs a copy or memset: at once (synchronous mode), or queued on st for its worker
 * (asynchronous mode; `wait`: a synchronous API, which returns once the work has run). Takes w
 * and the lock held; returns with the lock held. */
static CUresult issue_data_work(sim_stream *st, sim_work *w, bool wait)
{
    if (st->capture) return sim_capture_add(st, w, 0);
    if (!sim_is_async()) {
        /* Issue order is execution order: run it here (the lock keeps it atomic with the check). */
        if (w->kind == SIM_W_COPY) {
            if (w->zero_dst)
                sim_zero_host(w);
            else
                memmove((void *)w->dst, (const void *)w->src, w->n);
        } else if (w->elem == 1)
            memset((void *)w->dst, (int)(w->value & 0xff), w->n);
        else if (w->elem == 2)
            for (size_t i = 0; i < w->n / 2; i++)
                ((uint16_t *)w->dst)[i] = (uint16_t)w->value;
        else
            for (size_t i = 0; i < w->n / 4; i++)
                ((uint32_t *)w->dst)[i] = w->value;
        free(w);
        sim_issue(st, NULL, NULL);
        return CUDA_SUCCESS;
    }
    uint64_t seq = sim_issue(st, w, NULL);
    if (wait) sim_stream_wait_executed(st, seq);
    return CUDA_SUCCESS;
}

/* want_dst / want_src: -1 any (unified), else the side the API name promises. `s` is the stream
 * of an Async API; the synchronous ones (is_async false) use the legacy default stream. */
static CUresult do_copy(uintptr_t dst, uintptr_t src, size_t n, int want_dst, int want_src,
                        CUstream s, bool is_async)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_stream *st = NULL;
    CUresult rc = sim_stream_for_work(is_async ? s : NULL, &st);
    if (n == 0 || rc) {
        sim_unlock();
        return rc;
    }
    bool ddev = false, dknown = false, dskip = false, sdev = false, sknown = false, sskip = false;
    if (!rc) rc = check_side(dst, n, true, st->capture != NULL, &ddev, &dknown, &dskip);
    if (!rc) rc = check_side(src, n, false, st->capture != NULL, &sdev, &sknown, &sskip);
    /* A named device side must be memory the device can address. */
    if (!rc && ((want_dst == SIDE_DEVICE && !dknown) || (want_src == SIDE_DEVICE && !sknown)))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_op op = ddev ? (sdev ? SIM_OP_MEMCPY_DTOD : SIM_OP_MEMCPY_HTOD)
                     : (sdev ? SIM_OP_MEMCPY_DTOH : SIM_OP_MEMCPY_HTOH);
    if (!rc && (!dst || !src)) rc = CUDA_ERROR_INVALID_VALUE;
    sim_work *w = NULL;
    if (!rc && !(w = calloc(1, sizeof *w))) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        w->kind = SIM_W_COPY;
        w->dst = dst;
        w->src = src;
        w->n = n;
        if (dskip || sskip) {
            /* Virtual backing: no bytes on the device side. A device -> host copy still defines
             * the host bytes (as zeros), so the program never reads uninitialized memory. */
            if (!dskip && sskip) {
                w->zero_dst = true;
                sim_range *r = sim_range_find(dst);
                w->discard = r && r->kind == SIM_R_HOST && r->map_base && dst + n <= r->base + r->size;
            } else
                w->kind = SIM_W_NOP;
        }
        if (w->kind == SIM_W_NOP && !st->capture) {
            free(w);
            sim_issue(st, NULL, NULL);
        } else if (w->kind == SIM_W_NOP)
            free(w); /* nothing to capture: no bytes to move */
        else
            rc = issue_data_work(st, w, !is_async);
    }
    sim_cost(op, n);
    sim_unlock();
    return rc;
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return do_copy(dst, src, n, -1, -1, NULL, false);
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return do_copy(dst, src, n, -1, -1, s, true);
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    return do_copy(dst, (uintptr_t)src, n, SIDE_DEVICE, -1, NULL, false);
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    return do_copy((uintptr_t)dst, src, n, -1, SIDE_DEVICE, NULL, false);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return do_copy(dst, src, n, SIDE_DEVICE, SIDE_DEVICE, NULL, false);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return do_copy(dst, (uintptr_t)src, n, SIDE_DEVICE, -1, s, true);
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return do_copy((uintptr_t)dst, src, n, -1, SIDE_DEVICE, s, true);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return do_copy(dst, src, n, SIDE_DEVICE, SIDE_DEVICE, s, true);
}

/* Peer copies: both sides device memory; the contexts must be valid (the pointers themselves
 * say where the bytes are, as under unified addressing). */
static CUresult peer_ctx_check(CUcontext a, CUcontext b)
{
    SIM_CHECK_INIT();
    return sim_ctx_valid(a) && sim_ctx_valid(b) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
    CUresult rc = peer_ctx_check(dctx, sctx);
    return rc ? rc : do_copy(dst, src, n, SIDE_DEVICE, SIDE_DEVICE, NULL, false);
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                           size_t n, CUstream s)
{
    CUresult rc = peer_ctx_check(dctx, sctx);
    return rc ? rc : do_copy(dst, src, n, SIDE_DEVICE, SIDE_DEVICE, s, true);
}

static CUresult do_memset(uintptr_t dst, unsigned value, size_t elem, size_t count, CUstream s,
                          bool is_async)
{
    SIM_CHECK_INIT();
    if (count > SIZE_MAX / elem || dst % elem) return CUDA_ERROR_INVALID_VALUE;
    size_t n = count * elem;
    sim_lock();
    sim_stream *st = NULL;
    CUresult rc = sim_stream_for_work(is_async ? s : NULL, &st);
    if (count == 0 || rc) {
        sim_unlock();
        return rc;
    }
    bool dev = false, known = false, skip = false;
    if (!rc) rc = check_side(dst, n, true, st->capture != NULL, &dev, &known, &skip);
    if (!rc && !known) rc = CUDA_ERROR_INVALID_VALUE; /* pageable host memory is not the device's */
    if (!rc) {
        sim_work *w = skip ? NULL : calloc(1, sizeof *w);
        if (skip && !st->capture)
            sim_issue(st, NULL, NULL);
        else if (skip)
            free(w);
        else if (!w)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else {
            w->kind = SIM_W_MEMSET;
            w->dst = dst;
            w->n = n;
            w->elem = elem;
            w->value = value;
            rc = issue_data_work(st, w, !is_async);
        }
    }
    sim_cost(SIM_OP_MEMSET, n);
    sim_unlock();
    return rc;
}

CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
    return do_memset(d, v, 1, n, NULL, false);
}
CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n)
{
    return do_memset(d, v, 2, n, NULL, false);
}
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n)
{
    return do_memset(d, v, 4, n, NULL, false);
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    return do_memset(d, v, 1, n, s, true);
}
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    return do_memset(d, v, 2, n, s, true);
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    return do_memset(d, v, 4, n, s, true);
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags,
                               CUstream s)
{
    SIM_CHECK_INIT();
    (void)p;
    (void)n;
    (void)loc;
    (void)flags;
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_get(s, &st);
    sim_unlock();
    return rc; /* managed memory is host memory */
}

CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc)
{
    SIM_CHECK_INIT();
    (void)p;
    (void)n;
    (void)advice;
    (void)loc;
    return CUDA_SUCCESS; /* advice has no effect on host memory */
}

/* ---- shareable VMM handles and IPC -------------------------------------------------------- */

CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags)
{
    SIM_CHECK_INIT();
    if (!out || flags) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return sim_unsupported("cuMemExportToShareableHandle with this handle type");
    sim_lock();
    sim_handle *h = handle_find(handle);
    CUresult rc = CUDA_SUCCESS;
    bool unbacked = h && h->refs > 0 && !h->own_fd &&
                    (h->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (unbacked) {
        sim_unlock();
        return sim_unsupported("cuMemExportToShareableHandle with virtual backing");
    }
    if (!h || h->refs <= 0 || !h->own_fd)
        rc = CUDA_ERROR_INVALID_VALUE; /* unknown, or not created with the POSIX fd type */
    else {
        int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
            rc = CUDA_ERROR_OPERATING_SYSTEM;
        else
            *(int *)out = fd;
    }
    sim_unlock();
    return rc;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
                                        CUmemAllocationHandleType type)
{
    SIM_CHECK_INIT();
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return sim_unsupported("cuMemImportFromShareableHandle with this handle type");
    int fd = (int)(intptr_t)os_handle;
    struct stat stt;
    if (fd < 0 || fstat(fd, &stt) || stt.st_size <= 0 || (size_t)stt.st_size % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    sim_handle *h = calloc(1, sizeof *h);
    if (!h) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc && (h->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) rc = CUDA_ERROR_OPERATING_SYSTEM;
    if (rc) {
        free(h);
    } else {
        /* The properties of the exporting handle when it lives in this process. */
        h->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        h->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        h->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        bool found = false;
        for (size_t i = 0; i < sim.nhandle_buckets && !found; i++)
            for (sim_handle *x = sim.handle_buckets[i]; x && !found; x = x->hnext) {
                struct stat o;
                if (x->own_fd && !fstat(x->fd, &o) && o.st_ino == stt.st_ino &&
                    o.st_dev == stt.st_dev) {
                    h->prop = x->prop;
                    found = true;
                }
            }
        h->id = sim.next_id++;
        h->size = (size_t)stt.st_size;
        h->dev = h->prop.location.id;
        h->own_fd = h->imported = true;
        h->refs = 1;
        if (!handle_insert(h)) {
            close(h->fd);
            free(h);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else
            *handle = h->id;
    }
    sim_unlock();
    return rc;
}

/* cudaIpcMemHandle_t / CUipcMemHandle: 64 opaque bytes; the sim's layout. */
typedef struct sim_ipc_handle {
    uint32_t magic;
    int32_t pid; /* exporter */
    int32_t fd;  /* the allocation's memfd, in the exporter */
    int32_t dev;
    uint64_t size;
    uint64_t ino;
} sim_ipc_handle;
#define SIM_IPC_MAGIC 0x49504331u
_Static_assert(sizeof(sim_ipc_handle) <= sizeof(CUipcMemHandle), "IPC handle layout");

/* cuMemAlloc memory is private host memory; exporting it moves its bytes into a memfd mapped
 * at the same address (the pointer stays valid), which other processes can then map. */
CUresult cuIpcGetMemHandle(CUipcMemHandle *out, CUdeviceptr dptr)
{
    SIM_CHECK_INIT();
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    if (sim.virtual_backing) return sim_unsupported("cuIpcGetMemHandle with virtual backing");
    sim_lock();
    int dev;
    CUresult rc = sim_current_dev(&dev);
    sim_range *r = rc ? NULL : sim_range_find((uintptr_t)dptr);
    if (!rc && (!r || r->kind != SIM_R_DEVICE || r->pool || r->graph || r->ipc_import))
        rc = CUDA_ERROR_INVALID_VALUE; /* only cuMemAlloc memory (pools export differently) */
    if (!rc && !r->ipc) {
        size_t len = r->map_size ? r->map_size : round_up(r->size, 4096);
        void *at = r->map_base ? r->map_base : (void *)r->base;
        int fd = memfd_create("gpumem-sim-ipc", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)len) || pwrite(fd, at, len, 0) != (ssize_t)len ||
            mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
            if (fd >= 0) close(fd);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            r->ipc = true;
            r->ipc_fd = fd;
        }
    }
    if (!rc) {
        struct stat stt;
        sim_ipc_handle h = {.magic = SIM_IPC_MAGIC,
                            .pid = (int32_t)getpid(),
                            .fd = r->ipc_fd,
                            .dev = r->dev,
                            .size = r->size,
                            .ino = fstat(r->ipc_fd, &stt) ? 0 : (uint64_t)stt.st_ino};
        memset(out, 0, sizeof *out);
        memcpy(out->reserved, &h, sizeof h);
    }
    sim_unlock();
    return rc;
}

/* Opens another process's handle through /proc/<pid>/fd (same user): the memory is mapped
 * shared at a new address. A process cannot open its own handles ("by one CUcontext per
 * CUdevice per other process"): CUDA_ERROR_INVALID_CONTEXT. Opening one twice returns the same
 * pointer with a reference more. */
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pd, CUipcMemHandle handle, unsigned int flags)
{
    SIM_CHECK_INIT();
    sim_ipc_handle h;
    memcpy(&h, handle.reserved, sizeof h);
    if (!pd || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS || h.magic != SIM_IPC_MAGIC ||
        h.size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (h.pid == (int32_t)getpid()) return CUDA_ERROR_INVALID_CONTEXT;
    sim_lock();
    int dev;
    CUresult rc = sim_current_dev(&dev);
    for (size_t i = 0; !rc && i < sim.nranges; i++) {
        sim_range *r = sim.ranges[i];
        if (r->ipc_import && r->ipc_key[0] == (uint64_t)h.pid && r->ipc_key[1] == (uint64_t)h.fd &&
            r->ipc_key[2] == h.ino) {
            r->ipc_refs++;
            *pd = (CUdeviceptr)r->base;
            sim_unlock();
            return CUDA_SUCCESS;
        }
    }
    if (rc) {
        sim_unlock();
        return rc;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat stt;
    if (fd < 0 || fstat(fd, &stt) || (uint64_t)stt.st_ino != h.ino ||
        (uint64_t)stt.st_size < h.size) {
        if (fd >= 0) close(fd);
        sim_unlock();
        return CUDA_ERROR_INVALID_HANDLE; /* gone, or not ours to open */
    }
    size_t len = round_up(h.size, 4096);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    sim_range *r = p == MAP_FAILED ? NULL : range_new(SIM_R_DEVICE, (uintptr_t)p, h.size, p, len);
    if (!r || !range_insert(r)) {
        if (r)
            range_destroy(r);
        else if (p != MAP_FAILED)
            munmap(p, len);
        close(fd);
        sim_unlock();
        return CUDA_ERROR_MAP_FAILED;
    }
    r->ipc = r->ipc_import = true;
    r->ipc_fd = fd;
    r->ipc_refs = 1;
    r->dev = h.dev >= 0 && h.dev < sim.ndevices ? h.dev : dev;
    r->ipc_key[0] = (uint64_t)h.pid;
    r->ipc_key[1] = (uint64_t)h.fd;
    r->ipc_key[2] = h.ino;
    *pd = (CUdeviceptr)p;
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_range *r = sim_range_find((uintptr_t)dptr);
    CUresult rc = CUDA_SUCCESS;
    if (!r || !r->ipc_import || r->base != (uintptr_t)dptr)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (--r->ipc_refs == 0) {
        range_remove(r);
        range_destroy(r);
    }
    sim_unlock();
    return rc;
}

