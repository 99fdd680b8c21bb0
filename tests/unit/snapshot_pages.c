/* snapshot_pages.c — the sweep's page reader (snapshot/read/gm_analyze_pages.c) reads exactly the
 * rows SQLite reads, and gives up, never guesses, on anything else: its rows equal a query's
 * on a recorder's database; a WAL with frames, another declaration of `events`, and damaged
 * pages all leave the loaded model what the SQLite sweep (GPUMEM_SWEEP=sql) makes of the file;
 * an image in memory (the fuzz target's) is read the same way. Its fall-back, gm_events_sql,
 * hands over the same rows through SQLite, up to where SQLite stops on a damaged file; its lean
 * variant (gm_events_pages_lean) the same rows with t and stream 0, a device free's size,
 * requested, stack, device and alloc_id 0, and a device allocation's alloc_id. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>

#include "snapshot/analyze/gm_report.h"
#include "snapshot/formats/gm_formats.h"
#include "snapshot/read/gm_analyze_pages.h"
#include "snapshot/record/rec.h"
#include "snapshot/record/rec_internal.h"
#include "tests/unit/snapshot_test.h"

static char err[8192];

/* A recorder's database: n alloc/free pairs over three ranges, sizes and addresses of every
 * integer width, and allocations left alive. */
static void make_db(const char *p, int n) {
    unlink(p);
    rec_options o = {.path = p, .stacks = 4, .fork_record = 0, .ring = 1 << 16, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    for (int i = 0; i < n; i++) {
        if (i % 1000 == 0) {
            if (i) rec_range_pop();
            char name[32];
            snprintf(name, sizeof name, "step %d", i / 1000);
            rec_range_push(NULL, name);
        }
        uint64_t addr = (uint64_t)0x7f0000000000 + (uint64_t)i * 4096, size = (uint64_t)1 << (i % 40);
        rec_event(i % 3 ? REC_ALLOC : REC_ALLOC_ASYNC, 0, i % 2, addr, size, size - (uint64_t)(i % 7), (uint64_t)i + 1);
        if (i % 97) rec_event(i % 3 ? REC_FREE : REC_FREE_ASYNC, 0, i % 2, addr, size, 0, (uint64_t)i + 1);
    }
    rec_range_pop();
    rec_test_reset();
}

/* make_db, then sql run on the file by SQLite (the change a case makes); the rows it changed. */
static int make_db_edited(const char *p, int n, const char *sql) {
    make_db(p, n);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    int changed = sqlite3_changes(db);
    sqlite3_close(db);
    return changed;
}

typedef struct rows {
    gm_event_row *r;
    size_t n, cap;
} rows;

static int collect(void *ctx, const gm_event_row *r, size_t n) {
    rows *v = ctx;
    if (v->n + n > v->cap) {
        v->cap = (v->n + n) * 2;
        v->r = realloc(v->r, v->cap * sizeof *v->r);
        assert_non_null(v->r);
    }
    memcpy(v->r + v->n, r, n * sizeof *r);
    v->n += n;
    return 0;
}

/* The page reader's rows of p, checked against the sweep's query value for value. */
static rows rows_checked(const char *p) {
    gm_db d;
    assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
    rows v = {0};
    assert_int_equal(gm_events_pages(&d, collect, &v), GM_PAGES_DONE);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(d.db, "SELECT seq, kind, flags, addr, size, stack, range, "
                                              "coalesce(device, -1), requested, alloc_id, stream, t FROM events ORDER BY seq",
                                        -1, &s, NULL), SQLITE_OK);
    size_t i = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        assert_true(i < v.n);
        const gm_event_row *r = &v.r[i++];
        int64_t want[12], got[12] = {r->seq,   r->kind,   r->flags,     r->addr,     r->size,   r->stack,
                                     r->range, r->device, r->requested, r->alloc_id, r->stream, r->t};
        for (int c = 0; c < 12; c++) want[c] = sqlite3_column_int64(s, c);
        assert_memory_equal(want, got, sizeof want);
    }
    sqlite3_finalize(s);
    assert_int_equal(i, v.n);
    /* and gm_events_sql, the fall-back every caller takes, hands over the same rows */
    rows q = {0};
    assert_int_equal(gm_events_sql(&d, collect, &q), GM_PAGES_DONE);
    assert_int_equal(q.n, v.n);
    assert_memory_equal(q.r, v.r, v.n * sizeof *v.r);
    free(q.r);
    /* gm_events_pages_lean (the model's sweep): the same rows with t and stream 0, a device
     * free's size, requested, stack, device and alloc_id, and a device allocation's alloc_id */
    rows l = {0};
    assert_int_equal(gm_events_pages_lean(&d, collect, &l), GM_PAGES_DONE);
    assert_int_equal(l.n, v.n);
    for (size_t k = 0; k < v.n; k++) {
        gm_event_row want = v.r[k];
        want.t = want.stream = 0;
        if (want.kind == REC_FREE || want.kind == REC_FREE_ASYNC)
            want.size = want.requested = want.stack = want.device = want.alloc_id = 0;
        if (want.kind == REC_ALLOC || want.kind == REC_ALLOC_ASYNC) want.alloc_id = 0;
        assert_memory_equal(&l.r[k], &want, sizeof want);
    }
    free(l.r);
    gm_db_close(&d);
    return v;
}

