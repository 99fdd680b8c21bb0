/*
 * gm_internal.h — types and functions shared by the files of libgpumem.so (preload/).
 *
 * Nothing here is exported from the library: every file is built with -fvisibility=hidden and
 * the version script (preload/libgpumem.map) lists the only public names. Each .c file owns one
 * concept:
 *
 *   dlsym.c    the exported dlsym (a tail-jumping trampoline, so RTLD_NEXT keeps its meaning
 *              for the caller) and the name -> hook decision
 *   driver.c   the real driver: dlopen("libcuda.so.1"), the stored real pointers, the
 *              cuGetProcAddress wrappers and the driver-level hooks
 *   driver_sym.c  the driver's memory entry points exported under their own names (by symbol)
 *   program_mem.c memory the program manages itself (VMM, pools, arrays), pitched allocations
 *   devused.c  the real cuMemGetInfo sampled for the report's "device used"
 *   runtime.c  the exported cuda* runtime functions
 *   heap.c     device memory: glue between the hooks and alloc/ (replace mode), the table of
 *              passed-through allocations (record mode), ownership, double-free detection
 *   pinned.c   the pinned-host pool on a jemalloc arena
 *   nvtx.c     NVTX injection: range stacks, domains, registered strings, memory extension
 *   core.c     configuration and modes, lazy init, stats, fork and exit handling, user API
 *   torch_hooks.c  the PyTorch hooks' hot paths as CPython builtins (gpumem/_torch.py)
 *
 * Recursion rule: code inside gpumem never calls a hooked name. The allocator's backend and
 * every pass-through use the real pointers in gm_real. While gpumem calls into the real
 * runtime (record mode, context bring-up), the thread is marked "inside" (gm_inside_enter) so
 * that the runtime's own driver calls, which reach gpumem's driver hooks through the pointers
 * handed out by cuGetProcAddress, pass straight through and are not counted a second time.
 */
#ifndef GM_INTERNAL_H
#define GM_INTERNAL_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define GM_HIDDEN __attribute__((visibility("hidden")))
#define GM_EXPORT __attribute__((visibility("default")))

/* ---- modes and configuration (core.c) ---- */
typedef enum { GM_MODE_OFF = 0, GM_MODE_RECORD = 1, GM_MODE_REPLACE = 2 } gm_mode_t;

/* The mode in force. Reading it triggers the lazy init (configuration + driver). */
gm_mode_t gm_mode(void);
/* gm_mode's answer once init has run and gpumem is on (GM_MODE_OFF before, when off, and in a
 * forked child): what a hook on a hot path reads inline before calling gm_mode. */
extern _Atomic int gm_mode_ready;
static inline gm_mode_t gm_mode_fast(void)
{
    int m = atomic_load_explicit(&gm_mode_ready, memory_order_acquire);
    return __builtin_expect(m != GM_MODE_OFF, 1) ? (gm_mode_t)m : gm_mode();
}
/* The mode without triggering init (GM_MODE_OFF until init ran). */
gm_mode_t gm_mode_peek(void);
/* 1 when a driver function looked up (dlsym, cuGetProcAddress) gets gpumem's hook: configured
 * on and a driver that loads. Unlike gm_mode it opens no recording: a lookup is no CUDA call
 * (cuBLAS's constructor looks cuLaunchKernel up at `import torch`), and a process that makes
 * none writes no file. */
int gm_mode_hooks_on(void);
/* 1 in a child forked after gpumem was initialised in the parent: gpumem is off there. */
extern int gm_forked_child;
/* GPUMEM_LIMIT in bytes, 0 when unset. */
extern size_t gm_limit;

/* ---- the "inside gpumem" mark (per thread) ---- */
/* initial-exec: read by dlsym before a sanitizer runtime is ready, where a __tls_get_addr call
 * (intercepted by ASan) would crash; the library needs static TLS anyway (jemalloc). */
extern __thread int gm_inside __attribute__((tls_model("initial-exec")));
static inline void gm_inside_enter(void) { gm_inside++; }
static inline void gm_inside_leave(void) { gm_inside--; }
/* Set while the calling thread loads the driver or reads the configuration: dlsym lookups made
 * then (libcuda's own start-up) pass straight through instead of re-entering the init. This is
 * not gm_inside: a runtime initialising itself inside gpumem's cudaFree(NULL) must still be
 * handed the cuGetProcAddress wrapper, so its later driver calls reach the hooks. */
extern __thread int gm_in_init __attribute__((tls_model("initial-exec")));

/* ---- driver calls gpumem makes itself, beside its allocator's backend calls (which alloc/
 * counts): the synchronizations cudaFree and cudaFreeHost imply, cudaMemGetInfo's answer and the
 * device-used samples, the pinned pool's pins, access tracking's timing events, the backend's
 * event queries and memory queries. Stored with the backend's as stat.driver.<name> (core.c), in
 * the virtual GPU's names, so a recording's counts can be held to GPUMEM_SIM_STATS's. A call the
 * program made and gpumem only forwarded is the program's, not counted. ---- */
enum gm_drv {
    GM_DRV_CTX_SYNC,       /* cuCtxSynchronize */
    GM_DRV_EVENT_RECORD,   /* cuEventRecord */
    GM_DRV_EVENT_QUERY,    /* cuEventQuery */
    GM_DRV_EVENT_SYNC,     /* cuEventSynchronize */
    GM_DRV_MEM_GET_INFO,   /* cuMemGetInfo */
    GM_DRV_HOST_ALLOC,     /* cuMemHostAlloc (cuMemAllocHost_v2 too) */
    GM_DRV_HOST_REGISTER,  /* cuMemHostRegister */
    GM_DRV_HOST_UNREGISTER, /* cuMemHostUnregister */
    GM_DRV_COUNT
};
extern _Atomic unsigned long long gm_drv_calls[GM_DRV_COUNT];
/* GM_DRV(GM_DRV_CTX_SYNC, gm_real.cuCtxSynchronize()): counts the call, then makes it */
#define GM_DRV(k, call) (atomic_fetch_add_explicit(&gm_drv_calls[k], 1, memory_order_relaxed), (call))

