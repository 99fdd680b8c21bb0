/* gm_export.c — `gpumem export`: the recording in other tools' formats.
 *
 * --format trace: the replay engine's text trace (alloc/alloc.h, alloc_trace_kind): one line
 * per device allocation "a <id> <requested> <stream>", per cudaFree "f <id>", per
 * cudaFreeAsync "fa <id> <stream>", in recorded (seq) order. The id is the allocation's birth
 * seq (unique, so ids never collide even when the allocator reuses an address); the size is
 * what the program asked for, so the replay rounds it under whatever config it is given; the
 * stream is the database's small stream number (streams.id), which keeps stream identity.
 * Frees that match no recorded allocation (before the recording started, or foreign) are left
 * out: the replay could not place them. A record_stream of a live allocation (kind 21, events.addr
 * = the allocation, events.stream = the stream it is used on) becomes "rs <id> <stream>"; the
 * replay then holds its free back as PyTorch does (alloc/README.md, trace format). In a recording
 * made through PyTorch's pluggable allocator (some allocation carries REC_F_FRAMEWORK, from
 * gpumem_torch_malloc), the other device allocations — libraries' own cudaMalloc calls — are
 * "ag <id> <requested> <stream>" where gpumem served them (GPUMEM_MODE=replace: it takes every
 * cudaMalloc of the process, so its pool held cuBLAS's workspaces and a replay under the same
 * preset must put them there too), "ax" where the driver did (record mode): the pytorch presets
 * replay "ax" outside their cache, and "ag" too with --framework-only (what PyTorch's own
 * allocator would do). A device allocation passed through to the driver in every mode (a pool
 * the program chose, flag REC_F_POOL; a graph's memory node, REC_F_GRAPH) is "ad <id> <size>
 * <stream>": its own segment of the bytes the driver gave, under every configuration (gpumem
 * report counts it so), never the allocator's to serve. A request that failed with out-of-memory
 * (kind 13, its `ooms` row) is
 * "ao <seq> <requested> <stream>": the replay tries it again, so an OOM run replayed under its
 * own limit or memory fraction meets the same OOM. An allocation in one of gpumem's graph capture
 * pools (flag REC_F_PRIVATE_POOL; its stream is the capture's) is "ap <id> <requested> <pool>",
 * pool = 2^32 + stream (as adv_to_trace keys it): the replay keeps it in that pool; the first
 * segment of that pool given back (kind 15 or 19 flagged REC_F_PRIVATE_POOL: gpumem releases a
 * capture's pool only once its graphs are destroyed) is "pr <pool>", where the replay releases
 * the pool. gpumem's allocator emptying its cache (kind 36 flagged REC_F_FRAMEWORK:
 * gpumem_empty_cache, PyTorch's torch.cuda.empty_cache() through it) is "e". The capture itself is "cb <pool>" before the pool's first allocation and "ce <pool>"
 * after its last (the recording has no event for cuStreamBeginCapture / EndCapture; these are
 * the bounds its allocations give): between them the replay settles, synchronizes and releases
 * nothing, as the live allocator during a capture. A free that
 * waited for stream events landed in the allocator later (kind 29 free_completed, matched to its
 * free by address and allocation id): "fc <id>" at that point, and the replay holds the free until
 * then. Only frees flagged REC_F_PENDING wait for one; those still waiting when the recording
 * stopped get their "fc" at the end (held for the rest of the trace). A free_completed recorded
 * before its own free event (another thread landed it first) is left out: the block was reusable
 * when the free was recorded. gpumem's allocator's markers (kinds 39 marker_record, 40
 * marker_done: its release before growth recorded a marker event on a stream, found that stream's
 * oldest marker complete) are "mr <stream>" and "md <stream>" where they came: a replay of the
 * recorded configuration unmaps only what they settled, as the run did (alloc/README.md,
 * "Releasing without synchronizing"). A stream the program destroyed holding memory, which the
 * allocator forgot (kind 42: it synchronized and released the forgotten pools then), is
 * "sf <stream>". A synchronization of the allocator's that dropped its lock to wait (kind 43,
 * then its 41 with the same number in addr) is "sw <wait> [<requested> <stream>]" where the wait
 * began and "sy <step> <wait>" / "sr <wait>" where it ended.
 * Older recordings have none.
 *
 * Like the reports, this is one sequential pass over `events` with a hash map of live
 * allocations keyed by address, so a database from a killed process (no alloc_life rows for
 * what was alive) exports the same way. The output equals the SQL over alloc_life that it
 * replaced:
 *   SELECT CASE WHEN e.kind IN (1,3) THEN printf('a %d %d %d', e.seq, e.requested, e.stream)
 *               WHEN e.kind = 2 THEN printf('f %d', l.birth)
 *               ELSE printf('fa %d %d', l.birth, e.stream) END
 *   FROM events e LEFT JOIN alloc_life l ON l.death = e.seq
 *   WHERE e.kind IN (1,2,3,4) AND (e.kind IN (1,3) OR l.birth IS NOT NULL) ORDER BY e.seq
 */