/* Every row, value for value, what the sweep's query hands over. */
static void rows_equal_query(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "rows.db");
    /* NULLs where the recorder writes none, and the largest and smallest integers; rowids
     * after a gap and across the sizes of their varints (3 to 4 bytes at 2^21, 4 to 5 at 2^28,
     * where the reader stops expecting the next one: rowid_expect) */
    make_db_edited(p, 20000, "INSERT INTO events (seq, kind, addr) VALUES (2097151, 1, 1), (2097152, 2, 1), "
                             "(2097153, 1, 2), (2097155, 2, 2);"
                             "INSERT INTO events (seq, kind, addr, size, device) VALUES "
                             "(100000000, 1, 9223372036854775807, -9223372036854775808, NULL);"
                             "INSERT INTO events (seq, kind, flags) VALUES (100000001, 2, -1);"
                             "INSERT INTO events (seq, kind, addr) VALUES (268435455, 1, 3), (268435456, 2, 3), "
                             "(268435457, 1, 4);");
    rows v = rows_checked(p);
    gm_db d;
    assert_true(v.n > 39000);
    assert_int_equal(v.r[v.n - 1].device, -1);
    /* the same rows from an image in memory (gm_db_open_mem, what the fuzz target opens) */
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    unsigned char *img = malloc((size_t)st.st_size);
    int fd = open(p, O_RDONLY);
    assert_int_equal(read(fd, img, (size_t)st.st_size), st.st_size);
    close(fd);
    /* as the file lies (read where it is), then with a WAL-mode header (read from a copy, as
     * the rollback file an image without its -wal is): the same rows, the image unchanged */
    for (int wal = 0; wal < 2; wal++) {
        img[18] = img[19] = (unsigned char)(wal ? 2 : 1);
        unsigned char before[20];
        memcpy(before, img, sizeof before);
        assert_int_equal(gm_db_open_mem("image", img, (size_t)st.st_size, &d, err, sizeof err), 0);
        assert_int_equal(gm_meta_int(&d, "schema_major", 0), 1);
        rows w = {0};
        assert_int_equal(gm_events_pages(&d, collect, &w), GM_PAGES_DONE);
        assert_int_equal(w.n, v.n);
        assert_memory_equal(w.r, v.r, v.n * sizeof *v.r);
        gm_db_close(&d);
        assert_memory_equal(img, before, sizeof before);
        free(w.r);
    }
    free(img); /* valid until the close */
    free(v.r);
}

static int load_both_ways(const char *p);

static int stop_after_first(void *ctx, const gm_event_row *r, size_t n) {
    collect(ctx, r, n);
    return 1;
}

/* A callback that answers nonzero stops the SQLite read there (GM_PAGES_STOPPED), as it stops
 * the pages: no row is handed over after it. */
static void sql_rows_stop(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "stop.db");
    make_db(p, 5000);
    gm_db d;
    assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
    rows v = {0}, w = {0};
    assert_int_equal(gm_events_sql(&d, stop_after_first, &v), GM_PAGES_STOPPED);
    assert_int_equal(gm_events_pages(&d, stop_after_first, &w), GM_PAGES_STOPPED);
    assert_true(v.n > 0 && v.n < 10000 && w.n > 0);
    /* the batch it stopped in is a prefix of the rows */
    size_t k = v.n < w.n ? v.n : w.n;
    assert_memory_equal(v.r, w.r, k * sizeof *v.r);
    free(v.r), free(w.r);
    gm_db_close(&d);
}

