/* rec_unwind.c — filling the per-thread memo of stack walks (see rec_unwind.h for the design
 * and what makes a memoized walk the walk libunwind would do). */
#include "snapshot/record/rec_unwind.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#define CREDIT 8 /* a set's fills before its first answer (rec_unw_set.credit) */

__thread rec_unw *rec_unw_tls __attribute__((tls_model("initial-exec")));

static pthread_key_t unw_key;
static pthread_once_t unw_once = PTHREAD_ONCE_INIT;
static int unw_key_ok;

static void unw_free(void *p)
{
    rec_unw *m = p;
    if (rec_unw_tls == m) rec_unw_tls = NULL;
    for (int i = 0; m && i < REC_UNW_SETS; i++)
        for (int w = 0; w < REC_UNW_WAYS; w++)
            free(m->set[i].way[w].slots);
    free(m);
}
static void unw_make_key(void)
{
    unw_key_ok = pthread_key_create(&unw_key, unw_free) == 0;
}

/* two per frame: the callers' and the entry point's own */
static size_t slots_max(int frames)
{
    return 2 * (size_t)(frames + 1);
}

/* The thread's memo for `frames` frames (~13 KB; each filled entry's words are allocated as
 * it fills: ~16 bytes per frame and word read). */
static rec_unw *unw_block(rec_unw **mp, int frames)
{
    if (*mp && (*mp)->frames == frames) return *mp;
    pthread_once(&unw_once, unw_make_key);
    if (!unw_key_ok) return NULL; /* nothing would free it at the thread's exit */
    rec_unw *m = calloc(1, sizeof *m + slots_max(frames) * sizeof(rec_unw_slot));
    if (!m) return NULL;
    m->frames = frames;
    m->work = (rec_unw_slot *)(m + 1);
    for (int i = 0; i < REC_UNW_SETS; i++)
        m->set[i].credit = CREDIT;
    unw_free(*mp);
    *mp = m;
    pthread_setspecific(unw_key, m);
    return m;
}

#if defined(__x86_64__)
/* A slot the walk read, for e: a word on the stack at or above fp. */
static int unw_slot(rec_unw_ent *e, uint32_t *ns, const unw_save_loc_t *loc, uint64_t fp)
{
    if (loc->type != UNW_SLT_MEMORY || loc->u.addr < fp || (loc->u.addr & 7)) return -1;
    e->slots[(*ns)++] = (rec_unw_slot){loc->u.addr, *(const uint64_t *)(uintptr_t)loc->u.addr};
    return 0;
}

/* The cursor's walk from the capture function's caller, checked against the walk the capture
 * did: 0 and e filled, or -1 (this stack is not memoized).
 * Which words the walk depends on: each frame's return address (the next frame's code address,
 * whose unwinding rule it selects), and the rbp of each frame whose CFA is its rbp + 16 (a
 * frame-pointer frame, gcc's and clang's layout): the others' CFA is their stack pointer plus
 * a constant of their code address, and their rbp (in code without frame pointers, any value
 * the program keeps there) does not move the walk. */
