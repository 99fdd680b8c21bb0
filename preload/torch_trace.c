/*
 * torch_trace.c — PyTorch's allocator trace entries, each where it happened in the recording.
 *
 * `gpumem record` leaves PyTorch's allocator in place and merges its trace (every allocation,
 * free and segment PyTorch's caching allocator makes) into the database at the end
 * (snapshot/formats/gm_torch.c). PyTorch calls every attached AllocatorTraceTracker with each
 * entry as it makes it (CUDACachingAllocator's record_trace: the callbacks first, then its
 * memory history's ring, when that is on). The tracker (preload/torch_trace.cpp, a C++ library
 * built against the installed wheel's headers, loaded by preload/python/gpumem/_torch.py) hands
 * each entry to gpumem_torch_trace_entry, which keeps (action, device, addr, size, stream,
 * pool, the recorder's last seq, the recorder's time). At each dump _torch.py copies them
 * (gpumem_torch_trace_copy) into the pickle beside PyTorch's snapshot.
 *
 * These entries are the trace: PyTorch's own history stays off (_torch.py), so the merge takes
 * every entry from here and places it right after the events recorded before it (no clock
 * involved: PyTorch's approximate clock drifts against the recording's by up to milliseconds
 * over a run, and an entry placed by time can land in the wrong module's range). The history
 * cost a recorded step more than all of this (tests/bench/README.md, torch.rec_vs_off): a
 * 136-byte entry per event in a vector that grows by doubling to its cap. With
 * GPUMEM_TORCH_PYTORCH_HISTORY=1 it runs too, and the merge pairs its entries with these one for
 * one (the i-th entry seen here is the history's i-th), as it did before.
 *
 * PyTorch calls the trackers holding its per-device allocator lock, with or without the GIL
 * (autograd's device threads allocate without it): this file takes only its own lock (a spin lock,
 * gm_spin: one exchange an entry, where a mutex cost more than the entry's store) and calls
 * nothing that could call back into PyTorch or Python. The store is a ring of
 * GPUMEM_TORCH_MAX_ENTRIES per device seen (2,000,000 by default, as PyTorch's history keeps),
 * growing by doubling (mremap: nothing copied); once full, the oldest entries are overwritten,
 * and the merge says the trace was truncated (entries seen against entries kept).
 *
 * Stacks. Each allocation entry also gets the allocating thread's Python frames, read here
 * (gm_python_frames_now: the interpreter's frame chain read in place, a few loads a frame),
 * in place of PyTorch's CapturedTraceback::gather (a heap object per allocation). Stacks are
 * interned: an entry holds the index (from 1) of its distinct frame sequence, and the sequences
 * are copied out beside the entries (gpumem_torch_trace_stacks). A stack read from the frame
 * reader's chain memo comes with the chain's tag (python_nogil.c: the same tag, the same frames),
 * and a tag seen before gives the stack's index at once. At most TT_MAX_FRAMES frames are
 * kept over all distinct stacks; past that, new stacks are not kept (the entry's stack is 0) and
 * counted.
 */
#include "preload/gm_internal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "snapshot/record/rec_ring.h" /* rec_mem_advise_huge */
#include "snapshot/record/rec_settings.h" /* rec_env_num */
#include "snapshot/record/bytemap.h" /* bytemap_rekey */
#include "snapshot/record/u64map.h"

#ifdef GM_HAVE_REC
#include "snapshot/record/rec.h"
#else /* no recorder: no Python frames either (gm_python_frames_now answers 0) */
typedef struct rec_pyframe { uint32_t function, file, line; } rec_pyframe;
#define REC_MAX_PY_FRAMES 64
#endif