/* Rows inserted in shuffled seq order: the leaves lie all over the file, out of order. */
static void leaves_out_of_order(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "shuffled.db");
    make_db(p, 10);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
    sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 30000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        char q[256];
        snprintf(q, sizeof q, "INSERT OR IGNORE INTO events (seq, kind, addr, size, requested, stack, range) "
                              "VALUES (%llu, %d, %llu, %d, %d, 0, 0)",
                 (unsigned long long)(1000 + x % 1000000), 1 + (int)(x % 2), (unsigned long long)(x >> 20) % 64 * 4096,
                 (int)(x % 100000), (int)(x % 99999));
        assert_int_equal(sqlite3_exec(db, q, NULL, NULL, NULL), SQLITE_OK);
    }
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(db);
    rows v = rows_checked(p);
    assert_true(v.n > 29000);
    free(v.r);
    assert_true(load_both_ways(p));
}

/* The sweep's results, field for field (pointers aside). */
static void assert_same_model(const gm_model *a, const gm_model *b) {
    assert_int_equal(a->events, b->events);
    assert_int_equal(a->max_seq, b->max_seq);
    assert_memory_equal(a->count_kind, b->count_kind, sizeof a->count_kind);
    assert_int_equal(a->allocated, b->allocated);
    assert_int_equal(a->reserved, b->reserved);
    assert_int_equal(a->requested, b->requested);
    assert_int_equal(a->peak_allocated, b->peak_allocated);
    assert_int_equal(a->peak_allocated_seq, b->peak_allocated_seq);
    assert_int_equal(a->peak_reserved, b->peak_reserved);
    assert_int_equal(a->peak_requested_seq, b->peak_requested_seq);
    assert_int_equal(a->cache_hits, b->cache_hits);
    assert_int_equal(a->unmatched_frees, b->unmatched_frees);
    assert_int_equal(a->truncated_warning, b->truncated_warning);
    assert_int_equal(a->nallocs, b->nallocs);
    for (size_t i = 0; i < a->nallocs; i++) { /* field by field: the padding is anything */
        const gm_alloc *x = &a->allocs[i], *y = &b->allocs[i];
        assert_true(x->birth == y->birth && x->death == y->death && x->size == y->size &&
                    x->requested == y->requested && x->stack == y->stack && x->range == y->range &&
                    x->name == y->name && x->kind == y->kind && x->device == y->device);
    }
    assert_int_equal(a->nsteps, b->nsteps);
    for (size_t i = 0; i < a->nsteps; i++) {
        const gm_step *x = &a->steps[i], *y = &b->steps[i];
        assert_true(x->step == y->step && x->end_allocated == y->end_allocated && x->end_seq == y->end_seq &&
                    x->leaked == y->leaked && x->nleaked == y->nleaked);
    }
}

static int count_rows(void *ctx, const gm_event_row *r, size_t n) {
    (void)r;
    *(size_t *)ctx += n;
    return 0;
}

/* what the page reader answered, by GM_PAGES_* */
static int outcomes[4];

/* the times gm_events_sql stopped at a damaged tail */
static int sql_errors;

/* gm_events_sql on p against a plain query stepped row by row: the same rows up to where SQLite
 * stopped, less those whose seq does not follow the last one kept (a cell's rowid overwritten:
 * left out, and the recording said damaged), and GM_SQL_ERROR exactly when it stopped at an error
 * (a damaged tail), which says the recording damaged too. */
static void sql_rows_as_query(gm_db *d) {
    rows v = {0};
    d->damage[0] = 0;
    int rc = gm_events_sql(d, collect, &v);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(d->db, "SELECT seq, kind, flags, addr, size, stack, range, "
                                               "coalesce(device, -1), requested, alloc_id, stream, t FROM events "
                                               "ORDER BY seq", -1, &s, NULL), SQLITE_OK);
    size_t i = 0, back = 0;
    int step;
    int64_t last = INT64_MIN;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (i && sqlite3_column_int64(s, 0) <= last) {
            back++;
            continue;
        }
        last = sqlite3_column_int64(s, 0);
        assert_true(i < v.n);
        const gm_event_row *r = &v.r[i++];
        int64_t want[12], got[12] = {r->seq,   r->kind,   r->flags,     r->addr,     r->size,   r->stack,
                                     r->range, r->device, r->requested, r->alloc_id, r->stream, r->t};
        for (int c = 0; c < 12; c++) want[c] = sqlite3_column_int64(s, c);
        assert_memory_equal(want, got, sizeof want);
    }
    sqlite3_finalize(s);
    assert_int_equal(i, v.n);
    assert_int_equal(rc, step == SQLITE_DONE ? GM_PAGES_DONE : GM_SQL_ERROR);
    if (back || rc == GM_SQL_ERROR) assert_true(d->damage[0]);
    sql_errors += rc == GM_SQL_ERROR;
    free(v.r);
}

