/* rec_unwind.h — a per-thread memo of stack walks, so that a stack seen before costs a few
 * loads instead of libunwind's walk (internal to the recorder's application side).
 *
 * Why. With 16 frames, libunwind's unw_backtrace is ~1,650 of the ~1,860 instructions an event
 * costs (its trace cache: ~80 per frame). Programs allocate from the same few places again and
 * again, at the same depth of the same stack: the walk's answer is then the same.
 *
 * What a walk depends on. An unwinder on x86-64 computes each caller's frame from the frame it
 * is in: the CFA from the stack pointer (or the frame pointer, rbp) by the rule of the frame's
 * code address, the return address (the caller's code address) read from a stack slot, and
 * rbp read from a stack slot where the frame saved it. The recorder's capture function keeps a
 * frame pointer, so its frame's address (the key) fixes the stack pointer of the entry point
 * that called it, and the two words above it are that entry point's rbp and return address.
 * From there on the walk is decided by the words it reads: each frame's return-address slot
 * and rbp slot. The memo stores, for a key, those slots' addresses and values, found with
 * libunwind's cursor (unw_get_save_loc), and the frames the walk gave. A later event with the
 * same key and every slot still holding its value walks the same frames: the memo gives them
 * without walking.
 *
 * Safety.
 *   - A memo is filled only after its key was seen twice in a row in its way (a stack that
 *     never repeats keeps costing one walk, as before, plus a key compare), and only when the
 *     cursor's frames equal unw_backtrace's for the same event.
 *   - Every slot lies at or above the key on this thread's stack (the memo is per thread), in
 *     frames that are live while the capture runs: reading it is reading the live stack. A walk
 *     that reads anything else (a register, a signal frame, a slot below the key) is not
 *     memoized.
 *   - A key may have several stacks (an entry point called from two places of one function, or
 *     one function reached from several outer paths at the same stack pointer): a set of ways
 *     holds up to REC_UNW_WAYS of them. A set whose stacks keep changing spends its credit
 *     (a fill costs one, an answer earns one) and stops filling: at most a few extra walks.
 * Not covered: frames whose CFA rule reads memory through an expression (DW_CFA_def_cfa_
 * expression, e.g. gcc's stack realignment with a DRAP register) rather than a register plus
 * an offset; a code object unloaded and another loaded at the same address with the same
 * return addresses in the same slots. Both would need the same words at the same places.
 */
#ifndef GPUMEM_SNAPSHOT_REC_UNWIND_H
#define GPUMEM_SNAPSHOT_REC_UNWIND_H

#include <stddef.h>
#include <stdint.h>

/* Entries per thread: a set chosen by the key, its ways tried in turn. One key may have several
 * stacks (an entry point called from two places of one function at one depth has one key). */
#define REC_UNW_SETS 32
#define REC_UNW_WAYS 8

enum { REC_UNW_EMPTY = 0, REC_UNW_SEEN, REC_UNW_FILLED, REC_UNW_OFF };

typedef struct rec_unw_slot {
    uint64_t addr, val;
} rec_unw_slot;

typedef struct rec_unw_ent {
    uint64_t fp, ra; /* key: the capture's frame address and its return address */
    uint32_t state;  /* REC_UNW_* */
    uint32_t hits;   /* answers given (the entry a new key replaces has the fewest) */
    uint32_t nslots, npcs;
    uint32_t id, id_gen; /* the stack's id in the recording of generation id_gen (rec_g.gen), 0:
                            none yet (the capture's to fill and read) */
    rec_unw_slot *slots; /* the words the walk read (FILLED: owned, one allocation with pcs) */
    void **pcs;          /* frames of the walk, innermost caller first */
} rec_unw_ent;

typedef struct rec_unw_set {
    rec_unw_ent way[REC_UNW_WAYS];
    int32_t credit; /* fills left (see Safety): a fill costs one, an answer earns one */
} rec_unw_set;

typedef struct rec_unw {
    int frames;                  /* rec_g.stacks the block was made for */
    uint64_t hits, fills, walks; /* for tests and the benchmark's notes */
    rec_unw_set set[REC_UNW_SETS];
    rec_unw_slot *work; /* a fill's slots before they are kept: 2 * (frames + 1) (one
                           allocation with the block) */
} rec_unw;

static inline rec_unw_set *rec_unw_set_of(rec_unw *m, uint64_t fp, uint64_t ra)
{
    uint64_t h = (fp ^ (ra * 0x9E3779B97F4A7C15ull)) * 0xff51afd7ed558ccdull;
    return &m->set[(h >> 40) & (REC_UNW_SETS - 1)];
}

/* The calling thread's memo (NULL until its first walk with stacks on). */
extern __thread rec_unw *rec_unw_tls __attribute__((tls_model("initial-exec")));

/* The memo's frames for this key and this stack, or NULL (then walk, and call rec_unw_learn).
 * Slots are checked innermost first: another stack of the same key differs within a few. */
static inline __attribute__((always_inline)) rec_unw_ent *rec_unw_lookup(rec_unw *m, uint64_t fp,
                                                                         uint64_t ra)
{
    rec_unw_set *set = rec_unw_set_of(m, fp, ra);
    for (int w = 0; w < REC_UNW_WAYS; w++) {
        rec_unw_ent *e = &set->way[w];
        if (e->state != REC_UNW_FILLED || e->fp != fp || e->ra != ra) continue;
        const rec_unw_slot *s = e->slots, *end = s + e->nslots;
        while (s < end && *(const volatile uint64_t *)(uintptr_t)s->addr == s->val)
            s++;
        if (s < end) continue;
        if (set->credit < 64) set->credit++; /* answers earn back fills */
        e->hits++;
        return e;
    }
    return NULL;
}

/* After a walk that the memo could not answer, called directly from the capture function
 * (which keeps a frame pointer) with its frame address fp, its return address ra (fp[1]) and
 * the walk's frames from the entry point's caller on (pcs[0]). *mp is the thread's memo (made
 * on the first call, for `frames` frames; freed at the thread's exit). Notes the key, or fills
 * its entry when the key repeats (see Safety). x86-64 only; elsewhere it does nothing. */
void rec_unw_learn(rec_unw **mp, int frames, uint64_t fp, uint64_t ra, void *const *pcs, int n);

#endif
