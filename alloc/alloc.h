/* alloc.h — gpumem's caching device-memory allocator: the one public header of alloc/.
 *
 * The allocator hands out device addresses carved from segments it obtains from a *backend*
 * (a struct of function pointers: the real CUDA driver, the virtual GPU, or the in-memory
 * backend below). It knows nothing of CUDA symbols or SQLite. Two segment modes:
 *
 *   - expandable (default where the backend has virtual-memory calls): one large address range
 *     per (stream, pool) sized to the device; physical handles of `handle_size` bytes are mapped
 *     on demand, holes are filled before the range grows, fully free pages are unmapped on
 *     empty_cache / garbage collection / OOM retry / release threshold (after synchronizing);
 *   - classic (expandable_segments:False): one backend allocation per segment, PyTorch's segment
 *     sizes, blocks never merge across segments.
 *
 * Sizes round to 512 B. Requests <= 1 MiB go to the small pool, larger ones to the large pool.
 * Each stream has its own pools. Best fit with split and coalesce in O(log n).
 *
 * Stream order (PyTorch's model, plus cudaFree's):
 *   - every block remembers its allocation stream and the streams named for it by
 *     alloc_record_stream (recordStream: another stream uses the block) or seen using it by
 *     access tracking (alloc_use_streams);
 *   - a free records one event on each of those streams and on the stream of alloc_free_async,
 *     except the allocation stream itself when per-stream pools are on (the block goes back to
 *     that stream's pool, and work issued later on a stream runs after its earlier work); no
 *     stream left: the block is reusable at once;
 *   - a plain alloc_free (cudaFree) of a block never given a stream by alloc_record_stream
 *     records an event on every stream the allocator knows (alloc_malloc, alloc_free_async,
 *     alloc_note_stream): cudaFree waits for the whole device, so a program may have used the
 *     block anywhere;
 *   - each stream keeps its events in order and the pending frees behind them land as soon as
 *     their own events completed: a slow stream delays only the frees that wait for it;
 *   - the device is never synchronized with the allocator lock held: the OOM path, empty_cache,
 *     garbage collection, the release threshold and alloc_forget_stream drop the lock while they
 *     wait, and then only land the frees and release the memory freed before the wait began;
 *   - a failed event record leaves the stream fenced; that one free waits for the device.
 * A backend without event functions (event_record == NULL) means "all issued work is already
 * complete" (replay): frees then take effect at once.
 *
 * Thread safety: every function may be called from any thread; one mutex per allocator, held
 * briefly on the hot path. Hooks run with that mutex held unless stated otherwise.
 *
 * Errors: functions return an alloc_err (0 = ALLOC_OK). alloc_strerror() names each.
 */
#ifndef GPUMEM_ALLOC_H
#define GPUMEM_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                       */

typedef enum alloc_err {
    ALLOC_OK = 0,
    ALLOC_ERR_OOM = 1,         /* out of memory after freeing the cache and retrying */
    ALLOC_ERR_INVALID = 2,     /* bad argument (NULL out pointer, size overflow, ...) */
    ALLOC_ERR_NOT_OWNED = 3,   /* pointer not inside anything this allocator handed out */
    ALLOC_ERR_DOUBLE_FREE = 4, /* pointer lies in a block that is already free (or pending) */
    ALLOC_ERR_NOT_BASE = 5,    /* pointer inside a live block but not its start address */
    ALLOC_ERR_BACKEND = 6,     /* the backend failed with something other than OOM */
    ALLOC_ERR_CONFIG = 7,      /* bad configuration (message from alloc_config_parse) */
    ALLOC_ERR_CORRUPT = 8,     /* alloc_check found a broken invariant */
    ALLOC_ERR_NOMEM = 9,       /* host malloc failed for allocator metadata */
} alloc_err_t;

/* Static string naming the error ("out of memory", "double free", ...). */
const char *alloc_strerror(int err);

/* ------------------------------------------------------------------------------------------ */
/* Backend                                                                                      */

/* Return codes of backend functions. Any other nonzero value is treated as ALLOC_BE_ERROR;
 * the raw value is kept and readable with alloc_last_backend_error(). */
enum {
    ALLOC_BE_OK = 0,
    ALLOC_BE_OOM = 1,       /* out of device memory (CUDA_ERROR_OUT_OF_MEMORY) */
    ALLOC_BE_NOT_READY = 2, /* event_query only: work before the event not finished yet */
    ALLOC_BE_ERROR = 3,
};

/* All functions get `ctx` first. Addresses and physical handles are 64-bit integers
 * (CUdeviceptr, CUmemGenericAllocationHandle); streams are opaque uintptr_t (CUstream cast;
 * 0 = legacy default stream); events are opaque void * (CUevent).
 *
 * Virtual-memory group (expandable segments): all of reserve..granularity must be non-NULL,
 * otherwise the allocator falls back to classic segments.
 * Classic group: seg_alloc/seg_free, required for classic mode (and nocache).
 * Event group: event_create/record/query/destroy; all NULL = work completes at issue time.
 * synchronize: waits for all work on the device; NULL = nothing to wait for. */
typedef struct alloc_backend {
    void *ctx;

    /* reserve `size` bytes of address space aligned to `align` (cuMemAddressReserve) */
    int (*reserve)(void *ctx, size_t size, size_t align, uint64_t *addr);
    /* give the address range back (cuMemAddressFree); nothing is mapped in it any more */
    int (*free_range)(void *ctx, uint64_t addr, size_t size);
    /* create a physical allocation of `size` bytes (cuMemCreate); OOM -> ALLOC_BE_OOM */
    int (*create)(void *ctx, size_t size, uint64_t *handle);
    /* release a physical handle (cuMemRelease); it is unmapped everywhere already */
    int (*release)(void *ctx, uint64_t handle);
    /* map the whole handle at addr (cuMemMap, offset 0) */
    int (*map)(void *ctx, uint64_t addr, size_t size, uint64_t handle);
    /* make [addr, addr+size) readable and writable by the device (cuMemSetAccess) */
    int (*set_access)(void *ctx, uint64_t addr, size_t size);
    /* unmap [addr, addr+size) (cuMemUnmap); always exactly what one map call mapped */
    int (*unmap)(void *ctx, uint64_t addr, size_t size);
    /* physical allocation granularity in bytes (cuMemGetAllocationGranularity); 0 = error */
    size_t (*granularity)(void *ctx);

    /* classic segments: cuMemAlloc / cuMemFree */
    int (*seg_alloc)(void *ctx, size_t size, uint64_t *addr);
    int (*seg_free)(void *ctx, uint64_t addr, size_t size);

    /* events for stream order */
    int (*event_create)(void *ctx, void **event);
    int (*event_record)(void *ctx, void *event, uintptr_t stream);
    int (*event_query)(void *ctx, void *event); /* ALLOC_BE_OK done, ALLOC_BE_NOT_READY */
    int (*event_destroy)(void *ctx, void *event);
    int (*synchronize)(void *ctx);

    /* device memory: free and total bytes (cuMemGetInfo). NULL: total = 1 TiB, free = total
     * minus what this allocator reserved. */
    int (*mem_info)(void *ctx, size_t *free_bytes, size_t *total_bytes);
} alloc_backend_t;

/* ------------------------------------------------------------------------------------------ */
/* Configuration (GPUMEM_CONF, PYTORCH_CUDA_ALLOC_CONF syntax: key:value,key:value)             */

#define ALLOC_RP2_INTERVALS 64 /* roundup_power2_divisions: one entry per power of two */

typedef enum alloc_policy {
    ALLOC_POLICY_GPUMEM = 0,  /* gpumem's rules (see README): split any remainder >= 512 B */
    ALLOC_POLICY_PYTORCH = 1, /* PyTorch's documented rules (segment sizes, split limits) */
    ALLOC_POLICY_NOCACHE = 2, /* every request is one backend allocation, freed at free */
} alloc_policy_t;

/* alloc_config_t.limit when there is none (limit:none, GPUMEM_LIMIT unset) */
#define ALLOC_NO_LIMIT SIZE_MAX