/* Loads p both ways; 1 when both loaded (and agree), 0 when both refused. */
static int load_both_ways(const char *p) {
    gm_db d;
    gm_model pages, sql;
    if (gm_db_open(p, &d, err, sizeof err) != 0) return 0;
    size_t n = 0;
    outcomes[gm_events_pages(&d, count_rows, &n) & 3]++;
    sql_rows_as_query(&d);
    int rp = gm_model_load(&d, &pages, 0, err, sizeof err);
    setenv("GPUMEM_SWEEP", "sql", 1);
    int rs = gm_model_load(&d, &sql, 0, err, sizeof err);
    unsetenv("GPUMEM_SWEEP");
    assert_int_equal(rp, rs);
    if (rp == 0) assert_same_model(&pages, &sql);
    gm_model_free(&pages);
    gm_model_free(&sql);
    gm_db_close(&d);
    return rp == 0;
}

/* A WAL with frames in it holds pages newer than the file: not read from the file. */
static void wal_with_frames(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "wal.db");
    make_db(p, 3000);
    sqlite3 *w;
    assert_int_equal(sqlite3_open(p, &w), SQLITE_OK);
    sqlite3_exec(w, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0", NULL, NULL, NULL);
    assert_int_equal(sqlite3_exec(w, "INSERT INTO events (seq, kind, addr, size) VALUES (99999999, 1, 4096, 77)",
                                  NULL, NULL, NULL), SQLITE_OK);
    /* w stays open: its WAL keeps the row */
    gm_db d;
    assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
    rows v = {0};
    assert_int_equal(gm_events_pages(&d, collect, &v), GM_PAGES_NO);
    assert_int_equal(v.n, 0);
    gm_model m;
    assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
    assert_int_equal(m.max_seq, 99999999);
    gm_model_free(&m);
    gm_db_close(&d);
    sqlite3_close(w);
    free(v.r);
}

/* The reader maps the file it opens again by name only when that is the connection's file: a
 * file renamed over the name after the connection opened is not read in its place. */
static void file_replaced_under_reader(void **state) {
    (void)state;
    char p[512], q[512];
    snap_path(p, sizeof p, "replaced.db");
    snap_path(q, sizeof q, "replacement.db");
    make_db(p, 20000);
    make_db(q, 5000);
    gm_db d;
    assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
    assert_int_equal(rename(q, p), 0);
    rows v = {0};
    assert_int_equal(gm_events_pages(&d, collect, &v), GM_PAGES_DONE);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(d.db, "SELECT count(*), max(seq) FROM events", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_true(v.n > 39000);
    assert_int_equal(v.n, sqlite3_column_int64(s, 0));
    assert_int_equal(v.r[v.n - 1].seq, sqlite3_column_int64(s, 1));
    sqlite3_finalize(s);
    gm_db_close(&d);
    free(v.r);
}

/* A column added to events: the layout is not the schema's, SQLite reads it. */
static void other_declaration(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "altered.db");
    make_db_edited(p, 3000, "ALTER TABLE events ADD COLUMN extra INTEGER DEFAULT 5");
    gm_db d;
    assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
    rows v = {0};
    assert_int_equal(gm_events_pages(&d, collect, &v), GM_PAGES_NO);
    gm_db_close(&d);
    free(v.r);
    assert_true(load_both_ways(p));
}

/* The events rewritten by SQLite with other file-level settings: a page size other than the
 * recorder's (512, and 65536, which the header stores as 1), bytes reserved at the end of every
 * page (cells and the overflow threshold then go by the usable size), auto-vacuum (pointer-map
 * pages among the table's), rows deleted under secure_delete. The reader reads each exactly as
 * SQLite does. */