/* ---- statistics (core.c): plain atomic counters, dumped with GPUMEM_STATS=1 ---- */
enum gm_stat {
    GM_ST_RT_MALLOC,        /* cudaMalloc calls seen by gpumem */
    GM_ST_RT_FREE,          /* cudaFree calls seen */
    GM_ST_RT_MALLOC_ASYNC,  /* cudaMallocAsync / FromPoolAsync calls seen */
    GM_ST_RT_FREE_ASYNC,    /* cudaFreeAsync calls seen */
    GM_ST_DRV_ALLOC,        /* cuMemAlloc_v2 calls seen (not from inside gpumem) */
    GM_ST_DRV_FREE,         /* cuMemFree_v2 calls seen */
    GM_ST_DRV_ALLOC_ASYNC,  /* cuMemAllocAsync calls seen */
    GM_ST_DRV_FREE_ASYNC,   /* cuMemFreeAsync calls seen */
    GM_ST_SERVED,           /* device allocations served by gpumem's allocator */
    GM_ST_RELEASED,         /* device frees of gpumem blocks */
    GM_ST_PASSTHROUGH,      /* device allocations passed to the real function */
    GM_ST_PASSTHROUGH_FREE, /* frees of passed-through allocations */
    GM_ST_FOREIGN_FREE,     /* frees of pointers gpumem never saw, passed to the real function */
    GM_ST_DOUBLE_FREE,      /* frees of gpumem blocks already freed */
    GM_ST_OOM,              /* allocations that failed for lack of memory */
    GM_ST_FAILED,           /* allocations that failed otherwise (bad argument, no driver) */
    GM_ST_MEMGETINFO,       /* cudaMemGetInfo / cuMemGetInfo_v2 answered by gpumem */
    GM_ST_ADDR_RANGE,       /* cuMemGetAddressRange_v2 answered for a gpumem block */
    GM_ST_HOST_ALLOC,       /* pinned host allocations served from the pinned pool */
    GM_ST_HOST_FREE,        /* pinned host frees into the pool */
    GM_ST_HOST_REGISTER,    /* cuMemHostRegister calls made by the pool's extent hooks */
    GM_ST_HOST_UNREGISTER,  /* cuMemHostUnregister calls made by the pool */
    GM_ST_HOST_PASSTHROUGH, /* pinned allocations passed to the real function */
    GM_ST_MANAGED,          /* cudaMallocManaged / cuMemAllocManaged (passed through) */
    GM_ST_VMM,              /* VMM calls made by the program (passed through, recorded) */
    GM_ST_LAUNCH,           /* kernel launches seen, every path, each once */
    GM_ST_COPY,             /* copies and memsets seen (runtime or driver), each once */
    GM_ST_PROC_HOOKED,      /* driver entry points replaced in cuGetProcAddress/dlsym answers */
    GM_ST_STREAMS,          /* streams created by the program (fenced by cudaFree) */
    GM_ST_NVTX_RANGES,      /* NVTX ranges pushed/started */
    GM_ST_NVTX_MARKS,       /* NVTX marks */
    GM_ST_NAMED,            /* allocations named (gpumem_name or NVTX memory extension) */
    GM_ST_BAD_ACCESS,       /* copies and memsets refused: past an allocation's end, or freed */
    GM_ST_PY_AGAIN,         /* Python stacks read without the GIL as a kept chain, checked as read
                             * (python_nogil.c, memo_again) */
    GM_ST_COUNT
};
extern _Atomic unsigned long long gm_stats[GM_ST_COUNT];
static inline void gm_stat_add(enum gm_stat s, unsigned long long n)
{
    atomic_fetch_add_explicit(&gm_stats[s], n, memory_order_relaxed);
}

/* One-line diagnostic on stderr, prefixed "gpumem: ". */
void gm_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* An allocator setting (GPUMEM_CONF, GPUMEM_LIMIT, PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF)
 * the way the program runs does not use: when it is set, said once per setting as "gpumem:
 * NAME=VALUE WHY" and kept in the recording's meta as ignored.NAME = WHY (core.c). */
void gm_setting_ignored(const char *name, const char *why);
/* The same for a setting the program made by a call, not by the environment (PyTorch's
 * set_per_process_memory_fraction under gpumem's allocator): value is what it set (NULL or "":
 * nothing to say). */
void gm_setting_ignored_value(const char *name, const char *value, const char *why);
/* GPUMEM_CONF is set in replace mode: the first device allocations look at who asked
 * (gm_conf_check_caller, core.c), since PyTorch's own caching allocator uses it for its
 * segments only, never its tensors. Cleared once said, or after the first allocations. */
extern _Atomic int gm_conf_watch;
void gm_conf_check_caller(const void *caller);
/* The program allocates memory gpumem's allocator does not serve (its own VMM, pools, arrays):
 * GPUMEM_CONF and GPUMEM_LIMIT do not apply to it (program_mem.c, once). */
void gm_settings_program_mem(void);

/* ---- the real driver (driver.c) ---- */
struct gm_real {
    CUresult (*cuGetProcAddress_v2)(const char *, void **, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult *);
    CUresult (*cuInit)(unsigned int);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxGetDevice)(CUdevice *);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceTotalMem_v2)(size_t *, CUdevice);
    CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree_v2)(CUdeviceptr);
    CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemAllocAsync_ptsz)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*cuMemFreeAsync_ptsz)(CUdeviceptr, CUstream);
    CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuMemAllocFromPoolAsync_ptsz)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuMemGetInfo_v2)(size_t *, size_t *);
    CUresult (*cuMemGetAddressRange_v2)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*cuMemAllocHost_v2)(void **, size_t);
    CUresult (*cuMemHostAlloc)(void **, size_t, unsigned int);
    CUresult (*cuMemFreeHost)(void *);
    CUresult (*cuMemHostRegister_v2)(void *, size_t, unsigned int);
    CUresult (*cuMemHostUnregister)(void *);
    CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned int);
    CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                                    unsigned long long);
    CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
    CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                            unsigned long long);
    CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
    CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                         unsigned long long);
    CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
    CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *,
                                              CUmemAllocationGranularity_flags);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventQuery)(CUevent);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuEventDestroy_v2)(CUevent);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*cuStreamGetCaptureInfo_v3)(CUstream, CUstreamCaptureStatus *, cuuint64_t *,
                                          CUgraph *, const CUgraphNode **,
                                          const CUgraphEdgeData **, size_t *);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);
    CUresult (*cuLaunchKernel_ptsz)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, unsigned, CUstream, void **, void **);
    CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUresult (*cuLaunchKernelEx_ptsz)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUresult (*cuLaunchCooperativeKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                          unsigned, unsigned, unsigned, CUstream, void **);
    CUresult (*cuLaunchCooperativeKernel_ptsz)(CUfunction, unsigned, unsigned, unsigned,
                                               unsigned, unsigned, unsigned, unsigned, CUstream,
                                               void **);
    CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *);
    CUresult (*cuFuncGetName)(const char **, CUfunction);
    CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *);
    CUresult (*cuStreamGetDevice)(CUstream, CUdevice *);
    CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
};
extern struct gm_real gm_real;

