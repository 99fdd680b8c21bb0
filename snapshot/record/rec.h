/* rec.h — the recorder API (snapshot/), used by libgpumem.so (preload/) and by tests.
 *
 * The recorder turns what the preload sees into a SQLite database (schema: snapshot/record/schema.sql,
 * user documentation: snapshot/README.md). It is built as $(BUILD)/snapshot/librec.a (-fPIC
 * objects; link with -lsqlite3 -lunwind -lpthread).
 *
 * Contract in short
 *   - Everything is lazy and thread-safe: the first call of any rec_* function opens the
 *     database from the environment (GPUMEM_DB, GPUMEM_STACKS, GPUMEM_FORK, GPUMEM_RING,
 *     GPUMEM_QUIET, GPUMEM_TSC, GPUMEM_RING_FULL) unless rec_open() was called first. Nothing happens in a
 *     constructor. Opening costs ~5 ms once (clock calibration, schema creation).
 *   - No function ever blocks the application for long, calls exit(), or crashes on a recorder
 *     error: on any failure the recorder prints ONE line to stderr ("gpumem: recorder: ...")
 *     and turns itself off; later calls are cheap no-ops.
 *   - Strings passed in (names, domains) are copied before the call returns.
 *   - The recorder adds to every event: seq (global order), time (ns since the recording
 *     started; from the invariant TSC when available), thread, call stack (when GPUMEM_STACKS > 0) and the calling thread's
 *     innermost open NVTX range (rec_range_push/pop).
 *   - Fork: the recorder installs its own pthread_atfork handlers when it opens; the preload
 *     has nothing to call. A child never touches the parent's SQLite connection. With
 *     GPUMEM_FORK=record (default) the child records into its own file (the GPUMEM_DB template
 *     expanded with the child's pid; "-<pid>" is inserted before ".db" when the template has no
 *     %p); with GPUMEM_FORK=off the child records nothing.
 *   - rec_close() flushes everything, writes the derived tables and closes the file. It is safe
 *     to call twice, and if nobody calls it the recorder's own destructor does (it runs after
 *     all atexit handlers). Events after rec_close() are ignored.
 *   - Back-pressure: the ring holds GPUMEM_RING events (default 65536). When it is full the
 *     application thread waits for the writer (lossless; it gives up only where the wait could
 *     not end: no writer, a fork in preparation, a writer stuck for 10 s — rec_ring.h). With
 *     GPUMEM_RING_FULL=drop the first thread to find it full waits up to GPUMEM_RING_WAIT_US
 *     (200 us), then drops and counts; while it stays full, later events drop at once (no
 *     wait) until a quarter is free again. Drops are stored in meta (dropped_events: events;
 *     dropped_word_records: a launch's argument-word records, no events) and every analysis
 *     says so first.
 */
#ifndef GPUMEM_SNAPSHOT_REC_H
#define GPUMEM_SNAPSHOT_REC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Event kinds (events.kind in the database). Values are part of the schema: never renumber. */
enum rec_kind {
    REC_ALLOC = 1,           /* device memory handed to the program (cudaMalloc, cuMemAlloc)   */
    REC_FREE = 2,            /* device memory given back by the program                        */
    REC_ALLOC_ASYNC = 3,     /* stream-ordered allocation (cudaMallocAsync, cuMemAllocAsync)    */
    REC_FREE_ASYNC = 4,      /* stream-ordered free (cudaFreeAsync, cuMemFreeAsync)             */
    REC_HOST_ALLOC = 5,      /* pinned host memory (cudaMallocHost, cudaHostAlloc; the program's
                                cudaHostRegister / cuMemHostRegister, passed through)           */
    REC_HOST_FREE = 6,       /* cudaFreeHost (cuMemHostUnregister of a registration)            */
    REC_MANAGED_ALLOC = 7,   /* cudaMallocManaged (passed through)                              */
    REC_MANAGED_FREE = 8,    /* free of managed memory                                          */
    REC_FOREIGN_FREE = 9,    /* free of a pointer gpumem does not own (forwarded to the real one)*/
    REC_DOUBLE_FREE = 10,    /* free of a pointer already freed (reported, never a crash)       */
    REC_VMM_MAP = 11,        /* the program's own cuMemMap (VMM passthrough): size bytes mapped */
    REC_VMM_UNMAP = 12,      /* the program's own cuMemUnmap                                    */
    REC_OOM = 13,            /* an allocation that failed; written by rec_oom(), not rec_event  */
    REC_SEG_MAP = 14,        /* allocator mapped physical memory into a segment (reserved += size) */
    REC_SEG_UNMAP = 15,      /* allocator unmapped / released physical memory (reserved -= size)   */
    REC_SEG_RESERVE = 16,    /* allocator reserved virtual address space (no memory yet)       */
    REC_SEG_RELEASE = 17,    /* allocator released virtual address space                       */
    REC_DRIVER_ALLOC = 18,   /* allocator got memory with a plain driver allocation (reserved += size) */
    REC_DRIVER_FREE = 19,    /* allocator gave such memory back (reserved -= size)              */
    REC_LAUNCH = 20,         /* kernel launch, copy or memset (addr = CUfunction); written by rec_launch() only (rec_event ignores it) */
    REC_RECORD_STREAM = 21,  /* gpumem_record_stream: the allocation at addr is used on stream too */
    /* 22..28 (schema 1.3): memory held outside gpumem's allocator and the driver's own view of
     * the device. */
    REC_VMM_CREATE = 22,     /* the program's own cuMemCreate: addr = handle, size = bytes of
                                physical memory, device = its location */
    REC_VMM_RELEASE = 23,    /* the program's cuMemRelease: addr = handle, size = its bytes (the
                                memory goes when the handle is released and no longer mapped) */
    REC_DEVICE_INFO = 24,    /* the real driver's cuMemGetInfo: device, addr = free bytes,
                                size = used (total - free), requested = total, alloc_id = when
                                (REC_DEVINFO_*) */
    REC_POOL_CREATE = 25,    /* the program's own memory pool (cuMemPoolCreate): addr = pool */
    REC_POOL_DESTROY = 26,   /* cuMemPoolDestroy: addr = pool */
    REC_ARRAY_ALLOC = 27,    /* a CUDA array (passed through): addr = CUarray, size = bytes of
                                its elements (the driver's own padding is not known) */
    REC_ARRAY_FREE = 28,     /* cuArrayDestroy / cudaFreeArray: addr = CUarray */
    /* 29: a free that waited for stream events (PENDING, fenced) landed in the allocator: its
     * block is reusable from here (PyTorch snapshots' free_completed). addr, size = the block,
     * alloc_id = the allocation's id (as on its alloc and free events), stream = the stream of
     * the allocation. Frees that are reusable at once have none. */
    REC_FREE_COMPLETED = 29,
    /* 30 (issue 37): a copy or memset refused because its bytes do not all lie in one live
     * allocation (past its end, or freed memory), as the driver refuses one on its own
     * allocations. addr = the address accessed, size = the bytes of the access, requested = the
     * allocation's requested size (0: no live allocation there), alloc_id = its id (0: none),
     * flags REC_F_BA_* = the operation. */
    REC_BAD_ACCESS = 30,
    REC_KIND_MAX_ = 31
};