static void other_file_settings(void **state) {
    (void)state;
    static const struct {
        const char *name, *sql;
        int reserve;
    } v[] = {
        {"p512.db", "PRAGMA page_size=512; VACUUM", 0},
        {"p65536.db", "PRAGMA page_size=65536; VACUUM", 0},
        {"reserve.db", "SELECT 1", 40},
        {"reserve_small.db", "PRAGMA page_size=512; VACUUM", 32},
        {"autovacuum.db", "PRAGMA auto_vacuum=FULL; VACUUM", 0},
        {"secdel.db", "PRAGMA secure_delete=ON; DELETE FROM events WHERE seq % 5 = 0", 0},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char p[512];
        snap_path(p, sizeof p, v[i].name);
        make_db(p, 6000);
        sqlite3 *db;
        assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, v[i].sql, NULL, NULL, NULL), SQLITE_OK);
        if (v[i].reserve) { /* after the page size: its VACUUM keeps no reserve */
            int n = v[i].reserve;
            assert_int_equal(sqlite3_file_control(db, "main", SQLITE_FCNTL_RESERVE_BYTES, &n), SQLITE_OK);
            assert_int_equal(sqlite3_exec(db, "VACUUM", NULL, NULL, NULL), SQLITE_OK);
        }
        sqlite3_close(db);
        unsigned char h[100];
        int fd = open(p, O_RDONLY);
        assert_int_equal(read(fd, h, sizeof h), (ssize_t)sizeof h);
        close(fd);
        assert_int_equal(h[20], v[i].reserve); /* the setting took */
        rows r = rows_checked(p);
        assert_true(r.n > 5000);
        free(r.r);
        assert_true(load_both_ways(p));
    }
}

/* Values the recorder never writes: a REAL in an integer column (SQLite hands the sweep its
 * integer part), a text, and a row so large that its payload spills to overflow pages. The
 * reader gives up; the model is the SQLite sweep's. */
static void values_not_integers(void **state) {
    (void)state;
    static const char *const edit[] = {
        "UPDATE events SET size = 1.5 WHERE seq = (SELECT max(seq) FROM events)",
        "UPDATE events SET size = 2750.25 WHERE seq = 10", /* 2.75e3 would be stored as 2750 */
        "UPDATE events SET addr = 'x' || addr WHERE seq = 20",
        "UPDATE events SET t = randomblob(20000) WHERE seq = 30",
        "UPDATE events SET t = zeroblob(8100) WHERE seq = 40", /* just over one page's local size */
    };
    for (size_t i = 0; i < sizeof edit / sizeof edit[0]; i++) {
        char p[512];
        snap_path(p, sizeof p, "values.db");
        assert_int_equal(make_db_edited(p, 3000, edit[i]), 1);
        gm_db d;
        assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
        size_t n = 0;
        assert_int_not_equal(gm_events_pages(&d, count_rows, &n), GM_PAGES_DONE);
        gm_db_close(&d);
        assert_true(load_both_ways(p));
    }
}

/* events' last column dropped and added back: the declaration reads exactly as the schema's
 * again, but every older row holds 12 values, and SQLite gives the missing one its default
 * (NULL). The reader gives up on a row shorter than the table. */
static void column_dropped_and_added(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "readded.db");
    /* the views name events' columns: DROP COLUMN refuses while they do */
    make_db_edited(p, 3000, "DROP VIEW IF EXISTS allocations; DROP VIEW IF EXISTS stack_frames;"
                            "ALTER TABLE events DROP COLUMN range;"
                            "ALTER TABLE events ADD COLUMN range INTEGER");
    gm_db d;
    assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(d.db, "SELECT sql FROM sqlite_master WHERE name = 'events'", -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    /* the case this is about: the text the reader compares is the schema's */
    assert_non_null(strstr((const char *)sqlite3_column_text(s, 0), "stack INTEGER, range INTEGER)"));
    sqlite3_finalize(s);
    size_t n = 0;
    assert_int_equal(gm_events_pages(&d, count_rows, &n), GM_PAGES_NO);
    gm_db_close(&d);
    assert_true(load_both_ways(p));
}

/* p's page pgno (size pgsz) replaced by a leaf of the given cells, laid from the page's end. */
static void write_leaf(const char *p, uint32_t pgsz, uint32_t pgno, const uint8_t *const *cell,
                       const size_t *len, int ncell) {
    uint8_t *pg = calloc(pgsz, 1);
    assert_non_null(pg);
    uint32_t at = pgsz;
    pg[0] = 0x0d;
    pg[3] = (uint8_t)(ncell >> 8), pg[4] = (uint8_t)ncell;
    for (int i = 0; i < ncell; i++) {
        at -= (uint32_t)len[i];
        memcpy(pg + at, cell[i], len[i]);
        pg[8 + 2 * i] = (uint8_t)(at >> 8), pg[9 + 2 * i] = (uint8_t)at;
    }
    pg[5] = (uint8_t)(at >> 8), pg[6] = (uint8_t)at;
    int fd = open(p, O_WRONLY);
    assert_int_equal(pwrite(fd, pg, pgsz, (off_t)(pgno - 1) * pgsz), (ssize_t)pgsz);
    close(fd);
    free(pg);
}