#include "snapshot/formats/gm_formats.h"
#include "snapshot/formats/gm_out.h"
#include "snapshot/record/rec.h"

#include <inttypes.h>

/* 1 when some allocation was made through the framework's allocator hook (REC_F_FRAMEWORK). */
static int has_framework_allocs(gm_db *d) {
    sqlite3_stmt *s;
    int has = 0;
    if (sqlite3_prepare_v2(d->db, "SELECT 1 FROM events WHERE kind IN (1, 3) AND (flags & 4096) != 0 LIMIT 1", -1,
                           &s, NULL) == SQLITE_OK) {
        has = sqlite3_step(s) == SQLITE_ROW;
        sqlite3_finalize(s);
    }
    return has;
}

/* 1 when the recording has frees that waited for stream events (kind 29 free_completed, frees
 * flagged REC_F_PENDING; older files have neither). */
static int has_free_completed(gm_db *d) {
    sqlite3_stmt *s;
    int has = 0;
    if (sqlite3_prepare_v2(d->db, "SELECT 1 FROM events WHERE kind = 29 OR (kind IN (2, 4) AND (flags & 8192) != 0) LIMIT 1",
                           -1, &s, NULL) == SQLITE_OK) {
        has = sqlite3_step(s) == SQLITE_ROW;
        sqlite3_finalize(s);
    }
    return has;
}

/* The allocation a free or free_completed names: device and the allocator's id. */
static uint64_t fc_key(sqlite3_stmt *s) {
    return (uint64_t)sqlite3_column_int64(s, 7) ^ ((uint64_t)(sqlite3_column_int64(s, 6) & 0xff) << 56);
}

/* The last allocation (seq) of each of gpumem's capture pools, by the capture's stream: where
 * the trace's "ce" goes. 0, or -1 out of memory. */
static int capture_last_allocs(gm_db *d, u64map *last) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, "SELECT stream, max(seq) FROM events WHERE kind IN (1, 3) AND (flags & 32768) != 0 "
                                  "GROUP BY stream", -1, &s, NULL) != SQLITE_OK)
        return 0; /* read again below, where a damaged table is said */
    int rc = 0;
    while (rc == 0 && sqlite3_step(s) == SQLITE_ROW)
        if (u64map_put(last, (uint64_t)sqlite3_column_int64(s, 0), (uint64_t)sqlite3_column_int64(s, 1)) != 0) rc = -1;
    sqlite3_finalize(s);
    return rc;
}