/* Loads the driver and fills gm_real once (pthread_once). Returns 1 when the driver is usable. */
int gm_driver_init(void);
/* Makes sure the calling thread has a current context (the primary context of device 0 when
 * it has none, as the runtime would). Returns the device of the current context. */
CUresult gm_driver_ensure_context(CUdevice *dev);

/* 1 when `s` is being captured into a CUDA graph: stream-ordered allocations on it belong to
 * the graph (the driver's graph memory nodes), so gpumem passes them through. */
int gm_stream_capturing(CUstream s);
/* The allocator's key for a stream: each thread's per-thread default stream is a stream of its
 * own (driver.c); gm_stream_of_key gives the stream to record an event on for a key. */
uintptr_t gm_stream_key(CUstream s);
CUstream gm_stream_of_key(uintptr_t key);
/* CUDA graph capture (driver.c): the private stream key of the capture s is part of (0 when s
 * is not capturing): allocations in the capture come from pools of their own, frees on it are
 * held until the graph is released (heap.c). */
uintptr_t gm_capture_key(CUstream s);
/* 1 when an allocator key is a capture's private key (a gm_capture_key answer) */
int gm_is_capture_key(uintptr_t key);
void gm_heap_capture_begin(void);
void gm_heap_capture_end(void);
void gm_heap_capture_release(uintptr_t key);
void gm_heap_empty_cache(void); /* every device's cache back (gpumem_empty_cache) */
/* PyTorch's set_per_process_memory_fraction (gpumem_torch_memory_fraction): device dev's
 * allocator is capped at fraction x the device's total (alloc_set_memory_fraction), recorded as
 * event 37 flagged REC_F_FRAMEWORK. 0, or -1 when dev has no allocator to cap. */
int gm_heap_memory_fraction(int dev, double fraction);
/* 1 while a graph capture is underway anywhere in the process (replace mode; one atomic load) */
int gm_capture_underway(void);
/* 1 when the calling thread may not make a "potentially unsafe" call (cudaMalloc, cudaFree,
 * cudaMallocHost, cudaMallocPitch, ...) now: the capture rules of cudaStreamCaptureMode and the
 * thread's cudaThreadExchangeStreamCaptureMode (driver.c). gpumem then hands the call to the
 * real function, whose refusal (and invalidation of the capture) is CUDA's own. */
int gm_capture_prohibited(void);
/* gpumem's own driver calls that allocate or free (segments, pinned extents) run in the relaxed
 * interaction mode while a capture is underway: relax returns 1 (mode saved) when it switched,
 * unrelax puts the thread's mode back. */
int gm_capture_relax(CUstreamCaptureMode *saved);
void gm_capture_unrelax(int relaxed, CUstreamCaptureMode saved);
/* cudaIpcGetMemHandle / cuIpcGetMemHandle on memory gpumem serves: 1 (and the one-line reason,
 * printed once) when ptr is gpumem's, 0 when the real function should answer. */
int gm_heap_ipc_refuse(const char *fn, uintptr_t ptr);
/* A stream of gpumem's own (non-blocking, through the real driver; never destroyed). */
CUresult gm_driver_private_stream(CUstream *s);
/* The hook for a real driver entry point, or NULL. Used by cuGetProcAddress and dlsym. */
void *gm_driver_hook_for(void *real_fn);
/* For dlsym: the hook for an exported driver symbol name, or NULL when the name is not hooked.
 * Only compares strings: never loads anything. */
int gm_driver_name_hooked(const char *name);
/* cuGetProcAddress wrappers (handed out for the driver's own cuGetProcAddress). */
void *gm_driver_getproc_wrapper(const char *name);

/* ---- the real dlsym (dlsym.c) ---- */
void *gm_real_dlsym_fn(void *handle, const char *name);
/* dlsym(RTLD_NEXT, name) as seen from libgpumem.so (for the runtime functions it wraps). */
void *gm_next_symbol(const char *name);

/* ---- device memory (heap.c) ---- */
typedef enum {
    GM_ALLOC_SYNC = 0, /* cudaMalloc / cuMemAlloc */
    GM_ALLOC_ASYNC = 1, /* cudaMallocAsync / cuMemAllocAsync */
    GM_FREE_SYNCED = 2  /* gm_heap_free only: cudaFree after its device synchronization */
} gm_alloc_kind;

/* Serves a device allocation in replace mode. Returns CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY,
 * CUDA_ERROR_INVALID_VALUE. */
CUresult gm_heap_alloc(CUdeviceptr *out, size_t size, CUdevice dev, CUstream stream,
                       gm_alloc_kind kind);
/* Frees a pointer. Returns 1 when gpumem owned it (res set: success or double free answered
 * with CUDA_ERROR_INVALID_VALUE), 0 when the pointer is foreign (the caller passes it on). */
int gm_heap_free(CUdeviceptr ptr, CUstream stream, gm_alloc_kind kind, CUresult *res);
/* gm_heap_free in stream order of a PyTorch tensor (gpumem_torch_free): off PyTorch's figures
 * (gm_heap_torch_stats) too. */
int gm_heap_torch_free(CUdeviceptr ptr, CUstream stream, CUresult *res);
/* Block containing ptr: 1 and base/size set when gpumem owns it. */
int gm_heap_lookup(CUdeviceptr ptr, CUdeviceptr *base, size_t *size);
/* gpumem's view of device memory (cached-but-idle counts as free; the limit caps total). */
CUresult gm_heap_meminfo(size_t *free_b, size_t *total_b);
/* Finds the live allocation containing ptr (gpumem block, passed-through allocation, pinned
 * pool memory): 0 and its start address, or -1 when gpumem knows no such allocation. */
int gm_heap_name(CUdeviceptr ptr, uintptr_t *start);
/* At exit: allocator snapshots for the recorder (memory stays mapped). */
void gm_heap_exit(void);
void gm_heap_print_stats(FILE *f);

/* Record mode / pass-through bookkeeping: allocations made by the real functions that gpumem
 * saw, so their frees are matched and double frees detected. */
enum gm_pt_kind { GM_PT_DEVICE, GM_PT_ASYNC, GM_PT_POOL, GM_PT_MANAGED, GM_PT_HOST, GM_PT_GRAPH };
/* device: the allocation's (-1 for host memory); its free, record_stream and a reset's free are
 * recorded on it, since the thread that frees may have no current device, or another one (a
 * graph's free node, a worker thread, a foreign context). */
