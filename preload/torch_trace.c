/*
 * torch_trace.c — where each of PyTorch's allocator trace entries happened in the recording.
 *
 * `gpumem record` leaves PyTorch's allocator in place and merges PyTorch's memory history into the
 * database at the end (snapshot/formats/gm_torch.c). The history's times are PyTorch's
 * approximate clock, which drifts against the recording's by up to milliseconds over a run: an
 * entry placed by time can land in the wrong module's range (a checkpointed block's outputs in
 * the next block's backward), and advise then models the wrong tensors.
 *
 * PyTorch calls every attached AllocatorTraceTracker with each entry as it records it
 * (CUDACachingAllocator's record_trace: the callbacks first, then the history's ring, in one
 * call; so the i-th entry seen here is the history's i-th). The tracker (preload/
 * torch_trace.cpp, a C++ library built against the installed wheel's headers, loaded by
 * preload/python/gpumem/_torch.py) hands each entry to gpumem_torch_trace_note, which keeps
 * (action, device, addr, size, the recorder's last seq, the recorder's time). At each dump
 * _torch.py copies them (gpumem_torch_trace_copy) into the pickle beside PyTorch's snapshot,
 * and the merge places each history entry it can pair with one of these right after the events
 * recorded before it: no clock involved.
 *
 * PyTorch calls the trackers holding its per-device allocator lock, with or without the GIL
 * (autograd's device threads allocate without it): this file takes only its own mutex and
 * calls nothing that could call back into PyTorch or Python. The store is a ring of
 * GPUMEM_TORCH_MAX_ENTRIES per device seen (PyTorch's history keeps that many per device: 2,000,000
 * by default), growing by doubling; once full, the oldest entries are overwritten, as PyTorch's
 * ring does with its own.
 */
#include "preload/gm_internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef GM_HAVE_REC
#include "snapshot/record/rec.h"
#endif

/* One entry; the layout gm_torch.c reads (GM_TT_* there; little-endian, 40 bytes). */
typedef struct tt_entry {
    uint64_t addr, size;
    uint64_t seq;   /* the recorder's last claimed seq when PyTorch recorded the entry */
    uint64_t t_ns;  /* the recorder's clock (ns since the recording started) */
    int32_t action; /* c10::CachingDeviceAllocator::TraceEntry::Action */
    int32_t device;
} tt_entry;
_Static_assert(sizeof(tt_entry) == 40, "tt_entry: the 40-byte layout gm_torch.c reads");

static struct {
    pthread_mutex_t lock;
    tt_entry *ring;
    size_t cap, max, head, n; /* head: the next slot; n: entries held (<= cap) */
    size_t per_device;        /* GPUMEM_TORCH_MAX_ENTRIES: max is this times the devices seen */
    int ndev;
    uint64_t seen;            /* entries noted since the start, kept or not */
} tt = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t tt_max(void)
{
    const char *e = getenv("GPUMEM_TORCH_MAX_ENTRIES");
    char *end;
    unsigned long long v = e && *e ? strtoull(e, &end, 10) : 0;
    if (!e || !*e || *end || v == 0 || v > (1ull << 32)) return 2000000;
    return (size_t)v;
}

/* Grows the ring (unwrapped into the new array) up to max; 0 when there is room. */
static int tt_grow(void)
{
    if (tt.cap >= tt.max) return -1;
    size_t cap = tt.cap ? tt.cap * 2 : 4096;
    if (cap > tt.max) cap = tt.max;
    tt_entry *r = malloc(cap * sizeof *r);
    if (!r) return -1;
    /* held entries are in order from (head - n) mod cap; not full yet, so that is slot 0 */
    if (tt.n) memcpy(r, tt.ring, tt.n * sizeof *r);
    free(tt.ring);
    tt.ring = r;
    tt.cap = cap;
    tt.head = tt.n;
    return 0;
}

GM_EXPORT void gpumem_torch_trace_note(int action, int device, uint64_t addr, uint64_t size)
{
    /* the history's actions only (alloc .. segment_unmap: 0-6), so that this ring, as long per
     * device as PyTorch's, holds at least what PyTorch's still holds (its snapshot and OOM
     * entries take room in its ring, not here) */
    if (action < 0 || action > 6 || device < 0) return;
    tt_entry e = {.addr = addr, .size = size, .action = action, .device = device};
#ifdef GM_HAVE_REC
    /* seq before time: every event at or below seq was claimed before this moment */
    e.seq = rec_last_seq();
    e.t_ns = rec_time_ns();
#endif
    pthread_mutex_lock(&tt.lock);
    tt.seen++;
    if (device >= tt.ndev) { /* PyTorch keeps a ring per device: room for one more device's */
        if (!tt.per_device) tt.per_device = tt_max();
        tt.ndev = device + 1;
        tt.max = tt.per_device * (size_t)tt.ndev;
    }
    if (tt.n == tt.cap && tt_grow() != 0 && !tt.cap) {
        pthread_mutex_unlock(&tt.lock); /* no memory for even the first slots: nothing kept */
        return;
    }
    tt.ring[tt.head] = e;
    tt.head = tt.head + 1 == tt.cap ? 0 : tt.head + 1;
    if (tt.n < tt.cap) tt.n++;
    pthread_mutex_unlock(&tt.lock);
}

/* Copies the held entries, oldest first, into dst (room for cap bytes); returns the bytes they
 * take (all of them: call with cap 0 to size dst, then again). *seen: entries noted in all. */
GM_EXPORT size_t gpumem_torch_trace_copy(void *dst, size_t cap, uint64_t *seen)
{
    pthread_mutex_lock(&tt.lock);
    size_t need = tt.n * sizeof(tt_entry);
    if (seen) *seen = tt.seen;
    if (dst && cap >= need && tt.n) {
        size_t first = (tt.head + tt.cap - tt.n) % tt.cap, k = tt.cap - first < tt.n ? tt.cap - first : tt.n;
        memcpy(dst, tt.ring + first, k * sizeof(tt_entry));
        memcpy((char *)dst + k * sizeof(tt_entry), tt.ring, (tt.n - k) * sizeof(tt_entry));
    }
    pthread_mutex_unlock(&tt.lock);
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
