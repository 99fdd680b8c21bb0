/* gm_uses.c — the analyses of access tracking (schema 1.2: `launches`, `uses`).
 *
 * With GPUMEM_USES=1 the recorder writes one `uses` row per (allocation, launch) whose
 * arguments pointed into the allocation. Two questions are answered here, both on top of the
 * model gm_analyze.c loaded (allocations with birth, death, size, name):
 *
 * - Idle at the peak (`gpumem report`): for every allocation live at the peak allocated moment,
 *   its last use at or before the peak and its first use after it. Offload candidates are the
 *   big tensors with a long gap on both sides. `uses` is read once in its primary-key order
 *   (seq, birth: launch order, which is how the recorder appends), from the birth of the
 *   oldest live allocation on, each row matched to a live allocation through a hash map — a
 *   sweep with no per-allocation query, so it stays linear on 10-million-event recordings
 *   (and needs no index: a killed process's file has no uses_birth). Past the peak an
 *   allocation is settled by its first use or by its death, and the sweep stops once every
 *   one is; only allocations alive at the end with no later use make it read to the end.
 *   Then the times of the uses kept (two per live allocation at most) are looked up in one
 *   statement over a JSON list of seqs: joining every use to `events` would be a random
 *   lookup per row.
 * - One tensor's life (`gpumem uses`): birth, each use with its kernel, access, phase and
 *   device time, death, for the few allocations shown: their uses in one statement (through
 *   the uses_birth index when the file has it, else one scan of `uses` for all of them).
 *
 * Gaps are given in time (events.t) and in events: the rows of `events` in between, counted
 * (gm_report.c, idle_count_events), not the difference of seq numbers (a launch's argument
 * words and the names take seqs with no row in `events`).
 */
#include "snapshot/analyze/gm_report.h"
#include "snapshot/record/rec.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const gm_idle_bucket_name[GM_IDLE_NBUCKETS] = {"<1ms", "1-10ms", "10-100ms", "100ms-1s",
                                                           ">=1s", "none"};
const uint64_t gm_idle_bucket_max_ns[GM_IDLE_TIMED] = {1000000ull, 10000000ull, 100000000ull,
                                                       1000000000ull, UINT64_MAX};

int gm_idle_bucket(uint64_t gap_ns) {
    int b = 0;
    while (b < GM_IDLE_TIMED - 1 && gap_ns >= gm_idle_bucket_max_ns[b]) b++;
    return b;
}

/* Rows decide, not only meta.uses: a database whose `uses` has rows was recorded with tracking
 * on, whatever its meta says; meta.uses on with no rows means nothing was touched by a launch
 * (or the program launched nothing), which the report says differently from "off". */
int gm_uses_state(gm_db *d, char *mode, size_t modesz) {
    gm_meta_text(d, "uses", mode, modesz);
    int on = mode[0] && strcmp(mode, "0") != 0;
    int rows = 0;
    sqlite3_stmt *s;
    if (gm_table_exists(d, "uses") &&
        sqlite3_prepare_v2(d->db, "SELECT 1 FROM uses LIMIT 1", -1, &s, NULL) == SQLITE_OK) {
        rows = sqlite3_step(s) == SQLITE_ROW;
        sqlite3_finalize(s);
    }
    if (rows && !on) snprintf(mode, modesz, "1");
    return rows ? GM_USES_ON : on ? GM_USES_EMPTY : GM_USES_OFF;
}

