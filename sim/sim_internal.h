/* sim_internal.h — the driver side's shared state (libcuda.so.1 only; never installed).
 *
 * The whole virtual GPU is one struct, `sim`, guarded by one mutex. Every entry point takes
 * the lock for the few microseconds it needs; host kernels and host callbacks run with the
 * lock released (they may be long and may call back into the driver).
 *
 * Address bookkeeping: every address range the driver hands out (cuMemAlloc allocations,
 * cuMemAddressReserve reservations, host and managed allocations, cuMemHostRegister ranges)
 * is a sim_range in one array sorted by base address, so a pointer lookup is a binary search.
 * A reservation carries its mappings in a table with one slot per granule of its address space
 * (allocated at its first cuMemMap), so finding the mapping of an address costs the same whatever
 * the number of mappings; the live handles are a hash table by id. (Sorted arrays here made
 * mapping and releasing n pages cost n^2: a terabyte-sized dry run maps ~500k 2 MiB pages.)
 * Physical handles (cuMemCreate) are slices of
 * one sparse memfd: handle n owns [file_off, file_off + size); cuMemMap mmaps that slice with
 * MAP_SHARED|MAP_FIXED into the PROT_NONE reservation, so two mappings of one handle alias, and
 * cuMemRelease punches the slice out of the file. One file descriptor serves every handle (no
 * descriptor limit), and the offsets are never reused, so a stale mapping can never alias a
 * newer handle. A forked child switches to a fresh memfd for the handles it creates (so parent
 * and child never alias new memory); handles from before the fork stay shared with the parent.
 */
#ifndef GPUMEM_SIM_INTERNAL_H
#define GPUMEM_SIM_INTERNAL_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/sim.h"

#define SIM_GRANULARITY ((size_t)2 << 20) /* VMM granularity, like current NVIDIA parts */
#define SIM_ALLOC_ROUND ((size_t)512)     /* pool and graph allocations: their "used" rounding */
/* What an allocation costs the device's memory, as cudaMemGetInfo shows it on an H200 (driver
 * 580; tests/diff/gpu-h200/meminfo.out, rt_sizes.out, reset.out): cuMemAlloc takes whole 2 MiB
 * pages (1 B and 2 MiB: 2 MiB; 2 MiB + 1: 4 MiB), and the stream-ordered pool reserves 32 MiB
 * chunks, given back when its allocations are freed (release threshold 0). */
#define SIM_ALLOC_PAGE ((size_t)2 << 20)
#define SIM_POOL_CHUNK ((size_t)32 << 20)
#define SIM_MAX_FAULTS 32
/* The device description (an A100's figures; memory size aside): cuDeviceGetAttribute reports
 * these and the driver's own decisions use the same values (cuMemAllocPitch pads rows to the
 * texture alignment, as NVIDIA GPUs are observed to, and refuses pitches above the maximum). */
#define SIM_TEXTURE_ALIGNMENT 512
#define SIM_TEXTURE_PITCH_ALIGNMENT 32
#define SIM_MAX_PITCH 2147483647
/* Device memory a primary context takes while active (GPUMEM_SIM_CONTEXT_BYTES); see README. */
#define SIM_DEFAULT_CONTEXT_BYTES ((size_t)426 << 20)
/* Devices smaller than this get no context charge by default (test-sized devices). */
#define SIM_CONTEXT_MIN_CAPACITY ((size_t)4 << 30)

enum sim_range_kind {
    SIM_R_DEVICE = 1, /* cuMemAlloc / cuMemAllocAsync */
    SIM_R_RESERVE,    /* cuMemAddressReserve */
    SIM_R_HOST,       /* cuMemHostAlloc / cuMemAllocHost */
    SIM_R_MANAGED,    /* cuMemAllocManaged */
    SIM_R_REGISTERED, /* cuMemHostRegister */
};

typedef struct sim_handle {
    uint64_t id; /* the CUmemGenericAllocationHandle value */
    size_t size;
    uint64_t file_off; /* slice of the backing memfd (unused when virtual) */
    int fd;            /* that memfd: the process's current one, or the parent's before a fork */
    bool inherited;    /* created before a fork: shared with the parent, never punched here */
    bool own_fd;       /* fd is this handle's own memfd (shareable: POSIX fd handle type) */
    bool imported;     /* cuMemImportFromShareableHandle: charged to no device here */
    int refs;          /* cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease */
    int nmaps;         /* live mappings; the memory is freed when refs and nmaps are both 0 */
    int dev;           /* device charged (prop.location.id) */
    CUmemAllocationProp prop;
    struct sim_handle *hnext; /* next in its bucket of sim.handle_buckets */
} sim_handle;

