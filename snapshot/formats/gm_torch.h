/* gm_torch.h — PyTorch's caching allocator seen from its own memory history: the block sizes
 * its trace does not carry, and the merge of that history into a gpumem recording.
 *
 * PyTorch's trace (torch.cuda.memory._record_memory_history) gives each allocation's address
 * and REQUESTED size; its statistics (allocated_bytes, max_memory_allocated) count the BLOCK
 * size, which is the request rounded (to 512 bytes, or by roundup_power2_divisions) unless the
 * free block it came from was not split, when it is the whole free block. The addresses say
 * which free block that was, so the block structure can be replayed exactly: gm_tblocks keeps
 * every segment's blocks (split on allocation, merged with free neighbours when a free
 * completes, grown and shrunk by expandable segments' map and unmap) and applies PyTorch's
 * split rule. No policy is guessed: PyTorch already chose the addresses. */
#ifndef GPUMEM_SNAPSHOT_FORMATS_GM_TORCH_H
#define GPUMEM_SNAPSHOT_FORMATS_GM_TORCH_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "snapshot/formats/gm_pickle.h"
#include "snapshot/record/u64map.h"

/* PyTorch's settings that shape blocks (its snapshot's allocator_settings). */
typedef struct gm_tsettings {
    int expandable;             /* expandable_segments */
    uint64_t max_split;         /* max_split_size in bytes; UINT64_MAX: no limit */
    unsigned divisions[16];     /* roundup_power2_divisions per power-of-two MiB interval */
} gm_tsettings;
void gm_tsettings_read(const gpk_val *allocator_settings, gm_tsettings *s);
/* The snapshot's allocator_settings dict kept as it was (pickled, protocol 2) in meta
 * torch_allocator_settings, so that an export writes back every field PyTorch wrote, those
 * gpumem does not read included (max_round_threshold, max_cached_size, ...). Nothing when it is
 * not a dict. 0, -1 out of memory or a failed write. */
int gm_tsettings_store(sqlite3 *db, const gpk_val *allocator_settings);
/* PyTorch's round_size: a request's size before the split decision. */
uint64_t gm_tround(const gm_tsettings *s, uint64_t size);

typedef struct gm_tnode {
    uint64_t addr, size;
    uint32_t prev, next; /* neighbours in the same segment (node index; 0: none) */
    uint8_t free;
} gm_tnode;

typedef struct gm_tblocks {
    gm_tsettings set;
    gm_tnode *nodes; /* index 0 unused */
    size_t nnodes, cap;
    uint32_t spare; /* a chain of unused nodes through .next */
    u64map by_start, by_end; /* addr -> node index, end addr -> node index */
    uint64_t guessed;        /* allocations whose block was not where the trace said */
} gm_tblocks;

void gm_tblocks_init(gm_tblocks *b, const gm_tsettings *s);
void gm_tblocks_free(gm_tblocks *b);
/* segment_alloc (grow 0) / segment_map (grow 1: joins the blocks beside it): free memory
 * [addr, addr + size); segment_free / segment_unmap: gives it back. 0, or -1 out of memory. */
int gm_tblocks_map(gm_tblocks *b, uint64_t addr, uint64_t size, int grow);
void gm_tblocks_unmap(gm_tblocks *b, uint64_t addr, uint64_t size);
/* alloc of `requested` bytes at addr: the block's size (0: out of memory). When no free block
 * starts at addr (the trace began after it was made) the rounded request is returned and
 * counted in b->guessed. */
uint64_t gm_tblocks_alloc(gm_tblocks *b, uint64_t addr, uint64_t requested);
/* free_completed at addr: the block is free again and merges with free neighbours. */
void gm_tblocks_free_block(gm_tblocks *b, uint64_t addr);

/* The largest free block b holds (0: none): PyTorch's biggest cached block at that moment. */
uint64_t gm_tblocks_largest_free(const gm_tblocks *b);

/* An OOM of PyTorch's trace (an entry of action "oom": PyTorch raised OutOfMemoryError) as a
 * row of gpumem's `ooms` table, built the same way by the merge and by `gpumem import`. */
typedef struct gm_toom {
    uint64_t seq; /* its oom event (kind 13) */
    int device;
    int64_t stream;               /* the database's stream id */
    uint64_t requested;           /* the entry's size: what the tensor asked for */
    uint64_t allocated, reserved; /* PyTorch's bytes at that moment (its blocks, its segments) */
    uint64_t largest_free;        /* its largest free block then (gm_tblocks_largest_free) */
    uint64_t device_free; /* the entry's: what cudaMemGetInfo said was free (gm_toom_device_free) */
    uint64_t device_total; /* 0: not known */
    uint64_t limit;        /* the per-process memory fraction's bytes; REC_NO_LIMIT: none (a
                              fraction of 0 is a cap of 0 bytes) */
} gm_toom;

/* device_free of a trace entry of action "oom": PyTorch's snapshots hold it as `device_free`
 * (its TraceEntry keeps it in addr_), gpumem's snapshots at an OOM before 2026-12-06 as `addr`;
 * 0 when neither is a number. */
uint64_t gm_toom_device_free(const gpk_val *entry);

/* Inserts o into the `ooms` table of db, free_cached = reserved - allocated (PyTorch's cached
 * bytes). 0, or -1 with the reason in err. */
struct sqlite3;
int gm_toom_insert(struct sqlite3 *db, const gm_toom *o, char *err, size_t errsz);

/* Merges a pickle written by gpumem's PyTorch hook (preload/python/gpumem/_torch.py: PyTorch's
 * snapshot with its trace, and the names of parameters, gradients and optimizer state) into
 * the recording at dbpath, in one transaction: the trace entries become events of kinds 31-35
 * (torch_alloc, torch_free, torch_free_completed, torch_segment_map, torch_segment_unmap),
 * placed among the recorded events by time (a segment's events right after the cudaMalloc
 * that made it), every seq renumbered to make room; their Python frames become frames and
 * stacks; each gets the NVTX range open at its time; its OOMs (action "oom") become oom events
 * (kind 13) and `ooms` rows (gm_toom), except one whose request the driver already refused in
 * the recording (that OOM is recorded); the names become `names` rows; meta says
 * what was merged (torch_history, torch_version, torch_conf, torch_blocks_guessed). Returns 0
 * with the number of trace entries merged, or -1 with a one-line reason (nothing is changed). */
int gm_torch_merge(const char *dbpath, const unsigned char *buf, size_t n, uint64_t *merged,
                   char *err, size_t errsz);

/* PyTorch's own snapshot at an OOM (a dump of gpumem's hook, as gm_torch_merge reads) written
 * beside the recording at dbpath: DB.oom.pickle for DB.db (else dbpath + ".oom.pickle"), the
 * dict of torch.cuda.memory._snapshot() with "exporter": "gpumem" first, through the output rule
 * (gm_out.h: a file of another kind is not replaced). path receives its name. 0, or -1 with a
 * one-line reason. */
int gm_torch_write_oom(const char *dbpath, const unsigned char *buf, size_t n, char *path,
                       size_t pathsz, char *err, size_t errsz);

#endif