/* One entry; the layout gm_torch.c reads (tt_rec there; little-endian, 72 bytes). */
typedef struct tt_entry {
    uint64_t addr, size;
    union {
        struct {
            uint64_t seq;  /* the recorder's last claimed seq when PyTorch recorded the entry */
            uint64_t t_ns; /* the recorder's clock (ns since the recording started); in the ring
                            * its raw ticks, turned into ns as they are copied out */
        };
        uint64_t seq_ticks[2]; /* both, as rec_last_seq_ticks writes them */
    };
    uint64_t stream;  /* the CUDA stream's handle (0: the legacy default stream) */
    uint64_t pool[2]; /* PyTorch's MempoolId_t: (0, 0) the device's default pool, else a private
                       * one (a CUDA graph's, a torch.cuda.MemPool) */
    int32_t action;   /* c10::CachingDeviceAllocator::TraceEntry::Action */
    int32_t device;
    union {
        struct {
            uint32_t stack; /* allocations and OOMs: the index (from 1) of its Python stack;
                             * 0: none */
            uint32_t flags; /* TT_F_CACHE; 0 otherwise (a pad before 2026-12-07, 0) */
        };
        uint64_t tag; /* tt_entry_stack's image of the entry only: the chain's tag of its stack */
    };
} tt_entry;
_Static_assert(sizeof(tt_entry) == 72, "tt_entry: the 72-byte layout gm_torch.c reads");

/* The actions kept: alloc .. segment_unmap (0-6), and oom (8: addr is the device's free bytes,
 * size the request), which the snapshot at an OOM shows; not snapshot (7), which only marks
 * PyTorch's own snapshots, nor annotate (9). TT_KEPT: one bit each, tested in one shift. */
enum { TT_ACTION_OOM = 8 };
/* tt_entry.flags: a free (actions 1, 2) PyTorch made while gpumem's hooks emptied one of its
 * caches at exit on this thread (gm_torch_cache_emptying: its cuBLAS workspaces), merged as
 * REC_F_TORCH_CACHE (gm_torch.c) */
#define TT_F_CACHE 1u
#define TT_KEPT (0x7Fu | 1u << TT_ACTION_OOM)

/* The distinct Python stacks: their frames in one array (rec_pyframe: function and file as
 * recorder string ids, and the line), a stack being (first frame, count); found by the hash of
 * its frames and told apart by the frames themselves (two stacks of one hash: the second takes
 * the next key of the hash's chain, bytemap_rekey). */
#define TT_MAX_FRAMES (1u << 24)
#define TT_TAG_SLOTS 1024u
typedef struct tt_stack {
    uint32_t first, n;
} tt_stack;

static struct {
    gm_spin lock;
    tt_entry *ring;
    size_t cap, max, head, n; /* head: the next slot; n: entries held (<= cap) */
    size_t grow_at;           /* n at which the ring grows (cap while below max, else never:
                               * tt_grow_at); 0 before the first slot */
    size_t per_device;        /* GPUMEM_TORCH_MAX_ENTRIES: max is this times the devices seen */
    int ndev;
    uint64_t seen;            /* entries noted since the start, kept or not */
    tt_stack *stacks;         /* by index - 1 */
    size_t nstacks, capstacks;
    u64map by_hash;           /* frames_hash (or a later key of its chain) -> stack index */
    rec_pyframe *frames;
    size_t nframes, capframes;
    uint64_t stacks_lost;     /* allocations whose new stack found no room */
    struct {
        uint64_t tag;
        uint32_t stack;
    } by_tag[TT_TAG_SLOTS]; /* stack index by the chain memo's tag, direct mapped */
} tt;

/* GPUMEM_TORCH_MAX_ENTRIES, checked with the other settings before gpumem started */
static size_t tt_max(void)
{
    return (size_t)rec_env_num("GPUMEM_TORCH_MAX_ENTRIES", 2000000, 1, 1L << 32, NULL, NULL, 0);
}

/* Reverses slots [a, b) of the ring. */
static void tt_reverse(size_t a, size_t b)
{
    while (b > a + 1) {
        tt_entry t = tt.ring[a];
        tt.ring[a++] = tt.ring[--b];
        tt.ring[b] = t;
    }
}

