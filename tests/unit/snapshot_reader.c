/* snapshot_reader.c — reading databases that are not what they should be. Each case must give
 * a clear message (naming the problem) or a report of what is there; never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "snapshot/analyze/gm_report.h"
#include "snapshot/formats/gm_formats.h"
#include "snapshot/record/rec.h"
#include "snapshot/record/rec_internal.h"
#include "tests/unit/snapshot_test.h"

static char err[8192];

/* A valid database with n alloc/free pairs and a leak, written by the recorder. */
static void make_db(const char *p, int n) {
    unlink(p);
    rec_options o = {.path = p, .stacks = 4, .fork_record = 0, .ring = 1 << 16, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    rec_range_push(NULL, "step 0");
    for (int i = 0; i < n; i++) {
        rec_event(REC_ALLOC, 0, 0, 0x1000 + (uint64_t)i * 4096, 4096, 4000, (uint64_t)i + 1);
        rec_event(REC_FREE, 0, 0, 0x1000 + (uint64_t)i * 4096, 4096, 0, (uint64_t)i + 1);
    }
    rec_event(REC_ALLOC, 0, 0, 0x7000000, 1 << 20, 1 << 20, 999999);
    rec_range_pop();
    rec_test_reset();
}

static int open_fails_with(const char *p, const char *needle) {
    gm_db d;
    if (gm_db_open(p, &d, err, sizeof err) == 0) {
        gm_db_close(&d);
        return 0;
    }
    if (!strstr(err, needle)) fprintf(stderr, "message '%s' lacks '%s'\n", err, needle);
    return strstr(err, needle) != NULL;
}

static void missing_empty_random(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "nope.db");
    assert_true(open_fails_with(p, "No such file"));
    snap_path(p, sizeof p, "empty.db");
    close(open(p, O_CREAT | O_WRONLY | O_TRUNC, 0600));
    assert_true(open_fails_with(p, "empty"));
    snap_path(p, sizeof p, "random.db");
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 10000; i++) fputc((i * 7919) & 0xff, f);
    fclose(f);
    assert_true(open_fails_with(p, "not a gpumem database"));
    assert_true(open_fails_with(snap_tmpdir(), "is a directory, not a database"));
}

static void other_sqlite_file(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "other.db");
    unlink(p);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
    sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", NULL, NULL, NULL);
    sqlite3_close(db);
    assert_true(open_fails_with(p, "not a gpumem database"));
}

static void newer_schema_refused_missing_table_named(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "newer.db");
    make_db(p, 10);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
    sqlite3_exec(db, "UPDATE meta SET value=2 WHERE key='schema_major'", NULL, NULL, NULL);
    sqlite3_close(db);
    assert_true(open_fails_with(p, "newer gpumem"));
    assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
    sqlite3_exec(db, "UPDATE meta SET value=1 WHERE key='schema_major'; DROP VIEW stack_frames; DROP TABLE frames",
                 NULL, NULL, NULL);
    sqlite3_close(db);
    assert_true(open_fails_with(p, "'frames'"));
}

/* Truncated or overwritten files: either a clear refusal or a (partial) report. */
static void truncated_and_corrupted(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "trunc.db");
    for (int variant = 0; variant < 6; variant++) {
        make_db(p, 3000);
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        if (variant < 3) {
            assert_int_equal(truncate(p, st.st_size * (variant + 1) / 4), 0);
        } else {
            int fd = open(p, O_WRONLY);
            char junk[4096];
            memset(junk, 0x5a + variant, sizeof junk);
            off_t at = variant == 3 ? 0 : st.st_size / (variant == 4 ? 2 : 5);
            assert_int_equal(pwrite(fd, junk, sizeof junk, at), (ssize_t)sizeof junk);
            close(fd);
        }
        gm_db d;
        gm_model m;
        if (gm_db_open(p, &d, err, sizeof err) != 0) {
            assert_true(strlen(err) > 10);
            continue;
        }
        int rc = gm_model_load(&d, &m, 0, err, sizeof err);
        if (rc != 0) assert_true(strlen(err) > 10);
        else {
            FILE *out = fopen("/dev/null", "w");
            gm_report(&d, &m, &(gm_opts){0, 10, 0, 1}, out);
            fclose(out);
        }
        gm_model_free(&m);
        gm_db_close(&d);
    }
}