int64_t gm_uses_unknown(gm_db *d, int64_t *unread, int64_t *lost, char *buf, size_t n) {
    int64_t u = gm_meta_int(d, "launches_unread", 0), l = gm_meta_int(d, "launch_words_lost", 0),
            launches = gm_meta_int(d, "launches", -1);
    u = u > 0 ? u : 0, l = l > 0 ? l : 0;
    if (unread) *unread = u;
    if (lost) *lost = l;
    size_t o = 0;
    if (n) buf[0] = 0;
    if (u > 0 && o < n) {
        /* meta.launches is written at close: a killed recording has the rows, not the count */
        sqlite3_stmt *c;
        if (launches < 0 && gm_table_exists(d, "launches") &&
            sqlite3_prepare_v2(d->db, "SELECT count(*) FROM launches", -1, &c, NULL) == SQLITE_OK) {
            if (sqlite3_step(c) == SQLITE_ROW) launches = sqlite3_column_int64(c, 0);
            sqlite3_finalize(c);
        }
        int64_t all = launches > u ? launches : u;
        int k = snprintf(buf + o, n - o,
                         "%" PRId64 " of %" PRId64 " launches (%.0f%%) ran kernels whose arguments gpumem could not read "
                         "(the driver gave no parameter layout for them: cuFuncGetParamInfo, CUDA 12.4 and later, "
                         "reads it from the kernel's fat binary, which a kernel registered without one lacks)",
                         u, all, 100.0 * (double)u / (double)all);
        o += k > 0 ? (size_t)k : 0;
    }
    if (l > 0 && o < n) {
        int k = snprintf(buf + o, n - o, "%s%" PRId64 " launches lost their arguments (the ring was full: raise GPUMEM_RING)",
                         u > 0 ? "; " : "", l);
        o += k > 0 ? (size_t)k : 0;
    }
    if ((u > 0 || l > 0) && o < n) snprintf(buf + o, n - o, ": memory that only they touched shows as unused");
    return u + l;
}

static int live_device_at(const gm_alloc *a, uint64_t at) {
    return a->birth <= at && (a->death == 0 || a->death > at) && a->kind != REC_HOST_ALLOC &&
           a->kind != REC_MANAGED_ALLOC;
}

/* events.t of each seq in seqs (sorted, distinct) into ts (0 when the event is missing). One
 * statement; where SQLite lacks json_each, one reused point lookup per seq. */
static int times_of(gm_db *d, const uint64_t *seqs, uint64_t *ts, size_t n) {
    memset(ts, 0, n * sizeof *ts);
    if (!n) return 0;
    size_t cap = n * 21 + 3, o = 0;
    char *list = malloc(cap);
    if (!list) return -1;
    list[o++] = '[';
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(list + o, cap - o, "%s%" PRIu64, i ? "," : "", seqs[i]);
    list[o++] = ']';
    list[o] = 0;
    sqlite3_stmt *s;
    int rc = -1;
    if (sqlite3_prepare_v2(d->db, "SELECT e.seq, e.t FROM json_each(?1) j JOIN events e ON e.seq = j.value "
                                  "ORDER BY e.seq", -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, list, (int)o, SQLITE_STATIC);
        size_t i = 0;
        int r;
        while ((r = sqlite3_step(s)) == SQLITE_ROW) {
            uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
            while (i < n && seqs[i] < seq) i++;
            if (i < n && seqs[i] == seq) ts[i] = (uint64_t)sqlite3_column_int64(s, 1);
        }
        rc = r == SQLITE_DONE ? 0 : -1;
        sqlite3_finalize(s);
    } else if (sqlite3_prepare_v2(d->db, "SELECT t FROM events WHERE seq = ?1", -1, &s, NULL) == SQLITE_OK) {
        rc = 0;
        for (size_t i = 0; i < n; i++) {
            sqlite3_bind_int64(s, 1, (sqlite3_int64)seqs[i]);
            if (sqlite3_step(s) == SQLITE_ROW) ts[i] = (uint64_t)sqlite3_column_int64(s, 0);
            sqlite3_reset(s);
        }
        sqlite3_finalize(s);
    }
    free(list);
    return rc;
}

static uint64_t time_at(const uint64_t *seqs, const uint64_t *ts, size_t n, uint64_t seq) {
    const uint64_t *p = bsearch(&seq, seqs, n, sizeof *seqs, gm_cmp_u64);
    return p ? ts[p - seqs] : 0;
}

/* qsort has no context argument: the deaths are copied next to the indices */
typedef struct death_ix { uint64_t death; size_t i; } death_ix;
static int cmp_death(const void *a, const void *b) {
    const death_ix *x = a, *y = b;
    if (x->death != y->death) return x->death < y->death ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}
