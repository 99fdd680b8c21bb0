/* sim_internal.h — the driver side's shared state (libcuda.so.1 only; never installed).
 *
 * The whole virtual GPU is one struct, `sim`, guarded by one mutex. Every entry point takes
 * the lock for the few microseconds it needs; host kernels and host callbacks run with the
 * lock released (they may be long and may call back into the driver).
 *
 * Address bookkeeping: every address range the driver hands out (cuMemAlloc allocations,
 * cuMemAddressReserve reservations, host and managed allocations, cuMemHostRegister ranges)
 * is a sim_range in one array sorted by base address, so a pointer lookup is a binary search.
 * A reservation carries its mappings (sorted too). Physical handles (cuMemCreate) are slices of
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
#define SIM_ALLOC_ROUND ((size_t)512)     /* cuMemAlloc charge rounding */
#define SIM_MAX_FAULTS 32

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
    int refs;          /* cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease */
    int nmaps;         /* live mappings; the memory is freed when refs and nmaps are both 0 */
    CUmemAllocationProp prop;
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
    unsigned flags;    /* host alloc flags, register flags */
    size_t charged;    /* device bytes charged for it */
    uint64_t id;       /* buffer id */
    bool from_pool;    /* allocated by cuMemAllocAsync / FromPool */
    sim_mapping *maps; /* SIM_R_RESERVE: sorted by va */
    size_t nmaps, capmaps;
} sim_range;

typedef struct sim_stream {
    uint32_t magic;
    unsigned flags;
    int priority;
    uint64_t id;
} sim_stream;

typedef struct sim_event {
    uint32_t magic;
    unsigned flags;
    bool recorded;
    unsigned pending;   /* queries left before it completes (delayed-completion mode) */
    double deadline_us; /* simulated clock at which it completes (timed delayed completion) */
    sim_stream *stream; /* stream of the last record (NULL: legacy default stream) */
    double t_ms;        /* CLOCK_MONOTONIC at record */
} sim_event;

typedef struct sim_kernel {
    uint32_t magic;
    char *name;
    sim_host_kernel_fn fn;
    unsigned nparams;
    size_t *sizes;
    size_t *offsets;
    size_t args_size;
} sim_kernel;

struct CUctx_st {
    uint32_t magic;
    int refs;
    unsigned flags;
    uint64_t id;
};

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
    size_t capacity, used, peak;
    int memfd; /* backing for cuMemCreate handles; -1 when virtual */
    uint64_t next_file_off;
    uint64_t next_id;
    sim_range **ranges;
    size_t nranges, capranges;
    sim_handle **handles;
    size_t nhandles, caphandles; /* sorted by id */
    void **streams;
    size_t nstreams, capstreams; /* sorted pointer sets */
    void **events;
    size_t nevents, capevents;
    void **kernels;
    size_t nkernels, capkernels;
    struct CUctx_st primary;
    sim_fault_plan faults;
    uint64_t n_allocs, n_maps, faults_injected;
    sim_stats stats;
    char **noted;
    size_t nnoted, capnoted; /* names already reported as not supported */
} sim_state;

extern sim_state sim;

#define SIM_MAGIC_STREAM 0x5354524du
#define SIM_MAGIC_EVENT 0x4556454eu
#define SIM_MAGIC_KERNEL 0x4b45524eu
#define SIM_MAGIC_CTX 0x43545854u

/* sim_state.c */
void sim_lock(void);
void sim_unlock(void);
void sim_ensure_config(void);                     /* reads the environment once; takes no lock */
void sim_cost(sim_op op, size_t bytes);           /* caller holds the lock */
void sim_cost_wait(sim_op op, double us);         /* simulated waiting, charged to op; lock held */
CUresult sim_charge(size_t bytes, bool is_alloc); /* capacity + faults; caller holds the lock */
void sim_uncharge(size_t bytes);
bool sim_fault_map(void); /* caller holds the lock: should this map fail? */
CUresult sim_unsupported(const char *name);
int sim_parse_size(const char *s, size_t *out);
void sim_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double sim_now_ms(void);

/* sorted pointer sets (streams, events, kernels) */
bool sim_pset_add(void ***v, size_t *n, size_t *cap, void *p);
bool sim_pset_has(void *const *v, size_t n, const void *p);
void sim_pset_del(void **v, size_t *n, const void *p);

/* sim_mem.c */
sim_range *sim_range_find(uintptr_t p); /* range containing p, or NULL; lock held */
double sim_events_complete_all(void);   /* lock held; returns the simulated µs waited */

/* sim_exec.c */
bool sim_stream_valid(CUstream s); /* lock held */
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