/* A process killed mid-run: no clean close, no alloc_life rows for the survivors, WAL left
 * behind. The reader derives what it needs and says the run did not end cleanly. */
static void killed_process(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "killed.db");
    unlink(p);
    pid_t pid = fork();
    if (pid == 0) {
        rec_options o = {.path = p, .stacks = 0, .fork_record = 0, .ring = 4096, .quiet = 1};
        if (rec_open(&o) != 0) _exit(2);
        for (int i = 0; i < 100; i++) rec_event(REC_ALLOC, 0, 0, 0x1000 + (uint64_t)i * 64, 64, 64, 1);
        for (int i = 0; i < 60; i++) rec_event(REC_FREE, 0, 0, 0x1000 + (uint64_t)i * 64, 64, 0, 1);
        rec_flush();
        kill(getpid(), SIGKILL);
        _exit(3);
    }
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFSIGNALED(st));
    gm_db d;
    gm_model m;
    assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
    assert_int_equal(d.closed, 0);
    assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
    assert_int_equal(m.count_kind[REC_ALLOC], 100);
    uint64_t leaked = 0;
    FILE *out = fopen("/dev/null", "w");
    /* what was alive is listed (and counted), but a run that did not reach its end cannot be
     * judged: --fail-on-leak says so (exit 3), it does not fail a CI job as a leak */
    assert_int_equal(gm_leaks(&d, &m, &(gm_opts){0, 10, 1, 1}, out, &leaked), GM_EXIT_CANNOT_JUDGE);
    fclose(out);
    assert_int_equal(leaked, 40 * 64);
    gm_model_free(&m);
    gm_db_close(&d);
}

/* A file's bytes, or NULL (and *n 0) when it is not there. */
static char *file_bytes(const char *p, size_t *n) {
    *n = 0;
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    char *b = NULL;
    size_t cap = 0;
    for (size_t got; (cap - *n) || (b = realloc(b, cap = cap * 2 + 4096)); *n += got)
        if ((got = fread(b + *n, 1, cap - *n, f)) == 0) break;
    fclose(f);
    return b;
}

/* gm_db_open_as_found leaves a file exactly as it found it, and still reads what a killed
 * recorder left in its -wal. One row per way a recording lies on disk: killed (-wal and -shm
 * beside it), killed with its -shm gone (SQLite would create one), finished (no side file).
 * Each of the three files has the same bytes (or is still absent) after the open, a model
 * load and the close; the killed rows read their 100 allocations, which are in the -wal. */