typedef struct alloc_config {
    alloc_policy_t policy;
    bool expandable_segments; /* default true (falls back to classic without VMM calls) */
    bool per_stream_pools;    /* default true; false: one pool set shared by all streams */
    size_t max_split_size;    /* bytes; SIZE_MAX = unlimited (default) */
    /* roundup_power2_divisions: rp2_div[i] applies to sizes in [2^i, 2^(i+1)) bytes; 0 or 1 =
     * plain 512 B rounding. The parser fills it as PyTorch's AllocatorConfig does: a single value
     * sets every interval; in a list, key K MiB sets [K, 2K) MiB, the first key also covers
     * everything below it, '>' covers the intervals after the last key, and PyTorch's 16
     * intervals are clamped (below 2 MiB = [1, 2) MiB, 32 GiB and above = [32, 64) GiB). */
    uint64_t rp2_div[ALLOC_RP2_INTERVALS];
    double gc_threshold;      /* garbage_collection_threshold, 0 = off, else in (0, 1) */
    size_t handle_size;       /* physical handle size (expandable); 0 = granularity */
    size_t handle_size_small; /* handle size for the small pool; 0 = granularity */
    size_t release_threshold; /* unmap free pages when cached bytes exceed it; SIZE_MAX off */
    /* cap on reserved bytes (GPUMEM_LIMIT); ALLOC_NO_LIMIT = none. 0 is a cap of 0 bytes: every
     * value of a size key means what it says, none of them is a hidden "off" */
    size_t limit;
    bool release_before_grow; /* expandable: unmap free pages before mapping new ones */
    /* max_non_split_rounding_mb: a free block >= max_split_size serves a request >=
     * max_split_size only if it is less than this much larger; default = large_segment */
    size_t max_non_split_rounding;
    /* large_segment_size_mb: the classic segment for 1..10 MiB requests (PyTorch's
     * kLargeBuffer, 20 MiB by default); lower bound of max_split_size_mb and
     * max_non_split_rounding_mb */
    size_t large_segment;
    /* What cudaFree/cuMemFree (free_sync) and cudaFreeHost/cuMemFreeHost (free_host_sync) imply
     * under libgpumem.so: ALLOC_SYNC_DEVICE (default) synchronizes the device first, as the real
     * calls do; ALLOC_SYNC_NONE does not (stream order alone protects reuse). The allocator
     * itself ignores them. */
    unsigned char free_sync, free_host_sync;
    /* guard:1 — a debugging mode: every allocation gets pages of its own, placed so that it ends
     * where they end, with an unmapped granule (2 MiB on GPUs) after them; a kernel writing past
     * the block's rounded end faults instead of corrupting a neighbour. Nothing is cached (each
     * free gives its pages back once its stream work is done). Needs the virtual-memory calls. */
    bool guard;
    /* per_process_memory_fraction (PyTorch's key): the device's starting per-process memory
     * fraction, as in PyTorch: at most this share of the device's memory is reserved (the
     * allocator's limit becomes fraction x device memory, or the limit if that is lower) until
     * the program's torch.cuda.set_per_process_memory_fraction replaces it, either way
     * (alloc_set_memory_fraction); < 0: not set (default) */
    double memory_fraction;
    /* PyTorch keys the configuration named that gpumem accepts and does not model (bits;
     * alloc_config_unmodelled names them) */
    unsigned unmodelled;
} alloc_config_t;

enum { ALLOC_SYNC_DEVICE = 0, ALLOC_SYNC_NONE = 1 };

/* Defaults = preset "gpumem". */
void alloc_config_default(alloc_config_t *cfg);

/* Replace *cfg by a preset: "gpumem", "pytorch", "pytorch-expandable", "nocache".
 * Returns ALLOC_OK or ALLOC_ERR_CONFIG (unknown name). */
int alloc_config_preset(alloc_config_t *cfg, const char *name);

/* NULL-terminated list of preset names. */
extern const char *const alloc_preset_names[];

/* Apply a GPUMEM_CONF string on top of *cfg (keys are applied left to right; `preset:NAME`
 * resets to a preset first). On error *cfg is unchanged, ALLOC_ERR_CONFIG is returned and
 * err (if non-NULL) receives one line naming the bad key or value and listing what is accepted,
 * e.g. "GPUMEM_CONF: unknown key 'bogus_key' (accepted keys: expandable_segments, ...)".
 * NULL or empty string: no change. */
int alloc_config_parse(alloc_config_t *cfg, const char *conf, char *err, size_t errlen);

/* A configuration alloc_config_format wrote (a recording's meta.config), by this version or an
 * earlier one, which wrote "none" as max_split_size_mb:inf, garbage_collection_threshold:0 and
 * roundup_power2_divisions:0 (words PyTorch's grammar, and so GPUMEM_CONF, refuses). As
 * alloc_config_parse otherwise. */
int alloc_config_parse_recorded(alloc_config_t *cfg, const char *conf, char *err, size_t errlen);

/* The allocator configuration PyTorch 2.14.1 takes from the environment: PYTORCH_CUDA_ALLOC_CONF
 * when it is set (even empty: PYTORCH_ALLOC_CONF is then not read at all), else
 * PYTORCH_ALLOC_CONF; NULL when neither is set. *var (if var) names the variable. */
const char *alloc_config_torch_env(const char **var);

/* The PyTorch keys cfg named that gpumem accepts but does not model (pinned_*,
 * release_lock_on_cudamalloc, backend:cudaMallocAsync, ...), as "a, b, c" into buf: the caller
 * says so once. Returns how many. */
int alloc_config_unmodelled(const alloc_config_t *cfg, char *buf, size_t len);

/* The block size a request of `size` bytes gets under cfg (512 B rounding, or
 * roundup_power2_divisions): what `gpumem-replay --round` prints. 0 when it cannot exist. */
size_t alloc_round_size(const alloc_config_t *cfg, size_t size);

/* Format *cfg as a GPUMEM_CONF string that parses back to the same config. Returns the length
 * it needs (like snprintf). */
int alloc_config_format(const alloc_config_t *cfg, char *buf, size_t len);

/* Parse a byte size: "123", "512K", "2M", "24G", "1T" (also KiB/MiB/GiB/TiB, KB/MB/GB, B, and
 * lowercase), and a fraction with a unit ("1.5G": whole bytes, rounded down). Nothing else: no
 * space, sign or exponent, no fraction without a unit ("0.9" bytes). The one parser of every
 * size setting (GPUMEM_LIMIT, GPUMEM_CONF's size keys, gpumem-replay's, tune's and advise's
 * options); their messages quote ALLOC_SIZE_RULE. Returns ALLOC_OK or ALLOC_ERR_CONFIG. */
int alloc_parse_size(const char *s, size_t *out);
#define ALLOC_SIZE_RULE                                                                                  \
    "digits with an optional K, M, G or T (KiB, MB... also) suffix, e.g. 512M or 24G; a fraction only " \
    "with a suffix (1.5G); no spaces or signs"

/* ------------------------------------------------------------------------------------------ */
/* Lifetime                                                                                     */

typedef struct alloc alloc_t; /* opaque */

/* Create an allocator for one device over `be` (copied; be->ctx must outlive the allocator).
 * cfg NULL = defaults. Nothing is reserved before the first allocation. */
int alloc_create(const alloc_backend_t *be, const alloc_config_t *cfg, alloc_t **out);

/* Synchronize, release every segment and handle (live blocks included), free the allocator. */
void alloc_destroy(alloc_t *a);

/* The configuration in effect (expandable_segments false when the backend lacks VMM). */
void alloc_get_config(alloc_t *a, alloc_config_t *cfg);

/* Optional callbacks, e.g. for the recorder. Called with the allocator lock held: they must not
 * call alloc_* functions on the same allocator (except on_oom, called without the lock). */