int gm_export_trace(gm_db *d, FILE *out) {
    sqlite3_stmt *s;
    /* a recording through PyTorch's pluggable allocator: what did not come through it (cuBLAS
     * workspaces, NCCL buffers) is "ax", which the pytorch presets do not cache */
    int framework = has_framework_allocs(d), fcs = has_free_completed(d);
    char mode[32] = "";
    gm_meta_text(d, "mode", mode, sizeof mode);
    /* the recording's allocator served the libraries' allocations too (replace is the default) */
    const char *other_word = !mode[0] || !strcmp(mode, "replace") ? "ag" : "ax";
    if (sqlite3_prepare_v2(d->db, "SELECT seq, kind, addr, requested, stream, flags, device, alloc_id, size FROM events "
                                  "WHERE kind IN (1, 2, 3, 4, 13, 15, 19, 21, 29, 39, 40, 41, 42, 43) OR (kind IN (36, 37) AND (flags & 4096) != 0) "
                                  "ORDER BY seq", -1, &s, NULL) != SQLITE_OK) {
        fprintf(stderr, "gpumem: %s: cannot read events: %s\n", d->path, sqlite3_errmsg(d->db));
        return GM_EXIT_BADDB;
    }
    /* the output rule's marker (gm_out.h); the replay engine reads '#' lines as comments */
    fprintf(out, "%s: one line per event, the replay engine's format (alloc/README.md)\n",
            gm_out_marker[GM_OUT_TRACE].bytes);
    char ending[256]; /* a comment the replay engine skips: what is alive at the end is not leaks */
    gm_ending_line(d, ending, sizeof ending);
    if (ending[0]) fprintf(out, "# note: %s\n", ending);
    u64map live = {0};
    /* freed blocks whose free_completed may follow: address -> birth, address -> allocation key;
     * allocation keys whose free_completed came before their free */
    u64map pend = {0}, pend_key = {0}, early = {0};
    u64map pools = {0}; /* capture pools' keys: 1 made (an "ap" line), 2 ended (its "pr" line) */
    u64map cap_last = {0}; /* a capture's stream -> its pool's last allocation ("ce" after it) */
    int rc = capture_last_allocs(d, &cap_last) ? SQLITE_NOMEM : SQLITE_ROW;
    if (rc == SQLITE_NOMEM) {
        sqlite3_finalize(s);
        u64map_free(&cap_last);
        fprintf(stderr, "gpumem: out of memory exporting %s\n", d->path);
        return GM_EXIT_BADDB;
    }
    uint64_t lines = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
        int kind = sqlite3_column_int(s, 1);
        uint64_t addr = (uint64_t)sqlite3_column_int64(s, 2);
        int64_t stream = (int64_t)sqlite3_column_int64(s, 4);
        if (kind == REC_ALLOC || kind == REC_ALLOC_ASYNC) {
            if (addr != U64MAP_EMPTY && u64map_put(&live, addr, seq) != 0) {
                rc = SQLITE_NOMEM;
                break;
            }
            if (fcs) { /* the block at addr is handed out: an earlier free there has landed */
                u64map_del(&pend, addr, NULL);
                u64map_del(&pend_key, addr, NULL);
            }
            int other = framework && !(sqlite3_column_int64(s, 5) & REC_F_FRAMEWORK);
            uint64_t fl = (uint64_t)sqlite3_column_int64(s, 5);
            if (rec_is_own_segment(kind, (unsigned)fl) && !(fl & REC_F_PRIVATE_POOL)) {
                /* passed through to the driver (a pool the program chose, a graph's memory node):
                 * the bytes it gave, under any configuration */
                int64_t bytes = (int64_t)sqlite3_column_int64(s, 8);
                if (!bytes) bytes = (int64_t)sqlite3_column_int64(s, 3);
                fprintf(out, "ad %" PRIu64 " %" PRId64 " %" PRId64 "\n", seq, bytes, stream);
            } else if (fl & REC_F_PRIVATE_POOL) { /* a capture's pool: its own key */
                uint64_t key = (uint64_t)1 << 32 | (uint64_t)stream;
                if (!u64map_get(&pools, key)) fprintf(out, "cb %" PRIu64 "\n", key); /* the capture begins */
                if (u64map_put(&pools, key, 1) != 0) {
                    rc = SQLITE_NOMEM;
                    break;
                }
                fprintf(out, "ap %" PRIu64 " %" PRId64 " %" PRIu64 "\n", seq, (int64_t)sqlite3_column_int64(s, 3), key);
                const uint64_t *last = u64map_get(&cap_last, (uint64_t)stream);
                if (last && *last == seq) fprintf(out, "ce %" PRIu64 "\n", key);
            } else
                fprintf(out, "%s %" PRIu64 " %" PRId64 " %" PRId64 "\n", other ? other_word : "a", seq,
                        (int64_t)sqlite3_column_int64(s, 3), stream);
        } else if (kind == REC_SEG_UNMAP || kind == REC_DRIVER_FREE) {
            /* a capture pool's segment given back: its graphs are destroyed, the pool ends */
            uint64_t key = (uint64_t)1 << 32 | (uint64_t)stream;
            const uint64_t *st = u64map_get(&pools, key);
            if (!(sqlite3_column_int64(s, 5) & REC_F_PRIVATE_POOL) || !st || *st != 1) continue;
            if (u64map_put(&pools, key, 2) != 0) {
                rc = SQLITE_NOMEM;
                break;
            }
            fprintf(out, "pr %" PRIu64 "\n", key);
        } else if (kind == REC_TORCH_EMPTY_CACHE) { /* gpumem's allocator emptied its cache */
            fprintf(out, "e\n");
        } else if (kind == REC_TORCH_MEMORY_FRACTION) { /* the fraction its allocator applied */
            fprintf(out, "l %" PRId64 "\n", (int64_t)sqlite3_column_int64(s, 8));
        } else if (kind == REC_OOM) { /* the failed request, tried again by the replay */
            int64_t req = (int64_t)sqlite3_column_int64(s, 3);
            if (!req) req = (int64_t)sqlite3_column_int64(s, 8);
            if (!req) continue;
            fprintf(out, "ao %" PRIu64 " %" PRId64 " %" PRId64 "\n", seq, req, stream);
        } else if (kind == 21) { /* record_stream (the streams work's REC_RECORD_STREAM) */
            const uint64_t *birth = u64map_get(&live, addr);
            if (!birth) continue;
            fprintf(out, "rs %" PRIu64 " %" PRId64 "\n", *birth, stream);
        } else if (kind == REC_MARKER_RECORD || kind == REC_MARKER_DONE || kind == REC_ALLOC_SYNC) {
            int64_t step = (int64_t)sqlite3_column_int64(s, 8);
            if (kind == REC_ALLOC_SYNC && (sqlite3_column_int64(s, 5) & REC_F_SYNC_RESTART))
                fprintf(out, addr ? "sr %" PRIu64 "\n" : "sr\n", addr); /* addr: its wait (kind 43) */
            else if (kind == REC_ALLOC_SYNC && addr)
                fprintf(out, "sy %" PRId64 " %" PRIu64 "\n", step, addr);
            else if (kind == REC_ALLOC_SYNC)
                fprintf(out, step ? "sy %" PRId64 "\n" : "sy\n", step);
            else if (step)
                fprintf(out, "%s %" PRId64 " %" PRId64 "\n", kind == REC_MARKER_RECORD ? "mr" : "md", stream, step);
            else
                fprintf(out, "%s %" PRId64 "\n", kind == REC_MARKER_RECORD ? "mr" : "md", stream);
        } else if (kind == REC_ALLOC_WAIT) { /* a synchronization's wait begins */
            int64_t req = (int64_t)sqlite3_column_int64(s, 3);
            if (req)
                fprintf(out, "sw %" PRIu64 " %" PRId64 " %" PRId64 "\n", addr, req, stream);
            else
                fprintf(out, "sw %" PRIu64 "\n", addr);
        } else if (kind == REC_STREAM_FORGET) { /* the program destroyed the stream */
            fprintf(out, "sf %" PRId64 "\n", stream);
        } else if (kind == REC_FREE_COMPLETED) {
            const uint64_t *k = u64map_get(&pend_key, addr);
            uint64_t birth;
            if (!k || *k != fc_key(s)) { /* before its free event */
                if (u64map_put(&early, fc_key(s), 1) != 0) {
                    rc = SQLITE_NOMEM;
                    break;
                }
                continue;
            }
            u64map_del(&pend_key, addr, NULL);
            if (!u64map_del(&pend, addr, &birth)) continue;
            /* landed by the allocator's synchronization: settled there (REC_F_LANDED_SYNCED) */
            fprintf(out, "%s %" PRIu64 "\n", sqlite3_column_int64(s, 5) & REC_F_LANDED_SYNCED ? "fy" : "fc", birth);
        } else {
            uint64_t birth;
            if (!u64map_del(&live, addr, &birth)) continue;
            if (fcs && (sqlite3_column_int64(s, 5) & REC_F_PENDING) && !u64map_del(&early, fc_key(s), NULL) &&
                (u64map_put(&pend, addr, birth) != 0 || u64map_put(&pend_key, addr, fc_key(s)) != 0)) {
                rc = SQLITE_NOMEM;
                break;
            }
            if (kind == REC_FREE)
                fprintf(out, "%s %" PRIu64 "\n",
                        rec_is_synced_free((unsigned)kind, (unsigned)sqlite3_column_int64(s, 5)) ? "fs" : "f", birth);
            else fprintf(out, "fa %" PRIu64 " %" PRId64 "\n", birth, stream);
        }
        lines++;
    }
    sqlite3_finalize(s);
    /* frees still waiting when the recording stopped: their blocks never came back in the run */
    if (rc == SQLITE_DONE && pend.count) {
        uint64_t *births = malloc(pend.count * sizeof *births);
        size_t nb = 0;
        for (uint64_t i = 0; births && i <= pend.mask; i++)
            if (pend.keys[i] != U64MAP_EMPTY) births[nb++] = pend.vals[i];
        if (births) {
            gm_sort(births, nb, sizeof *births, gm_cmp_u64);
            for (size_t i = 0; i < nb; i++) fprintf(out, "fc %" PRIu64 "\n", births[i]);
        }
        free(births);
    }
    u64map_free(&live);
    u64map_free(&pend), u64map_free(&pend_key), u64map_free(&early), u64map_free(&pools), u64map_free(&cap_last);
    if (rc == SQLITE_NOMEM) {
        fprintf(stderr, "gpumem: out of memory exporting %s\n", d->path);
        return GM_EXIT_BADDB;
    }
    if (rc != SQLITE_DONE) {
        /* a damaged tail: what was read is exported, and the user is told */
        fprintf(stderr, "gpumem: %s: the events table is damaged after %" PRIu64
                        " exported lines: %s\n", d->path, lines, sqlite3_errmsg(d->db));
        return lines ? 0 : GM_EXIT_BADDB;
    }
    return 0;
}