void gm_pt_add(uintptr_t ptr, size_t size, enum gm_pt_kind kind, int device);
/* Removes ptr; returns 1 when it was there (size/kind/device set). */
int gm_pt_remove(uintptr_t ptr, size_t *size, enum gm_pt_kind *kind, int *device);
/* device may be NULL */
int gm_pt_lookup(uintptr_t ptr, uintptr_t *base, size_t *size, int *device);
/* A free no live passed-through allocation starts at: counted and recorded as a double,
 * interior or foreign free (heap.c). */
void gm_pt_bad_free(uintptr_t ptr, int device, CUstream stream);
/* After a successful device reset: what the driver destroyed is recorded freed (heap.c). */
void gm_pt_after_reset(void);

/* PyTorch's trace entries (torch_trace.c): a forked child starts with none. */
void gm_torch_trace_fork_prepare(void);
void gm_torch_trace_fork_parent(void);
void gm_torch_trace_fork_child(void);
void gm_pt_fork_prepare(void);
void gm_pt_fork_parent(void);
void gm_pt_fork_child(void);
void gm_heap_note_stream(CUstream s);
void gm_heap_forget_stream(CUstream s);
int gm_heap_record_stream(CUdeviceptr ptr, CUstream stream);
/* Access tracking: work on stream s of device dev touched these words (candidate addresses):
 * the live blocks they point into wait for s before a stream-ordered free reuses them. */
void gm_heap_use_streams(int dev, CUstream s, const uint64_t *words, size_t n);
/* 1 when no gm_heap_use_streams for (dev, s) can add anything while gm_heap_streams_gen keeps
 * the value it had before this call (no allocator on dev, or all its blocks are on s:
 * alloc_one_stream), so the launch hook skips the next ones (uses.c, use_streams); 0 otherwise. */
int gm_heap_streams_settled(int dev, CUstream s);
/* Owned by heap.c: bumped whenever an answer 1 of gm_heap_streams_settled may stop holding (a
 * device's allocator made or reset, an allocator's blocks' streams changed), with release after
 * the change: read it with acquire before asking gm_heap_streams_settled. */
extern _Atomic unsigned gm_heap_streams_gen;
struct alloc;
struct alloc_oom_info;
struct alloc_stats;
int gm_heap_stats(int dev, struct alloc_stats *st);
/* PyTorch's memory_stats() of device dev with gpumem as its allocator (gpumem_torch_stats,
 * gpumem.h; heap.c says where each figure comes from). 0, or -1 for a device out of range. */
struct gpumem_torch_stats;
int gm_heap_torch_stats(int dev, struct gpumem_torch_stats *out);
double gm_heap_memory_fraction_get(int dev);  /* get_per_process_memory_fraction */
void gm_heap_torch_reset_peaks(int dev);       /* reset_peak_memory_stats */
void gm_heap_torch_reset_accumulated(int dev); /* reset_accumulated_memory_stats */
/* The forensics of dev's last refused allocation (alloc_last_oom): 0 and *out filled, or -1 when
 * dev has no allocator or none was refused. */
int gm_heap_last_oom(int dev, struct alloc_oom_info *out);
/* The default memory pool's view of gpumem's stream-ordered allocations (cudaMallocAsync and
 * cuMemAllocAsync served by gpumem, sized as the pool sizes them: 512 B multiples): note one
 * (at its allocation), forget one (at any free of it), read and reset the figures of dev. */
void gm_heap_pool_note(int dev, uintptr_t ptr, size_t size);
void gm_heap_pool_forget(uintptr_t ptr);
void gm_heap_pool_figures(int dev, unsigned long long *used, unsigned long long *high);
void gm_heap_pool_reset_high(int dev);
/* -1: the driver handed out the allocators' ranges and segments downwards, 1 upwards, 0 unknown */
int gm_heap_address_order(void);

/* ---- pinned host memory (pinned.c) ---- */
/* Allocates pinned host memory from the pool. 0 on success; CUDA_ERROR_OUT_OF_MEMORY. */
CUresult gm_pinned_alloc(void **out, size_t size);
/* 1 when gpumem owned ptr (res: success or CUDA_ERROR_INVALID_VALUE for a double free),
 * 0 when foreign. */
int gm_pinned_free(void *ptr, CUresult *res);
/* gm_pinned_free whose memory is handed out again only after a later synchronized free
 * (cudaFreeHost while a capture is underway, when the implied synchronization is skipped). */
int gm_pinned_free_deferred(void *ptr, CUresult *res);
/* A synchronized free happened: the deferred blocks are no longer in use; back to the pool. */
void gm_pinned_release_deferred(void);
int gm_pinned_owns(const void *ptr);
void gm_pinned_fork_prepare(void);
void gm_pinned_fork_parent(void);
void gm_pinned_fork_child(void);

/* ---- NVTX (nvtx.c) ---- */
void gm_nvtx_constructor(void); /* points NVTX_INJECTION64_PATH at this library */
void gm_nvtx_dump(void);        /* GPUMEM_DEBUG_RANGES=path: write what was received */
void gm_nvtx_fork_prepare(void);
void gm_nvtx_fork_parent(void);
void gm_nvtx_fork_child(void);
void gm_nvtx_test_reset(void); /* tests and the fuzzer only: forget handles, log, stack */
/* gpumem_range_push / gpumem_range_pop (the Python module's ranges): NVTX push/pop */
int gm_nvtx_user_push(const char *name);
/* The same for a name pushed again and again: key is an address that names exactly this text for
 * the life of the process (a string never freed), by which the recorder's id of the name is kept.
 * Any thread, no lock needed (the ids are kept per thread). */
int gm_nvtx_user_push_kept(const void *key, const char *name);
int gm_nvtx_user_pop(void);
/* gm_nvtx_user_pop then gm_nvtx_user_push_kept(key, name) (a module's range in place of the
 * innermost), in one call: the same stack and records; push_kept's answer. */
int gm_nvtx_user_swap_kept(const void *key, const char *name);

/* ---- Python frames (python.c) ---- */
/* Once recording: finds CPython in the process and hands the recorder its frame provider. */
void gm_python_start(void);
/* python_nogil.c: the frames of a thread that released the GIL, read without calling Python.
 * init: 1 when the minor version's layout is known; frames: rec_pyframes_fn (snapshot/record/rec.h);
 * check: the first stack read through the C API (GIL held), compared with its own reading. */
struct rec_pyframe;
int gm_python_nogil_init(int minor);
/* tag (may be NULL): nonzero when the frames are a memoized chain's, the same tag always the
 * same frames (python_nogil.c, the chain memo); 0 otherwise. */
int gm_python_nogil_frames(struct rec_pyframe *out, int max, uint64_t *tag);
/* A frame as the C API reads it, for the check: the code object's address, its name's and file's
 * text, the line (0: none). Texts, not recorder strings: the check interns nothing, since the
 * stack it reads may never be recorded (a `strings` row no row refers to). */