/* Kinds the recorder never writes: PyTorch's own allocator, tensor by tensor, merged into a
 * recording by `gpumem record` from PyTorch's memory history (snapshot/formats/gm_torch.c).
 * addr = the block, size = the block's bytes (PyTorch's allocated_bytes count them), requested
 * = the tensor's bytes (requested_bytes); a segment's size is what PyTorch reserved. */
enum rec_torch_kind {
    REC_TORCH_ALLOC = 31,          /* a block handed to a tensor                             */
    REC_TORCH_FREE = 32,           /* the tensor freed it (PyTorch's free_requested: the
                                      statistics drop here)                                  */
    REC_TORCH_FREE_COMPLETED = 33, /* the block is reusable (free_completed: after the streams
                                      that used it caught up)                                */
    REC_TORCH_SEG_MAP = 34,        /* PyTorch reserved memory: segment_alloc, segment_map     */
    REC_TORCH_SEG_UNMAP = 35,      /* and gave it back: segment_free, segment_unmap           */
    /* 36-38: the program's own calls that change PyTorch's cache, from gpumem's hooks (not in
     * PyTorch's trace: an empty_cache that frees nothing leaves no entry there) */
    REC_TORCH_EMPTY_CACHE = 36,    /* torch.cuda.empty_cache(): device = the current device;
                                      flagged REC_F_FRAMEWORK: gpumem's allocator emptied its
                                      cache on that device (gpumem_empty_cache, written by the
                                      program's thread as it ran, the one such kind)         */
    REC_TORCH_MEMORY_FRACTION = 37, /* set_per_process_memory_fraction, or the fraction in force
                                      at the start: size = PyTorch's cap on reserved, in bytes
                                      (fraction x the device's total memory; 0: no cap),
                                      requested = the fraction in millionths; flagged
                                      REC_F_FRAMEWORK: gpumem's allocator, PyTorch's, applied
                                      it (gpumem_torch_memory_fraction, written by the program's
                                      thread: its limit is the lower of the cap and the
                                      configured limit)                                       */
    REC_TORCH_RESET_PEAK = 38      /* torch.cuda.reset_peak_memory_stats(device): from here its
                                      max_memory_allocated/_reserved() count only what follows;
                                      flagged REC_F_FRAMEWORK: gpumem's allocator, PyTorch's,
                                      restarted them (gpumem_torch_reset_peak_stats, written by
                                      the program's thread under that allocator's lock) */
};

/* 39-40 (after PyTorch's numbers): gpumem's allocator's marker events, for the replay of its
 * release before growth (alloc/README.md, "Releasing without synchronizing"): 39 a release that
 * does not synchronize recorded a marker event on stream (the allocator's on_marker hook), 40 it
 * found that stream's oldest marker complete. Only device and stream are set; per allocator
 * (device), in the order the allocator made them, among its free_completed events. */
enum rec_marker_kind {
    REC_MARKER_RECORD = 39,
    REC_MARKER_DONE = 40,
    /* 41: gpumem's allocator synchronized the device (its OOM path, the release threshold,
     * empty_cache, a stream forgotten, a failed event): every free made before it is settled;
     * flagged REC_F_SYNC_RESTART when the allocation in progress then started over. On 39, 40
     * and 41, size is the step within the allocation recorded next (alloc.h, on_marker; 0: made
     * outside one). */
    REC_ALLOC_SYNC = 41,
    /* 42: the program destroyed a stream that held memory and gpumem's allocator forgot it
     * (alloc_forget_stream): device and stream. It synchronized (the 41 before it) and released
     * what the forgotten streams' pools held. The trace's `sf <stream>`: every replay forgets
     * the stream there. */
    REC_STREAM_FORGET = 42,
    /* 43: gpumem's allocator is about to drop its lock and wait for the device (alloc.h,
     * on_wait; the trace's `sw`): addr the wait's number, which its 41 carries in addr when the
     * wait is over; requested and stream the allocation's in progress (0: none), size its step.
     * Written under the lock: the events between a 43 and its 41 are other threads' made during
     * the wait, which the synchronization did not land. Recordings before it have 41 with addr 0
     * (the replay settles at the 41 every free before it, as it did). */
    REC_ALLOC_WAIT = 43
};
/* REC_ALLOC_SYNC only: the allocation in progress started over on the frees it landed */
#define REC_F_SYNC_RESTART 0x100u
/* REC_FREE only: a cudaFree after free_sync's synchronization of the block's device: the
 * allocator settled the block at once (the trace's `fs`) */
#define REC_F_FREE_SYNCED 0x100u
/* REC_FREE_COMPLETED only: landed by the allocator's synchronization (alloc.h, on_free_synced):
 * settled there, the trace's `fy` */