typedef struct sim_mapping {
    uintptr_t va;
    size_t size;
    size_t offset; /* into the handle */
    sim_handle *h;
    unsigned access; /* CU_MEM_ACCESS_FLAGS_PROT_* */
} sim_mapping;

typedef struct sim_range {
    uintptr_t base;
    size_t size;
    void *map_base; /* what mmap returned (alignment slack included); NULL: not ours */
    size_t map_size;
    int kind;
    unsigned flags;  /* host alloc flags, register flags */
    size_t charged;  /* device bytes charged for it */
    uint64_t id;     /* buffer id */
    struct sim_pool *pool; /* the pool it came from (cuMemAllocAsync / FromPool), or NULL */
    bool freeing;    /* a cuMemFreeAsync is queued for it (asynchronous mode) */
    bool ipc;        /* exported (cuIpcGetMemHandle): backed by its own memfd, ipc_fd */
    bool ipc_import; /* opened with cuIpcOpenMemHandle: not charged, closed by refcount */
    /* A graph allocation (SIM_R_DEVICE made by a memory allocation node, sim_graph.c): its
     * address is fixed when the node is created; the memory exists (`g_live`: mapped, charged)
     * from the moment a launch reaches the node until a free reaches it. */
    bool graph;
    bool g_live;        /* execution: allocated by an alloc node, not yet freed */
    bool g_outstanding; /* API: a launch allocated it and no free was issued yet */
    bool g_freed_in_graph; /* its own graph has a free node for it */
    unsigned g_refs;    /* graph nodes (alloc and free, in graphs, executable graphs and
                           queued work) that name it; the address lives while any does */
    int ipc_fd;
    int ipc_refs;
    uint64_t ipc_key[3]; /* imported: exporter pid, its fd number, the file's inode */
    int dev;             /* device charged (device memory) */
    /* SIM_R_RESERVE: slot i is the mapping (malloc'd) that covers granule i of the range, or
     * NULL; size / SIM_GRANULARITY slots, NULL until the first cuMemMap. */
    sim_mapping **slots;
    size_t nmaps;
} sim_range;

#define SIM_MAX_DEVICES 16

struct sim_event;
struct sim_stream;

/* One piece of work queued on a stream (see sim_exec.c). */
enum sim_work_kind {
    SIM_W_NOP = 0, /* work that already ran at issue time (synchronous mode) */
    SIM_W_KERNEL,
    SIM_W_COPY,
    SIM_W_MEMSET,
    SIM_W_HOSTFN,
    SIM_W_RECORD, /* an event record */
    SIM_W_WAIT,   /* wait for (target, tseq) */
    SIM_W_FREE,   /* cuMemFreeAsync */
    SIM_W_GALLOC, /* a graph memory allocation node: user is its sim_range */
    SIM_W_GFREE,  /* a graph memory free node (or a free of a graph allocation) */
};

typedef struct sim_work {
    struct sim_work *next;
    uint64_t seq;
    int kind;
    /* SIM_W_RECORD */
    struct sim_event *ev; /* the event while this is its latest record, else NULL */
    unsigned pending;     /* queries left before it completes (delayed-completion mode) */
    double deadline_us;   /* simulated clock at which it completes (timed delayed completion) */
    /* SIM_W_WAIT */
    struct sim_stream *target;
    uint64_t tseq;
    /* SIM_W_KERNEL */
    sim_host_kernel_fn fn;
    void **args;
    char *argbuf;
    size_t argbytes;
    unsigned nargs;
    /* SIM_W_COPY / SIM_W_MEMSET */
    uintptr_t dst, src;
    size_t n, elem;
    unsigned value;
    bool zero_dst; /* virtual backing: a device -> host copy gives zeros */
    bool discard;  /* ... into the sim's own anonymous host memory: by giving pages back */
    /* SIM_W_HOSTFN */
    CUhostFn hfn;
    void *user;
    /* SIM_W_FREE */
    CUdeviceptr ptr;
} sim_work;

