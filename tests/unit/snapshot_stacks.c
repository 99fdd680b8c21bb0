/* snapshot_stacks.c — call stacks: captured on the application thread, stored once per
 * distinct stack, module-relative (path + build-id + offset), and symbolized after the run with
 * libdw so that this file's function names and file name come out. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "snapshot/analyze/gm_report.h"
#include "snapshot/formats/gm_formats.h"
#include "snapshot/record/rec.h"
#include "snapshot/record/rec_internal.h"
#include "snapshot/record/rec_unwind.h"
#include "tests/unit/snapshot_test.h"

static char path[512];

__attribute__((noinline)) void stack_site_alpha(uint64_t a) {
    rec_event(REC_ALLOC, 0, 0, a, 256, 256, a);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void stack_site_beta(uint64_t a) {
    rec_event(REC_ALLOC, 0, 0, a, 512, 512, a);
    __asm__ volatile("" ::: "memory");
}

/* An inline chain: inl_root calls inl_outer calls inl_inner calls stack_site_alpha, the two
 * middle ones inlined (always_inline), so the return address in inl_root belongs to inl_inner,
 * inl_outer and inl_root at once. Each call sits on the line its enum records. */
static inline __attribute__((always_inline)) void inl_inner(uint64_t a) { stack_site_alpha(a); } enum { L_INNER = __LINE__ };
static inline __attribute__((always_inline)) void inl_outer(uint64_t a) { inl_inner(a); } enum { L_OUTER = __LINE__ };
__attribute__((noinline)) void inl_root(uint64_t a) { inl_outer(a); __asm__ volatile("" ::: "memory"); } enum { L_ROOT = __LINE__ };

static void dedup_and_symbolize(void **state) {
    (void)state;
    snap_path(path, sizeof path, "stacks.db");
    unlink(path);
    rec_options o = {.path = path, .stacks = 16, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    for (uint64_t i = 0; i < 100; i++) {
        stack_site_alpha(0x10000 + i * 1024);
        stack_site_beta(0x90000 + i * 1024);
    }
    rec_test_reset(); /* closes */
    /* 200 events, exactly two distinct stacks: each stored once */
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT stack) FROM events"), 2);
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT stack) FROM stacks"), 2);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE stack IS NULL"), 0);
    /* frames are module-relative; the module is this test binary, with its build-id */
    char mod[512], exe[512] = {0};
    snap_q_text(path, "SELECT m.path FROM stacks s JOIN frames f ON f.id=s.frame JOIN modules m "
                      "ON m.id=f.module WHERE s.depth=0 LIMIT 1", mod, sizeof mod);
    assert_true(readlink("/proc/self/exe", exe, sizeof exe - 1) > 0);
    assert_string_equal(mod, exe);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM modules WHERE build_id IS NOT NULL AND length(build_id)=40 AND path=(SELECT value FROM meta WHERE key='exe')"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM frames WHERE function IS NOT NULL"), 0);

    gm_db d;
    gm_model m;
    char err[4096];
    assert_int_equal(gm_db_open(path, &d, err, sizeof err), 0);
    assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
    assert_true(gm_symbolize(&d, &m) > 0);
    int seen_alpha = 0, seen_beta = 0;
    for (size_t i = 0; i < m.nallocs; i++) {
        long f = gm_stack_site(&m, m.allocs[i].stack);
        assert_true(f >= 0);
        const gm_frame *fr = &m.frames[f];
        assert_non_null(fr->function);
        assert_non_null(fr->file);
        assert_non_null(strstr(fr->file, "snapshot_stacks.c"));
        assert_true(fr->line > 0);
        if (strcmp(fr->function, "stack_site_alpha") == 0) seen_alpha++;
        else if (strcmp(fr->function, "stack_site_beta") == 0) seen_beta++;
        /* the next frame is the caller: this test function */
        long caller = gm_stack_frame(&m, m.allocs[i].stack, 1, NULL);
        assert_true(caller >= 0);
        assert_string_equal(m.frames[caller].function, "dedup_and_symbolize");
    }
    assert_int_equal(seen_alpha, 100);
    assert_int_equal(seen_beta, 100);
    gm_model_free(&m);
    gm_db_close(&d);
    /* readers never write the recording: the names stay in memory */
    assert_int_equal(snap_q(path, "SELECT count(*) FROM frames WHERE function='stack_site_alpha'"), 0);
}