#define REC_F_LANDED_SYNCED 0x100u
static inline int rec_is_synced_free(unsigned kind, unsigned flags) {
    return kind == REC_FREE && (flags & REC_F_FREE_SYNCED) != 0;
}

/* A kind the merge writes after the run (31-38), never the program's threads. */
static inline int rec_kind_merged(unsigned kind) {
    return kind >= REC_TORCH_ALLOC && kind <= REC_TORCH_RESET_PEAK;
}

/* REC_DEVICE_INFO's alloc_id: when the sample was taken. */
enum rec_devinfo_when {
    REC_DEVINFO_START = 1, /* the first moment gpumem saw a current context */
    REC_DEVINFO_PEAK = 2,  /* device memory gpumem knows of reached a new high */
    REC_DEVINFO_EXIT = 3   /* at exit */
};

/* Flags OR-ed into the kind argument of rec_event (stored in events.flags). */
#define REC_F_CACHE_HIT 0x100u  /* allocation served from the cache, no driver call */
#define REC_F_CACHE_MISS 0x200u /* allocation needed the driver (segment grew / new memory) */
#define REC_F_PITCHED 0x400u    /* pitched or 3D allocation (cuMemAllocPitch, cudaMallocPitch/3D) */
#define REC_F_POOL 0x800u       /* allocation from a pool the program chose (cuMemAllocFromPoolAsync) */
#define REC_F_FRAMEWORK 0x1000u /* allocation made through the framework's allocator hook
                                   (gpumem_torch_malloc: PyTorch's pluggable allocator) */
#define REC_F_PENDING 0x2000u   /* a free whose block waits for stream events: a free_completed
                                   (REC_FREE_COMPLETED) follows when it lands */
#define REC_F_GRAPH 0x4000u     /* a graph allocation: the driver's memory node, made by a
                                   stream-ordered allocation during a capture (passed through) */
#define REC_F_PRIVATE_POOL 0x8000u /* an allocation or segment of a graph capture's private pool:
                                   gpumem's pools of one capture (PyTorch with gpumem as its
                                   allocator, capturing), or, in PyTorch's merged history (kinds
                                   31-35), a pool_id other than (0, 0): its CUDA graphs' pools
                                   and torch.cuda.MemPool */
/* REC_FOREIGN_FREE only: the pointer freed lies inside a live allocation without being its
 * start (cudaFree(p + 16)); alloc_id = that allocation's (0: not known). Refused, as the
 * driver refuses it; the allocation stays live. */
#define REC_F_INTERIOR 0x100u
/* REC_BAD_ACCESS only: the operation refused */
#define REC_F_BA_MEMSET 0x100u /* a memset into it */
#define REC_F_BA_WRITE 0x200u  /* a copy into it */
#define REC_F_BA_READ 0x400u   /* a copy from it */
/* REC_OOM only: its ooms row's limit_bytes is PyTorch's per-process memory fraction of the device
 * (torch.cuda.set_per_process_memory_fraction), not GPUMEM_LIMIT: the OOM came from PyTorch's
 * allocator trace (merged, or imported), or from gpumem's allocator as PyTorch's, capped by the
 * program's fraction (gpumem_torch_memory_fraction) */
#define REC_F_OOM_FRACTION 0x100u
/* REC_TORCH_MEMORY_FRACTION only (the merge's, not flagged REC_F_FRAMEWORK): the fraction in
 * force when CUDA started, PYTORCH_CUDA_ALLOC_CONF's per_process_memory_fraction key (PyTorch's
 * starting fraction, which the recorded configuration holds too), not a
 * set_per_process_memory_fraction call of the program's. advise leaves it out of its predictions
 * as it leaves the key out (adv_cfg_uncapped); frag and tune take the key's share from the
 * configuration. Recordings before it have the note unflagged, read as a call. (Not 0x100 or
 * 0x200: readers before rec_is_cache_hit counted those as cache hits and misses on every kind.) */
#define REC_F_FRACTION_START 0x400u
/* REC_OOM only: its ooms row's limit_bytes is the per_process_memory_fraction key's share of the
 * device (GPUMEM_CONF), below the limit in bytes (GPUMEM_LIMIT, the limit key), if any: the key
 * is what to raise. With REC_F_OOM_FRACTION (PyTorch's own allocator's OOM, merged): the fraction
 * was PYTORCH_CUDA_ALLOC_CONF's per_process_memory_fraction key, which the program never replaced
 * with a set_per_process_memory_fraction call. Neither flag: the limit is the one in bytes (meta
 * limit_from says whose) */
#define REC_F_OOM_KEY 0x200u
/* REC_HOST_FREE only: the free was made while gpumem's PyTorch hooks emptied PyTorch's pinned
 * host cache at exit (gpumem_host_cache_emptying around torch._C._host_emptyCache(), on that
 * thread): the block was the cache's, one no tensor held. Recorded whatever the stack settings
 * (GPUMEM_STACKS=0, GPUMEM_PYTHON=0); recordings before it are known by the free's stack only
 * (GM_HOST_CACHE_FN, snapshot/read/gm.h). */
#define REC_F_HOST_CACHE 0x200u
static inline int rec_is_host_cache_free(unsigned kind, unsigned flags) {
    return kind == REC_HOST_FREE && (flags & REC_F_HOST_CACHE) != 0;
}
/* The same bit with the same meaning on a device free: made while gpumem's PyTorch hooks emptied
 * one of PyTorch's caches at exit (gpumem_torch_cache_emptying around
 * torch._C._cuda_clearCublasWorkspaces(), on that thread), here its cuBLAS and cuBLASLt
 * workspaces, one per (handle, stream), kept for the process's life: the block was a workspace,
 * not a tensor the program kept. On REC_FREE and REC_FREE_ASYNC (gpumem as PyTorch's allocator:
 * the workspace's free through gpumem_torch_free) and on the merged REC_TORCH_FREE and
 * REC_TORCH_FREE_COMPLETED (PyTorch's own allocator: the tracker's entry flagged, gm_torch.c).
 * One flag, "freed from a PyTorch cache by gpumem's exit hook": the kind says which cache (a
 * pinned host block was the host cache's, a device block a BLAS workspace, the one device cache
 * the hook empties). Since 2026-12-07; before it such workspaces were alive at exit. */