typedef struct alloc_oom_info alloc_oom_info_t;
typedef struct alloc_hooks {
    void *user;
    /* physical memory mapped (expandable) or a classic segment allocated */
    void (*on_segment_map)(void *user, uint64_t addr, size_t size, uintptr_t stream);
    /* physical memory unmapped or a classic segment freed */
    void (*on_segment_unmap)(void *user, uint64_t addr, size_t size, uintptr_t stream);
    /* an allocation is about to fail with ALLOC_ERR_OOM (lock not held; may call alloc_walk) */
    void (*on_oom)(void *user, const alloc_oom_info_t *info);
    /* a free that waited for stream events (PENDING) landed: the block is reusable from now on.
     * alloc_id and stream are the allocation's. Not called for frees reusable at once. */
    void (*on_free_landed)(void *user, uint64_t addr, size_t size, uintptr_t stream,
                           uint64_t alloc_id);
    /* alloc_one_stream's answer may have changed: the first block named its stream, or a block
     * on another stream mixed them (at most twice an allocator). Called after the new answer is
     * stored (relaxed): a hook that publishes it to lock-free readers does so with release, and
     * they read alloc_one_stream after an acquire of what it published (preload/heap.c). */
    void (*on_streams_change)(void *user);
    /* What settled frees, for the replay (trace `mr` / `md` / `sy` / `sr`; README, "Releasing
     * without synchronizing"): a release that does not synchronize (release before growth,
     * garbage collection) recorded a marker event on stream (ALLOC_MARKER_RECORD) or found that
     * stream's oldest marker complete (ALLOC_MARKER_DONE); the allocator synchronized the device
     * (ALLOC_MARKER_SYNC, stream: the number on_wait gave its wait, 0 where it did not wait:
     * every free made before the wait began is settled; ALLOC_MARKER_RESTART:
     * the same, and the allocation in progress starts over on what it landed). `step`: inside
     * an allocation, which of its settle points (1, 2...: its releases' event queries and its
     * synchronizations, counted from the allocation's start or its last new start) made it; 0
     * outside one. alloc_forget_stream reports a stream it forgot that held memory
     * (ALLOC_MARKER_FORGET, after the ALLOC_MARKER_SYNC of its synchronization: it then released
     * what the forgotten streams' pools held; trace `sf`). A stream that held nothing is not
     * reported: forgetting it changes nothing a replay sees. */
    void (*on_marker)(void *user, unsigned what, uintptr_t stream, unsigned step);
    /* an allocation is about to fail with ALLOC_ERR_OOM, called with the lock held before
     * on_oom: a recorder writes the OOM's event here, in the order the allocator failed it among
     * every other thread's allocations and frees (alloc_malloc_notify). Written from on_oom,
     * after the unlock, frees other threads made meanwhile came before it in the recording, and
     * the replay served the allocation the run failed (tests/integration/replay_threads.sh). */
    void (*on_oom_locked)(void *user, const alloc_oom_info_t *info);
    /* A synchronization is about to drop the lock and wait for the device (trace `sw`): called
     * with the lock held, before other threads may run. `wait` numbers it (1, 2...: the same
     * number is on_marker's `stream` at its ALLOC_MARKER_SYNC / ALLOC_MARKER_RESTART, when the
     * wait is over); size and stream are the allocation's in progress (0 and 0 outside one),
     * step its settle point. What the synchronization lands is what was fenced and freed before
     * this call: the events other threads make during the wait come after it, and a replay that
     * knows both ends lands only what the run did (README, "Releasing without synchronizing"). */
    void (*on_wait)(void *user, uint64_t wait, size_t size, uintptr_t stream, unsigned step);
    /* A free that waited for stream events landed at a synchronization (the end of a wait): as
     * on_free_landed, which is called instead where this is not set. The block is settled (no
     * marker needed before its pages are unmapped), where one landed by its events is not: the
     * replay lands it the same way (trace `fy`). */
    void (*on_free_synced)(void *user, uint64_t addr, size_t size, uintptr_t stream,
                           uint64_t alloc_id);
} alloc_hooks_t;
enum {
    ALLOC_MARKER_RECORD = 0,
    ALLOC_MARKER_DONE = 1,
    ALLOC_MARKER_SYNC = 2,
    ALLOC_MARKER_RESTART = 3,
    ALLOC_MARKER_FORGET = 4
};
void alloc_set_hooks(alloc_t *a, const alloc_hooks_t *hooks);

/* ------------------------------------------------------------------------------------------ */
/* Allocation                                                                                   */

/* Allocate `size` bytes usable on `stream` (cudaMalloc: stream 0). size 0 -> *ptr = 0, OK.
 * ALLOC_ERR_OOM after the OOM path (process events, free cache, synchronize, retry);
 * the forensics are then available from alloc_last_oom(). */
int alloc_malloc(alloc_t *a, size_t size, uintptr_t stream, uint64_t *ptr);

/* alloc_malloc that also tells what happened, for the recorder (no second lookup needed). */
typedef struct alloc_block_query alloc_block_query_t;
typedef struct alloc_malloc_info {
    uint64_t alloc_id; /* as alloc_block_query's */
    size_t size;       /* rounded block size */
    bool cache_hit;    /* served from the cache, no backend allocation */
} alloc_malloc_info_t;
int alloc_malloc_ex(alloc_t *a, size_t size, uintptr_t stream, uint64_t *ptr,
                    alloc_malloc_info_t *info);

/* alloc_malloc_ex (capture 0) or alloc_malloc_captured (capture != 0: stream is ignored) that
 * also calls fn(arg, ptr, info) with the allocator lock held, once the block is live and before
 * any other call can free it, allocate or free anything else, or release memory: a recorder that
 * writes its allocation event there orders it as the allocator saw it. Written after the call
 * returned, another thread's frees (and allocations) made meanwhile came before it in the
 * recording, and a replay served the allocation from blocks the run had not freed yet (8 threads,
 * tests/apps/stress_app: a cache hit where the run missed, up to 14 MiB off the run's peak reserved;
 * tests/integration/replay_threads.sh). fn must not call alloc_* on `a`. */
typedef void (*alloc_malloced_fn)(void *arg, uint64_t ptr, const alloc_malloc_info_t *info);
int alloc_malloc_notify(alloc_t *a, size_t size, uintptr_t stream, uintptr_t capture,
                        uint64_t *ptr, alloc_malloc_info_t *info, alloc_malloced_fn fn, void *arg);

/* Passed as `stream` to alloc_free_ex with async false: the caller has just synchronized the
 * device (the real cudaFree does): the block is free at once, no fence. */
#define ALLOC_FREE_SYNCED UINTPTR_MAX

/* Free with cudaFree semantics (see top). ptr 0 -> OK. Errors: ALLOC_ERR_NOT_OWNED (foreign
 * pointer: hand it to the real driver), ALLOC_ERR_DOUBLE_FREE, ALLOC_ERR_NOT_BASE. */
int alloc_free(alloc_t *a, uint64_t ptr);

/* Free in stream order on `stream` (cudaFreeAsync). Same errors as alloc_free. */
int alloc_free_async(alloc_t *a, uint64_t ptr, uintptr_t stream);

/* alloc_free (async false) or alloc_free_async (async true) that reports the block it freed
 * (base, size, requested, stream, alloc id) in *freed when it returns ALLOC_OK. */
int alloc_free_ex(alloc_t *a, uint64_t ptr, bool async, uintptr_t stream,
                  alloc_block_query_t *freed);

/* alloc_free_ex (capture 0) or alloc_free_captured (capture != 0) that also calls fn(arg, freed)
 * with the allocator lock held, once the block has left the live state and before any other
 * call can hand it out again or land its fence (on_free_landed) or give its segment back: a
 * recorder that writes its free event there orders it before every reuse of the block, whatever
 * the scheduler does to the freeing thread afterwards. fn must not call alloc_* on `a`. */
typedef void (*alloc_freed_fn)(void *arg, const alloc_block_query_t *freed);
int alloc_free_notify(alloc_t *a, uint64_t ptr, bool async, uintptr_t stream, uintptr_t capture,
                      alloc_block_query_t *freed, alloc_freed_fn fn, void *arg);