typedef struct sim_stream {
    uint32_t magic;
    unsigned flags;
    int priority;
    uint64_t id;
    int dev;               /* device (context) the stream belongs to */
    bool legacy;           /* the device's legacy default stream */
    bool per_thread;       /* a thread's per-thread default stream */
    bool destroyed;        /* cuStreamDestroy called; freed when refs reach 0 */
    int refs;              /* the handle + events and waits that point here */
    uint64_t issued;       /* seq of the last work issued */
    uint64_t executed;     /* seq of the last work executed (== issued in synchronous mode) */
    uint64_t done;         /* completion frontier: work up to here is complete */
    sim_work *head, *tail; /* work not yet complete, in order */
    sim_work *exec_next;   /* asynchronous mode: the next work for the worker */
    pthread_t worker;
    bool has_worker, stop;
    struct sim_capture *capture;    /* stream capture in progress (sim_graph.c), else NULL */
    uint64_t cap_nodes;             /* nodes this stream added to its capture */
    uint64_t cap_joined;            /* of those, how many the origin stream has waited for */
    uint64_t poke_epoch, poke_upto; /* one query/synchronization pass visits a queue once */
} sim_stream;

typedef struct sim_event {
    uint32_t magic;
    unsigned flags;
    bool recorded;
    sim_stream *stream; /* stream of the last record (holds a reference), or NULL */
    uint64_t seq;       /* the record's position on that stream */
    sim_work *rec;      /* the record while it is queued (not complete), else NULL */
    double t_ms;        /* CLOCK_MONOTONIC when the record executed */
    int dev;
    struct sim_capture *capture; /* last recorded inside this capture (sim_graph.c) */
    sim_stream *cap_stream;      /* the capturing stream it was recorded on */
    uint64_t cap_nodes;          /* that stream's cap_nodes at the record */
} sim_event;

/* A graph: its nodes in capture order, which is a valid execution order (sim_graph.c). An
 * executable graph is the same structure (magic SIM_MAGIC_EXEC) with its instantiation flags
 * and the graph it came from. */
typedef struct sim_graph {
    uint32_t magic;
    sim_work **nodes;
    size_t n, cap;
    size_t nmem;                /* memory nodes (alloc and free) */
    unsigned long long flags;   /* executable graph: CUDA_GRAPH_INSTANTIATE_FLAG_* */
    struct sim_graph *origin;   /* executable graph: its graph while that exists */
    unsigned nexecs;            /* graph: executable graphs instantiated from it, alive */
} sim_graph;

typedef struct sim_capture {
    uint64_t id;
    int mode; /* CUstreamCaptureMode */
    pthread_t thread;
    bool invalidated;
    sim_stream *origin;
    sim_graph *graph;
    sim_stream **streams; /* every stream in this capture, the origin first */
    size_t nstreams, capstreams;
} sim_capture;

typedef struct sim_kernel {
    uint32_t magic;
    char *name;
    sim_host_kernel_fn fn; /* NULL: device code only (sim_register_device_kernel), skipped */
    int layout_unknown;    /* device code only, and no parameter layout was given with it */
    bool unloaded;         /* its module was unloaded (sim_module.c): no longer a valid handle */
    unsigned nparams;
    size_t *sizes;
    size_t *offsets;
    size_t args_size;
    uint64_t launches;    /* launches of a kernel with no host body (all skipped) */
    int num_regs;         /* CU_FUNC_ATTRIBUTE_NUM_REGS: a module's cubin's, else typical */
    int static_smem;      /* CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: a module's cubin's, else 0 */
    int max_dyn_smem;     /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    int carveout;         /* CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT */
    int cluster[3];       /* CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH/HEIGHT/DEPTH */
    int nonportable;      /* CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED */
    int sched_policy;     /* CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE */
} sim_kernel;