typedef struct gm_pyref {
    uintptr_t code;
    const char *function, *file;
    uint32_t line;
} gm_pyref;
void gm_python_nogil_check(const gm_pyref *ref, int n);
/* 1 while the check is still to be made (a layout known, neither agreed nor refused). */
int gm_python_nogil_pending(void);
int gm_python_nogil_agreed(void);
/* gm_python_nogil_agreed()'s answer as a flag (0 until agreed, then 1 for good), read by
 * gm_python_frames_now without a call. */
extern int gm_python_nogil_ok;
int gm_python_nogil_refused(void);
/* python.c: the calling thread's Python frames now, innermost first, for a caller outside the
 * recorder's events (preload/torch_trace.c); 0 when Python frames are off or there are none.
 * *tag as gm_python_nogil_frames' (0 from the C API's reading). */
int gm_python_frames_now(struct rec_pyframe *out, int max, uint64_t *tag);

/* ---- the recorder bridge (core.c) ---- */
enum gm_ev {
    GM_EV_ALLOC, GM_EV_FREE, GM_EV_ALLOC_ASYNC, GM_EV_FREE_ASYNC, GM_EV_HOST_ALLOC,
    GM_EV_HOST_FREE, GM_EV_FOREIGN_FREE, GM_EV_DOUBLE_FREE, GM_EV_VMM, GM_EV_OOM,
    GM_EV_MANAGED, GM_EV_RECORD_STREAM
};
/* OR-ed into an event's kind: how the allocator served it (events.flags; heap_malloced) */
#define GM_EVF_CACHE_HIT 0x100
#define GM_EVF_CACHE_MISS 0x200
#define GM_EVF_PITCHED 0x400 /* pitched or 3D (gm_next_alloc_flags) */
#define GM_EVF_POOL 0x800    /* from a pool the program chose (gm_next_alloc_flags) */
#define GM_EVF_PENDING 0x2000   /* a free that waits for stream events (free_completed follows) */
#define GM_EVF_SYNCED 0x100     /* on a device free: after free_sync's synchronization of its
                                   device, settled at once (REC_F_FREE_SYNCED) */
#define GM_EVF_FRAMEWORK 0x1000 /* made through the framework's allocator hook, gpumem_torch_malloc
                                   (gm_next_alloc_flags) */
#define GM_EVF_GRAPH 0x4000     /* a graph allocation: a memory node the driver created during a
                                   capture (passed through; gm_next_alloc_flags) */
#define GM_EVF_CAPTURE 0x8000   /* served from a capture's private pool (heap.c) */
void gm_event(enum gm_ev ev, int device, CUstream stream, uintptr_t addr, size_t size,
              size_t requested);
void gm_event_id(enum gm_ev ev, int device, CUstream stream, uintptr_t addr, size_t size,
                 size_t requested, uint64_t id);
/* A free of a pointer inside a live allocation, not its start: refused, recorded (core.c). */
void gm_rec_interior_free(int device, CUstream stream, uintptr_t ptr, uint64_t alloc_id);
/* GPUMEM_TEST_FREE_YIELD=1 (tests only): every free path yields the CPU right after the memory
 * went back to its allocator (gpumem's, the pinned pool, the real driver), the moment another
 * thread may be handed the same address. It makes a free recorded after that reuse (the order
 * bug tests/integration/preload_order.sh looks for) near certain instead of rare. A memory
 * fraction yields right after the allocator took it (gm_heap_memory_fraction): another thread's
 * allocation or OOM under the new limit recorded before the fraction's event, near certain
 * where that event is written outside the lock (tests/integration/replay_threads.sh). */
extern int gm_test_yield_on;
static inline void gm_test_free_yield(void)
{
    if (__builtin_expect(gm_test_yield_on, 0))
        sched_yield();
}
/* A lock for the short sections PyTorch's allocator trace entries pass through (torch_trace.c,
 * python_nogil.c), one taken and released per allocation: uncontended, one exchange and one
 * store, where a pthread mutex costs ~55 instructions a pair. A waiter yields its core. Sections
 * under it never block and never call back into the program. */
typedef atomic_int gm_spin;
static inline void gm_spin_lock(gm_spin *l)
{
    while (atomic_exchange_explicit(l, 1, memory_order_acquire))
        while (atomic_load_explicit(l, memory_order_relaxed))
            sched_yield();
}
/* 1 when taken at once (one exchange), 0 when held elsewhere (not taken: nothing to release). */
static inline int gm_spin_trylock(gm_spin *l)
{
    return !atomic_exchange_explicit(l, 1, memory_order_acquire);
}
static inline void gm_spin_unlock(gm_spin *l)
{
    atomic_store_explicit(l, 0, memory_order_release);
}
/* The calling thread's stack, taken before a lock inside which its events are written (the
 * allocator's: a free's event, a segment's map or unmap): those events carry it instead of
 * walking the stack with the lock held. gm_rec_stack_release(the hold's value) ends it. */
int gm_rec_stack_hold(void);
void gm_rec_stack_release(int held);
/* Allocator callbacks and snapshots for the recorder (no-ops when not recording). */
void gm_rec_segment(int device, int map, uint64_t addr, size_t size, uintptr_t stream);
void gm_rec_oom(int device, const struct alloc_oom_info *info);
void gm_rec_snapshot(struct alloc *a, int device, int reason);
/* Takes the peak snapshot a new peak left pending (at the first free after it, OOM, exit). */
void gm_rec_peak_settle(struct alloc *a, int device);
void gm_rec_alloc_peak(int device, int cache_hit, struct alloc *a);
void gm_rec_note_device(int device, int expandable);
/* A copy or memset refused by gm_access_refused: counted, and recorded with its stack (event
 * kind bad_access). access: what the refused operation did to that memory. */
enum { GM_BA_MEMSET, GM_BA_WRITE, GM_BA_READ };
struct gm_alloc_ref;
void gm_rec_bad_access(int access, CUstream s, uint64_t addr, size_t n,
                       const struct gm_alloc_ref *ref);
/* Registers the exit handler again once the runtime has initialised (see core.c). */
void gm_exit_register_late(void);

/* ---- access tracking (uses.c) ---- */
enum { GM_USES_OFF = 0, GM_USES_ON = 1, GM_USES_TIMED = 2 };
/* What is in force before the settings are read (read_config: rec_settings_read decides). */
#define GM_USES_DEFAULT GM_USES_ON
/* The mode in force: GPUMEM_USES when gpumem is on and records, else GM_USES_OFF. */
extern int gm_uses_mode;
const char *gm_uses_name(int mode); /* "0", "1", "timed" (the meta value) */
/* Widens the pre-filter with an allocation the recorder is told about (host: pinned memory). */
void gm_uses_note_range(uintptr_t addr, size_t size, int host);
/* Once recording with uses on: installs the timing resolver (timed mode). */
void gm_uses_start(void);
/* The device of the calling thread's current context (-1: none). */
int gm_uses_device(void);
/* The CUfunction behind a runtime kernel symbol on a device (cudaGetFuncBySymbol, cached per
 * symbol and device), or NULL. */