static __attribute__((noinline)) int unw_fill(rec_unw *m, rec_unw_ent *e, uint64_t fp, uint64_t ra,
                                              void *const *pcs, int n)
{
    const int frames = m->frames;
    rec_unw_ent tmp = {.slots = m->work};
    unw_context_t uc;
    unw_cursor_t c;
    unw_word_t sp, ip, bp;
    unw_save_loc_t ip_loc, bp_loc;
    if (unw_getcontext(&uc) != 0 || unw_init_local(&c, &uc) != 0) return -1;
    /* up to the entry point that called the capture: its stack pointer is fp + 16 (the
     * capture's saved rbp and return address above its frame address) */
    for (int up = 0;; up++) {
        if (up > 4 || unw_step(&c) <= 0 || unw_get_reg(&c, UNW_REG_SP, &sp) != 0) return -1;
        if (sp == fp + 16) break;
        if (sp > fp + 16) return -1;
    }
    uint32_t ns = 0;
    if (unw_get_reg(&c, UNW_REG_IP, &ip) != 0 || ip != ra ||
        unw_get_save_loc(&c, UNW_X86_64_RIP, &ip_loc) != 0 || ip_loc.type != UNW_SLT_MEMORY ||
        ip_loc.u.addr != fp + 8 || unw_slot(&tmp, &ns, &ip_loc, fp) != 0 ||
        unw_get_reg(&c, UNW_X86_64_RBP, &bp) != 0 ||
        unw_get_save_loc(&c, UNW_X86_64_RBP, &bp_loc) != 0)
        return -1;
    int k = 0;
    for (; k < frames; k++) {
        int r = unw_step(&c);
        if (r < 0) return -1;
        if (r == 0) break;
        if (unw_get_reg(&c, UNW_REG_SP, &sp) != 0) return -1;
        /* the frame before: its CFA (this stack pointer) from its rbp? then that rbp counts */
        if (sp == bp + 16 && unw_slot(&tmp, &ns, &bp_loc, fp) != 0) return -1;
        if (unw_is_signal_frame(&c) > 0) return -1;
        if (unw_get_reg(&c, UNW_REG_IP, &ip) != 0 || k >= n || (void *)(uintptr_t)ip != pcs[k])
            return -1;
        if (unw_get_save_loc(&c, UNW_X86_64_RIP, &ip_loc) != 0 ||
            unw_slot(&tmp, &ns, &ip_loc, fp) != 0 || unw_get_reg(&c, UNW_X86_64_RBP, &bp) != 0 ||
            unw_get_save_loc(&c, UNW_X86_64_RBP, &bp_loc) != 0)
            return -1;
    }
    /* the same frames as the walk, no more (a walk cut by `frames` ends here too) */
    if (k != n) return -1;
    rec_unw_slot *keep = malloc(ns * sizeof(rec_unw_slot) + (size_t)n * sizeof(void *));
    if (!keep) return -1;
    memcpy(keep, tmp.slots, ns * sizeof(rec_unw_slot));
    free(e->slots);
    e->slots = keep;
    e->pcs = (void **)(keep + ns);
    memcpy(e->pcs, pcs, (size_t)n * sizeof(void *));
    e->nslots = ns;
    e->npcs = (uint32_t)n;
    e->id = 0;
    return 0;
}

void rec_unw_learn(rec_unw **mp, int frames, uint64_t fp, uint64_t ra, void *const *pcs, int n)
{
    if (frames <= 0 || n < 1 || n > frames) return;
    rec_unw *m = unw_block(mp, frames);
    if (!m) return;
    m->walks++;
    rec_unw_set *set = rec_unw_set_of(m, fp, ra);
    /* the key noted before, and not yet filled: fill it (the key repeats) */
    rec_unw_ent *e = NULL;
    for (int w = 0; w < REC_UNW_WAYS && !e; w++)
        if (set->way[w].state == REC_UNW_SEEN && set->way[w].fp == fp && set->way[w].ra == ra)
            e = &set->way[w];
    if (!e) {
        /* note the key in the way that matters least: empty, given up, only noted, then the
         * memo that answered least (its count halves for the others: old answers fade) */
        uint64_t least = UINT64_MAX;
        for (int w = 0; w < REC_UNW_WAYS; w++) {
            rec_unw_ent *x = &set->way[w];
            uint64_t rank = x->state == REC_UNW_EMPTY  ? 0
                            : x->state == REC_UNW_OFF  ? 1
                            : x->state == REC_UNW_SEEN ? 2
                                                       : 3 + (uint64_t)x->hits;
            if (rank < least) least = rank, e = x;
        }
        for (int w = 0; w < REC_UNW_WAYS; w++)
            set->way[w].hits /= 2;
        free(e->slots);
        *e = (rec_unw_ent){.fp = fp, .ra = ra, .state = REC_UNW_SEEN};
        return;
    }
    if (set->credit <= 0) return; /* its stacks keep changing: walks only */
    set->credit--;
    if (unw_fill(m, e, fp, ra, pcs, n) != 0) {
        e->state = REC_UNW_OFF;
        return;
    }
    e->state = REC_UNW_FILLED;
    m->fills++;
}
#else
void rec_unw_learn(rec_unw **mp, int frames, uint64_t fp, uint64_t ra, void *const *pcs, int n)
{
    (void)mp, (void)frames, (void)fp, (void)ra, (void)pcs, (void)n;
}
#endif