/* What a virtual device says it is (GPUMEM_SIM_PROFILE; sim_profile.c). */
typedef struct sim_profile {
    const char *key;  /* the GPUMEM_SIM_PROFILE value */
    const char *name; /* cuDeviceGetName */
    size_t memory;    /* cuDeviceTotalMem, unless GPUMEM_SIM_MEMORY is set */
    int cc_major, cc_minor, sm_count, l2_bytes;
    int clock_khz, mem_clock_khz, bus_width;
    int smem_per_sm, smem_optin; /* shared memory per SM, and per block when opted in */
    int threads_per_sm, blocks_per_sm, copy_engines;
    bool fabric; /* CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED */
    /* driver call costs measured on that part, in GPUMEM_SIM_COSTS syntax, applied over the
     * default table (GPUMEM_SIM_COSTS then applies over the result); NULL: the defaults */
    const char *costs;
} sim_profile;

struct CUctx_st {
    uint32_t magic;
    int refs;
    unsigned flags;
    uint64_t id;
    int dev;
};

/* A stream-ordered memory pool: each device's default one (in its sim_device), or one the
 * program made (cuMemPoolCreate: malloc'd, on sim.pools until it is destroyed and holds no
 * allocation). Its reservation follows its use in SIM_POOL_CHUNK steps; what it keeps beyond
 * that is bounded by its release threshold (sim_mem.c, pool_settle). */
typedef struct sim_pool {
    uint32_t magic;
    int dev;
    bool created;   /* cuMemPoolCreate's (a device's default pool cannot be destroyed) */
    bool destroyed; /* cuMemPoolDestroy'd while it held allocations: gone with the last one */
    size_t max_size; /* CUmemPoolProps.maxSize: its reservation's limit (0: the device's) */
    uint64_t release_threshold;
    size_t used, used_high; /* pool allocations now, and their high-water mark */
    size_t reserved, reserved_high; /* the device memory the pool holds (SIM_POOL_CHUNK) */
    struct sim_pool *next;          /* sim.pools: the created pools */
} sim_pool;

/* One virtual device: its memory accounting, primary context, legacy stream and default pool. */
typedef struct sim_device {
    size_t capacity, used, peak; /* used: allocations (cuMemAlloc*, cuMemCreate) */
    size_t ctx_bytes;            /* charged while the primary context is active */
    struct CUctx_st primary;
    sim_stream legacy;
    sim_pool pool;          /* the default pool */
    sim_pool *current_pool; /* cuMemAllocAsync's (cuDeviceSetMemPool): the default pool unless
                               the program set another */
    /* graph allocations: live now and the high-water mark; device memory kept for them (live
     * plus freed, until cuDeviceGraphMemTrim) and its high-water mark */
    size_t graph_used, graph_high, graph_reserved, graph_reserved_high;
    uint64_t peer_mask; /* devices this one has enabled peer access to */
} sim_device;

typedef struct sim_fault_plan {
    uint64_t alloc_at[SIM_MAX_FAULTS];
    size_t nalloc;
    uint64_t map_at[SIM_MAX_FAULTS];
    size_t nmap;
    size_t oom_at; /* 0: none */
} sim_fault_plan;

typedef struct sim_state {
    pthread_mutex_t lock;
    bool initialized; /* cuInit called */
    bool virtual_backing;
    unsigned event_delay;  /* queries before a recorded event completes */
    double event_delay_us; /* simulated µs after its record before an event completes */
    double clock_us;       /* simulated driver clock: every cost and wait, never reset */
    bool async;            /* GPUMEM_SIM_ASYNC=1: streams run their work on worker threads */
    int ndevices;          /* GPUMEM_SIM_DEVICES */
    const sim_profile *profile; /* GPUMEM_SIM_PROFILE (every device) */
    bool kernels_strict;        /* GPUMEM_SIM_KERNELS=strict: kernels need a host body */
    sim_device dev[SIM_MAX_DEVICES];
    pthread_cond_t cond; /* broadcast whenever a stream executes work */
    void **allstreams;   /* every live stream, default streams included (sorted set) */
    size_t nallstreams, capallstreams;
    int memfd; /* backing for cuMemCreate handles; -1 when virtual */
    uint64_t next_file_off;
    uint64_t next_id;
    sim_range **ranges;
    size_t nranges, capranges;
    sim_handle **handle_buckets; /* the live handles by id: chained through hnext */
    size_t nhandles, nhandle_buckets; /* nhandle_buckets: 0 or a power of two */
    void **streams;
    size_t nstreams, capstreams; /* sorted pointer sets */
    void **events;
    size_t nevents, capevents;
    void **kernels;
    size_t nkernels, capkernels;
    void **captures, **graphs, **execs; /* live captures, graphs, executable graphs */
    size_t ncaptures, capcaptures, ngraphs, capgraphs, nexecs, capexecs;
    sim_pool *pools; /* the program's pools (cuMemPoolCreate), not yet gone */
    sim_fault_plan faults;
    uint64_t n_allocs, n_maps, faults_injected;
    sim_stats stats;
    char **noted;
    uint64_t *noted_calls;
    size_t nnoted, capnoted; /* calls of what is not modelled, by name (noted once each) */
} sim_state;