static void sort_by_death(const gm_model *m, const gm_idle *g, size_t *order) {
    death_ix *t = malloc(g->nallocs * sizeof *t);
    if (!t) return; /* unsorted: the sweep then only stops at the end of the table */
    for (size_t i = 0; i < g->nallocs; i++) {
        uint64_t death = m->allocs[g->allocs[i].alloc].death;
        t[i] = (death_ix){death ? death : UINT64_MAX, i};
    }
    gm_sort(t, g->nallocs, sizeof *t, cmp_death);
    for (size_t i = 0; i < g->nallocs; i++) order[i] = t[i].i;
    free(t);
}

int gm_idle_at_peak(gm_db *d, const gm_model *m, gm_idle *g, char *err, size_t errsz) {
    memset(g, 0, sizeof *g);
    g->state = gm_uses_state(d, g->mode, sizeof g->mode);
    g->peak_seq = m->peak_allocated_seq;
    if (g->state != GM_USES_ON || !m->peak_allocated_seq) return 0;
    size_t n = 0;
    for (size_t i = 0; i < m->nallocs; i++) n += live_device_at(&m->allocs[i], g->peak_seq);
    g->allocs = calloc(n ? n : 1, sizeof *g->allocs);
    if (!g->allocs) {
        snprintf(err, errsz, "%s: out of memory for %zu allocations live at the peak", d->path, n);
        return -1;
    }
    for (size_t i = 0; i < m->nallocs; i++)
        if (live_device_at(&m->allocs[i], g->peak_seq)) {
            g->allocs[g->nallocs].alloc = i;
            g->bytes_live += m->allocs[i].size;
            g->nallocs++;
        }
    if (!g->nallocs) return 0;
    /* birth -> index in g->allocs, and the live allocations by death (alive at the end last):
     * once the sweep is past the peak, an allocation is settled by its first use after the
     * peak or by its death, and the sweep stops when every one is settled */
    u64map idx = {0};
    size_t *by_death = malloc(g->nallocs * sizeof *by_death);
    if (!by_death || u64map_init(&idx, g->nallocs) != 0) {
        free(by_death);
        snprintf(err, errsz, "%s: out of memory for %zu allocations live at the peak", d->path, g->nallocs);
        return -1;
    }
    for (size_t i = 0; i < g->nallocs; i++) {
        u64map_put(&idx, m->allocs[g->allocs[i].alloc].birth, i);
        by_death[i] = i;
    }
    sort_by_death(m, g, by_death);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, "SELECT seq, birth, kernel FROM uses WHERE seq >= ?1 ORDER BY seq", -1, &s,
                           NULL) != SQLITE_OK) {
        snprintf(err, errsz, "%s: cannot read uses: %s", d->path, sqlite3_errmsg(d->db));
        u64map_free(&idx), free(by_death);
        return -1;
    }
    sqlite3_bind_int64(s, 1, (sqlite3_int64)m->allocs[g->allocs[0].alloc].birth);
    size_t unsettled = g->nallocs, di = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0), birth = (uint64_t)sqlite3_column_int64(s, 1);
        if (seq > g->peak_seq) {
            for (; di < g->nallocs; di++) {
                gm_idle_alloc *ia = &g->allocs[by_death[di]];
                uint64_t death = m->allocs[ia->alloc].death;
                if (!death || death >= seq) break;
                if (!ia->next_seq) unsettled--;
            }
            if (!unsettled) break;
        }
        uint64_t *i = u64map_get(&idx, birth);
        if (!i) continue;
        gm_idle_alloc *ia = &g->allocs[*i];
        const gm_alloc *a = &m->allocs[ia->alloc];
        /* a use outside the allocation's life is damage, not a use */
        if (seq < birth || (a->death && seq > a->death)) continue;
        ia->nuses++;
        uint32_t kernel = (uint32_t)sqlite3_column_int64(s, 2);
        if (seq <= g->peak_seq) {
            ia->last_seq = seq, ia->last_kernel = kernel;
        } else if (!ia->next_seq) {
            ia->next_seq = seq, ia->next_kernel = kernel;
            unsettled--;
        }
    }
    sqlite3_finalize(s);
    u64map_free(&idx), free(by_death);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        snprintf(err, errsz, "%s: the uses table is damaged: %s", d->path, sqlite3_errmsg(d->db));
        return -1;
    }
    /* the times of the peak and of every use kept */
    uint64_t *seqs = malloc((2 * g->nallocs + 1) * sizeof *seqs), *ts = NULL;
    size_t ns = 0;
    if (seqs) {
        seqs[ns++] = g->peak_seq;
        for (size_t i = 0; i < g->nallocs; i++) {
            if (g->allocs[i].last_seq) seqs[ns++] = g->allocs[i].last_seq;
            if (g->allocs[i].next_seq) seqs[ns++] = g->allocs[i].next_seq;
        }
        gm_sort(seqs, ns, sizeof *seqs, gm_cmp_u64);
        size_t u = 0;
        for (size_t i = 0; i < ns; i++)
            if (!u || seqs[i] != seqs[u - 1]) seqs[u++] = seqs[i];
        ns = u;
        ts = malloc(ns * sizeof *ts);
    }
    if (!seqs || !ts || times_of(d, seqs, ts, ns) != 0) {
        snprintf(err, errsz, "%s: cannot read the times of the uses: %s", d->path, sqlite3_errmsg(d->db));
        free(seqs), free(ts);
        return -1;
    }
    g->peak_t = time_at(seqs, ts, ns, g->peak_seq);
    for (size_t i = 0; i < g->nallocs; i++) {
        gm_idle_alloc *ia = &g->allocs[i];
        uint64_t size = m->allocs[ia->alloc].size;
        int sb = GM_IDLE_NONE, ub = GM_IDLE_NONE;
        if (ia->last_seq) {
            ia->last_t = time_at(seqs, ts, ns, ia->last_seq);
            sb = gm_idle_bucket(g->peak_t > ia->last_t ? g->peak_t - ia->last_t : 0);
        }
        if (ia->next_seq) {
            ia->next_t = time_at(seqs, ts, ns, ia->next_seq);
            ub = gm_idle_bucket(ia->next_t > g->peak_t ? ia->next_t - g->peak_t : 0);
        }
        g->since_bytes[sb] += size, g->since_count[sb]++;
        g->until_bytes[ub] += size, g->until_count[ub]++;
        if (!ia->nuses) g->never_bytes += size, g->never_count++;
        else if (!ia->last_seq) g->not_before_bytes += size, g->not_before_count++;
        else if (!ia->next_seq) g->not_again_bytes += size, g->not_again_count++;
    }
    free(seqs), free(ts);
    return 0;
}