/* Tell the allocator a stream exists (so alloc_free fences it) / is being destroyed. Call forget
 * before cuStreamDestroy: no event is recorded on the stream after it. When the stream holds
 * memory, pending frees or is named by record_stream, forget waits for the device once (lock
 * dropped) so that no later free needs an event on it, and gives back the stream's pools:
 * cached memory and the address space reserved for it. A stream destroyed with live blocks in
 * its pools keeps them until they are freed and a later forget or empty_cache runs. */
int alloc_note_stream(alloc_t *a, uintptr_t stream);
int alloc_forget_stream(alloc_t *a, uintptr_t stream);

/* The live block containing ptr is used on `stream` too (PyTorch's Tensor.record_stream): its
 * free waits for the work issued on `stream` before the free. Interior pointers are accepted.
 * Recording the allocation stream, or a stream twice, changes nothing. Errors: ALLOC_ERR_NOT_OWNED,
 * ALLOC_ERR_DOUBLE_FREE (ptr lies in a freed block), ALLOC_ERR_NOMEM. */
int alloc_record_stream(alloc_t *a, uint64_t ptr, uintptr_t stream);

/* Access tracking saw work on `stream` (a kernel launch, copy or memset) touch these addresses:
 * each live block holding one (start or interior address; anything else is ignored) is used on
 * `stream` too, and a stream-ordered free of it (alloc_free_async) waits for the work issued on
 * `stream` before the free, as with alloc_record_stream. Unlike a record_stream these uses never
 * narrow a plain alloc_free to named streams (tracking can miss a use: it still fences every
 * stream). Returns how many blocks gained the stream. */
size_t alloc_use_streams(alloc_t *a, const uint64_t *addrs, size_t n, uintptr_t stream);

/* True while every block allocated so far is on `stream` (or none was and `stream` is 0):
 * alloc_use_streams adds nothing for `stream` then, and takes no lock. The answer changes at most
 * twice, and on_streams_change is called each time, so a caller may skip alloc_use_streams for
 * that stream until then (preload/uses.c: the launch's stream, memoised per thread). */
bool alloc_one_stream(alloc_t *a, uintptr_t stream);

/* CUDA graphs (PyTorch's private pools are the model). While a capture is underway the
 * allocator queries no event and never synchronizes (both would invalidate the capture), and the
 * events of frees made meanwhile are recorded when the last capture ends.
 *   - alloc_capture_begin / alloc_capture_end: a capture started / ended (any stream).
 *   - alloc_malloc_captured(a, size, capture, ...): an allocation inside the capture, with a
 *     stream key of its own for it (`capture`, chosen by the caller, e.g. one per capture id):
 *     its pools are private to the capture (also with per_stream_pools false), the graph's
 *     static addresses are never handed to anyone else, and nothing releases their memory
 *     (release before growth, the release threshold, garbage collection, empty_cache, the OOM
 *     path) before alloc_release_capture: a replay writes to it whenever the graph runs.
 *   - alloc_free_captured(a, ptr, capture): a free on the capturing stream. A block allocated in
 *     the capture is reusable at once by the capture's later allocations (graph order is stream
 *     order); any other block is held (PENDING) until the capture is released.
 *   - alloc_release_capture(a, capture): the graph and its executable graphs are destroyed:
 *     waits for the device once (lock dropped), then the held blocks are free and the capture's
 *     pools and address space are given back. */
int alloc_capture_begin(alloc_t *a);
int alloc_capture_end(alloc_t *a);
int alloc_malloc_captured(alloc_t *a, size_t size, uintptr_t capture, uint64_t *ptr,
                          alloc_malloc_info_t *info);
int alloc_free_captured(alloc_t *a, uint64_t ptr, uintptr_t capture, alloc_block_query_t *freed);
int alloc_release_capture(alloc_t *a, uintptr_t capture);

/* Is ptr inside a block this allocator handed out and that is still live? ALLOC_OK with the
 * block's base and (rounded) size; ALLOC_ERR_DOUBLE_FREE if it lies in a free/pending block;
 * ALLOC_ERR_NOT_OWNED otherwise. Interior pointers are accepted (slower path). */
int alloc_block_info(alloc_t *a, uint64_t ptr, uint64_t *base, size_t *size);

/* Full information about the live block containing ptr. */
struct alloc_block_query {
    uint64_t base;
    size_t size;       /* rounded block size */
    size_t requested;  /* what alloc_malloc was asked for */
    uintptr_t stream;  /* stream it was allocated on */
    uint64_t alloc_id; /* 1, 2, 3, ...: order of alloc_malloc calls that succeeded */
    /* alloc_free_ex only: the block waits for stream events (or a graph's release); the
     * on_free_landed hook tells when it is reusable */
    bool pending;
};
int alloc_block_query(alloc_t *a, uint64_t ptr, alloc_block_query_t *out);

/* Synchronize, make pending frees final, unmap every fully free page (expandable) and free
 * every fully free segment (classic). */
int alloc_empty_cache(alloc_t *a);
/* alloc_empty_cache that calls fn(arg) with the lock held before anything is synchronized or
 * released: a recorder's event (trace `e`) comes after every allocation and free made before
 * the call took the lock. fn must not call alloc_*. What stays approximate in the replay (the
 * synchronization drops the lock): README, "Releasing without synchronizing". */
typedef void (*alloc_locked_fn)(void *arg);
int alloc_empty_cache_notify(alloc_t *a, alloc_locked_fn fn, void *arg);

/* PyTorch's torch.cuda.set_per_process_memory_fraction while the program runs: reserved memory
 * is capped at limit bytes from now on (ALLOC_NO_LIMIT: no cap), what is reserved already stays reserved
 * (PyTorch frees nothing when the fraction changes; the next request over it frees the cache and
 * retries). An OOM under it says ALLOC_LIMIT_BYTES (the caller's limit, whatever it stands for).
 * The limit replaces the limit in bytes configured (GPUMEM_LIMIT, the limit key) and whatever
 * fraction was in force, and is the ceiling of a later alloc_set_memory_fraction as the
 * configured one was: a later fraction's cap is taken only where lower, a fraction of 1 gives
 * this limit back. ALLOC_OK or ALLOC_ERR_INVALID (no allocator). */
int alloc_set_limit(alloc_t *a, size_t limit);

/* The program's torch.cuda.set_per_process_memory_fraction with this allocator as PyTorch's: from
 * now on reserved memory is capped at fraction x the device's total memory (as PyTorch computes
 * it, truncated; 0: nothing may be reserved), or at the limit in bytes (GPUMEM_LIMIT, the limit
 * key) where that is lower. As in PyTorch, the call replaces the fraction in force, in either
 * direction: the per_process_memory_fraction key's share (only the device's starting fraction)
 * and an earlier call's alike; a fraction of 1 leaves the limit in bytes alone
 * (alloc_fraction_limit). What is reserved already stays, as with alloc_set_limit. *cap (may be
 * NULL): the fraction's bytes. ALLOC_OK, or ALLOC_ERR_INVALID (no allocator, a fraction outside
 * [0, 1]). */
int alloc_set_memory_fraction(alloc_t *a, double fraction, size_t *cap);
/* alloc_set_memory_fraction that also calls fn(arg, cap) with the lock held, the new limit in
 * force: a recorder's event (trace `l`) comes between the allocations the old limit capped and
 * those the new one caps, as the allocator applied it. Written after the unlock, another
 * thread's allocation made under the new limit could come before it. fn must not call alloc_*. */
typedef void (*alloc_limit_fn)(void *arg, size_t cap);
int alloc_set_memory_fraction_notify(alloc_t *a, double fraction, size_t *cap, alloc_limit_fn fn,
                                     void *arg);

/* The limit before any per-process memory fraction call, on a device of total bytes: cfg->limit
 * (GPUMEM_LIMIT, the limit key), or the per_process_memory_fraction key's share of total
 * (truncated, as PyTorch computes it) where that is lower. With alloc_fraction_limit, the one
 * place of the rule: alloc_create applies it to the device's total, and alloc_replay to the
 * recorded device's (alloc_replay_opts.device_total). */