extern sim_state sim;

#define SIM_MAGIC_STREAM 0x5354524du
#define SIM_MAGIC_EVENT 0x4556454eu
#define SIM_MAGIC_KERNEL 0x4b45524eu
#define SIM_MAGIC_CTX 0x43545854u

/* sim_state.c */
void sim_lock(void);
void sim_unlock(void);
void sim_ensure_config(void);             /* reads the environment once; takes no lock */
void sim_cost(sim_op op, size_t bytes);   /* caller holds the lock */
void sim_cost_wait(sim_op op, double us); /* simulated waiting, charged to op; lock held */
CUresult sim_charge(int dev, size_t bytes, bool is_alloc); /* capacity + faults; lock held */
void sim_uncharge(int dev, size_t bytes);
size_t sim_dev_free(int dev); /* capacity - context - allocations; lock held */
bool sim_fault_map(void);     /* caller holds the lock: should this map fail? */
CUresult sim_unsupported(const char *name);
/* Every size setting of the virtual GPU (GPUMEM_SIM_MEMORY, GPUMEM_SIM_CONTEXT_BYTES,
 * GPUMEM_SIM_FAULTS' oom_at): alloc_parse_size's grammar, and its messages quote SIM_SIZE_RULE,
 * ALLOC_SIZE_RULE's words (alloc/alloc.h; sim/ does not link alloc/). 0, or -1 on a bad size. */
int sim_parse_size(const char *s, size_t *out);
#define SIM_SIZE_RULE                                                                                    \
    "digits with an optional K, M, G or T (KiB, MB... also) suffix, e.g. 512M or 24G; a fraction only " \
    "with a suffix (1.5G); no spaces or signs"
void sim_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double sim_now_ms(void);

/* sorted pointer sets (streams, events, kernels) */
bool sim_pset_add(void ***v, size_t *n, size_t *cap, void *p);
bool sim_pset_has(void *const *v, size_t n, const void *p);
void sim_pset_del(void **v, size_t *n, const void *p);

/* sim_profile.c */
const sim_profile *sim_profile_find(const char *key); /* NULL/"" : the default; unknown: NULL */
const char *sim_profile_keys(void);                   /* for messages */

/* sim_func.c: functions (kernels) as objects */
sim_kernel *sim_kernel_of(CUfunction f); /* NULL unless a registered kernel; lock held */
void sim_kernel_init_attrs(sim_kernel *k); /* the attributes of a fresh kernel */
void sim_kernels_print(void *f);         /* the skipped-kernel lines of GPUMEM_SIM_STATS */

/* sim_mem.c */
sim_range *sim_range_find(uintptr_t p); /* range containing p, or NULL; lock held */

/* sim_device.c */
/* The device of the calling thread's current context: CUDA_ERROR_INVALID_CONTEXT without one. */
CUresult sim_current_dev(int *dev);
bool sim_ctx_valid(CUcontext c);

/* sim_exec.c */
bool sim_stream_valid(CUstream s); /* lock held */
/* Resolves a stream handle (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: the current
 * context's default streams) to its stream; lock held. */
CUresult sim_stream_get(CUstream s, sim_stream **out);
/* sim_stream_get for issuing work: also CUDA_ERROR_STREAM_CAPTURE_INVALIDATED for a stream whose
 * capture was invalidated, and CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream while a
 * blocking stream of its device captures (that capture is invalidated). */
CUresult sim_stream_for_work(CUstream s, sim_stream **out);
/* Issues work on st (lock held). In synchronous mode the caller has already done it (pass a
 * SIM_W_NOP) and w may be NULL; in asynchronous mode w is queued for the stream's worker. The
 * legacy stream's implicit synchronization with blocking streams is added here. Returns its seq
 * (0 when out of memory). */