CUfunction gm_uses_func_of_symbol(const void *sym, int device);

/* 1 when the calling hook should record: recording with uses on, and not a call gpumem or the
 * real runtime (inside a runtime-level hook) makes on the program's behalf. */
static inline int gm_uses_active(void)
{
    return !gm_inside && gm_mode_fast() != GM_MODE_OFF && gm_uses_mode != GM_USES_OFF;
}

/* One launch in flight: candidates collected before the real call, recorded after it. The
 * candidates are kept off the hook's stack (what a hook leaves there is read by the program's
 * next partly filled argument struct: the scrubs below), so the hook's frames and the bound
 * scrubbed below them stay small: a kernel's go to the thread's buffer of its nesting level
 * (GM_USES_FIT_WORDS words, uses.c `levels`; a launch inside another's hook takes the next one),
 * a copy's two to `pair`. */
#define GM_USES_FIT_WORDS 256
struct gm_uses_op {
    int device;
    CUfunction f;
    CUstream s;
    uint32_t name;
    void *timing, *tmp;
    uint64_t *w;
    size_t n, cap;
    int unread;        /* a kernel's arguments could not be read (no layout from the driver) */
    unsigned char own; /* w is: 0 the level's buffer or pair, 1 the thread's spill buffer, 2 malloc'd */
    uint64_t pair[2];
};
enum { GM_COPY_DEFAULT, GM_COPY_HTOD, GM_COPY_DTOH, GM_COPY_DTOD, GM_COPY_HTOH, GM_COPY_MEMSET };
/* Kernel launch: begin (layout, candidates, start event) before the real call with the stream
 * the work goes to; end with its result (the launch is recorded only when it succeeded). */
void gm_uses_kernel_begin(struct gm_uses_op *op, int device, CUfunction f, CUstream s,
                          void **params, void **extra);
void gm_uses_kernel_end(struct gm_uses_op *op, CUresult r);
/* Copy or memset (which: GM_COPY_*; src ignored for a memset): dst is written, src read. */
void gm_uses_copy_begin(struct gm_uses_op *op, CUstream s);
void gm_uses_copy_end(struct gm_uses_op *op, CUresult r, int which, uint64_t dst, uint64_t src,
                      size_t bytes);

/* Stack scrubs (uses.c). A hook's frames and those of the real call under it leave words on
 * the stack below the program's frame: the launch's pointers, the spans' bounds, the hook's
 * candidate buffer. The program later builds argument structs there, partly filled (PyTorch
 * copies CatArrInputTensorMetadata and its like whole, unused slots never written), and the
 * next launch's scan would read those words as the program's: uses it never made. An entry
 * point that runs on the program's thread calls its hook as a noinline function and then one of
 * these from the same frame: it zeroes the bytes below, as deep as the measured depth of the
 * hook and the real call with room to spare (tests/integration/preload_uses.sh "residue" fails
 * when a hook leaves an address deeper, within its 8 KiB parameter). The candidates are off the
 * stack (struct gm_uses_op), so the hooks' own frames are small. Measured on the virtual GPU,
 * x86-64 gcc -O2, by painting the stack and reading how deep it was written (bytes below the
 * entry point, hook + real call; without gpumem the call alone: driver launch 384, runtime 464,
 * copy 328): driver launch 1,144 (a kernel's first launch, its layout asked: 1,592; with
 * GPUMEM_USES=timed, the first launch making the event pool: 2,248), runtime launch 1,112 (a
 * kernel's first launch: its leftovers reach 2.1-2.5 KiB, preload_uses.sh "residue" rt; the very
 * first launch of a runtime kernel, once, far deeper: the dynamic linker), copy and memset 1,064
 * (the first: 1,576). A real driver's and runtime's own frames go deeper; what they leave there
 * they leave without gpumem too, and is not scrubbed. PyTorch's trace entry is bounded by where
 * its own frames keep its words instead (torch_trace.c): the allocation's (tt_entry_stack) and
 * the slow path's (tt_entry_plain) hold the entry's five words in their frame and in no register
 * across a call (TT_IN_FRAME), and the allocation's zeroes the registers (x86-64) before the
 * Python stack reader, whose frames (~12 KiB deep) then hold only the interpreter's words. The
 * words lie within 144 bytes of the entry's call (tt_entry_stack's image of the entry at its
 * frame's top, under the return address and six saved registers of the caller's;
 * tt_entry_plain's frame is 96 bytes), and the scrub's buffer starts up to 40 bytes below it
 * (32-byte aligned): 256 bytes cover them. preload_uses.sh's residue rows fail at 128 and
 * without the scrub. The allocation and free entry points (runtime cudaMalloc, cudaMallocAsync,
 * cudaMallocManaged, cudaMallocHost, cudaHostAlloc, cudaFree, cudaFreeAsync, cudaFreeHost; the
 * driver's cuMemAlloc, cuMemAllocAsync, cuMemAllocManaged, cuMemAllocHost, cuMemHostAlloc,
 * cuMemAllocPitch, cuMemFree, cuMemFreeAsync, cuMemFreeHost, and their _ptsz forms; PyTorch's
 * gpumem_torch_malloc/free) and gpumem_name leave the new, freed or named address: a later
 * allocation there (the allocator reuses addresses) would get the next partly filled struct's
 * use. Measured the same way (replace and record mode, 512 bytes): the address lies at most
 * 1,056 bytes below the entry point (cudaMalloc 976, cuMemFreeHost 1,056, gpumem_name 168;
 * without gpumem, the virtual GPU's call alone: 304), a first call deeper (the first pinned
 * allocation: 2,752, its pool made; cudaFreeHost's first, once: 5.2 KiB, the dynamic linker
 * binding a name); the stack is written 1.6-2.0 KiB deep, 5.0-5.4 KiB on the calls that take an
 * allocation's call stack (the unwinder's frames: return addresses, not the address); 3 KiB
 * cover all but the dynamic linker's.
 * preload_uses.sh's residue rows rt_malloc..torch_free (with the pools' and record_stream) fail
 * without the scrub, and at 2 KiB
 * the rows after the first cudaMallocHost. Those 3 KiB hold while the address stays out of the
 * deep frames: a call that took its call stack by walking with libunwind (a first stack from
 * its call site) ran frames 5.0-5.4 KiB below the entry point, and a register the hook kept the
 * address in across the capture is saved there when a deep frame uses it: which register, and
 * whether, is the compiler's choice (commit 42df9c4 moved one test in gm_event_id and seven
 * rows failed in CI, the RA_ addresses 3-6 KiB down). So the capture notes that it walked
 * (rec_stack_walked, rec.h) and the entry point's scrub then covers the walk, 8 KiB (a memo
 * miss: a few times a run per call site); a capture the walk memo answered, or none, keeps the
 * short bound. The Python frame reader writes 4.5 KiB below a cudaMalloc from Python code with
 * the GIL held, 11.4 KiB without it (painted and read back, 2026-12-07), on every call: a scrub
 * that deep after each made a Python loop of cudaMalloc/cudaFree 3.4-4.1 us a pair for
 * 1.9-2.6 us, and no address was found there (preload_uses.sh "residue python" rows, before and
 * after): not scrubbed. Sanitizer builds lay frames out otherwise (redzones, frame pointers,
 * the runtime's own calls: deeper), so their bounds are 16 KiB each (the residue rows run there). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GM_SCRUB_LAUNCH_BYTES 16384
#define GM_SCRUB_COPY_BYTES 16384
#define GM_SCRUB_TRACE_BYTES 16384
#define GM_SCRUB_MEM_BYTES 16384
#define GM_SCRUB_UNWIND_BYTES 16384
#else
#define GM_SCRUB_LAUNCH_BYTES 2560
#define GM_SCRUB_COPY_BYTES 2048
#define GM_SCRUB_TRACE_BYTES 256
#define GM_SCRUB_MEM_BYTES 3072
#define GM_SCRUB_UNWIND_BYTES 8192
#endif
void gm_stack_scrub_launch(void);
void gm_stack_scrub_mem(void);
void gm_stack_scrub_copy(void);
void gm_stack_scrub_trace(void);
/* An entry point's return: CALL, its hook (noinline), then the stack it used scrubbed while
 * access tracking records (KIND: launch, copy, trace or mem). From the entry point's own frame, so the
 * scrub's buffer lies where the hook's frames were. */