/* Grows the ring up to max; 0 when there is room. It is mapped memory moved with mremap: the
 * pages written stay where they are, none copied (a doubling copied every entry and faulted in
 * its new pages). A ring below its cap is full only before it wraps (entries in slots 0..n-1,
 * the oldest first); one that wrapped at its cap and grows because a device came (max raised)
 * holds its oldest at head: it is rotated first (three reversals, in place, once a device), so
 * that the oldest is in slot 0 and the next entry goes after the newest. */
static inline void tt_grow_at(void)
{
    tt.grow_at = tt.cap < tt.max ? tt.cap : SIZE_MAX;
}

static int tt_grow(void)
{
    if (tt.cap >= tt.max) return tt_grow_at(), -1;
    if (tt.n == tt.cap && tt.head != 0) {
        tt_reverse(0, tt.head);
        tt_reverse(tt.head, tt.cap);
        tt_reverse(0, tt.cap);
        tt.head = 0;
    }
    size_t cap = tt.cap ? tt.cap * 2 : 4096;
    if (cap > tt.max) cap = tt.max;
    void *r = tt.ring ? mremap(tt.ring, tt.cap * sizeof *tt.ring, cap * sizeof *tt.ring, MREMAP_MAYMOVE)
                      : mmap(NULL, cap * sizeof *tt.ring, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return -1;
    rec_mem_advise_huge(r, cap * sizeof *tt.ring); /* written on PyTorch's allocating threads */
    tt.ring = r;
    tt.cap = cap;
    tt.head = tt.n;
    tt_grow_at();
    return 0;
}

static uint64_t frames_hash(const rec_pyframe *f, int n)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h = (h ^ f[i].function) * 1099511628211ull;
        h = (h ^ f[i].file) * 1099511628211ull;
        h = (h ^ f[i].line) * 1099511628211ull;
    }
    h = GM_NARROW_HASH(h); /* the test hook (u64map.h) */
    return h == U64MAP_EMPTY ? h - 1 : h;
}

/* The index of frames f[0..n) (hash h) among the distinct stacks, added when new; 0 when it
 * cannot be kept. Under tt.lock. */
static uint32_t stack_index(const rec_pyframe *f, int n, uint64_t h)
{
    for (const uint64_t *v; (v = u64map_get(&tt.by_hash, h)) != NULL; h = bytemap_rekey(h)) {
        const tt_stack *st = &tt.stacks[*v - 1];
        if (st->n == (uint32_t)n && !memcmp(tt.frames + st->first, f, (size_t)n * sizeof *f)) return (uint32_t)*v;
        /* another stack of the same key: the chain's next key */
    }
    if (tt.nframes + (size_t)n > TT_MAX_FRAMES || tt.nstacks >= UINT32_MAX - 1) goto lost;
    if (tt.nstacks == tt.capstacks) {
        size_t cap = tt.capstacks ? tt.capstacks * 2 : 256;
        tt_stack *r = realloc(tt.stacks, cap * sizeof *r);
        if (!r) goto lost;
        tt.stacks = r, tt.capstacks = cap;
    }
    if (tt.nframes + (size_t)n > tt.capframes) {
        size_t cap = tt.capframes ? tt.capframes : 4096;
        while (cap < tt.nframes + (size_t)n) cap *= 2;
        rec_pyframe *r = realloc(tt.frames, cap * sizeof *r);
        if (!r) goto lost;
        tt.frames = r, tt.capframes = cap;
    }
    if (u64map_put(&tt.by_hash, h, tt.nstacks + 1) != 0) goto lost;
    memcpy(tt.frames + tt.nframes, f, (size_t)n * sizeof *f);
    tt.stacks[tt.nstacks] = (tt_stack){.first = (uint32_t)tt.nframes, .n = (uint32_t)n};
    tt.nframes += (size_t)n;
    return (uint32_t)++tt.nstacks;
lost:
    tt.stacks_lost++;
    return 0;
}