/* A cell whose payload size is a 9-byte varint. SQLite reads that size 7 bits a byte, the
 * ninth too (btreeParseCellPtr), where a record's varints take all 8 bits of the ninth: the
 * size 0x88 written so is 8 to SQLite, for which the 136-byte record on the page is damaged.
 * The reader must not take the row. */
static void payload_size_nine_bytes(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "varint9.db");
    make_db(p, 2);
    uint32_t root = (uint32_t)snap_q(p, "SELECT rootpage FROM sqlite_master WHERE name = 'events'");
    uint32_t pgsz = (uint32_t)snap_q(p, "PRAGMA page_size");
    /* seq 1, a plain record: t 1, kind 1 (alloc), device 0, 4096 bytes at 0x1000 */
    static const uint8_t a[] = {21, 1, /* payload size, rowid */
                                14, 0, 1, 1, 0, 1, 0, 0, 2, 2, 0, 0, 0, 0,
                                1, 1, 0, 0x10, 0x00, 0x10, 0x00};
    /* seq 2: payload size 80x8 88; a 40-byte header (each type as 80 80 t), 12 8-byte values */
    uint8_t b[9 + 1 + 136];
    size_t nb = 0;
    for (int i = 0; i < 8; i++) b[nb++] = 0x80;
    b[nb++] = 0x88;
    b[nb++] = 2; /* rowid */
    b[nb++] = 40;
    for (int col = 0; col < 13; col++) b[nb++] = 0x80, b[nb++] = 0x80, b[nb++] = col ? 6 : 0;
    for (int col = 1; col < 13; col++)
        for (int k = 0; k < 8; k++) b[nb++] = k == 7 ? (uint8_t)(col == 2 ? 2 : col == 3 ? 0 : 1) : 0;
    assert_int_equal(nb, sizeof b);
    const uint8_t *cells[] = {a, b};
    size_t lens[] = {sizeof a, sizeof b};
    write_leaf(p, pgsz, root, cells, lens, 2);
    /* SQLite: the first row, then the second damaged */
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(p, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT seq, kind, size FROM events ORDER BY seq", -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int64(s, 0), 1);
    assert_int_equal(sqlite3_column_int64(s, 2), 4096);
    assert_int_equal(sqlite3_step(s), SQLITE_CORRUPT);
    sqlite3_finalize(s);
    sqlite3_close(db);
    /* the model: one event, and the damaged tail said */
    assert_true(load_both_ways(p));
    gm_db d;
    assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
    rows v = {0};
    assert_int_equal(gm_events_pages(&d, collect, &v), GM_PAGES_NO);
    assert_int_equal(v.n, 0);
    gm_model m;
    assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
    assert_int_equal(m.events, 1);
    assert_int_equal(m.truncated_warning, 1);
    gm_model_free(&m);
    gm_db_close(&d);
    free(v.r);
}

/* A writer at work while the pages are read (a report on a recording still being written):
 * the read transaction keeps the file as it was from the first leaf to the last. In rollback
 * mode the writer cannot commit; in WAL mode its rows go to the WAL and no checkpoint can copy
 * them into the file. Either way the rows are the file's before the write. */
typedef struct writer_ctx {
    rows v;
    sqlite3 *w;
    int wal, wrote, commit_rc, ckpt_rc;
} writer_ctx;

static int collect_and_write(void *ctx, const gm_event_row *r, size_t n) {
    writer_ctx *x = ctx;
    if (!x->wrote++) {
        assert_int_equal(sqlite3_exec(x->w, "BEGIN IMMEDIATE; INSERT INTO events (seq, kind, addr, size) "
                                            "VALUES (99999999, 1, 4096, 77)", NULL, NULL, NULL), SQLITE_OK);
        x->commit_rc = sqlite3_exec(x->w, "COMMIT", NULL, NULL, NULL);
        if (x->commit_rc != SQLITE_OK) sqlite3_exec(x->w, "ROLLBACK", NULL, NULL, NULL);
        x->ckpt_rc = x->wal ? sqlite3_wal_checkpoint_v2(x->w, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL) : 0;
    }
    return collect(&x->v, r, n);
}