void gm_idle_free(gm_idle *g) {
    free(g->allocs);
    memset(g, 0, sizeof *g);
}

static int grow_uses(gm_life *l, size_t *cap) {
    if (l->nuses < *cap) return 0;
    size_t c = *cap ? *cap * 2 : 16;
    gm_use *n = realloc(l->uses, c * sizeof *n);
    if (!n) return -1;
    l->uses = n, *cap = c;
    return 0;
}

int gm_lives_load(gm_db *d, const gm_model *m, const size_t *allocs, size_t n, gm_life *lives, char *err,
                  size_t errsz) {
    memset(lives, 0, n * sizeof *lives);
    sqlite3_stmt *s;
    /* births and deaths: point lookups by primary key, two per allocation shown */
    if (sqlite3_prepare_v2(d->db, "SELECT seq, t, range, kind, flags FROM events WHERE seq IN (?1, ?2)", -1, &s, NULL) != SQLITE_OK) {
        snprintf(err, errsz, "%s: cannot read events: %s", d->path, sqlite3_errmsg(d->db));
        return -1;
    }
    u64map by_birth = {0};
    for (size_t i = 0; i < n; i++) {
        const gm_alloc *a = &m->allocs[allocs[i]];
        lives[i].alloc = allocs[i];
        sqlite3_bind_int64(s, 1, (sqlite3_int64)a->birth);
        sqlite3_bind_int64(s, 2, (sqlite3_int64)a->death);
        while (sqlite3_step(s) == SQLITE_ROW) {
            uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0), t = (uint64_t)sqlite3_column_int64(s, 1);
            if (seq == a->birth) lives[i].birth_t = t;
            else
                lives[i].death_t = t,
                lives[i].death_range = gm_row_range(m, (uint32_t)sqlite3_column_int64(s, 2), (int64_t)t,
                                                    (unsigned)sqlite3_column_int(s, 3),
                                                    (unsigned)sqlite3_column_int(s, 4));
        }
        sqlite3_reset(s);
        if (u64map_put(&by_birth, a->birth, i) != 0) {
            sqlite3_finalize(s);
            u64map_free(&by_birth);
            snprintf(err, errsz, "%s: out of memory", d->path);
            return -1;
        }
    }
    sqlite3_finalize(s);
    if (!n || !gm_table_exists(d, "uses")) {
        u64map_free(&by_birth);
        return 0;
    }
    /* The uses of every allocation shown in one statement: with the uses_birth index (built at
     * close) SQLite looks each birth up; a killed process's file has no index, and one scan of
     * `uses` then serves them all instead of one scan per allocation. 1.2 has launches and
     * uses.access; a 1.1 file has neither. */
    static const char *const q[2] = {
        "SELECT u.birth, u.seq, u.kernel, u.access, e.t, e.range, l.op, l.start_ns, l.end_ns FROM uses u "
        "LEFT JOIN events e ON e.seq = u.seq LEFT JOIN launches l ON l.seq = u.seq "
        "WHERE u.birth IN (SELECT value FROM json_each(?1)) ORDER BY u.seq",
        "SELECT u.birth, u.seq, u.kernel, NULL, e.t, e.range, NULL, NULL, NULL FROM uses u "
        "LEFT JOIN events e ON e.seq = u.seq WHERE u.birth IN (SELECT value FROM json_each(?1)) ORDER BY u.seq"};
    size_t lcap = n * 21 + 3, o = 0;
    char *list = malloc(lcap);
    if (!list || (sqlite3_prepare_v2(d->db, q[0], -1, &s, NULL) != SQLITE_OK &&
                  sqlite3_prepare_v2(d->db, q[1], -1, &s, NULL) != SQLITE_OK)) {
        snprintf(err, errsz, "%s: cannot read uses: %s", d->path, list ? sqlite3_errmsg(d->db) : "out of memory");
        free(list);
        u64map_free(&by_birth);
        return -1;
    }
    list[o++] = '[';
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(list + o, lcap - o, "%s%" PRIu64, i ? "," : "", m->allocs[allocs[i]].birth);
    list[o++] = ']';
    list[o] = 0;
    sqlite3_bind_text(s, 1, list, (int)o, SQLITE_STATIC);
    size_t *cap = calloc(n, sizeof *cap);
    int rc = cap ? SQLITE_ROW : SQLITE_NOMEM;
    while (cap && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        uint64_t *li = u64map_get(&by_birth, (uint64_t)sqlite3_column_int64(s, 0));
        if (!li) continue;
        gm_life *l = &lives[*li];
        if (grow_uses(l, &cap[*li]) != 0) {
            rc = SQLITE_NOMEM;
            break;
        }
        gm_use *u = &l->uses[l->nuses++];
        u->seq = (uint64_t)sqlite3_column_int64(s, 1);
        u->kernel = (uint32_t)sqlite3_column_int64(s, 2);
        u->access = sqlite3_column_int(s, 3) & (int)(REC_ACC_READ | REC_ACC_WRITE);
        u->t = (uint64_t)sqlite3_column_int64(s, 4);
        u->range = gm_event_range(m, (uint32_t)sqlite3_column_int64(s, 5), (int64_t)u->t);
        u->op = sqlite3_column_type(s, 6) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 6);
        int timed = sqlite3_column_type(s, 7) != SQLITE_NULL && sqlite3_column_type(s, 8) != SQLITE_NULL;
        u->start_ns = timed ? sqlite3_column_int64(s, 7) : -1;
        u->end_ns = timed ? sqlite3_column_int64(s, 8) : -1;
    }
    sqlite3_finalize(s);
    free(list), free(cap);
    u64map_free(&by_birth);
    if (rc != SQLITE_DONE) {
        snprintf(err, errsz, "%s: the uses table is damaged: %s", d->path,
                 rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(d->db));
        return -1;
    }
    return 0;
}

void gm_life_free(gm_life *l) {
    free(l->uses);
    memset(l, 0, sizeof *l);
}