/* Room for one more device's entries (PyTorch keeps a ring per device) and the ring grown when
 * full and below its cap: tt_claim's slow path, under tt.lock. -1 when not even the first slots
 * could be mapped (nothing kept); once at the cap, the oldest entries are overwritten. */
static __attribute__((noinline)) int tt_room(int device)
{
    if (device >= tt.ndev) {
        if (!tt.per_device) tt.per_device = tt_max();
        tt.ndev = device + 1;
        tt.max = tt.per_device * (size_t)tt.ndev;
        tt_grow_at();
    }
    return tt.n == tt.cap && tt_grow() != 0 && !tt.cap ? -1 : 0;
}

/* The next slot, taken (the caller fills it), with room already made; under tt.lock. */
static inline __attribute__((always_inline)) tt_entry *tt_take(void)
{
    tt_entry *e = &tt.ring[tt.head];
    tt.head = tt.head + 1 == tt.cap ? 0 : tt.head + 1;
    if (tt.n < tt.cap) tt.n++;
    return e;
}

/* The slot of the next entry, counted and taken (the caller fills it), under tt.lock; NULL when
 * there is none. One test on the way: a device seen and a ring not due to grow. */
static inline __attribute__((always_inline)) tt_entry *tt_claim(int device)
{
    tt.seen++;
    if (__builtin_expect(device >= tt.ndev || tt.n == tt.grow_at, 0) && tt_room(device) != 0) return NULL;
    return tt_take();
}

static inline __attribute__((always_inline)) void tt_fill(tt_entry *e, int action, int device, uint64_t addr,
                                                          uint64_t size, uint64_t stream, uint64_t pool_a,
                                                          uint64_t pool_b, uint32_t stack)
{
    e->addr = addr, e->size = size, e->stream = stream;
    e->pool[0] = pool_a, e->pool[1] = pool_b, e->action = action, e->device = device;
    e->stack = stack, e->flags = gm_torch_cache_emptying ? TT_F_CACHE : 0;
}

/* Bytes of tt_entry_stack's frame that hold nothing: the Python reader's frames lie where they did
 * (its frame 0x398 bytes, x86-64 gcc -O2). Those frames are not scrubbed, and PyTorch's
 * partly filled kernel argument structs pick up what they leave: a foreach launch's metadata
 * struct carries stale tensor addresses of PyTorch's own from an earlier launch, which the
 * reader's frames overwrite in part; 64 bytes shallower, other such words survived (two launches
 * of each later step carried one word fewer) and a tiny GPT-2 recording's seqs moved by 4
 * (tests/bench/README.md, "The trace entry's scrub bound"). */
#define TT_READER_DEPTH 64

/* The index of the stack f[0..nf) (tag: its chain's, 0 when none), under tt.lock: a memoized
 * chain's tag seen before gives its stack without hashing its frames. */
static __attribute__((noinline)) uint32_t tt_stack_of(const rec_pyframe *f, int nf, uint64_t tag)
{
    __typeof__(tt.by_tag[0]) *c = &tt.by_tag[tag & (TT_TAG_SLOTS - 1)];
    if (tag && c->tag == tag) return c->stack;
    uint32_t stack = stack_index(f, nf, frames_hash(f, nf));
    if (tag && stack) c->tag = tag, c->stack = stack;
    return stack;
}

/* The entry's slot image, built first in the frame of the function that fills the ring: the asm
 * tells the compiler that it may have changed, so every later use reads it there and the
 * arguments (the allocation's address, the stream, the pool ids) are dead from here on. No
 * register holds them across the calls below, so no callee's prologue pushes them further down
 * the stack (a deeper frame saving a callee-saved register that still held addr): the only place
 * in memory they are in is this frame, which gm_stack_scrub_trace's bound covers (gm_internal.h,
 * GM_SCRUB_TRACE_BYTES). On x86-64 the caller-saved registers are zeroed too: a dead argument
 * left in one is saved deeper only by code that saves every register (a signal's frame, the
 * dynamic linker's lazy binding), but then it is not there to save. */