#define REC_F_TORCH_CACHE REC_F_HOST_CACHE
static inline int rec_is_workspace_free(unsigned kind, unsigned flags)
{
    return (kind == REC_FREE || kind == REC_FREE_ASYNC || kind == REC_TORCH_FREE ||
            kind == REC_TORCH_FREE_COMPLETED) &&
           (flags & REC_F_TORCH_CACHE) != 0;
}
/* An alloc event without REC_F_CACHE_HIT/REC_F_CACHE_MISS was not served by gpumem's allocator:
 * it was passed to the real driver or runtime (record mode, pools, managed, graph capture). */
#define REC_F_FLAGS_MASK 0xff00u

/* A flag's meaning depends on the event's kind (0x100 is REC_F_CACHE_HIT on a device allocation,
 * REC_F_INTERIOR on a foreign free, REC_F_BA_MEMSET on a bad access, REC_F_OOM_FRACTION on an
 * OOM): a reader tests the bit together with the kind that gives it its meaning, through these.
 * The cache flags belong to device allocations (REC_ALLOC, REC_ALLOC_ASYNC) only: gpumem's
 * allocator serves no other kind. */
static inline int rec_is_device_alloc(unsigned kind) {
    return kind == REC_ALLOC || kind == REC_ALLOC_ASYNC;
}
/* a device allocation gpumem's allocator served from its cache, no driver call */
static inline int rec_is_cache_hit(unsigned kind, unsigned flags) {
    return rec_is_device_alloc(kind) && (flags & REC_F_CACHE_HIT) != 0;
}
/* a device allocation gpumem's allocator served with the driver's help (its segments grew) */
static inline int rec_is_cache_miss(unsigned kind, unsigned flags) {
    return rec_is_device_alloc(kind) && (flags & REC_F_CACHE_MISS) != 0;
}
/* a device allocation gpumem's allocator served (hit or miss): inside its segments; a device
 * allocation without either was passed through to the driver or runtime */
static inline int rec_is_served(unsigned kind, unsigned flags) {
    return rec_is_device_alloc(kind) && (flags & (REC_F_CACHE_HIT | REC_F_CACHE_MISS)) != 0;
}
/* a device allocation that is a graph's memory node: made by the driver for a stream-ordered
 * allocation while its stream was capturing (passed through). REC_F_GRAPH means nothing on
 * another kind. */
static inline int rec_is_graph_node(unsigned kind, unsigned flags) {
    return rec_is_device_alloc(kind) && (flags & REC_F_GRAPH) != 0;
}
/* a device allocation passed through as its own segment: from a pool the program chose
 * (REC_F_POOL) or a graph's memory node (REC_F_GRAPH), memory the driver gave for exactly this
 * block, in reserved from its allocation to its free */
static inline int rec_is_own_segment(unsigned kind, unsigned flags) {
    return rec_is_device_alloc(kind) && (flags & (REC_F_POOL | REC_F_GRAPH)) != 0;
}
/* a device allocation made through the framework's allocator hook (PyTorch's pluggable
 * allocator). REC_F_FRAMEWORK on kinds 36, 37 and 38 says gpumem's allocator was PyTorch's; on
 * another kind it means nothing. */
static inline int rec_is_framework_alloc(unsigned kind, unsigned flags) {
    return rec_is_device_alloc(kind) && (flags & REC_F_FRAMEWORK) != 0;
}
/* an allocation or segment of a graph capture's private pool: device allocations, gpumem's
 * segment events (REC_SEG_MAP/UNMAP, REC_DRIVER_ALLOC/FREE) and PyTorch's rows (REC_TORCH_*,
 * 31-35) carry REC_F_PRIVATE_POOL; another kind (a host or managed allocation) does not */
static inline int rec_is_private_pool(unsigned kind, unsigned flags) {
    return (rec_is_device_alloc(kind) || kind == REC_SEG_MAP || kind == REC_SEG_UNMAP ||
            kind == REC_DRIVER_ALLOC || kind == REC_DRIVER_FREE ||
            (kind >= REC_TORCH_ALLOC && kind <= REC_TORCH_SEG_UNMAP)) &&
           (flags & REC_F_PRIVATE_POOL) != 0;
}

/* ---- Hot path. ----------------------------------------------------------------------------
 * One fixed-size event into the lock-free ring: ~tens of ns without stacks.
 *   kind      enum rec_kind, optionally | REC_F_* flags
 *   device    CUDA device ordinal (-1 for host memory)
 *   stream    the cudaStream_t / CUstream as an integer (0 = legacy default stream)
 *   addr      the address handed out / freed (for REC_SEG_* the segment address)
 *   size      bytes actually held by the allocation (after the allocator's rounding); for a free,
 *             the size of the block freed (0 when unknown: the recorder uses the allocation's)
 *   requested bytes the program asked for (0 for frees)
 *   alloc_id  the allocator's allocation id (same id on the alloc and its free; 0 = none). The
 *             recorder pairs frees with allocations by address, so 0 is fine. */
void rec_event(unsigned kind, int device, uint64_t stream, uint64_t addr, uint64_t size,
               uint64_t requested, uint64_t alloc_id);

/* A stack held for the events a call writes later, under a lock: rec_stack_hold() captures the
 * calling thread's stack now (the walk, outside the lock), and every event the thread writes
 * until rec_stack_release(its return value) carries that stack instead of walking again. Holds
 * nest (an inner one returns 0 and its release does nothing). Returns 0 when nothing is held
 * (not recording, stacks off, already held). */
int rec_stack_hold(void);
void rec_stack_release(int held);