static inline size_t alloc_conf_limit(const alloc_config_t *cfg, size_t total)
{
    if (cfg->memory_fraction < 0) return cfg->limit;
    size_t share = (size_t)(cfg->memory_fraction * (double)total); /* 0: nothing may be reserved */
    return share < cfg->limit ? share : cfg->limit;
}

/* The limit a per-process memory fraction call leaves in force: its cap (bytes) where the fraction
 * is under 1 (whole: false) and the cap is below the limit in bytes bytes_limit (cfg->limit as
 * configured: GPUMEM_LIMIT, the limit key, or the last alloc_set_limit's; ALLOC_NO_LIMIT: none),
 * else bytes_limit. The
 * per_process_memory_fraction key plays no part: as in PyTorch it is only the starting fraction,
 * which the call replaces in either direction (alloc_conf_limit before the first call). The one
 * place of the rule: alloc_set_memory_fraction applies it, and so does a reader that replays a
 * recording's fractions under the limit it ran with (gm_replay_trace_load_tap). */
static inline size_t alloc_fraction_limit(size_t cap, bool whole, size_t bytes_limit)
{
    return !whole && cap < bytes_limit ? cap : bytes_limit;
}

/* Raw code of the last backend failure (0 if none). */
int alloc_last_backend_error(alloc_t *a);

/* ------------------------------------------------------------------------------------------ */
/* Stats (PyTorch's names)                                                                      */

typedef struct alloc_stat {
    int64_t current;
    int64_t peak;       /* the whole run's: the allocator's own decisions and the recording read it */
    int64_t reset_peak; /* since alloc_reset_program_peaks (the program's reset_peak_memory_stats) */
    int64_t allocated;  /* the sum of the increases (PyTorch's "allocated" of a stat; its "freed",
                         * the sum of the decreases, is allocated - current: alloc_stat_freed) */
} alloc_stat_t;

static inline int64_t alloc_stat_freed(const alloc_stat_t *s)
{
    return s->allocated - s->current;
}

/* A change of a stat by d (either sign): the one place of the rule, for the allocator and for
 * the figures kept beside it in PyTorch's shape (preload/heap.c, gpumem as PyTorch's allocator).
 * A decrease never makes a new peak (current <= peak always: a peak reset sets peak = current). */
static inline void alloc_stat_change(alloc_stat_t *s, int64_t d)
{
    s->current += d;
    if (d >= 0) {
        s->allocated += d;
        if (s->current > s->peak) s->peak = s->current;
        if (s->current > s->reset_peak) s->reset_peak = s->current;
    }
}

typedef struct alloc_stats {
    alloc_stat_t allocated_bytes;      /* rounded sizes of live blocks */
    alloc_stat_t requested_bytes;      /* requested sizes of live blocks */
    alloc_stat_t reserved_bytes;       /* mapped (expandable) or segment (classic) bytes */
    alloc_stat_t active_bytes;         /* live + freed-but-pending blocks */
    alloc_stat_t inactive_split_bytes; /* free blocks that are not a whole segment / run */
    alloc_stat_t allocation;           /* count of live blocks */
    alloc_stat_t segment;              /* classic segments, or mapped runs (expandable) */
    alloc_stat_t active;               /* count of live + pending blocks */
    alloc_stat_t inactive_split;       /* count of such free blocks */
    uint64_t num_mallocs;              /* successful alloc_malloc calls with size > 0 */
    uint64_t num_frees;                /* successful alloc_free / alloc_free_async calls */
    uint64_t cache_hits;               /* mallocs served without a backend allocation */
    uint64_t cache_misses;             /* mallocs that needed a backend allocation */
    uint64_t num_device_alloc;         /* backend seg_alloc + map calls */
    uint64_t num_device_free;          /* backend seg_free + unmap calls */
    uint64_t num_backend_calls;        /* every backend call except event queries */
    uint64_t backend_calls[12];        /* the same, per call: index enum alloc_be_call */
    uint64_t num_alloc_retries;        /* mallocs that freed cache and retried */
    uint64_t num_ooms;                 /* mallocs that failed with ALLOC_ERR_OOM */
    uint64_t num_syncs;                /* backend synchronize calls */
    uint64_t num_events_recorded;
    uint64_t num_gc_runs;  /* garbage collections */
    uint64_t num_releases; /* release-threshold triggered unmaps */
} alloc_stats_t;

/* The backend calls counted in alloc_stats_t.backend_calls, one per backend function (on CUDA:
 * cuMemAddressReserve, cuMemAddressFree, cuMemCreate, cuMemRelease, cuMemMap, cuMemSetAccess,
 * cuMemUnmap, cuMemAlloc, cuMemFree, cuEventCreate, cuEventRecord, cuCtxSynchronize). */
enum alloc_be_call {
    ALLOC_BE_CALL_RESERVE, ALLOC_BE_CALL_FREE_RANGE, ALLOC_BE_CALL_CREATE, ALLOC_BE_CALL_RELEASE,
    ALLOC_BE_CALL_MAP, ALLOC_BE_CALL_SET_ACCESS, ALLOC_BE_CALL_UNMAP, ALLOC_BE_CALL_SEG_ALLOC,
    ALLOC_BE_CALL_SEG_FREE, ALLOC_BE_CALL_EVENT_CREATE, ALLOC_BE_CALL_EVENT_RECORD,
    ALLOC_BE_CALL_SYNCHRONIZE, ALLOC_BE_NCALLS
};
/* "reserve", "create", "map", ... (the backend function's name), NULL when out of range. */
const char *alloc_be_call_name(int call);

void alloc_get_stats(alloc_t *a, alloc_stats_t *out);

/* Where the backend put the allocator's new address ranges and classic segments, each relative
 * to the one before: 1 mostly above (a GPU driver, the replay's in-memory backend), -1 mostly
 * below (mmap: the virtual GPU's virtual backing), 0 not known (fewer than two). Best fit and
 * releases break ties by address, so a replay of a recording must hand out addresses the same
 * way round (alloc_replay_opts_t.top_down) to take the same decisions. */
int alloc_address_order(alloc_t *a);
void alloc_reset_peak_stats(alloc_t *a); /* peaks := current (reset_peak too) */
/* The program's peaks (alloc_stat_t.reset_peak) := current, as PyTorch's reset_peak_memory_stats
 * restarts its own; the whole-run peaks stay (the allocator's release decisions and the
 * recording's figures read them). fn(arg) (may be NULL) is called with the lock held after the
 * reset: a recorder's event there comes between the allocations and frees before it and after it,
 * as the reset saw them. fn must not call alloc_* on `a`. */
void alloc_reset_program_peaks(alloc_t *a, void (*fn)(void *), void *arg);

/* What set the limit in force (alloc_oom_info_t.limit_from): what an OOM under it tells the user
 * to change. Each names the setting the allocator took its limit from, not the one the user
 * would guess: a share of the device can be lower than a limit given in bytes. */
typedef enum alloc_limit_from {
    ALLOC_LIMIT_NONE = 0, /* no limit */
    ALLOC_LIMIT_BYTES,    /* alloc_config_t.limit (GPUMEM_LIMIT, the limit key), or alloc_set_limit's */
    ALLOC_LIMIT_KEY,      /* the per_process_memory_fraction key's share of the device
                             (alloc_conf_limit), below the limit in bytes; no call replaced it */
    ALLOC_LIMIT_FRACTION, /* alloc_set_memory_fraction's (the program's
                             set_per_process_memory_fraction), below the limit in bytes */
} alloc_limit_from_t;