#define GM_SCRUBBED(KIND, CALL)                                                                    \
    __extension__({                                                                                \
        __typeof__(CALL) gm_scrubbed_r_ = (CALL);                                                  \
        if (gm_uses_active()) gm_stack_scrub_##KIND();                                             \
        gm_scrubbed_r_;                                                                            \
    })
/* The same for a hook that returns nothing. */
#define GM_SCRUBBED_VOID(KIND, CALL)                                                               \
    do {                                                                                           \
        (CALL);                                                                                    \
        if (gm_uses_active()) gm_stack_scrub_##KIND();                                             \
    } while (0)

/* An entry point that gpumem's other objects call (libgpumem_torch.so: PyTorch's allocator,
 * record_stream, empty_cache, memory fraction) notes its caller first: when that is a libgpumem*
 * object, its code is gpumem's own, left out of the recorded stacks like libgpumem.so's
 * (rec_add_own_code). A few loads once the caller is known; in the exported function itself. */
void gm_note_caller(const void *ra);
#define GM_NOTE_CALLER() gm_note_caller(__builtin_return_address(0))

/* Converts a driver result to the runtime error the real runtime would give. */
cudaError_t gm_rt_error(CUresult r);

/* ---- memory the program manages itself, pitched allocations (program_mem.c) ---- */
/* Real driver entry points only program_mem.c and devused.c use (filled by driver.c's table). */
struct gm_real_pm {
    CUresult (*cuMemAllocPitch_v2)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
    CUresult (*cuMemPoolCreate)(CUmemoryPool *, const CUmemPoolProps *);
    CUresult (*cuMemPoolDestroy)(CUmemoryPool);
    CUresult (*cuDeviceSetMemPool)(CUdevice, CUmemoryPool);
    CUresult (*cuMemSetMemPool)(CUmemLocation *, CUmemAllocationType, CUmemoryPool);
    CUresult (*cuArrayCreate_v2)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    CUresult (*cuArray3DCreate_v2)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
    CUresult (*cuArrayDestroy)(CUarray);
    CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*cuDevicePrimaryCtxGetState)(CUdevice, unsigned int *, int *);
    CUresult (*cuDevicePrimaryCtxRelease_v2)(CUdevice);
    CUresult (*cuCtxPushCurrent_v2)(CUcontext);
    CUresult (*cuCtxPopCurrent_v2)(CUcontext *);
};
extern struct gm_real_pm gm_real_pm;
CUresult gm_pm_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                           const CUmemAllocationProp *prop, unsigned long long flags);
CUresult gm_pm_cuMemRelease(CUmemGenericAllocationHandle h);
CUresult gm_pm_cuMemMap(CUdeviceptr va, size_t size, size_t off, CUmemGenericAllocationHandle h,
                        unsigned long long flags);
CUresult gm_pm_cuMemUnmap(CUdeviceptr va, size_t size);
CUresult gm_pm_cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                                   unsigned long long flags);
CUresult gm_pm_cuMemAddressFree(CUdeviceptr p, size_t size);
CUresult gm_pm_cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n);
/* The device an allocation from `pool` is on: the pool's (one the program created: its location;
 * a device's default pool: that device), whatever the stream's device or the current one is;
 * the stream's device, then the current one, only where gpumem does not know the pool. Every
 * pool entry point, runtime and driver, records its allocation (and its OOM) there. */
int gm_pm_pool_device(CUmemoryPool pool, CUstream s);
/* The device whose default pool `pool` is, or -1 (driver.c). */
int gm_default_pool_device(CUmemoryPool pool);
CUresult gm_pm_cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s);
CUresult gm_pm_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p,
                                            CUstream s);
CUresult gm_pm_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult gm_pm_cuMemPoolDestroy(CUmemoryPool pool);
/* The program made `pool` a device's current pool (cuDeviceSetMemPool; cuMemSetMemPool for a
 * device's device memory): noted for gm_pm_chosen_pool, in every mode. */
CUresult gm_pm_cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool);
CUresult gm_pm_cuMemSetMemPool(CUmemLocation *loc, CUmemAllocationType type, CUmemoryPool pool);
/* The pool the program chose for device dev's stream-ordered allocations (cudaMallocAsync,
 * cuMemAllocAsync), NULL where it chose none: those allocations are then the pool's, passed
 * through in both modes with flag GM_EVF_POOL. */