/* Checks the logical frames above the site of the inline-chain stack: inl_inner at the call of
 * stack_site_alpha, then inl_outer and inl_root at the inlined calls (nearest first). */
static void check_inline_chain(const gm_model *m, uint32_t stack) {
    static const struct { const char *fn; int line; } want[] = {
        {"inl_inner", L_INNER}, {"inl_outer", L_OUTER}, {"inl_root", L_ROOT}};
    long site = gm_stack_site(m, stack);
    assert_true(site >= 0);
    assert_string_equal(m->frames[site].function, "stack_site_alpha");
    for (size_t k = 0; k < 3; k++) {
        long f = gm_stack_frame(m, stack, 1 + k, NULL);
        assert_true(f >= 0);
        assert_non_null(m->frames[f].function);
        assert_string_equal(m->frames[f].function, want[k].fn);
        assert_non_null(m->frames[f].file);
        assert_non_null(strstr(m->frames[f].file, "snapshot_stacks.c"));
        assert_int_equal(m->frames[f].line, want[k].line);
        /* inl_inner is the recorded frame itself; the two enclosing ones are made from it */
        assert_int_equal(m->frames[f].inl_depth, k);
    }
    long next = gm_stack_frame(m, stack, 4, NULL);
    assert_true(next >= 0);
    assert_string_equal(m->frames[next].function, "inline_frames");
}

