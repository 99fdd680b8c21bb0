/* gpumem.h — the user API of libgpumem.so (optional: programs run unchanged without it).
 *
 * Everything here is exported by libgpumem.so. A program that wants gpumem to be optional
 * looks the names up at run time instead of linking them:
 *
 *     int (*name)(const void *, const char *) =
 *         (int (*)(const void *, const char *))dlsym(RTLD_DEFAULT, "gpumem_name");
 *     if (name) name(ptr, "attn.qkv");
 *
 * All functions are thread-safe and never abort the program.
 */
#ifndef GPUMEM_H
#define GPUMEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Names the live allocation containing ptr (device memory served or seen by gpumem, or pinned
 * host memory from its pool). The name is copied and stored with the allocation in the
 * recording. Returns 0, or -1 when ptr is not inside a live allocation gpumem knows, name is
 * NULL, or gpumem is off. */
int gpumem_name(const void *ptr, const char *name);

/* Names the calling thread's NEXT allocation (device, or pinned host memory) before it is
 * made: the name is stored with it when it succeeds, and with the out-of-memory record when it
 * fails, so `gpumem report` can say which tensor did not fit. Names longer than 63 bytes are
 * cut. Returns 0, or -1 when name is NULL or gpumem is off. */
int gpumem_name_next(const char *name);

/* PyTorch pluggable-allocator entry points (torch.cuda.memory.CUDAPluggableAllocator):
 * allocate `size` bytes on `device` for use on `stream` (a cudaStream_t), and free in stream
 * order on `stream`. gpumem_torch_malloc returns NULL on failure: PyTorch 2.14's pluggable
 * allocator does not check it (the tensor gets no memory), so gpumem.use_as_allocator plugs in
 * libgpumem_torch.so's malloc instead, which raises torch.OutOfMemoryError with
 * gpumem_torch_oom_message's words (preload/torch_alloc.cpp; README "PyTorch"). The stream is a
 * void * here so that this header needs no CUDA header. */
void *gpumem_torch_malloc(ssize_t size, int device, void *stream);
void gpumem_torch_free(void *ptr, ssize_t size, int device, void *stream);
/* The calling thread's last refused gpumem_torch_malloc in words for PyTorch's OutOfMemoryError
 * (what was asked, gpumem's allocated and reserved bytes, its limit, the device's memory), written
 * into buf (cap bytes, cut to fit); returns the message's full length. */
size_t gpumem_torch_oom_message(char *buf, size_t cap);
/* PyTorch's set_per_process_memory_fraction as the pluggable allocator hands it on
 * (set_memory_fraction_fn, libgpumem_torch.so): gpumem's allocator of `device` is capped at
 * fraction x the device's total memory (or GPUMEM_LIMIT / the limit key where lower), recorded as
 * event 37 flagged 4096; an OOM under it is recorded with that limit, flagged the fraction's.
 * Under GPUMEM_MODE=record (the driver serves) it says once that it is ignored (stderr, meta
 * ignored.torch.cuda.set_per_process_memory_fraction). */
void gpumem_torch_memory_fraction(double fraction, int device);
/* Gives gpumem's cached device memory back to the driver, on every device (PyTorch's emptyCache
 * once gpumem is PyTorch's allocator: libgpumem_torch.so makes it the allocator's reset hook,
 * reached by torch.cuda.empty_cache and torch._C._cuda_emptyCache; without that library the gpumem
 * Python module calls it from torch.cuda.empty_cache). It waits for the device first. A CUDA graph's memory stays while the graph lives; once the graph is
 * destroyed and its last tensor freed, its pool goes back here. Nothing in modes record and
 * off (the program's own allocator caches). */
void gpumem_empty_cache(void);
/* on != 0: the calling thread is emptying PyTorch's pinned host cache (gpumem's Python hooks at
 * exit, around torch._C._host_emptyCache()); its pinned host frees until gpumem_host_cache_emptying
 * (0) are recorded as the cache's (event 6 flagged 512), which leaks and report say apart from
 * leaks, whatever the stack settings. */
void gpumem_host_cache_emptying(int on);
/* on != 0: the calling thread is emptying one of PyTorch's device caches at exit (gpumem's Python
 * hooks, around torch._C._cuda_clearCublasWorkspaces(): its cuBLAS and cuBLASLt workspaces); its
 * device frees until gpumem_torch_cache_emptying(0) (events 2 and 4, gpumem as PyTorch's
 * allocator) and the frees of PyTorch's own allocator the trace tracker sees on it (merged as
 * events 32 and 33) are recorded flagged 512, which leaks and report say apart from leaks. */