/* Whether the calling thread's stack captures walked with libunwind since the last reader
 * cleared it (REC_WALKED_UNWIND: a call site the walk memo did not know; its frames go ~4 KiB
 * under the capture). A value the entry point held in a callee-saved register when the capture
 * began is saved there by the deep frames: the entry point's stack scrub (preload/uses.c) then
 * covers that depth. */
enum { REC_WALKED_UNWIND = 1 };
extern __thread unsigned char rec_stack_walked __attribute__((tls_model("initial-exec")));

/* ---- NVTX ranges. Per thread; every event carries its thread's innermost open range. ----- */
/* nvtxRangePush: opens a nested range on the calling thread. domain may be NULL (default
 * domain). Returns the new nesting depth (1 = outermost), or -1 when not recording. */
int rec_range_push(const char *domain, const char *name);
/* The same in the default domain, the name given by its rec_string() id (name itself when the
 * id is 0), for a caller that pushes the same names again and again and keeps their ids
 * (preload/nvtx.c, PyTorch's module hooks): no interning on the way. */
int rec_range_push_sid(uint32_t name_sid, const char *name);
/* The recording's generation: it changes where string ids start again (a forked child's
 * recording), so a cached rec_string() id holds while the generation it was taken in does. */
uint32_t rec_generation(void);
/* nvtxRangePop: closes the calling thread's innermost range. Returns the depth before the pop
 * (like nvtxRangePop's level), or -1 when there was no open range or not recording. */
int rec_range_pop(void);
/* rec_range_pop, then rec_range_push_sid(name_sid, name): one range in place of the innermost
 * (PyTorch's module hooks: a module's range replaces its sibling's or its parent's), the two
 * records claimed at once. Returns rec_range_push_sid's answer. */
int rec_range_swap_sid(uint32_t name_sid, const char *name);
/* nvtxRangeStart/End: a non-nested range that may end on another thread. Events do not carry
 * it. Returns an id (> 0) for rec_range_end, 0 when not recording. */
uint64_t rec_range_start(const char *domain, const char *name);
void rec_range_end(uint64_t id);
/* nvtxMark: an instant (a range with start == end, parent = the thread's innermost range). */
void rec_mark(const char *domain, const char *name);

/* ---- Naming (gpumem_name, NVTX memory extension). Names the live allocation at addr. ------ */
void rec_name(uint64_t addr, const char *name);
/* nvtxNameOsThread: names the thread with kernel thread id tid (threads.name). The recorder
 * otherwise stores the pthread name the thread had at its first event. */
void rec_thread_name(uint64_t tid, const char *name);

/* ---- Allocator snapshots (filled by the preload from alloc's snapshot walk). -------------- */
enum rec_snap_reason {
    REC_SNAP_PEAK = 1, /* at a new peak reserved; the recorder keeps the latest per device and
                          writes it at most once per second and at close, so calling this on
                          every new peak is fine */
    REC_SNAP_OOM = 2,  /* right after an OOM (written at once) */
    REC_SNAP_EXIT = 3, /* at exit, before rec_close (written at once) */
    REC_SNAP_USER = 4  /* on request (written at once) */
};
typedef struct rec_segment {
    int device;
    uint64_t stream;   /* stream the segment belongs to (allocator pools are per stream) */
    uint64_t addr;     /* start of the virtual range */
    uint64_t size;     /* bytes of virtual range reserved */
    uint64_t mapped;   /* bytes backed by physical memory (== size for non-expandable) */
    uint32_t flags;    /* REC_SEG_F_* */
} rec_segment;
#define REC_SEG_F_EXPANDABLE 0x1u
#define REC_SEG_F_SMALL_POOL 0x2u

enum rec_block_state {
    REC_BLOCK_FREE = 0,      /* cached, reusable */
    REC_BLOCK_ALLOCATED = 1, /* held by the program */
    REC_BLOCK_PENDING = 2,   /* freed, waiting for stream work to finish before reuse */
    REC_BLOCK_UNMAPPED = 3   /* virtual range without physical memory (expandable segments) */
};
typedef struct rec_block {
    uint32_t segment;  /* index into the segment array passed with it */
    uint32_t state;    /* enum rec_block_state */
    uint64_t addr;
    uint64_t size;
    uint64_t requested; /* 0 unless allocated */
    uint64_t alloc_id;  /* 0 unless allocated */
} rec_block;

/* Devices 0 .. REC_MAX_DEVICES-1 keep their own latest peak snapshot (the preload serves as
 * many devices). */
#define REC_MAX_DEVICES 64
/* Copies the arrays (the caller may reuse them at once). Returns 0, or -1 if not recording. */
int rec_snapshot(enum rec_snap_reason reason, const rec_segment *segs, size_t nsegs,
                 const rec_block *blocks, size_t nblocks);

/* ---- OOM forensics: call when an allocation fails (before returning the error). ---------- */
/* rec_oom_info.limit where no cap was set: written as NULL in ooms.limit_bytes (schema 1.4; before
 * it 0 stood for none, when a limit of 0 bytes could not be set) */
#define REC_NO_LIMIT UINT64_MAX
typedef struct rec_oom_info {
    int device;
    uint64_t stream;
    uint64_t requested;        /* bytes the program asked for */
    uint64_t allocated;        /* bytes held by the program at that moment */
    uint64_t reserved;         /* bytes the allocator holds from the device */
    uint64_t free_cached;      /* reserved - allocated: free in the allocator's fragments */
    uint64_t largest_free;     /* largest free block that the request could have used */
    uint64_t device_free;      /* what the driver said was free (0 if unknown) */
    uint64_t device_total;     /* device memory size (0 if unknown) */
    uint64_t limit;            /* configured cap; REC_NO_LIMIT: none (0 is a cap of 0 bytes) */
    const char *name;          /* name of the allocation that failed (gpumem_name_next), or NULL;
                                  copied. Stored as ooms.name (schema 1.1). */
    unsigned flags;            /* the event's flag, what set limit: REC_F_OOM_FRACTION the
                                  program's per-process memory fraction (gpumem's allocator as
                                  PyTorch's), REC_F_OOM_KEY the per_process_memory_fraction key */
} rec_oom_info;
/* Records the OOM (an event of kind REC_OOM plus a row in `ooms`; the event carries the
 * calling thread's innermost NVTX range, which reports show as the OOM's phase). Follow it with
 * rec_snapshot(REC_SNAP_OOM, ...) when a snapshot is at hand. */