static void inline_frames(void **state) {
    (void)state;
    snap_path(path, sizeof path, "inline.db");
    unlink(path);
    rec_options o = {.path = path, .stacks = 16, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    inl_root(0x5000);
    rec_test_reset();
    char err[4096];
    for (int pass = 0; pass < 2; pass++) {
        /* each reader symbolizes with libdw, in memory: the file is never written (pass 1 finds
         * nothing left by pass 0) */
        gm_db d;
        gm_model m;
        assert_int_equal(gm_db_open(path, &d, err, sizeof err), 0);
        assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
        size_t done = gm_symbolize(&d, &m);
        assert_true(done > 0);
        assert_int_equal(m.nallocs, 1);
        check_inline_chain(&m, m.allocs[0].stack);
        size_t before = m.nstack_frames;
        assert_int_equal(gm_expand_inlines(&m), 0); /* idempotent */
        assert_int_equal(m.nstack_frames, before);
        if (pass == 1) {
            /* gpumem sql's view of them: TEMP tables shadow frames / inlines / stack_frames */
            assert_int_equal(gm_symbols_temp(&d, &m), 0);
            sqlite3_stmt *st;
            assert_int_equal(sqlite3_prepare_v2(d.db, "SELECT inlined_into FROM stack_frames WHERE function = 'inl_inner'",
                                                -1, &st, NULL), SQLITE_OK);
            assert_int_equal(sqlite3_step(st), SQLITE_ROW);
            const char *chain = (const char *)sqlite3_column_text(st, 0);
            assert_non_null(chain);
            assert_non_null(strstr(chain, "inl_outer (")); /* nearest first */
            assert_true(strstr(chain, "inl_outer (") < strstr(chain, " < inl_root ("));
            sqlite3_finalize(st);
        }
        gm_model_free(&m);
        gm_db_close(&d);
    }
    /* nothing written back: the file's own tables are as recorded */
    assert_int_equal(snap_q(path, "SELECT count(*) FROM inlines"), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM frames WHERE symbolized = 1 AND module IS NOT NULL"), 0);
}

static void stacks_off(void **state) {
    (void)state;
    snap_path(path, sizeof path, "nostacks.db");
    unlink(path);
    rec_options o = {.path = path, .stacks = 0, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    stack_site_alpha(0x10);
    rec_test_reset();
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE stack IS NULL"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM stacks"), 0);
}

/* ---- Python frames (schema 1.3): a provider stands in for preload/python.c ---------------- */
static uint32_t py_ids[4][2]; /* function, file string ids: forward, deepcopy, step, <module> */
static uint32_t py_line = 42;
static int py_on = 1;

static int fake_python(rec_pyframe *out, int max) {
    static const uint32_t lines[4] = {0, 153, 88, 7};
    if (!py_on || max < 4) return 0;
    for (int i = 0; i < 4; i++)
        out[i] = (rec_pyframe){py_ids[i][0], py_ids[i][1], i ? lines[i] : py_line};
    return 4;
}

/* The interpreter's native frames are this function's caller and beyond: its return address
 * is the start of the interpreter's range, so only this frame stays native. */
__attribute__((noinline)) void py_site(uint64_t a) {
    uint64_t ra = (uint64_t)(uintptr_t)__builtin_return_address(0);
    rec_set_python(fake_python, ra, ra + 1);
    rec_event(REC_ALLOC, 0, 0, a, 256, 256, a);
    __asm__ volatile("" ::: "memory");
}

static void python_frames(void **state) {
    (void)state;
    snap_path(path, sizeof path, "python.db");
    unlink(path);
    rec_options o = {.path = path, .stacks = 16, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    static const char *const names[4][2] = {{"forward", "/home/u/model.py"},
                                            {"deepcopy", "/usr/lib/python3.11/copy.py"},
                                            {"step", "/home/u/train.py"},
                                            {"<module>", "/home/u/train.py"}};
    for (int i = 0; i < 4; i++)
        py_ids[i][0] = rec_string(names[i][0]), py_ids[i][1] = rec_string(names[i][1]);
    for (int i = 0; i < 10; i++) py_site(0x1000 + i * 1024); /* one stack */
    py_line = 43;
    py_site(0x100000); /* another line: another stack */
    py_on = 0;
    py_site(0x200000); /* no Python stack now (no GIL): native frames only, not cut */
    rec_set_python(NULL, 0, 0);
    py_on = 1, py_line = 42;
    rec_test_reset();

    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='schema_minor'"), REC_SCHEMA_MINOR);
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT stack) FROM events"), 3);
    /* one row per distinct (function, file, line): forward:42, forward:43, deepcopy, step, <module> */
    assert_int_equal(snap_q(path, "SELECT count(*) FROM frames WHERE python = 1 AND module IS NULL AND "
                                  "offset IS NULL AND symbolized = 1"), 5);
    /* the stacks with Python frames: py_site native at depth 0, then the Python frames */
    assert_int_equal(snap_q(path, "SELECT count(*) FROM stacks s JOIN frames f ON f.id = s.frame "
                                  "WHERE f.python IS NULL AND s.depth > 0 AND s.stack IN "
                                  "(SELECT stack FROM stack_frames WHERE python = 1)"), 0);
    char got[512];
    snap_q_text(path, "SELECT group_concat(function || ':' || line, ' ') FROM (SELECT * FROM stack_frames "
                      "WHERE stack = (SELECT stack FROM events ORDER BY seq LIMIT 1) AND python = 1 ORDER BY depth)",
                got, sizeof got);
    assert_string_equal(got, "forward:42 deepcopy:153 step:88 <module>:7");
    assert_int_equal(snap_q(path, "SELECT min(depth) FROM stack_frames WHERE python = 1 AND stack = "
                                  "(SELECT stack FROM events ORDER BY seq LIMIT 1)"), 1);
    /* without Python frames the native stack is whole: this test and its callers */
    assert_true(snap_q(path, "SELECT count(*) FROM stacks WHERE stack = (SELECT stack FROM events "
                             "ORDER BY seq DESC LIMIT 1)") > 2);

    gm_db d;
    gm_model m;
    char err[4096], site[512];
    assert_int_equal(gm_db_open(path, &d, err, sizeof err), 0);
    assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
    gm_symbolize(&d, &m);
    /* the user's code: the stdlib's copy.py is skipped between forward and its caller */
    gm_site_desc(&m, m.allocs[0].stack, site, sizeof site);
    assert_string_equal(site, "model.py:42 in forward < train.py:88 in step");
    gm_site_desc(&m, m.allocs[10].stack, site, sizeof site);
    assert_string_equal(site, "model.py:43 in forward < train.py:88 in step");
    m.frames_all = 1; /* --frames all: the native rule over every frame */
    gm_site_desc(&m, m.allocs[0].stack, site, sizeof site);
    assert_non_null(strstr(site, "py_site ("));
    assert_non_null(strstr(site, " < model.py:42 in forward"));
    m.frames_all = 0;
    gm_site_desc(&m, m.allocs[11].stack, site, sizeof site);
    assert_non_null(strstr(site, "py_site (")); /* no Python frames: native as before */
    gm_model_free(&m);
    gm_db_close(&d);
}

/* ---- the memo of stack walks (snapshot/record/rec_unwind.h) ---- */

__attribute__((noinline)) void memo_site(uint64_t a) {
    rec_event(REC_ALLOC, 0, 0, a, 64, 64, a);
    __asm__ volatile("" ::: "memory");
}
/* two call sites of rec_event in one function, at one depth: one key, two stacks */
__attribute__((noinline)) void memo_pair(uint64_t a) {
    rec_event(REC_ALLOC, 0, 0, a, 128, 128, a);
    __asm__ volatile("" ::: "memory");
    rec_event(REC_FREE, 0, 0, a, 128, 0, a);
    __asm__ volatile("" ::: "memory");
}
/* the same body twice: memo_site at the same stack pointer under two different callers */
__attribute__((noinline)) void memo_via_a(uint64_t a) { memo_site(a); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void memo_via_b(uint64_t a) { memo_site(a); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void memo_deep(int d, uint64_t a) {
    if (d > 0) memo_deep(d - 1, a);
    else memo_pair(a);
    __asm__ volatile("" ::: "memory");
}
/* a frame-pointer frame (alloca) of varying size above the call */
__attribute__((noinline)) void memo_alloca(unsigned sz, uint64_t a) {
    volatile char *p = __builtin_alloca(sz);
    p[0] = 1;
    if (sz & 16) memo_via_a(a);
    else memo_site(a);
    __asm__ volatile("" ::: "memory");
}

/* One fixed sequence of calls from every kind above, mixed by a fixed pseudo-random order. */
static void memo_mix(void) {
    uint64_t x = 12345;
    for (uint64_t i = 0; i < 3000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t a = 0x100000 + i * 256;
        switch ((x >> 33) % 6) {
        case 0: memo_pair(a); break;
        case 1: memo_via_a(a); break;
        case 2: memo_via_b(a); break;
        case 3: memo_deep((int)((x >> 40) % 4), a); break;
        case 4: memo_alloca(32 + (unsigned)((x >> 44) % 4) * 16, a); break;
        default: memo_site(a); break;
        }
    }
}

/* Each event's frames, innermost first, as text: "seq:off,off,..;" for every event. */
static char *memo_frames(const char *db_path) {
    sqlite3 *db;
    size_t cap = 1 << 20, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    out[0] = 0;
    assert_int_equal(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT e.seq, (SELECT group_concat(o, ',') FROM (SELECT "
                                            "f.offset AS o FROM stacks t JOIN frames f ON f.id = t.frame "
                                            "WHERE t.stack = e.stack ORDER BY t.depth)) FROM events e "
                                            "ORDER BY e.seq", -1, &s, NULL),
                     SQLITE_OK);
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *f = (const char *)sqlite3_column_text(s, 1);
        size_t need = strlen(f ? f : "") + 32;
        if (len + need >= cap) {
            cap = 2 * (len + need);
            out = realloc(out, cap);
            assert_non_null(out);
        }
        len += (size_t)snprintf(out + len, cap - len, "%lld:%s;", (long long)sqlite3_column_int64(s, 0),
                                f ? f : "-");
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return out;
}

/* The memo answers most stacks of a repeating program, and every event gets the frames the
 * walk gives without it: one mixed sequence (two stacks under one key, one site under two
 * callers at one stack pointer, depths, frame-pointer frames of varying size) recorded with and
 * without the memo, compared event by event. The memo keeps each stack's id for the recording
 * that gave it: the second recording starts with a stack of its own, so that the same stacks
 * get other ids there, and an id kept from the first would give wrong frames. */
__attribute__((noinline)) void memo_shift(void) {
    rec_event(REC_ALLOC, 0, 0, 0x10, 64, 64, 1);
    __asm__ volatile("" ::: "memory");
}

static void memo_same_as_walk(void **state) {
    (void)state;
    char p[3][512];
    uint64_t hits[3] = {0};
    /* run 0: the memo fills and answers; 1: a new recording, stacks in another order of ids;
     * 2: the same as 1 without the memo. memo_mix from one call site: the frames of this test
     * and beyond are the same in each. */
    for (int run = 0; run < 3; run++) {
        snprintf(p[run], sizeof p[run], "%s/memo%d.db", snap_tmpdir(), run);
        unlink(p[run]);
        rec_options o = {.path = p[run], .stacks = 16, .fork_record = 0, .ring = 1 << 16, .quiet = 1};
        assert_int_equal(rec_open(&o), 0);
        rec_g.no_unw_memo = run == 2;
        if (run > 0) memo_shift();
        uint64_t h0 = rec_unw_tls ? rec_unw_tls->hits : 0;
        memo_mix();
        assert_non_null(rec_unw_tls);
        hits[run] = rec_unw_tls->hits - h0;
        rec_g.no_unw_memo = 0;
        rec_test_reset();
    }
    assert_int_equal(hits[2], 0); /* walked every time */
    /* ~4,000 events from 14 stacks: nearly all answered by the memo */
    long long n = snap_q(p[0], "SELECT count(*) FROM events");
    assert_true(n > 3000);
    for (int run = 0; run < 2; run++) {
        if (hits[run] <= (uint64_t)n * 9 / 10)
            fprintf(stderr, "memo: %llu hits of %lld events\n", (unsigned long long)hits[run], n);
        assert_true(hits[run] > (uint64_t)n * 9 / 10);
    }
    assert_true(snap_q(p[0], "SELECT count(DISTINCT stack) FROM events") >= 8);
    /* the ids moved: the first event's stack is memo_shift's now */
    assert_true(snap_q(p[1], "SELECT stack FROM events WHERE seq = 2") !=
                snap_q(p[0], "SELECT stack FROM events WHERE seq = 1"));
    char *a = memo_frames(p[1]), *b = memo_frames(p[2]);
    assert_string_equal(a, b);
    free(a);
    free(b);
}

/* A thread's memo is its own and goes with it (LeakSanitizer in `make test SAN=address`): a
 * thread that records the mixed sequence answers from its memo too. */
static void *memo_thread(void *arg) {
    memo_mix();
    *(uint64_t *)arg = rec_unw_tls ? rec_unw_tls->hits : 0;
    return NULL;
}

static void memo_per_thread(void **state) {
    (void)state;
    snap_path(path, sizeof path, "memo_thread.db");
    unlink(path);
    rec_options o = {.path = path, .stacks = 16, .fork_record = 0, .ring = 1 << 16, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    uint64_t hits = 0;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, memo_thread, &hits), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    rec_test_reset();
    assert_true(hits > 3000);
    assert_true(snap_q(path, "SELECT count(*) FROM events") > 3000);
}

/* A held stack (rec_stack_hold, taken before a lock inside which the events are written): every
 * event until the release carries the stack of the hold's caller, not of where it is written;
 * an inner hold changes nothing; after the release, and in a later recording, events walk their
 * own stack again. */
__attribute__((noinline)) void held_write(uint64_t a) {
    rec_event(REC_ALLOC, 0, 0, a, 64, 64, a);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void held_site(uint64_t a) {
    int h = rec_stack_hold();
    assert_int_equal(h, 1);
    held_write(a);
    int inner = rec_stack_hold(); /* already held: nothing */
    assert_int_equal(inner, 0);
    held_write(a + 64);
    rec_stack_release(inner); /* the outer hold stays */
    held_write(a + 128);
    rec_stack_release(h);
    __asm__ volatile("" ::: "memory");
}

static const char *held_site_fn(const char *db, long long seq, gm_db *d, gm_model *m) {
    char err[4096];
    assert_int_equal(gm_db_open(db, d, err, sizeof err), 0);
    assert_int_equal(gm_model_load(d, m, 0, err, sizeof err), 0);
    assert_true(gm_symbolize(d, m) > 0);
    for (size_t i = 0; i < m->nallocs; i++)
        if ((long long)m->allocs[i].birth == seq) {
            long f = gm_stack_site(m, m->allocs[i].stack);
            assert_true(f >= 0);
            return m->frames[f].function;
        }
    fail_msg("no allocation at seq %lld", seq);
    return NULL;
}

static void held_stack(void **state) {
    (void)state;
    snap_path(path, sizeof path, "held.db");
    unlink(path);
    rec_options o = {.path = path, .stacks = 16, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    held_site(0x10000);
    held_write(0x20000); /* released: its own stack */
    assert_int_equal(rec_stack_hold(), 1); /* left held when the recording ends */
    rec_test_reset();
    /* seq 1-3 under the hold: one stack, held_site's; seq 4 its own */
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT stack) FROM events WHERE seq <= 3"), 1);
    assert_true(snap_q(path, "SELECT stack FROM events WHERE seq = 4") !=
                snap_q(path, "SELECT stack FROM events WHERE seq = 1"));
    gm_db d;
    gm_model m;
    assert_string_equal(held_site_fn(path, 1, &d, &m), "held_site");
    gm_model_free(&m);
    gm_db_close(&d);
    assert_string_equal(held_site_fn(path, 4, &d, &m), "held_write");
    gm_model_free(&m);
    gm_db_close(&d);

    /* a hold of the last recording means nothing in the next one */
    char p2[512];
    snap_path(p2, sizeof p2, "held2.db");
    unlink(p2);
    o.path = p2;
    assert_int_equal(rec_open(&o), 0);
    held_write(0x30000);
    rec_test_reset();
    assert_string_equal(held_site_fn(p2, 1, &d, &m), "held_write");
    gm_model_free(&m);
    gm_db_close(&d);

    /* stacks off: nothing to hold */
    snap_path(p2, sizeof p2, "held3.db");
    unlink(p2);
    rec_options off = {.path = p2, .stacks = 0, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&off), 0);
    assert_int_equal(rec_stack_hold(), 0);
    rec_test_reset();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dedup_and_symbolize),
        cmocka_unit_test(inline_frames),
        cmocka_unit_test(stacks_off),
        cmocka_unit_test(python_frames),
        cmocka_unit_test(memo_same_as_walk),
        cmocka_unit_test(memo_per_thread),
        cmocka_unit_test(held_stack),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rec_test_reset();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", snap_tmpdir());
    if (system(cmd) != 0) return 1;
    return rc;
}