#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
#define TT_NO_FRAME_POINTER __attribute__((optimize("omit-frame-pointer")))
#else
#define TT_NO_FRAME_POINTER
#endif
#define TT_IN_FRAME(x)                                                                            \
    __asm__ volatile("xor %%eax, %%eax\n\txor %%ecx, %%ecx\n\txor %%edx, %%edx\n\t"                \
                     "xor %%esi, %%esi\n\txor %%edi, %%edi\n\txor %%r8d, %%r8d\n\t"                \
                     "xor %%r9d, %%r9d\n\txor %%r10d, %%r10d\n\txor %%r11d, %%r11d"                \
                     : "+m"(x)                                                                    \
                     :                                                                            \
                     : "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11")
/* And the callee-saved ones, before a call that goes deep (the Python reader): this frame's
 * prologue saved the caller's values in them (PyTorch's, which may be device addresses) within
 * the bound; left in the registers, the reader's prologues would save them again below it. rbp
 * among them: the function is built without a frame pointer (TT_NO_FRAME_POINTER; gcc refuses
 * rbp in an asm's clobbers where it is one, as with -fno-omit-frame-pointer or a sanitizer). */
#define TT_CALLEE_SAVED_ZERO()                                                                    \
    __asm__ volatile("xor %%ebx, %%ebx\n\txor %%ebp, %%ebp\n\txor %%r12d, %%r12d\n\t"             \
                     "xor %%r13d, %%r13d\n\txor %%r14d, %%r14d\n\txor %%r15d, %%r15d"              \
                     :                                                                            \
                     :                                                                            \
                     : "rbx", "rbp", "r12", "r13", "r14", "r15")
#else
#define TT_IN_FRAME(x) __asm__ volatile("" : "+m"(x))
#define TT_CALLEE_SAVED_ZERO() ((void)0)
#define TT_NO_FRAME_POINTER
#endif

/* An allocation's or an OOM's entry (the caller tested the action and the device): with the
 * requesting thread's Python frames, read before the lock, after the seq and the clock (the
 * OOM's stack is the line that asked). The Python reader gets only its buffer: its frames (9 KiB
 * and more, deeper than the scrub's bound) hold the interpreter's words, never the entry's. The
 * entry's image is the last of the locals, at the frame's top, next to the registers the
 * prologue saved (the caller's, PyTorch's values): the scrub's 256 bytes cover both, not the
 * frames buffer below (Python's words). */
static __attribute__((noinline)) TT_NO_FRAME_POINTER void
tt_entry_stack(int action, int device, uint64_t addr, uint64_t size, uint64_t stream, uint64_t pool_a,
               uint64_t pool_b)
{
    struct {
        unsigned char depth[TT_READER_DEPTH];
        rec_pyframe f[REC_MAX_PY_FRAMES];
        tt_entry x; /* last: at the frame's top, next to the saved registers */
    } l;
    l.x = (tt_entry){.addr = addr, .size = size, .stream = stream, .pool = {pool_a, pool_b},
                     .action = action, .device = device};
    TT_IN_FRAME(l);
    TT_CALLEE_SAVED_ZERO();
#ifdef GM_HAVE_REC
    /* seq before time: every event at or below seq was claimed before this moment; the time is
     * kept in ticks, made ns when copied out (gpumem_torch_trace_copy) */
    rec_last_seq_ticks_into(l.x.seq_ticks);
#endif
    int nf = gm_python_frames_now(l.f, REC_MAX_PY_FRAMES, &l.x.tag);
    gm_spin_lock(&tt.lock);
    l.x.stack = nf > 0 ? tt_stack_of(l.f, nf, l.x.tag) : 0, l.x.flags = 0;
    tt_entry *e = tt_claim(l.x.device);
    if (e) *e = l.x; /* written in place, under the lock */
    gm_spin_unlock(&tt.lock);
}