void gpumem_torch_cache_emptying(int on);

/* PyTorch's memory statistics with gpumem as its allocator: PyTorch keeps none of its own then,
 * and libgpumem_torch.so's allocator answers getDeviceStats / resetPeakStats /
 * resetAccumulatedStats with these, so torch.cuda.memory_stats(), memory_allocated(),
 * max_memory_reserved(), memory_summary(), reset_peak_memory_stats(), ... work (without that
 * library the gpumem Python module reads them through ctypes). One figure as PyTorch keeps it
 * (c10's Stat): now, the peak since the last gpumem_torch_reset_peak_stats (the whole run's
 * before one), and the sums of its increases and decreases since the last
 * gpumem_torch_reset_accumulated_stats. */
typedef struct gpumem_torch_stat {
    int64_t current, peak, allocated, freed;
} gpumem_torch_stat_t;
typedef struct gpumem_torch_stats {
    /* PyTorch's live tensors on the device (what gpumem_torch_malloc served and
     * gpumem_torch_free has not freed): gpumem's block sizes (512 B multiples), the sizes
     * PyTorch asked for, how many */
    gpumem_torch_stat_t allocated_bytes, requested_bytes, allocation;
    /* gpumem's allocator of the device, which also serves the libraries' cudaMalloc (cuBLAS
     * workspaces, NCCL buffers) beside PyTorch's tensors: mapped bytes, mapped runs (expandable
     * segments) or segments (classic), live and freed-but-pending blocks, free blocks that are not
     * a whole run */
    gpumem_torch_stat_t reserved_bytes, segment, active_bytes, active, inactive_split_bytes,
        inactive_split;
    /* that allocator's counts since the last reset of the accumulated figures: allocations that
     * freed its cache and retried, refused ones (OOMs), device allocations (maps, segments) and
     * frees (unmaps), device synchronizations */
    int64_t num_alloc_retries, num_ooms, num_device_alloc, num_device_free, num_sync_all_streams;
    int64_t max_split_size; /* gpumem's max_split_size (GPUMEM_CONF) in bytes, -1 unlimited */
} gpumem_torch_stats_t;
/* Fills out (size: sizeof the caller's gpumem_torch_stats_t; the first size bytes are written)
 * with the figures of `device`. Returns 0, or -1 when gpumem's allocator does not serve PyTorch's
 * tensors (GPUMEM_MODE=record or off: the driver serves them) or the device is out of range. */
int gpumem_torch_stats(int device, gpumem_torch_stats_t *out, size_t size);
/* PyTorch's reset_peak_memory_stats(device): every peak above restarts from its current value.
 * The recording's peaks stay the whole run's. */
void gpumem_torch_reset_peak_stats(int device);
/* PyTorch's reset_accumulated_memory_stats(device): the sums and counts above restart from 0. */
void gpumem_torch_reset_accumulated_stats(int device);
/* PyTorch's get_per_process_memory_fraction(device): the fraction capping gpumem's allocator of
 * `device`, the last gpumem_torch_memory_fraction's, else GPUMEM_CONF's per_process_memory_fraction
 * key, else 1 (none; also in modes record and off, where gpumem caps nothing). */
double gpumem_torch_get_memory_fraction(int device);

/* A range of the calling thread, like nvtxRangePushA / nvtxRangePop without an NVTX library
 * (the gpumem Python module's gpumem.range and gpumem.annotate use these): allocations made
 * inside get it as their phase. push returns the zero-based level of the new range (-1 when
 * name is NULL); pop returns the level left, or -1 when no range was open. */
int gpumem_range_push(const char *name);
int gpumem_range_pop(void);
/* pop then push in one call (a push when no range is open): the level of the new range */
int gpumem_range_replace(const char *name);

/* The live device allocation containing ptr is used on `stream` too, as PyTorch's
 * Tensor.record_stream says: gpumem does not reuse its memory after it is freed until the work
 * issued on `stream` before the free has completed. Without it, a block freed in stream order
 * (cudaFreeAsync, PyTorch's free) waits only for its own stream, and a block freed with cudaFree
 * waits for every stream. `stream` is a cudaStream_t / CUstream (struct CUstream_st * is their
 * type, declared here so that no CUDA header is needed); cudaStreamPerThread names the calling
 * thread's stream. This is the signature of PyTorch's record-stream hook
 * (CUDAPluggableAllocator::set_record_stream_fn, C++ only; see README). Returns 0, or -1 when
 * ptr is not inside a live allocation gpumem knows, or gpumem is off. */
struct CUstream_st;
int gpumem_record_stream(const void *ptr, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif
