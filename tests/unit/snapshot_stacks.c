/* snapshot_stacks.c — call stacks: captured on the application thread, stored once per
 * distinct stack, module-relative (path + build-id + offset), and symbolized after the run with
 * libdw so that this file's function names and file name come out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "snapshot/gm.h"
#include "snapshot/rec.h"
#include "snapshot/rec_internal.h"
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
    /* written back: a second reader need not symbolize again */
    assert_true(snap_q(path, "SELECT count(*) FROM frames WHERE function='stack_site_alpha' AND file LIKE '%snapshot_stacks.c'") >= 1);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dedup_and_symbolize),
        cmocka_unit_test(stacks_off),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rec_test_reset();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", snap_tmpdir());
    if (system(cmd) != 0) return 1;
    return rc;
}