static void as_found_table(void **state) {
    (void)state;
    static const struct {
        const char *name;
        int killed, drop_shm;
    } rows[] = {{"killed", 1, 0}, {"killed-noshm", 1, 1}, {"closed", 0, 0}};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        char p[512], side[3][600], name[64];
        snprintf(name, sizeof name, "asfound-%s.db", rows[r].name);
        snap_path(p, sizeof p, name);
        snprintf(side[0], sizeof side[0], "%s", p);
        assert_int_equal(rec_db_side(p, REC_SIDE_WAL, side[1], sizeof side[1]), 0);
        assert_int_equal(rec_db_side(p, REC_SIDE_SHM, side[2], sizeof side[2]), 0);
        for (int k = 0; k < 3; k++) unlink(side[k]);
        if (rows[r].killed) {
            pid_t pid = fork();
            if (pid == 0) {
                rec_options o = {.path = p, .stacks = 0, .fork_record = 0, .ring = 4096, .quiet = 1};
                if (rec_open(&o) != 0) _exit(2);
                for (int i = 0; i < 100; i++) rec_event(REC_ALLOC, 0, 0, 0x1000 + (uint64_t)i * 64, 64, 64, 1);
                rec_flush();
                kill(getpid(), SIGKILL);
                _exit(3);
            }
            int st;
            waitpid(pid, &st, 0);
            assert_true(WIFSIGNALED(st));
            struct stat wst;
            assert_int_equal(stat(side[1], &wst), 0); /* the killed recorder's -wal is there */
            assert_true(wst.st_size > 32);
            if (rows[r].drop_shm) assert_int_equal(unlink(side[2]), 0);
        } else {
            make_db(p, 100);
        }
        char *before[3];
        size_t nb[3];
        for (int k = 0; k < 3; k++) before[k] = file_bytes(side[k], &nb[k]);
        gm_db d;
        gm_model m;
        if (gm_db_open_as_found(p, &d, err, sizeof err) != 0) fail_msg("%s: %s", rows[r].name, err);
        assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
        assert_int_equal(m.count_kind[REC_ALLOC], rows[r].killed ? 100 : 101);
        gm_model_free(&m);
        gm_db_close(&d);
        for (int k = 0; k < 3; k++) {
            size_t na;
            char *after = file_bytes(side[k], &na);
            if ((after == NULL) != (before[k] == NULL) || na != nb[k] || (na && memcmp(after, before[k], na)))
                fail_msg("%s: %s was %s (%zu bytes) and is %s (%zu bytes) after gm_db_open_as_found", rows[r].name,
                         side[k], before[k] ? "there" : "absent", nb[k], after ? "there" : "absent", na);
            free(after);
            free(before[k]);
        }
    }
}

/* A database still being written (WAL, writer alive in this very process). */
static void still_being_written(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "live.db");
    unlink(p);
    rec_options o = {.path = p, .stacks = 0, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    for (int i = 0; i < 50; i++) rec_event(REC_ALLOC, 0, 0, 0x1000 + (uint64_t)i * 64, 64, 64, 1);
    rec_flush();
    gm_db d;
    gm_model m;
    assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
    assert_int_equal(d.closed, 0);
    assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
    assert_int_equal(m.count_kind[REC_ALLOC], 50);
    gm_model_free(&m);
    gm_db_close(&d);
    for (int i = 0; i < 50; i++) rec_event(REC_FREE, 0, 0, 0x1000 + (uint64_t)i * 64, 64, 0, 1);
    rec_test_reset();
    assert_int_equal(snap_q(p, "SELECT count(*) FROM events"), 100);
}

/* Ids that point nowhere, NULLs and text where numbers belong: reported, not crashed on. */
static void inconsistent_rows(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "odd.db");
    make_db(p, 20);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
    sqlite3_exec(db,
                 "INSERT INTO events VALUES (1000000, NULL, 1, NULL, NULL, NULL, NULL, 5, 'big', NULL, NULL, 424242, 77777);"
                 "INSERT INTO events VALUES (1000001, 5, 99, 0, 0, 0, 0, 5, -1, 0, 0, NULL, NULL);"
                 "INSERT INTO events VALUES (1000002, 5, 2, 0, 0, 0, 0, 123456789, 64, 0, 0, NULL, NULL);"
                 "INSERT INTO ranges VALUES (500, 500, 1, 0, NULL, 999, 0, NULL, NULL);"
                 "INSERT INTO stacks VALUES (9, 0, 123456);"
                 "DELETE FROM strings;",
                 NULL, NULL, NULL);
    sqlite3_close(db);
    gm_db d;
    gm_model m;
    assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
    assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
    assert_true(m.unmatched_frees >= 1);
    FILE *out = fopen("/dev/null", "w");
    uint64_t leaked;
    assert_int_equal(gm_report(&d, &m, &(gm_opts){1, 10, 0, 1}, out), 0);
    gm_leaks(&d, &m, &(gm_opts){0, 10, 0, 1}, out, &leaked);
    fclose(out);
    gm_model_free(&m);
    gm_db_close(&d);
}