/* An entry without a stack, the whole way: the lock waited for, room made (a device seen the
 * first time, the ring grown: mmap, mremap, the settings read), with the arguments in this
 * frame as above. */
static __attribute__((noinline)) void tt_entry_plain(int action, int device, uint64_t addr, uint64_t size,
                                                     uint64_t stream, uint64_t pool_a, uint64_t pool_b)
{
    tt_entry x = {.addr = addr,
                  .size = size,
                  .stream = stream,
                  .pool = {pool_a, pool_b},
                  .action = action,
                  .device = device,
                  .flags = gm_torch_cache_emptying ? TT_F_CACHE : 0};
    TT_IN_FRAME(x);
    gm_spin_lock(&tt.lock);
    tt_entry *e = tt_claim(x.device);
    if (e) {
        *e = x;
#ifdef GM_HAVE_REC
        rec_last_seq_ticks_into(e->seq_ticks);
#endif
    }
    gm_spin_unlock(&tt.lock);
}

/* ~435 entries a tiny GPT-2 step, 290 of them without a stack (frees, segments; most of autograd's
 * thread's). Those take the lock in one exchange, fill their slot and read the seq and the clock
 * into it last: no argument lives across a call, so none is saved and restored. The seq is read
 * under tt.lock, where nothing between the entry's arrival and the read claims one. A lock held
 * elsewhere, a device not seen yet or a ring due to grow: tt_entry_plain, the lock let go first.
 * tt_entry_stack and tt_entry_plain keep the entry's words in their own frame (TT_IN_FRAME), below
 * PyTorch's, where it later builds kernel arguments: that frame is zeroed after them
 * (gm_stack_scrub_trace, its bound GM_SCRUB_TRACE_BYTES covering their frames; gm_internal.h
 * says why). The Python reader's deeper frames hold none of them. The path above leaves none:
 * its only frame holds the caller's saved registers, its only call reads the clock.
 * preload_uses.sh's residue rows (tests/integration/py/trace_residue.py) look for the words. */
GM_EXPORT void gpumem_torch_trace_entry(int action, int device, uint64_t addr, uint64_t size, uint64_t stream,
                                        uint64_t pool_a, uint64_t pool_b)
{
    if ((unsigned)action > TT_ACTION_OOM || !(TT_KEPT >> action & 1) || device < 0) return;
    if (action == 0 || action == TT_ACTION_OOM) {
        tt_entry_stack(action, device, addr, size, stream, pool_a, pool_b);
        gm_stack_scrub_trace();
        return;
    }
    if (__builtin_expect(!gm_spin_trylock(&tt.lock), 0)) {
        tt_entry_plain(action, device, addr, size, stream, pool_a, pool_b);
        gm_stack_scrub_trace();
        return;
    }
    if (__builtin_expect(device >= tt.ndev || tt.n == tt.grow_at, 0)) {
        gm_spin_unlock(&tt.lock);
        tt_entry_plain(action, device, addr, size, stream, pool_a, pool_b);
        gm_stack_scrub_trace();
        return;
    }
    tt.seen++;
    tt_entry *e = tt_take();
    tt_fill(e, action, device, addr, size, stream, pool_a, pool_b, 0);
#ifdef GM_HAVE_REC
    rec_last_seq_ticks_into(e->seq_ticks);
#else
    e->seq = e->t_ns = 0;
#endif
    gm_spin_unlock(&tt.lock);
}

/* Fork. The entries are this recording's (seqs, times, stacks of its string ids): a forked child
 * starts with none, whether it records (its own database, where those seqs and ids mean other
 * things) or not. The lock is held across fork() (core.c's handlers), so the child finds the
 * state whole and its lock free, never one held by a thread that does not exist there. */