/* OOM forensics, filled at the last failed alloc_malloc. */
struct alloc_oom_info {
    size_t requested; /* bytes asked for */
    size_t rounded;   /* after rounding */
    uintptr_t stream;
    size_t allocated;          /* allocated_bytes.current */
    size_t reserved;           /* reserved_bytes.current */
    size_t free_cached;        /* free bytes inside reserved memory ("free in fragments") */
    size_t largest_free_block; /* largest free block of any pool */
    size_t pending;            /* bytes freed but waiting for events */
    size_t limit;              /* cap on reserved: ALLOC_NO_LIMIT where there is none (0 is a
                                  cap of 0 bytes, as alloc_config_t.limit says) */
    size_t device_free;        /* backend's free memory at failure */
    size_t device_total;
    int backend_error; /* raw backend code if the failure was not a plain OOM */
    alloc_limit_from_t limit_from; /* what set limit (ALLOC_LIMIT_NONE where there is none) */
};
/* true and fills *out if an OOM happened on this allocator. */
bool alloc_last_oom(alloc_t *a, alloc_oom_info_t *out);

/* Memory-info view (cudaMemGetInfo under gpumem): total = capacity capped by limit;
 * free = total - reserved + cached idle (free, non-pending, mapped bytes), further capped by the
 * backend's own free memory + cached idle. */
void alloc_mem_info(alloc_t *a, size_t *free_bytes, size_t *total_bytes);

/* ------------------------------------------------------------------------------------------ */
/* Snapshot walk                                                                                */

typedef enum alloc_block_state {
    ALLOC_BLOCK_LIVE = 0,    /* handed out */
    ALLOC_BLOCK_PENDING = 1, /* freed, waiting for stream events */
    ALLOC_BLOCK_FREE = 2,    /* cached, reusable */
} alloc_block_state_t;

typedef struct alloc_walk_block {
    uint64_t addr;
    size_t size;
    size_t requested;  /* 0 unless live/pending */
    uint64_t alloc_id; /* 0 unless live/pending */
    alloc_block_state_t state;
} alloc_walk_block_t;

typedef struct alloc_walk_segment {
    uint64_t addr; /* a classic segment, or a maximal mapped run of an expandable range */
    size_t size;
    uintptr_t stream;
    bool small_pool;
    bool expandable;
    size_t allocated; /* bytes of live blocks */
    size_t nblocks;
} alloc_walk_segment_t;

/* Calls fn once per segment, in address order within each pool, with its blocks in address
 * order (they tile [addr, addr+size)). Under the lock: fn must not call the allocator. A nonzero
 * return from fn stops the walk and is returned. */
typedef int (*alloc_walk_fn)(void *user, const alloc_walk_segment_t *seg,
                             const alloc_walk_block_t *blocks, size_t nblocks);
int alloc_walk(alloc_t *a, alloc_walk_fn fn, void *user);

/* Invariant checker: blocks tile each segment/range exactly, no two free neighbours, every
 * free block in exactly one index (and live ones in the address map), stats equal the sums.
 * ALLOC_OK, or ALLOC_ERR_CORRUPT with a one-line description in err. */
int alloc_check(alloc_t *a, char *err, size_t errlen);

/* ------------------------------------------------------------------------------------------ */
/* In-memory backend (addresses only, no memory): replay and tests                              */

typedef struct alloc_mem_backend alloc_mem_backend_t;

typedef struct alloc_mem_opts {
    size_t capacity;    /* device memory; 0 = 80 GiB */
    size_t granularity; /* 0 = 2 MiB */
    bool no_vmm;        /* leave the VMM functions NULL (classic only) */
    bool track_events;  /* provide event functions (else they are NULL: work completes at once) */
    /* with track_events: an event completes after this many queries (0 = at the first one);
     * ALLOC_MEM_EVENT_MANUAL = only at synchronize or alloc_mem_backend_complete_events() */
    unsigned event_delay;
    uint64_t fail_call; /* if nonzero, the n-th create/seg_alloc call fails with OOM (1-based) */
    bool top_down;      /* hand out addresses downwards (as mmap does), not upwards */
    bool one_thread;    /* only one thread ever calls it (a replay's): no lock per call */
} alloc_mem_opts_t;
#define ALLOC_MEM_EVENT_MANUAL 0xffffffffu

alloc_mem_backend_t *alloc_mem_backend_create(const alloc_mem_opts_t *opts); /* NULL: no mem */
void alloc_mem_backend_destroy(alloc_mem_backend_t *m);
/* The backend struct to pass to alloc_create (valid while m lives). */
const alloc_backend_t *alloc_mem_backend(alloc_mem_backend_t *m);
/* Complete every event recorded so far. */
void alloc_mem_backend_complete_events(alloc_mem_backend_t *m);
/* Number of recorded events not yet complete. */
size_t alloc_mem_backend_pending_events(alloc_mem_backend_t *m);
typedef struct alloc_mem_counters {
    uint64_t reserve, free_range, create, release, map, unmap, set_access;
    uint64_t seg_alloc, seg_free, event_record, event_query, synchronize;
    /* bytes named by those calls (a driver's cost grows with them: sim/README.md, cost model) */
    uint64_t create_bytes, release_bytes, map_bytes, unmap_bytes, set_access_bytes;
    uint64_t seg_alloc_bytes, seg_free_bytes;
    size_t physical_in_use; /* bytes of handles + classic segments alive */
    size_t physical_peak;
} alloc_mem_counters_t;
void alloc_mem_backend_counters(alloc_mem_backend_t *m, alloc_mem_counters_t *out);

/* ------------------------------------------------------------------------------------------ */
/* Traces and replay                                                                            */