uint64_t sim_issue(sim_stream *st, sim_work *w, bool *queued);
/* Waits (lock held, released while waiting) until st has executed work up to seq, completes it
 * (delayed completion) and returns the simulated µs a caller would have waited. */
double sim_stream_drain(sim_stream *st, uint64_t seq);
/* Waits (lock held) until st has executed work up to seq; completes nothing. */
void sim_stream_wait_executed(sim_stream *st, uint64_t seq);
/* Drains every stream of dev (-1: every device); returns the simulated wait. */
double sim_device_drain(int dev);
bool sim_is_async(void);
/* Runs w now (synchronous mode: the lock is released around kernels and host functions) or
 * queues it for st's worker (asynchronous mode); lock held. Takes w. */
void sim_submit(sim_stream *st, sim_work *w);
void sim_work_free(sim_work *w);
sim_work *sim_work_clone(const sim_work *w, size_t argbytes); /* NULL when out of memory */

/* sim_ptds.c: > 0 inside a _ptsz/_ptds entry point (the NULL stream is the per-thread one) */
extern __thread int sim_tls_ptds;
/* The _ptsz/_ptds variant of a driver entry point (itself when it has none). */
void *sim_ptds_variant(void *fn);

/* sim_graph.c (lock held) */
/* Adds w to st's capture (st->capture != NULL); takes w. */
CUresult sim_capture_add(sim_stream *st, sim_work *w, size_t argbytes);
/* Invalidates c (an illegal call during capture). */
void sim_capture_invalidate(sim_capture *c);
/* Is a potentially unsafe call (cuMemAlloc, cuMemFree, ...) prohibited for this thread now? If
 * so the captures concerned are invalidated and the call must return
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED. */
bool sim_capture_prohibits_unsafe(void);
/* Does a stream of `dev` capture (blocking ones only: for the legacy stream's use)? Invalidates
 * those captures when `invalidate`. */
bool sim_capture_on_device(int dev, bool blocking_only, bool invalidate);

/* Zeros host memory: w->discard gives whole pages back to the kernel (sim_mem.c). */
void sim_zero_host(const sim_work *w);
/* sim_mem.c: graph allocations (lock held). A new one reserves its address (not live, no
 * references); the node that names it takes a reference. */
sim_range *sim_graph_mem_new(int dev, size_t size);
void sim_graph_mem_ref(sim_range *r);
void sim_graph_mem_unref(sim_range *r); /* the last reference of a dead allocation frees it */
size_t sim_graph_mem_avail(int dev);    /* free device memory + memory reserved for graphs */
void sim_graph_mem_end(sim_range *r);   /* its lifetime ends (a free) */
void sim_graph_mem_trim(int dev);
void sim_graph_mem_run(sim_work *w); /* an SIM_W_GALLOC / SIM_W_GFREE reached on its stream */
/* sim_graph.c: stream-ordered allocation and free on a capturing stream (memory nodes). */
CUresult sim_capture_mem_alloc(sim_stream *st, size_t size, CUdeviceptr *out);
CUresult sim_capture_mem_free(sim_stream *st, CUdeviceptr p);

/* Frees a cuMemAlloc'd range (lock held): sim_mem.c */
CUresult sim_device_free(CUdeviceptr dptr, bool async, size_t *freed);
void sim_device_reset_memory(int dev); /* cuDevicePrimaryCtxReset: lock held, device drained */
/* The pre-12.8 cuEventElapsedTime, exported under its old name. */
CUresult sim_cuEventElapsedTime_v1(float *ms, CUevent start,
                                   CUevent end) __asm__("cuEventElapsedTime");

/* Exports `name` as another name for `target` (the _ptsz/_ptds per-thread default-stream
 * symbols: the sim has one default-stream model, so they are the same functions). */
#define SIM_ALIAS(name, target)                                                                    \
    extern __typeof__(target) name __attribute__((alias(#target), visibility("default")));

#define SIM_CHECK_INIT()                                                                           \
    do {                                                                                           \
        if (!__atomic_load_n(&sim.initialized, __ATOMIC_ACQUIRE))                                  \
            return CUDA_ERROR_NOT_INITIALIZED;                                                     \
    } while (0)

#endif /* GPUMEM_SIM_INTERNAL_H */