void rec_oom(const rec_oom_info *info);

/* ---- Allocator statistics at exit (call once, before rec_close; a later call replaces). --- */
typedef struct rec_alloc_stats {
    uint64_t peak_allocated, peak_reserved;     /* bytes */
    uint64_t allocated_now, reserved_now;       /* bytes at exit */
    uint64_t n_alloc, n_free;                   /* program calls served */
    uint64_t cache_hits, cache_misses;          /* allocations served from cache / needing driver */
    uint64_t driver_alloc_calls, driver_free_calls; /* cuMemAlloc + cuMemCreate / cuMemFree + cuMemRelease */
    uint64_t driver_map_calls, driver_unmap_calls;  /* cuMemMap / cuMemUnmap */
    uint64_t n_oom, foreign_frees, double_frees;
    /* every driver call gpumem made itself, by function: its allocator's backend calls, and
     * beside them the implied synchronizations, memory queries, pinned-pool pins and timing
     * events (preload/gm_internal.h, enum gm_drv); stored as stat.driver.<name>, with their sum
     * as stat.driver_calls: names[i] is e.g. "cuMemCreate", NULL ends the list */
    const char *driver_call_names[32];
    uint64_t driver_calls[32];
} rec_alloc_stats;
void rec_stats(const rec_alloc_stats *st);

/* ---- The program's start: its working directory then (meta.cwd), which its arguments'
 * relative paths are from, however long before its first CUDA call the recording opens (a
 * program may chdir first). The preload's constructor calls it (exec: the new image's); a
 * forked child keeps its parent's, whose command line it has. Only getcwd and setenv: no CUDA,
 * no SQLite. Without it (a program linking the recorder itself), meta.cwd is the directory at
 * the open. A relative GPUMEM_DB, and the default name where it is unset, are from that
 * directory too: it sets GPUMEM_DB to the absolute template, so the program's exec'd images and
 * children (which may start elsewhere) write beside it, where the user looks. */
void rec_note_start(void);

/* ---- Metadata: free-form key/value pairs stored in `meta` (mode, config, device name...). -- */
void rec_meta(const char *key, const char *value);

/* ---- Access tracking (schema 1.2: tables `launches` and `uses`). ------------------------
 * The preload calls rec_launch once per kernel launch, copy or memset it intercepts (when
 * GPUMEM_USES is 1 or timed). It passes the words of the arguments that may be device pointers
 * (it may pre-filter words that cannot point into device memory it knows; it must not drop one
 * that can). The writer resolves each word against the allocations live at that point of the
 * event order (an interior pointer counts; a word inside no live allocation gives nothing) and
 * writes one `uses` row per (allocation, launch), access flags OR-ed over the words that hit
 * it, plus one `launches` row. The event itself is kind REC_LAUNCH with addr = func,
 * size = bytes, the calling thread and its innermost NVTX range, and no call stack.
 * Allocations a word can hit: device (REC_ALLOC, REC_ALLOC_ASYNC), managed (REC_MANAGED_ALLOC)
 * and pinned host memory (REC_HOST_ALLOC: a copy to or from a pinned buffer uses it), each
 * over the size it holds (rec_event's size). */
enum rec_launch_op {
    REC_OP_KERNEL = 0, /* cuLaunchKernel & co.; name = the kernel's (mangled) name */
    REC_OP_COPY = 1,   /* cudaMemcpy*, cuMemcpy*; name e.g. "memcpy HtoD" */
    REC_OP_MEMSET = 2  /* cudaMemset*, cuMemset*; name "memset" */
};
#define REC_ACC_READ 0x1u  /* the launch reads the memory (copy source) */
#define REC_ACC_WRITE 0x2u /* the launch writes it (copy destination, memset) */
/* 0 = unknown (kernel arguments: a kernel may read or write what it is given) */

typedef struct rec_launch_info {
    int device;
    uint64_t stream;        /* cudaStream_t / CUstream as an integer (0 = legacy) */
    uint64_t func;          /* CUfunction (kernels), 0 for copies and memsets */
    uint32_t name;          /* rec_string() id of the kernel or operation name */
    unsigned op;            /* enum rec_launch_op */
    uint64_t bytes;         /* copies and memsets: bytes; kernels: 0 */
    const uint64_t *words;  /* candidate device pointers (copied before the call returns) */
    const uint8_t *access;  /* REC_ACC_* per word, or NULL: all unknown */
    size_t nwords;
    int unread;             /* 1: a kernel whose arguments could not be read (the driver gave no
                               parameter layout): its uses are unknown, counted in
                               meta.launches_unread, never taken for "touched nothing" */
    void *timing;           /* NULL, or an opaque token for the timing resolver (GPUMEM_USES=timed) */
} rec_launch_info;
/* Records one launch. Returns its seq (> 0), or 0 when not recording or dropped; with 0 the
 * recorder did not take li->timing (the caller releases it). Hot path: no lock, no allocation,
 * no stack capture; one claim of the ring for the launch record plus one record per 6 words (5
 * where access bytes are given; at most 2^24 - 1 words are kept).
 * When the ring is full a record may be dropped like any event: a launch whose word records
 * were not all recorded gets no `uses` rows at all (counted in meta.launch_words_lost), never
 * another launch's words. */
uint64_t rec_launch(const rec_launch_info *li);

/* The id of string s in `strings`, interned (each distinct string stored once); 0 when not
 * recording. Takes a lock: callers cache the id (per CUfunction, per copy direction). */
uint32_t rec_string(const char *s);