typedef enum alloc_trace_kind {
    ALLOC_TR_ALLOC = 0,       /* a <id> <size> [stream]  through the framework's allocator */
    ALLOC_TR_FREE = 1,        /* f <id>                  (cudaFree) */
    ALLOC_TR_FREE_ASYNC = 2,  /* fa <id> <stream>        (cudaFreeAsync) */
    ALLOC_TR_EMPTY_CACHE = 3, /* e */
    /* ax <id> <size> [stream]: a device allocation made outside the framework's allocator (a
     * library's own cudaMalloc: NCCL, cuBLAS workspaces). Under the pytorch presets it is one
     * device allocation of exactly size bytes, never cached and not in reserved (PyTorch's
     * statistics do not see it, but it takes device memory); under gpumem and nocache it is
     * an allocation like any other (gpumem serves every cudaMalloc of the process). */
    ALLOC_TR_ALLOC_OTHER = 4,
    /* rs <id> <stream>: record_stream — the live allocation id is used on stream too. When it is
     * freed its block is reusable only once that stream's work issued before the free has
     * completed (PyTorch: stream_uses and events); see alloc_replay_opts.stream_lag. */
    ALLOC_TR_RECORD_STREAM = 5,
    /* fc <id>: the free of id completed (PyTorch snapshots' free_completed): a block held back
     * by record_stream becomes reusable here. fy <id> (size 1): landed by the recording's
     * allocator's synchronization (gpumem's kind 29 flagged 256, on_free_synced): settled there,
     * as `fs`; the replay frees it so. */
    ALLOC_TR_FREE_DONE = 6,
    /* l <bytes>: PyTorch's per-process memory fraction set (torch.cuda.
     * set_per_process_memory_fraction): under every preset reserved memory is capped at size
     * bytes from here (0 bytes too: PyTorch's fraction 0; alloc_set_limit), a request over it
     * frees the cache and retries, then is an OOM. The fraction caps whichever allocator is
     * PyTorch's: its own (the pytorch presets), or gpumem's as its CUDAPluggableAllocator
     * (gpumem_torch_memory_fraction, recorded as event 37 flag 4096), so gpumem's and nocache's
     * replays keep it too; a reader that judges configurations under the recorded limit in bytes
     * gives the lower of the fraction's cap and that limit (alloc_fraction_limit: the fraction
     * replaces the per_process_memory_fraction key's share, as in PyTorch). */
    ALLOC_TR_LIMIT = 7,
    /* ag <id> <size> [stream]: a device allocation made outside the framework's allocator that
     * the recording's own allocator served from its pool (gpumem as PyTorch's pluggable
     * allocator takes every cudaMalloc of the process, cuBLAS's workspaces included): an
     * allocation like `a` under every preset, so the replay reproduces the recording. With
     * alloc_replay_opts_t.framework_only it is an `ax` instead (what PyTorch's own allocator
     * would do: it never sees a library's cudaMalloc). */
    ALLOC_TR_ALLOC_SERVED = 8,
    /* ao <id> <size> [stream]: a request that failed with out-of-memory in the recording. The
     * replay tries it as an `a`: where it fails again that is the replay's OOM (oom_index);
     * where it succeeds the allocation stays live to the end of the trace (what the program did
     * after its failure is unknown; gpumem tune and frag hold it the same way). */
    ALLOC_TR_ALLOC_FAILED = 9,
    /* ap <id> <size> <pool>: an allocation in a private pool (PyTorch's CUDA graph pools,
     * torch.cuda.MemPool; gpumem's pools of a graph capture). pool is a nonzero key, distinct
     * from every stream of the trace, one per (pool, stream) the program allocated from. It is
     * served from that pool's own segments only (alloc_malloc_captured), whatever
     * per_stream_pools says, and its free gives the block back to that pool; nothing else uses
     * the pool's memory and no release path gives it back (the graph may replay at any time).
     * Without it the replay lets graph tensors and the default pool share blocks, which the
     * recorded allocator never does (4 MiB below a recording's reserved peak). */
    ALLOC_TR_ALLOC_PRIVATE = 10,
    /* pr <pool>: the private pool `pool` (an `ap` key) ends: the recorded allocator gave its
     * memory back here (the graph or MemPool that owned it is gone: PyTorch freed its segments,
     * gpumem's capture was released). The replay releases it (alloc_release_capture): its free
     * blocks go back to the device, blocks still live go back once freed and the cache is next
     * emptied, and its frees are no longer ordered on the pool's key. Without it the replay kept
     * a destroyed graph's memory reserved to the end of the trace. */
    ALLOC_TR_POOL_RELEASE = 11,
    /* ad <id> <size> [stream]: a device allocation the driver made for the program outside any
     * allocator a configuration changes (a pool the program chose, a CUDA graph's memory node:
     * recorded with flag 2048 or 16384, passed through in every mode). Under every configuration
     * it is exactly size bytes in allocated and in reserved (its own segment, as gpumem report
     * counts it) from its allocation to its free, never cached, never in the allocator's limit,
     * but in the device's memory (alloc_replay_opts.capacity): one that does not fit is an OOM. 
     * Without it a pool's allocations were served from the allocator's segments, so a
     * configuration seemed to save memory the program's pool held in the run. */
    ALLOC_TR_ALLOC_DRIVER = 12,
    /* cb <pool> / ce <pool>: gpumem's graph capture into the private pool `pool` (an `ap` key)
     * begins / ends (gpumem's recordings: the first and the last allocation of a capture's pool,
     * written before and after them: another thread's allocation made during the capture outside
     * that span replays as made outside it, the recordings having no event for a capture's own
     * begin and end). While a capture is underway the live allocator queries no
     * event, never synchronizes and releases no memory its streams may still use (only what was
     * settled before it began), and a free that must wait for other streams is recorded at the
     * capture's end (alloc_capture_begin / alloc_capture_end); the replay does the same between
     * the two lines. Without them the replay released the default pool's cached memory while
     * the capture grew its pool, which the run could not: 38 MiB below a recording's peak
     * reserved (tests/torch/torch_graphs.sh, `release-gpumem`). */
    ALLOC_TR_CAPTURE_BEGIN = 13,
    ALLOC_TR_CAPTURE_END = 14,
    /* mr <stream> / md <stream>: the recording's allocator recorded a marker event on stream /
     * found that stream's oldest marker complete (its on_marker hook: gpumem's event kinds 39 and
     * 40). Its release before growth unmaps only pages whose frees its markers settled; a replay
     * with alloc_replay_opts_t.markers does the same with these lines as its event queries'
     * answers (the replay's free sequence at `mr`, the stream's settled point at `md`), so the
     * configuration the trace was recorded under replays exactly with work queued. Ignored
     * otherwise: another configuration's releases would have asked at other moments.
     * `mr <stream> <step>` / `md <stream> <step>` (and `sy <step>`): made at that settle point of
     * the allocation that follows (the lines come before its own, which is recorded when it
     * returns); the replay holds them until its own allocation reaches that point, so a release
     * early in an allocation does not see what the run learnt later in it. No step (or 0):
     * taken where the line comes. */
    ALLOC_TR_MARKER_RECORD = 15,
    ALLOC_TR_MARKER_DONE = 16,
    /* sy: the recording's allocator synchronized the device (its OOM path, the release threshold,
     * empty_cache, a stream forgotten, a failed event): every free made before it was settled
     * (gpumem's event kind 41). sr: the same inside an allocation, which then started over on
     * the frees it landed (kind 41 flagged 256; those frees' `fc` lines come before it). Taken
     * as marker lines are. `sy <step> <wait>` / `sr <wait>` (id: the wait's number): the end of
     * the wait its `sw` began, which settled only what was freed before the `sw`
     * (ALLOC_TR_WAIT). */
    ALLOC_TR_SYNC = 17,
    ALLOC_TR_SYNC_RESTART = 18,
    /* fs <id>: a cudaFree after the program's device synchronization (free_sync:device, the
     * default): the block's work had finished, and the allocator settled it at once (gpumem's
     * free event flagged 256). Every replay frees it as alloc_free_ex(..., ALLOC_FREE_SYNCED). */
    ALLOC_TR_FREE_SYNCED = 19,
    /* sf <stream>: the program destroyed a stream that held memory and the recording's allocator
     * forgot it (gpumem's event kind 42; alloc_forget_stream): it synchronized (the `sy` before)
     * and released the forgotten streams' free pages there and then; their pools go as soon as
     * they hold nothing in use. Every replay forgets the stream there: the recorded
     * configuration's (markers) as the run did, any other as its own allocator would. */
    ALLOC_TR_STREAM_FORGET = 20,
    /* sw <wait> [<size> <stream>]: the recording's allocator dropped its lock to synchronize
     * (gpumem's event kind 43, its on_wait hook): id the wait's number, size and stream the
     * allocation in progress (0: none). The `sy <step> <wait>` / `sr <wait>` with the same number
     * (id) ends it; the lines between are other threads' events made during the wait. A replay
     * with alloc_replay_opts_t.markers runs the allocation's part before the wait here, the
     * lines between while it waits, and the rest where the run did (after its `sy`, at its own
     * line), and its synchronization settles only what was freed before this line, as the run's
     * did; an `e` followed by `sw` empties the cache after its `sy` the same way. A `sy` / `sr`
     * without a wait number (older traces) settles every free before it. */
    ALLOC_TR_WAIT = 21,
} alloc_trace_kind_t;

typedef struct alloc_trace_event {
    uint64_t id;     /* allocation id, any 64-bit value; unique among live allocations;
                      * WAIT, SYNC, SYNC_RESTART: the wait's number (0: none) */
    uint64_t size;   /* ALLOC, ALLOC_OTHER, ALLOC_SERVED, ALLOC_FAILED, ALLOC_DRIVER; LIMIT: the cap;
                      * MARKER_RECORD, MARKER_DONE, SYNC: the step within the allocation that
                      * follows (alloc_hooks_t.on_marker; 0: none, take it where it comes);
                      * WAIT: the allocation's request in progress (0: none) */
    uint64_t stream; /* the allocations', FREE_ASYNC, RECORD_STREAM, MARKER_RECORD, MARKER_DONE,
                      * STREAM_FORGET, WAIT;
                      * POOL_RELEASE, CAPTURE_BEGIN, CAPTURE_END: the pool's key */
    uint32_t kind;   /* alloc_trace_kind_t */
} alloc_trace_event_t;

/* Parse the text trace format (README: one event a line; '#' comments and blank lines ignored).
 * *events is malloc'ed (caller frees). Error: ALLOC_ERR_INVALID and "line N: ..." in err. */
