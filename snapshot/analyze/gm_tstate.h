/* gm_tstate.h — an allocator's segments and blocks rebuilt from a recording's rows, as PyTorch's
 * memory snapshot lists them: what `gpumem export --format torch` writes at the moment asked
 * for, and what `gpumem frag` classifies for a PyTorch program on PyTorch's allocator. One
 * rebuilding for both, so the picture a memory_viz user sees and the one frag explains never
 * disagree on where a segment begins or which block is in it.
 *
 * Segments: a plain driver allocation stands alone; pages mapped into an expandable range join
 * the expandable segment of the same device beside them (one mapped run, as PyTorch shows it),
 * and pages unmapped out of a run cut it. Blocks: live, or freed and waiting for stream work
 * (pending), one per address (a block allocated again at an address it still holds replaces
 * the old one, which was freed unseen). The caller walks the events in seq order and calls
 * these; at the moment it wants, gm_tstate_capture copies the state.
 *
 * Lives in analyze/ (below formats/): frag's analysis and the torch export both stand on it. */
#ifndef GPUMEM_SNAPSHOT_GM_TSTATE_H
#define GPUMEM_SNAPSHOT_GM_TSTATE_H

#include <stddef.h>
#include <stdint.h>

#include "snapshot/record/u64map.h"

typedef struct gm_tseg {
    uint64_t addr, size;
    uint64_t stream;  /* as the caller gave it (a handle, or the recording's stream id) */
    uint64_t largest; /* the largest block it held so far */
    uint64_t pool;    /* 0: the default pool; else the private pool it belongs to, as the caller
                       * names it (PyTorch's pool_id, a graph capture's key) */
    int device;
    uint8_t expandable;
} gm_tseg;

typedef struct gm_tblk {
    uint64_t addr, size, requested;
    uint64_t birth, death; /* seqs; death is the caller's (0 while unknown) */
    uint32_t stack;
    uint8_t pending; /* freed, waiting for stream events (PyTorch's active_pending_free) */
    uint8_t own_segment; /* the caller's mark, kept with the block: it is a segment of its own (an
                          * allocation passed through from a program's pool or a graph node) */
} gm_tblk;

typedef struct gm_tstate {
    gm_tseg *segs; /* sorted by address */
    size_t nsegs, csegs;
    gm_tblk *blocks; /* dropped ones keep size 0 until a capture compacts them */
    size_t nblocks, cblocks;
    u64map at; /* addr -> index into blocks */
} gm_tstate;

/* [addr, addr + size) mapped (expandable) or allocated as a segment of its own, for pool (0: the
 * default; a private pool's pages never join another pool's run). 0, -1 out of memory. A size of
 * 0 is no segment. */
int gm_tstate_map(gm_tstate *s, uint64_t addr, uint64_t size, int expandable, int device, uint64_t stream,
                  uint64_t pool);
/* [addr, addr + size) given back: a whole segment, or pages cut out of a mapped run (a hole in
 * the middle leaves two runs). 0, -1 out of memory. */
int gm_tstate_unmap(gm_tstate *s, uint64_t addr, uint64_t size);
/* A block handed out (the segment it falls in remembers the largest). 0, -1 out of memory. */
int gm_tstate_block_add(gm_tstate *s, const gm_tblk *b);
/* The block held at addr (live or pending), or NULL. */
gm_tblk *gm_tstate_block_at(gm_tstate *s, uint64_t addr);
/* The block at addr is gone (its free completed). */
void gm_tstate_block_drop(gm_tstate *s, uint64_t addr);
void gm_tstate_free(gm_tstate *s);

/* A copy of the state at one moment: the segments of one device (device < 0: every device),
 * the blocks sorted by address. */
typedef struct gm_tcapture {
    gm_tseg *segs;
    size_t nsegs;
    gm_tblk *blocks;
    size_t nblocks;
} gm_tcapture;
/* blocks_as_segments: a recording without segment events of an allocator (gpumem in record
 * mode, an old file): each live block that no segment holds (a pool's or a graph's allocation
 * passed through is one already) becomes a segment of its own, as PyTorch's profile_plot shows
 * allocations it has no segment for. 0, -1 out of memory (c then holds what the caller frees). */
int gm_tstate_capture(gm_tstate *s, int device, int blocks_as_segments, gm_tcapture *c);
void gm_tcapture_free(gm_tcapture *c);

#endif