/* Device times for GPUMEM_USES=timed. The writer thread calls fn(token, final, &start, &end)
 * for each launch recorded with a timing token, in launch order; fn returns 1 (start/end
 * filled, ns on the recorder's clock, see rec_time_ns) or -1 (no timing for this launch). 0
 * means "not finished yet": the writer stops there, asks again after its next drain (~10 ms)
 * and never blocks on it. With final = 1 fn must return 1 or -1: at close for every launch
 * left, and for the oldest ones while more than 65536 wait unresolved (so the queue stays
 * bounded). fn owns the token and releases it when it returns 1 or -1; each token gets exactly
 * one such answer. The writer calls fn without holding any recorder lock, never from an
 * application thread. Set once, before the first timed launch (timed launches recorded with
 * no resolver set are asked once one is set, and given up at close). */
typedef int (*rec_timing_fn)(void *token, int final, uint64_t *start_ns, uint64_t *end_ns);
void rec_set_timing_resolver(rec_timing_fn fn);
/* The recorder's clock: ns since the recording started (the clock of events.t); 0 when not
 * recording. Never opens the recording (nor does rec_last_seq): an observation is no event. */
uint64_t rec_time_ns(void);
/* The seq of the last record claimed so far, by any thread (0: none, or not recording): an
 * observation made now comes after every event with this seq or below (gm_torch's exact
 * placement of PyTorch's trace entries, preload/torch_trace.c). */
uint64_t rec_last_seq(void);
/* Both at once for an observation made many times a second (PyTorch's trace entries): returns
 * rec_last_seq() and sets *ticks to the clock's raw reading taken after it (0: not recording),
 * which rec_ticks_ns turns into rec_time_ns's ns later (the same clock for the recording's life). */
uint64_t rec_last_seq_ticks(uint64_t *ticks);
/* The same into st[0] (the seq) and st[1] (the ticks): two adjacent words where the caller keeps
 * them (a trace entry's slot, written in place), so that nothing of the caller's lives across
 * the call. */
void rec_last_seq_ticks_into(uint64_t *st);
uint64_t rec_ticks_ns(uint64_t ticks);

/* ---- Python frames (schema 1.3). ---------------------------------------------------------
 * The preload (preload/python.c) registers a provider when the process runs CPython. For every
 * event with a stack the recorder then calls fn(out, max) on the application thread after
 * capturing the native frames; fn fills out[0..n) innermost first and returns n (0: no Python
 * stack now, e.g. the thread does not hold the GIL). function and file are rec_string() ids.
 * When n > 0 the native frames from the first one inside the interpreter, [interp_lo,
 * interp_hi), outwards are left out: the Python frames stand for them. A stack is then its
 * native frames (the CUDA call, ctypes / libffi / a framework's C++) at depths 0.., and the
 * Python frames after them, innermost first (frames.python = 1). Set once, before events. */
typedef struct rec_pyframe {
    uint32_t function; /* rec_string id of the code object's name */
    uint32_t file;     /* rec_string id of its file name */
    uint32_t line;     /* line being executed (0 unknown) */
} rec_pyframe;
#define REC_MAX_PY_FRAMES 64
typedef int (*rec_pyframes_fn)(rec_pyframe *out, int max);
void rec_set_python(rec_pyframes_fn fn, uint64_t interp_lo, uint64_t interp_hi);

/* ---- gpumem's own code. ---------------------------------------------------------------------
 * A captured stack begins at the program's frame that made the call: the frames at its top whose
 * code lies in gpumem's own objects (the preload registers libgpumem.so at start and any other
 * libgpumem* object that calls it, e.g. libgpumem_torch.so) are left out, so GPUMEM_STACKS=N
 * keeps N frames of the program. Ranges [lo, hi) of code addresses, REC_MAX_OWN_CODE at most; a
 * range given again is kept once; -1 when the table is full. With none registered (a program
 * that links the recorder itself) the frames from rec_event's caller on are kept, as before.
 * Register an object before its first call that records a stack (a stack already memoized or
 * deduplicated keeps the frames it had). */
#define REC_MAX_OWN_CODE 4
int rec_add_own_code(uint64_t lo, uint64_t hi);
/* 1 when pc lies in a registered range. */
int rec_own_code(uint64_t pc);

/* ---- Explicit control (optional: everything above opens lazily from the environment). ---- */
typedef struct rec_options {
    const char *path;   /* database path template (%p pid, %r rank, %% percent); NULL: GPUMEM_DB,
                           else "gpumem-%p.db" */
    int stacks;         /* frames per stack; -1: GPUMEM_STACKS, else 16; 0 = off */
    int fork_record;    /* 1 child records to its own file, 0 child records nothing, -1: GPUMEM_FORK */
    uint32_t ring;      /* ring capacity (power of two); 0: GPUMEM_RING, else 65536 */
    int quiet;          /* 1: no "recording to ..." line on stderr; -1: GPUMEM_QUIET */
} rec_options;
/* Checks the recorder's settings in the environment (GPUMEM_STACKS, GPUMEM_RING,
 * GPUMEM_RING_WAIT_US, GPUMEM_RING_FULL, GPUMEM_FORK, GPUMEM_QUIET, GPUMEM_TSC): 0, or -1 with
 * err naming the first that cannot be read and what it accepts. Such a setting turns recording
 * off (rec_open returns -1), never a silent default; the preload turns gpumem off with it. */
int rec_check_env(char *err, size_t errsz);
/* Opens now (NULL = from environment). Returns 0 when recording, -1 when off (the reason was
 * printed). A second call while open returns 0 and changes nothing. */
int rec_open(const rec_options *opt);
/* 1 when recording. */
int rec_enabled(void);
/* Blocks until every event recorded so far is committed to the file (tests, checkpoints), or the
 * writer made no progress for 3 s (60 s at most in all). */
void rec_flush(void);
/* Around an exec of PATH (preload/core.c): the file marked state 'exec' and committed; after a
 * failed exec, 'recording' again. */