static void writer_during_read(void **state) {
    (void)state;
    for (int wal = 0; wal < 2; wal++) {
        char p[512];
        snap_path(p, sizeof p, wal ? "writer_wal.db" : "writer_rollback.db");
        make_db(p, 20000);
        writer_ctx x = {.wal = wal};
        assert_int_equal(sqlite3_open(p, &x.w), SQLITE_OK);
        assert_int_equal(sqlite3_exec(x.w, wal ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE",
                                      NULL, NULL, NULL), SQLITE_OK);
        long long before = snap_q(p, "SELECT count(*) FROM events");
        gm_db d;
        assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
        assert_int_equal(gm_events_pages(&d, collect_and_write, &x), GM_PAGES_DONE);
        assert_true(x.wrote > 1); /* the write came between leaves */
        assert_int_equal((long long)x.v.n, before);
        assert_true(x.v.r[x.v.n - 1].seq != 99999999);
        if (wal) {
            assert_int_equal(x.commit_rc, SQLITE_OK);
            assert_int_equal(x.ckpt_rc, SQLITE_BUSY);
        } else {
            assert_int_equal(x.commit_rc, SQLITE_BUSY);
        }
        gm_db_close(&d);
        free(x.v.r);
        /* after the read the writer's row is there to read (through the WAL in WAL mode) */
        if (!wal) assert_int_equal(sqlite3_exec(x.w, "INSERT INTO events (seq, kind, addr, size) "
                                                     "VALUES (99999999, 1, 4096, 77)", NULL, NULL, NULL), SQLITE_OK);
        assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
        gm_model m;
        assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
        assert_int_equal(m.max_seq, 99999999);
        gm_model_free(&m);
        gm_db_close(&d);
        sqlite3_close(x.w);
    }
}

/* Bytes overwritten in the events pages (records, cell pointers, page headers, child
 * pointers): whatever SQLite makes of each file, the model is the same. */