int alloc_trace_parse(const char *text, size_t len, alloc_trace_event_t **events, size_t *n,
                      char *err, size_t errlen);
int alloc_trace_load(const char *path, alloc_trace_event_t **events, size_t *n, char *err,
                     size_t errlen);

/* Synthetic transformer-training traces (GPT-2-like, 12 layers, bf16 activations; forward
 * allocates and saves activations, backward frees them in reverse while allocating gradient
 * temporaries; parameter gradients and optimizer state appear at the first step):
 *   "fixed"  — the same sequence length every step;
 *   "jitter" — the sequence length drawn per step (seeded), as with variable-length batches.
 * steps 0 = 20. Deterministic for a given (name, steps, seed). */
int alloc_trace_synth(const char *name, unsigned steps, uint64_t seed, alloc_trace_event_t **events,
                      size_t *n);

/* Write events in the text format (round-trips through alloc_trace_parse). */
int alloc_trace_write(const char *path, const alloc_trace_event_t *events, size_t n);

typedef struct alloc_replay_opts {
    size_t capacity;         /* device memory of the in-memory backend; 0 = 80 GiB */
    size_t granularity;      /* 0 = 2 MiB */
    bool continue_after_oom; /* default false: stop at the first OOM */
    /* A free of an allocation with record_stream uses (rs) on other streams is held back: its
     * block returns to the allocator at the trace's `fc` line for it when the trace has `fc`
     * lines; otherwise after stream_lag further allocations (0: before the next allocation,
     * which is what PyTorch does when the other streams' work has finished by then). empty_cache
     * and an OOM land every held free first (PyTorch synchronizes there). */
    unsigned stream_lag;
    /* the in-memory backend hands out addresses downwards: for a recording whose allocator got
     * them that way (alloc_address_order() -1, meta alloc.address_order "down") */
    bool top_down;
    /* when set, called through alloc_walk on the allocator's state after the last event (the
     * segments and blocks left at the end of the trace), before it is destroyed */
    alloc_walk_fn end_walk;
    void *end_walk_user;
    /* when set, called after each allocation the cache did not serve (reserved may have grown)
     * with the reserved peak so far; false stops the replay there (result.stopped): a search
     * that wants only configurations below a known peak stops one as soon as it reaches it */
    bool (*keep_going)(void *user, size_t peak_reserved);
    void *keep_going_user;
    /* the caller knows the trace has no `fc` event (ALLOC_TR_FREE_DONE): none is looked for (a
     * pass over the trace each replay; many replays of one trace look once) */
    bool no_free_done;
    /* alloc_trace_slots of the same events, or NULL: the live allocations are kept in an array
     * indexed by slot instead of a table keyed by id (many replays of one trace number it once) */
    const uint32_t *slots;
    uint32_t nslots;
    /* the replay is the framework's own allocator: under the pytorch presets an `ag` allocation
     * (a library's cudaMalloc that the recording's allocator served) goes to the device as an
     * `ax` does. False: it is served as recorded (the recording reproduced) */
    bool framework_only;
    /* the total memory of the device the trace was recorded on, of which the configuration's
     * per_process_memory_fraction key takes its share (alloc_conf_limit), as the recording's
     * allocator did; 0: of capacity (a replay's device is the recorded one's size or larger,
     * and the key's share of it would let a recorded OOM fit) */
    size_t device_total;
    /* cfg is the configuration the trace was recorded under: where the trace has marker lines
     * (ALLOC_TR_MARKER_RECORD / _DONE) they stand for the releases' event queries, and a page is
     * unmapped only once they settled its free, as in the run. False, or a trace without them:
     * work completes at issue and a release settles every free before it. alloc_replay looks
     * for them; a caller of alloc_replay_begin sets it only where its trace has some. */
    bool markers;
} alloc_replay_opts_t;

typedef struct alloc_replay_result {
    uint64_t events; /* events replayed */
    uint64_t allocs, frees;
    uint64_t bad_frees;    /* frees of unknown ids (ignored) */
    size_t peak_requested; /* peak of requested bytes live */
    size_t peak_allocated; /* peak of rounded bytes live (PyTorch's allocated_bytes) */
    size_t peak_reserved;
    double utilization;     /* peak_allocated / peak_reserved (1.0 if nothing reserved), as in
                               gpumem report */
    uint64_t device_allocs; /* map + seg_alloc calls */
    uint64_t device_frees;  /* unmap + seg_free calls */
    uint64_t driver_calls;  /* every backend call (reserve, create, map, set_access, ...) */
    uint64_t cache_hits, cache_misses;
    int64_t oom_index; /* index of the first event that failed with OOM, -1 if none */
    uint64_t num_ooms;
    alloc_oom_info_t oom; /* forensics of the first OOM */
    alloc_mem_counters_t backend; /* the in-memory backend's calls and bytes, per call */
    double seconds;       /* wall time of the replay loop */
    uint64_t other_allocs; /* `ax` allocations replayed outside the allocator (pytorch presets) */
    size_t peak_other;     /* peak bytes of those, live at once */
    uint64_t held_frees;   /* frees held back by record_stream */
    bool stopped;          /* keep_going said stop: the figures are those of that moment */
} alloc_replay_result_t;

/* The events' allocations numbered by slot, for alloc_replay_opts_t.slots: a slot is given at an
 * allocation (the id's own while it is live, else the one freed last, else a new one) and free
 * again at the id's free, so there are as many slots as allocations live at once at most.
 * (*slots)[i] is event i's slot: an allocation's, a free's and a record_stream's of a live id;
 * ALLOC_NO_SLOT for anything else. *slots is malloc'ed (caller frees). ALLOC_OK, or
 * ALLOC_ERR_NOMEM (then *slots is NULL). */
#define ALLOC_NO_SLOT UINT32_MAX
int alloc_trace_slots(const alloc_trace_event_t *events, size_t n, uint32_t **slots,
                      uint32_t *nslots);

/* Replay `n` events on a fresh allocator over a fresh in-memory backend with config cfg (NULL =
 * defaults). Deterministic: same input, same result (except seconds), with or without slots. */
int alloc_replay(const alloc_config_t *cfg, const alloc_replay_opts_t *opts,
                 const alloc_trace_event_t *events, size_t n, alloc_replay_result_t *out, char *err,
                 size_t errlen);

/* The same replay fed its trace a piece at a time, for a caller that makes the trace as it goes
 * instead of holding all of it at once (gpumem advise: a rewritten model's trace is 32 bytes an
 * event, 530 MB for 16 M events): alloc_replay_begin, alloc_replay_feed for each piece in
 * order, alloc_replay_end. The result is alloc_replay's of the pieces joined, where the `fc`
 * events (ALLOC_TR_FREE_DONE) of the whole trace are given to alloc_replay_begin: a free is held
 * when its id has an `fc` after it, which a piece cannot see ahead. fc: (id, index of the `fc`
 * event in the whole trace), in any order; nfc 0 as a trace without `fc` lines (then held
 * frees follow stream_lag). opts.slots, when set, number the whole trace. */
typedef struct alloc_replay_run alloc_replay_run_t;
typedef struct alloc_trace_fc {
    uint64_t id, at;
} alloc_trace_fc_t;
/* ALLOC_OK and *run, or an error (err says what; nothing to end) */
int alloc_replay_begin(const alloc_config_t *cfg, const alloc_replay_opts_t *opts,
                       const alloc_trace_fc_t *fc, size_t nfc, alloc_replay_run_t **run, char *err,
                       size_t errlen);
/* The next n events. false once the replay has stopped (an OOM without continue_after_oom,
 * keep_going's stop, an error): what is fed after that is not replayed. */
bool alloc_replay_feed(alloc_replay_run_t *run, const alloc_trace_event_t *events, size_t n);
/* Fills *out (events: those fed up to the stop), frees the run; alloc_replay's return. */
int alloc_replay_end(alloc_replay_run_t *run, alloc_replay_result_t *out, char *err,
                     size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* GPUMEM_ALLOC_H */