void gm_torch_trace_fork_prepare(void) { gm_spin_lock(&tt.lock); }
void gm_torch_trace_fork_parent(void) { gm_spin_unlock(&tt.lock); }
void gm_torch_trace_fork_child(void)
{
    if (tt.ring) munmap(tt.ring, tt.cap * sizeof *tt.ring);
    free(tt.stacks);
    free(tt.frames);
    u64map_free(&tt.by_hash);
    size_t per_device = tt.per_device; /* the setting, read once */
    memset(&tt, 0, sizeof tt);         /* the lock too: released */
    tt.per_device = per_device;
}

/* Copies the held entries, oldest first, into dst (room for cap bytes); returns the bytes they
 * take (all of them: call with cap 0 to size dst, then again). *seen: entries noted in all. */
GM_EXPORT size_t gpumem_torch_trace_copy(void *dst, size_t cap, uint64_t *seen)
{
    gm_spin_lock(&tt.lock);
    size_t need = tt.n * sizeof(tt_entry);
    if (seen) *seen = tt.seen;
    if (dst && cap >= need && tt.n) {
        size_t first = (tt.head + tt.cap - tt.n) % tt.cap, k = tt.cap - first < tt.n ? tt.cap - first : tt.n;
        memcpy(dst, tt.ring + first, k * sizeof(tt_entry));
        memcpy((char *)dst + k * sizeof(tt_entry), tt.ring, (tt.n - k) * sizeof(tt_entry));
#ifdef GM_HAVE_REC
        for (size_t i = 0; i < tt.n; i++) { /* dst: any alignment (a Python buffer) */
            char *at = (char *)dst + i * sizeof(tt_entry) + offsetof(tt_entry, t_ns);
            uint64_t t;
            memcpy(&t, at, sizeof t);
            t = rec_ticks_ns(t);
            memcpy(at, &t, sizeof t);
        }
#endif
    }
    gm_spin_unlock(&tt.lock);
    return need;
}

/* Copies the distinct stacks, in index order, into dst (room for cap bytes); returns the bytes
 * they take (call with cap 0 to size dst). Each stack: its frame count n (uint32), then n frames
 * of three uint32 (function and file: the recorder's string ids; line), innermost first;
 * little-endian. *lost: allocations whose stack was not kept. */
GM_EXPORT size_t gpumem_torch_trace_stacks(void *dst, size_t cap, uint64_t *lost)
{
    _Static_assert(sizeof(rec_pyframe) == 12, "rec_pyframe: three uint32, copied as they are");
    gm_spin_lock(&tt.lock);
    size_t need = tt.nstacks * sizeof(uint32_t) + tt.nframes * sizeof(rec_pyframe);
    if (lost) *lost = tt.stacks_lost;
    if (dst && cap >= need) {
        char *p = dst;
        for (size_t i = 0; i < tt.nstacks; i++) {
            uint32_t n = tt.stacks[i].n;
            memcpy(p, &n, sizeof n);
            memcpy(p + sizeof n, tt.frames + tt.stacks[i].first, n * sizeof(rec_pyframe));
            p += sizeof n + n * sizeof(rec_pyframe);
        }
    }
    gm_spin_unlock(&tt.lock);
    return need;
}

/* The recorder's last seq now (0: not recording): _torch.py stamps the tensor names it gives with
 * it, so that the merge places them exactly as it places the entries. */
GM_EXPORT uint64_t gpumem_torch_trace_seq(void)
{
#ifdef GM_HAVE_REC
    return rec_last_seq();
#else
    return 0;
#endif
}

/* The recorder's clock now, as an entry's t_ns (0: not recording): with the seq, a name made right
 * after an allocation is placed after that allocation's entries, which carry the same seq. */
GM_EXPORT uint64_t gpumem_torch_trace_time(void)
{
#ifdef GM_HAVE_REC
    return rec_time_ns();
#else
    return 0;
#endif
}