/* OOM forensics tell fragmentation (enough cached, no block large enough) from a full device. */
static void oom_advice_kinds(void **state) {
    (void)state;
    char p[512];
    snap_path(p, sizeof p, "oom.db");
    unlink(p);
    rec_options o = {.path = p, .stacks = 0, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    rec_event(REC_ALLOC, 0, 0, 0x1000, 6ull << 30, 6ull << 30, 1);
    rec_oom(&(rec_oom_info){.requested = 1ull << 30, .allocated = 6ull << 30, .reserved = 8ull << 30,
                            .free_cached = 2ull << 30, .largest_free = 512ull << 20});
    rec_oom(&(rec_oom_info){.requested = 4ull << 30, .allocated = 6ull << 30, .reserved = 8ull << 30,
                            .free_cached = 2ull << 30, .largest_free = 2ull << 30, .device_total = 8ull << 30});
    rec_test_reset();
    gm_db d;
    gm_model m;
    assert_int_equal(gm_db_open(p, &d, err, sizeof err), 0);
    assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    gm_report(&d, &m, &(gm_opts){0, 10, 0, 1}, out);
    fclose(out);
    char *first = strstr(buf, "OOM 1 at"), *second = strstr(buf, "OOM 2 at");
    assert_non_null(first);
    assert_non_null(second);
    assert_non_null(strstr(first, "fragmentation"));
    assert_true(strstr(first, "fragmentation") < second);            /* OOM 1: fragmentation */
    assert_null(strstr(second, "fragmentation"));                    /* OOM 2: the live set */
    assert_non_null(strstr(second, "6.00 GiB")); /* the live 6 GiB allocation is listed */
    free(buf);
    gm_model_free(&m);
    gm_db_close(&d);
}

/* JSON strings from the program's names: UTF-8 kept as it is, control characters and quotes
 * escaped, every byte that is not well-formed UTF-8 replaced by U+FFFD (valid JSON always). */
static void json_strings_utf8(void **state) {
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"plain", "\"plain\""},
        {"caf\xc3\xa9 \xe6\xad\xa5 \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xe6\xad\xa5 \xf0\x9f\x98\x80\""},
        {"a\"b\\c\n\x7f", "\"a\\\"b\\\\c\\u000a\\u007f\""},
        {"\xff", "\"\\ufffd\""},                              /* never a UTF-8 byte */
        {"x\xc3", "\"x\\ufffd\""},                            /* cut short by the end */
        {"\xc3(", "\"\\ufffd(\""},                            /* not followed by a continuation */
        {"\xc0\xaf", "\"\\ufffd\\ufffd\""},                   /* overlong '/' */
        {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""},          /* a surrogate */
        {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""}, /* above U+10FFFF */
        {"\xe6\xad", "\"\\ufffd\\ufffd\""},                   /* a 3-byte sequence cut short */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        assert_non_null(f);
        gm_json_str(f, cases[i].in);
        fclose(f);
        assert_string_equal(buf, cases[i].out);
        free(buf);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    gm_json_str(f, NULL);
    fclose(f);
    assert_string_equal(buf, "null");
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(missing_empty_random),
        cmocka_unit_test(other_sqlite_file),
        cmocka_unit_test(newer_schema_refused_missing_table_named),
        cmocka_unit_test(truncated_and_corrupted),
        cmocka_unit_test(killed_process),
        cmocka_unit_test(as_found_table),
        cmocka_unit_test(still_being_written),
        cmocka_unit_test(inconsistent_rows),
        cmocka_unit_test(oom_advice_kinds),
        cmocka_unit_test(json_strings_utf8),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", snap_tmpdir());
    if (system(cmd) != 0) return 1;
    return rc;
}
