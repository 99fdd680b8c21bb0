/* gm_owners.c — which allocation each block of an allocator snapshot belongs to.
 *
 * An address is handed out again and again, under other names, with other call sites: a block
 * at address A in the snapshot taken at the peak belongs to the allocation that held A *then*,
 * not to the last one that held A. So the join is by identity. Every block the allocator
 * reports carries the allocator's id of its allocation (blocks.alloc_id), the same id its alloc
 * event carries (events.alloc_id) on the segment's device: the owner is the alloc event with
 * that (device, id). A block without an id (a PyTorch snapshot imported: no ids) gets the
 * allocation live at its address at the snapshot's seq, which is the same answer in time order
 * (so does a block whose id no alloc event carries: a recording that lost events).
 *
 * One pass over the events, in seq order, from the start to the snapshot (and past it only
 * until every id is found: a thread's alloc event can follow the snapshot taken after it). */
#include "snapshot/read/gm.h"

#include <stdlib.h>

#include "snapshot/record/rec.h"

uint64_t gm_alloc_key(int device, uint64_t alloc_id) {
    if (!alloc_id || alloc_id >= (uint64_t)1 << 56) return 0;
    return (uint64_t)(device & 0x7f) << 56 | alloc_id;
}

int gm_snapshot_owners(gm_db *d, int64_t snap, u64map *owners) {
    sqlite3_stmt *s;
    int64_t sseq = -1;
    if (!gm_table_exists(d, "snapshots")) return 0;
    if (sqlite3_prepare_v2(d->db, "SELECT seq FROM snapshots WHERE id = ?", -1, &s, NULL) != SQLITE_OK) return -1;
    sqlite3_bind_int64(s, 1, snap);
    if (sqlite3_step(s) == SQLITE_ROW) sseq = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    if (sseq < 0) return 0;
    /* the allocated blocks: want[key] = block address; all their addresses in byaddr */
    u64map want = {0}, byaddr = {0};
    if (sqlite3_prepare_v2(d->db, "SELECT b.addr, b.alloc_id, g.device FROM blocks b LEFT JOIN segments g "
                                  "ON g.snapshot = b.snapshot AND g.idx = b.segment "
                                  "WHERE b.snapshot = ? AND b.state = 1",
                           -1, &s, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(s, 1, snap);
    int rc = 0;
    while (rc == 0 && sqlite3_step(s) == SQLITE_ROW) {
        uint64_t addr = (uint64_t)sqlite3_column_int64(s, 0);
        uint64_t key = gm_alloc_key(sqlite3_column_int(s, 2), (uint64_t)sqlite3_column_int64(s, 1));
        rc = u64map_put(&byaddr, addr, 1);
        if (rc == 0 && key) rc = u64map_put(&want, key, addr);
    }
    sqlite3_finalize(s);
    size_t pending = want.count;
    u64map live = {0}; /* addr -> birth, up to the snapshot */
    if (rc == 0 && byaddr.count &&
        sqlite3_prepare_v2(d->db, "SELECT seq, kind, device, addr, alloc_id FROM events "
                                  "WHERE kind IN (1, 2, 3, 4) ORDER BY seq",
                           -1, &s, NULL) == SQLITE_OK) {
        while (rc == 0 && sqlite3_step(s) == SQLITE_ROW) {
            int64_t seq = sqlite3_column_int64(s, 0);
            if (seq > sseq && !pending) break;
            int kind = sqlite3_column_int(s, 1) & 0xff;
            uint64_t addr = (uint64_t)sqlite3_column_int64(s, 3);
            int is_alloc = kind == REC_ALLOC || kind == REC_ALLOC_ASYNC;
            if (is_alloc && pending) {
                uint64_t key = gm_alloc_key(sqlite3_column_int(s, 2), (uint64_t)sqlite3_column_int64(s, 4));
                uint64_t *ba = key ? u64map_get(&want, key) : NULL;
                if (ba && !u64map_get(owners, *ba)) {
                    rc = u64map_put(owners, *ba, (uint64_t)seq);
                    pending--;
                }
            }
            if (seq > sseq || rc) continue;
            if (is_alloc) rc = u64map_put(&live, addr, (uint64_t)seq);
            else u64map_del(&live, addr, NULL);
        }
        sqlite3_finalize(s);
    }
    for (uint64_t i = 0; rc == 0 && byaddr.keys && i <= byaddr.mask; i++) {
        if (byaddr.keys[i] == U64MAP_EMPTY || u64map_get(owners, byaddr.keys[i])) continue;
        const uint64_t *b = u64map_get(&live, byaddr.keys[i]);
        if (b) rc = u64map_put(owners, byaddr.keys[i], *b);
    }
    u64map_free(&want);
    u64map_free(&byaddr);
    u64map_free(&live);
    return rc ? -1 : 0;
}