void rec_exec_begin(const char *path);
void rec_exec_failed(void);
/* Flush, derive the `allocations` table, write stats, close. Idempotent; safe if never opened. */
void rec_close(void);
/* The process ends now, without its exit handlers: of signal sig (one of rec_signal_ends'; the writer
 * closes with state = 'interrupted' and meta.signal), or by _exit (sig 0: state = 'closed'). The
 * writer drains the ring and closes; waits for it while it makes progress (given up after 3 s
 * without any, 60 s in all: rec.c wait_writer). Async-signal-safe: the
 * recorder's own signal handler calls it, and so do the preload's kill(), raise() and _exit().
 * The caller must not go back to what its thread was doing (the process ends): where that
 * thread holds the recorder's locks (a handler on top of one of its sections), the writer
 * closes without them. A no-op unless recording, and in any process but the recording's own
 * (a vfork child). */
void rec_close_ending(int sig);
/* GPUMEM_SIGNALS as read when the recording opened: 0 leaves the ending signals alone. */
int rec_signals_handled(void);
/* 1 when sig's default action ends the process and the recorder closes the recording on it
 * (where the program keeps that default): SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
 * SIGALRM, SIGPIPE, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSTKFLT and the
 * real-time signals. Not the crashes (their own handler), SIGTRAP, SIGSYS. Async-signal-safe. */
int rec_signal_ends(int sig);
/* The path of the database being written ("" when not recording). */
const char *rec_path(void);

/* ---- Path templating (exposed for gpumem record and tests). ------------------------------
 * Expands %p (pid), %r (rank: rec_launch_rank's, else 0) and %%.
 * Returns 0, or -1 if the result does not fit (out is always NUL-terminated). */
int rec_expand_path(const char *tmpl, long pid, char *out, size_t outsz);
/* path as seen from the directory dir: path itself when it is absolute or dir is "" (unknown),
 * else "dir/path". Returns 0, or -1 if it does not fit (out is then ""). Every way a
 * recording's name is made goes through it, so a relative name never depends on where the
 * program happens to be at its first CUDA call. */
#define REC_DEFAULT_DB "gpumem-%p.db" /* the name where GPUMEM_DB is unset */
int rec_path_from(const char *dir, const char *path, char *out, size_t outsz);
/* in with ins before its ".db" ("run.db" + "-123" -> "run-123.db"; no ".db": at its end): the
 * name a forked child or a second process of the run gets. */
void rec_insert_before_ext(const char *in, const char *ins, char *out, size_t outsz);
/* The file image k (1, 2, ...) after an exec records to, beside path: "-exec<k>" before its
 * ".db" (run.db -> run-exec1.db); the recorder takes the first k that is free. */
void rec_exec_image_path(const char *path, int k, char *out, size_t outsz);
/* The one the image after path's records to, the chain followed in order: k one past path's
 * own (run.db -> run-exec1.db, run-exec1.db -> run-exec2.db); gpumem report names it. */
void rec_exec_next_path(const char *path, char *out, size_t outsz);
/* SQLite's side files of a database: its write-ahead log, the log's shared-memory index, and the
 * rollback journal of a file killed while it was created. One place names them, for the
 * recorder, the command's reader, its re-runs and its output rule alike.
 * rec_db_side: path's side file `which` (run.db -> run.db-wal); 0, or -1 (out "") when it
 * does not fit: a cut name could be another file's, never to be stat'ed or removed.
 * rec_db_unlink_sides: removes all of path's side files (not path itself). */
enum { REC_SIDE_WAL, REC_SIDE_SHM, REC_SIDE_JOURNAL, REC_SIDES };
int rec_db_side(const char *path, int which, char *out, size_t outsz);
void rec_db_unlink_sides(const char *path);
/* The process's rank as its launcher set it: the first of torchrun (RANK), Open MPI
 * (OMPI_COMM_WORLD_RANK), MVAPICH (MV2_COMM_WORLD_RANK), PMI (PMI_RANK), PMIx (PMIX_RANK) and
 * Slurm (SLURM_PROCID) that is set, with the same launcher's world size and local rank
 * (WORLD_SIZE / LOCAL_RANK, OMPI_COMM_WORLD_SIZE / _LOCAL_RANK, MV2_COMM_WORLD_SIZE /
 * _LOCAL_RANK, PMI_SIZE / MPI_LOCALRANKID, PMIX_SIZE / PMIX_LOCAL_RANK, SLURM_NTASKS /
 * SLURM_LOCALID). Returns 1 when a rank variable is set, else 0. Numbers that are absent or
 * not numbers are -1; rank_text is the variable's text as set. */
typedef struct rec_rank {
    long rank, world_size, local_rank;
    char rank_text[32];
    const char *from; /* the rank variable's name */
} rec_rank;
int rec_launch_rank(rec_rank *out);

/* ---- The side channel to gpumem record. ---------------------------------------------------
 * gpumem record sets GPUMEM_RECORD_STATUS to a file of its own; every process of the recorded
 * program appends "<pid> db <path>" when it starts recording and "<pid> msg <text>" for each
 * start-up message (why it records nothing, a refused file...), so that record summarises the
 * database this run wrote, and nothing else, or says the real reason there is none. No-op when
 * the variable is unset. One write(2) with O_APPEND per line: lines never interleave. */
void rec_status(const char *what, const char *text);

/* ---- Never overwrite what is not ours (shared by the recorder and gpumem record). ---------
 * gpumem's databases carry this SQLite application_id (header offset 68) from their creation. */
#define REC_APPLICATION_ID 1735420269
/* May the open regular file fd be replaced by a new recording? 1: it is empty, or a SQLite
 * database whose header carries REC_APPLICATION_ID (an earlier recording); 0: it is anything
 * else (a source file, another program's database) and must be left alone; -1: it cannot be
 * read (errno set). Reads the first 100 bytes; does not move the file offset. */
int rec_db_replaceable(int fd);

#ifdef __cplusplus
}
#endif
#endif /* GPUMEM_SNAPSHOT_REC_H */