CUmemoryPool gm_pm_chosen_pool(int dev);
/* Whether the program chose a pool for any device (so far): the allocation paths ask this first. */
int gm_pm_any_chosen_pool(void);
CUresult gm_pm_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                  unsigned int elem);
CUresult gm_pm_cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d);
CUresult gm_pm_cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d);
CUresult gm_pm_cuArrayDestroy(CUarray a);
void gm_pm_fork_child(void);

/* The hook behind an exported driver symbol name (driver_sym.c's exports), loading the driver
 * first; NULL when the driver or that entry point is missing. */
void *gm_driver_sym_hook(const char *sym);

/* GM_EVF_PITCHED / GM_EVF_POOL for the calling thread's next allocation event; the hook sets it
 * around the call that records, gm_event_id consumes it. */
extern __thread unsigned gm_next_alloc_flags __attribute__((tls_model("initial-exec")));
/* set while this thread empties one of PyTorch's caches for gpumem's hooks at exit (core.c,
 * gpumem_host_cache_emptying / gpumem_torch_cache_emptying): its frees are the cache's */
extern __thread int gm_torch_cache_emptying __attribute__((tls_model("initial-exec")));
/* An event of a kind gm_ev does not name (snapshot/record/rec.h REC_*), when recording. */
void gm_event_raw(unsigned rec_kind, int device, uintptr_t stream, uint64_t addr, uint64_t size,
                  uint64_t requested, uint64_t id);
/* 1 once the recorder is open in this process (it stays 1 after the exit handler closed it). */
int gm_rec_opened(void);

/* ---- the driver's view of the device (devused.c) ---- */
/* Device memory gpumem knows of changed by delta bytes on device (-1: the current context's):
 * gpumem's segments, passed-through allocations, the program's VMM and arrays. A new high is
 * sampled with the real cuMemGetInfo (REC_DEVICE_INFO), as is the first call with a context
 * current (the start). Call after the event that made the change was recorded. */
void gm_devused_change(int device, long long delta);
/* The device's start sample now, before memory is mapped on it (its allocator just made, the
 * program's VMM handle about to be created), where its context is current and it has none yet. */
void gm_devused_start(int device);
/* gm_event_id's part: a passed-through device allocation or its free changes the count. */
void gm_devused_event(int ev, unsigned flags, int device, size_t size, uint64_t id);
/* At exit, before the recorder closes: one sample per device with an active context. */
void gm_devused_exit(void);
/* ---- what a program can observe: errors, queries, resets (core.c, driver.c, runtime.c) ----
 * A failure gpumem decides (an OOM of its allocator, a double free, a bad stream) is replayed
 * through the real runtime function with the thread marked inside: the runtime's own driver call
 * reaches gpumem's hook, which answers the armed code without doing anything. The runtime then
 * sets its return code, its out-parameters and its last-error state itself, exactly as for its
 * own failure (see preload/README.md, "Indistinguishable"). */
enum gm_fail_site { GM_FAIL_NONE, GM_FAIL_ALLOC, GM_FAIL_FREE, GM_FAIL_HOST_ALLOC, GM_FAIL_HOST_FREE,
                    GM_FAIL_COPY };
extern __thread int gm_fail_site __attribute__((tls_model("initial-exec")));
extern __thread CUresult gm_fail_code __attribute__((tls_model("initial-exec")));
/* In a driver hook: 1 and *r set when a replayed failure is armed for this site (consumed). */
static inline int gm_fail_take(enum gm_fail_site site, CUresult *r)
{
    if (gm_fail_site != (int)site)
        return 0;
    *r = gm_fail_code;
    gm_fail_site = GM_FAIL_NONE;
    return 1;
}
/* 1 when `s` is a stream handle the driver accepts (special handles always; others asked of the
 * real driver with cuStreamGetFlags, cached per thread until a stream is destroyed). */
int gm_stream_valid(CUstream s);
/* gm_stream_valid that also gives the stream's device (the current context's for the special
 * handles): where a stream-ordered allocation on it must live. */
int gm_stream_device(CUstream s, CUdevice *dev);
/* The device of memory gpumem did not see allocated (a foreign free), asked before it is freed:
 * the driver's answer, else the stream's device, else -1. */
int gm_addr_device(CUdeviceptr p, CUstream s);
/* What gm_free_sync did. */
enum { GM_SYNC_NONE = 0, GM_SYNC_DONE = 1, GM_SYNC_SKIPPED_CAPTURE = 2 };
/* cudaFree / cuMemFree (device) and cudaFreeHost / cuMemFreeHost (host): synchronize the
 * device first, as the real calls do, unless GPUMEM_CONF free_sync / free_host_sync is none, or
 * a graph capture is underway (a device synchronization would invalidate a relaxed or
 * thread-local capture on another thread, which the real free does not: the block is then
 * fenced with events the allocator records when the capture ends; the pinned block is held
 * until a later synchronized free). Returns GM_SYNC_*. */
int gm_free_sync(int host);
/* Pointer queries for gpumem's memory (heap.c, pinned.c): 1 and the allocation the program asked
 * for (base, requested size, a process-unique id) when ptr lies inside a live one; 0 when gpumem
 * does not own the address; -1 when it lies in gpumem's memory outside any live allocation
 * (freed, or past the requested end: the driver would not know it). */
struct gm_alloc_ref {
    uintptr_t base;
    size_t size;
    unsigned long long id;
    int device; /* -1: pinned host memory */
    int pooled; /* a stream-ordered allocation (which a CUDA pool would have served) */
};
int gm_heap_find(CUdeviceptr ptr, struct gm_alloc_ref *out);
/* A copy or memset of n bytes at p (device side): 1 when p lies in gpumem's device memory and
 * the bytes do not all lie inside one live allocation (past its requested end, or in freed
 * memory), with the allocation in *ref (base 0: none live there). The driver refuses such an
 * access to its own allocations (CUDA_ERROR_INVALID_VALUE); sub-allocation must not make it
 * silent. 0 otherwise (memory gpumem does not serve: the driver checks it). */
int gm_heap_check_access(uint64_t p, size_t n, struct gm_alloc_ref *ref);
/* The copy / memset hooks' check (driver.c): in replace mode, when dst (written) or src (read)
 * is a bad access as above, record it and return 1: the call must fail with
 * CUDA_ERROR_INVALID_VALUE without running. which: GM_COPY_*. */
int gm_access_refused(int which, CUstream s, uint64_t dst, uint64_t src, size_t n);
int gm_pinned_find(const void *ptr, struct gm_alloc_ref *out);
/* cudaDeviceReset / cuDevicePrimaryCtxReset: drop the allocator of `dev` (its memory is given
 * back before the reset destroys it; live blocks are recorded as freed). */
void gm_heap_reset(int dev);

#endif