static void damaged_pages_same_model(void **state) {
    (void)state;
    char p[512], q[512];
    snap_path(p, sizeof p, "clean.db");
    snap_path(q, sizeof q, "damaged.db");
    make_db(p, 20000);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    unsigned char *clean = malloc((size_t)st.st_size);
    int fd = open(p, O_RDONLY);
    assert_int_equal(read(fd, clean, (size_t)st.st_size), st.st_size);
    close(fd);
    uint32_t pgsz = (uint32_t)clean[16] << 8 | clean[17];
    assert_true(pgsz >= 512);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int loaded = 0;
    for (int variant = 0; variant < 120; variant++) {
        unsigned char *b = malloc((size_t)st.st_size);
        memcpy(b, clean, (size_t)st.st_size);
        int hits = 1 + variant % 4;
        for (int k = 0; k < hits; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t page = 2 + (seed >> 33) % ((uint64_t)st.st_size / pgsz - 1);
            uint64_t at = (page - 1) * pgsz;
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            /* a third at the page header and cell pointers, the rest anywhere in the page */
            at += variant % 3 == 0 ? (seed >> 40) % 24 : (seed >> 40) % pgsz;
            b[at] ^= (unsigned char)(1 + (seed >> 20) % 255);
        }
        fd = open(q, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        assert_int_equal(write(fd, b, (size_t)st.st_size), st.st_size);
        close(fd);
        free(b);
        loaded += load_both_ways(q);
    }
    free(clean);
    print_message("damaged files: %d loaded; the page reader read %d, gave up on %d before a row, "
                  "%d after rows; SQLite stopped at the damage in %d\n", loaded, outcomes[GM_PAGES_DONE],
                  outcomes[GM_PAGES_NO], outcomes[GM_PAGES_RESTART], sql_errors);
    /* both ways of the reader were taken: damage it reads past, damage it gives up on */
    assert_true(loaded > 0 && outcomes[GM_PAGES_DONE] > 0 && outcomes[GM_PAGES_RESTART] > 0 && sql_errors > 0);
    assert_true(load_both_ways(p));
}

/* A recording of varied lives: allocations freed in random order from a pool of up to 300, one
 * in 40 never freed (so the peak comes late), three "step N" ranges. */
static void make_lives_db(const char *p, int n) {
    unlink(p);
    rec_options o = {.path = p, .stacks = 4, .fork_record = 0, .ring = 1 << 16, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    uint64_t live[300], seed = 42;
    int nlive = 0;
    for (int i = 0; i < n; i++) {
        if (i % (n / 3 + 1) == 0) {
            if (i) rec_range_pop();
            char name[32];
            snprintf(name, sizeof name, "step %d", i / (n / 3 + 1));
            rec_range_push(NULL, name);
        }
        uint64_t addr = (uint64_t)0x7f0000000000 + (uint64_t)i * 4096, size = 4096 + (uint64_t)(i % 64) * 512;
        rec_event(REC_ALLOC, 0, 0, addr, size, size, (uint64_t)i + 1);
        if (i % 40 && nlive < 300) live[nlive++] = addr;
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        for (int f = (int)((seed >> 33) % 3); f > 0 && nlive > 0; f--) { /* 0-2 frees, any of the pool */
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int k = (int)((seed >> 33) % (uint64_t)nlive);
            rec_event(REC_FREE, 0, 0, live[k], 0, 0, 0);
            live[k] = live[--nlive];
        }
    }
    rec_range_pop();
    rec_test_reset();
}

/* The model's marks on its list of deaths find, for any moment, the first death after it and
 * how many follow, as a search of every allocation does; its list of the allocations never
 * freed is every one whose death is 0; and the report, which takes the allocations live at its
 * late peak from those (and leaks from the list), prints what a pass over every allocation
 * gives. */
static void deaths_after_marks(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "lives.db");
    make_lives_db(p, 40000);
    gm_db d;
    gm_model m;
    assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
    assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
    assert_true(m.deaths_linked && m.alive_known);
    assert_true(m.ndeath_marks >= 5 && m.ndeath_marks == m.ndeaths / GM_DEATH_MARK);
    size_t nalive = 0;
    for (size_t i = 0; i < m.nallocs; i++)
        if (!m.allocs[i].death) {
            assert_true(nalive < m.nalive);
            assert_int_equal(m.alive[nalive++], i);
        }
    assert_int_equal(nalive, m.nalive);
    for (uint64_t seq = 0; seq <= m.max_seq + 1; seq += 1 + seq % 97) {
        size_t first, after, want = 0, wafter = 0;
        assert_int_equal(gm_first_death_after(&m, seq, &first, &after), 0);
        for (size_t i = 0; i < m.nallocs; i++)
            if (m.allocs[i].death > seq) {
                wafter++;
                if (!want || m.allocs[i].death < m.allocs[want - 1].death) want = i + 1;
            }
        assert_int_equal(first, want);
        assert_int_equal(after, wafter);
    }
    /* the report and leaks, from the model's lists and from a pass over every allocation: the
     * peak late enough that the report takes the first (fewer deaths after it than an eighth
     * of the allocations born by then) */
    size_t first, after, born = 0;
    assert_int_equal(gm_first_death_after(&m, m.peak_allocated_seq, &first, &after), 0);
    while (born < m.nallocs && m.allocs[born].birth <= m.peak_allocated_seq) born++;
    print_message("peak at seq %" PRIu64 " of %" PRIu64 ": %zu deaths after it, %zu never freed, %zu born by then\n",
                  m.peak_allocated_seq, m.max_seq, after, m.nalive, born);
    assert_true(after + m.nalive <= born / 8);
    char *out[2][2] = {{NULL}};
    size_t len[2][2];
    gm_opts o = {.json = 1, .top = 50};
    for (int pass = 0; pass < 2; pass++) {
        m.alive_known = !pass;
        FILE *f = open_memstream(&out[pass][0], &len[pass][0]);
        assert_int_equal(gm_report(&d, &m, &o, f), 0);
        fclose(f);
        uint64_t leaked;
        f = open_memstream(&out[pass][1], &len[pass][1]);
        gm_leaks(&d, &m, &o, f, &leaked);
        fclose(f);
    }
    for (int k = 0; k < 2; k++) {
        assert_int_equal(len[0][k], len[1][k]);
        assert_memory_equal(out[0][k], out[1][k], len[0][k]);
        free(out[0][k]), free(out[1][k]);
    }
    gm_model_free(&m);
    gm_db_close(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(deaths_after_marks),
        cmocka_unit_test(rows_equal_query),
        cmocka_unit_test(sql_rows_stop),
        cmocka_unit_test(leaves_out_of_order),
        cmocka_unit_test(wal_with_frames),
        cmocka_unit_test(other_declaration),
        cmocka_unit_test(file_replaced_under_reader),
        cmocka_unit_test(other_file_settings),
        cmocka_unit_test(values_not_integers),
        cmocka_unit_test(column_dropped_and_added),
        cmocka_unit_test(payload_size_nine_bytes),
        cmocka_unit_test(writer_during_read),
        cmocka_unit_test(damaged_pages_same_model),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", snap_tmpdir());
    if (system(cmd) != 0) return 1;
    return rc;
}
