/* snapshot_files.c — where and how the recorder creates its database: GPUMEM_DB templating,
 * mode 0600, no symlink following, a busy file is not clobbered, a stale one is replaced, and
 * fork: the child never writes into the parent's database. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "snapshot/record/rec.h"
#include "snapshot/record/rec_internal.h"
#include "tests/unit/snapshot_test.h"

static void expand_path_placeholders(void **state) {
    (void)state;
    char out[256];
    unsetenv("RANK");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("SLURM_PROCID");
    assert_int_equal(rec_expand_path("run-%p.db", 1234, out, sizeof out), 0);
    assert_string_equal(out, "run-1234.db");
    assert_int_equal(rec_expand_path("r%r-%p-100%%.db", 7, out, sizeof out), 0);
    assert_string_equal(out, "r0-7-100%.db");
    setenv("SLURM_PROCID", "5", 1);
    assert_int_equal(rec_expand_path("%r", 1, out, sizeof out), 0);
    assert_string_equal(out, "5");
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    assert_int_equal(rec_expand_path("%r", 1, out, sizeof out), 0);
    assert_string_equal(out, "3"); /* OMPI before SLURM */
    setenv("RANK", "../x", 1);     /* not a number: cannot smuggle a path */
    assert_int_equal(rec_expand_path("%r", 1, out, sizeof out), 0);
    assert_null(strchr(out, '/'));
    unsetenv("RANK");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("SLURM_PROCID");
    assert_int_equal(rec_expand_path("%p%p%p%p", 123456789, out, 10), -1); /* does not fit */
    assert_true(strlen(out) < 10);
}

static const char *const launcher_vars[] = {"RANK",
                                            "WORLD_SIZE",
                                            "LOCAL_RANK",
                                            "OMPI_COMM_WORLD_RANK",
                                            "OMPI_COMM_WORLD_SIZE",
                                            "OMPI_COMM_WORLD_LOCAL_RANK",
                                            "MV2_COMM_WORLD_RANK",
                                            "MV2_COMM_WORLD_SIZE",
                                            "MV2_COMM_WORLD_LOCAL_RANK",
                                            "PMI_RANK",
                                            "PMI_SIZE",
                                            "MPI_LOCALRANKID",
                                            "PMIX_RANK",
                                            "PMIX_SIZE",
                                            "PMIX_LOCAL_RANK",
                                            "SLURM_PROCID",
                                            "SLURM_NTASKS",
                                            "SLURM_LOCALID"};

static void clear_launchers(void)
{
    for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++)
        unsetenv(launcher_vars[i]);
}

/* Each launcher's variables are read, the first launcher set wins (torchrun, Open MPI, MVAPICH,
 * PMI, PMIx, Slurm), and size and local rank come from the same launcher as the rank. */
static void launch_rank_precedence(void **state)
{
    (void)state;
    rec_rank rk;
    char out[64];
    clear_launchers();
    assert_int_equal(rec_launch_rank(&rk), 0);
    assert_int_equal(rk.rank, -1);
    setenv("SLURM_PROCID", "0", 1), setenv("SLURM_NTASKS", "1", 1), setenv("SLURM_LOCALID", "0", 1);
    assert_int_equal(rec_launch_rank(&rk), 1);
    assert_string_equal(rk.from, "SLURM_PROCID");
    assert_int_equal(rk.world_size, 1);
    setenv("PMIX_RANK", "6", 1);
    assert_int_equal(rec_launch_rank(&rk), 1);
    assert_string_equal(rk.from, "PMIX_RANK");
    assert_int_equal(rk.rank, 6);
    assert_int_equal(rk.world_size, -1); /* not Slurm's size: another launcher's */
    setenv("PMI_RANK", "5", 1), setenv("PMI_SIZE", "8", 1), setenv("MPI_LOCALRANKID", "1", 1);
    assert_int_equal(rec_launch_rank(&rk), 1);
    assert_string_equal(rk.from, "PMI_RANK");
    assert_int_equal(rk.rank, 5), assert_int_equal(rk.world_size, 8),
        assert_int_equal(rk.local_rank, 1);
    setenv("MV2_COMM_WORLD_RANK", "4", 1);
    assert_int_equal(rec_launch_rank(&rk), 1);
    assert_string_equal(rk.from, "MV2_COMM_WORLD_RANK");
    setenv("OMPI_COMM_WORLD_RANK", "3", 1), setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    assert_int_equal(rec_launch_rank(&rk), 1);
    assert_string_equal(rk.from, "OMPI_COMM_WORLD_RANK");
    assert_int_equal(rk.rank, 3), assert_int_equal(rk.world_size, 4),
        assert_int_equal(rk.local_rank, 3);
    assert_int_equal(rec_expand_path("run-%r.db", 1, out, sizeof out), 0);
    assert_string_equal(out, "run-3.db");
    setenv("RANK", "2", 1), setenv("WORLD_SIZE", "16", 1), setenv("LOCAL_RANK", "0", 1);
    assert_int_equal(rec_launch_rank(&rk), 1);
    assert_string_equal(rk.from, "RANK");
    assert_int_equal(rk.rank, 2), assert_int_equal(rk.world_size, 16),
        assert_int_equal(rk.local_rank, 0);
    assert_int_equal(rec_expand_path("run-%r.db", 1, out, sizeof out), 0);
    assert_string_equal(out, "run-2.db");
    setenv("RANK", "", 1); /* set but empty: the next launcher */
    assert_int_equal(rec_launch_rank(&rk), 1);
    assert_string_equal(rk.from, "OMPI_COMM_WORLD_RANK");
    clear_launchers();
}

static int open_at(const char *tmpl) {
    rec_options o = {.path = tmpl, .stacks = 0, .fork_record = 1, .ring = 1024, .quiet = 1};
    return rec_open(&o);
}

static void created_0600_with_pid(void **state) {
    (void)state;
    char tmpl[512], expect[600];
    snap_path(tmpl, sizeof tmpl, "perm-%p.db");
    mode_t old = umask(0);
    assert_int_equal(open_at(tmpl), 0);
    umask(old);
    snprintf(expect, sizeof expect, "%s/perm-%ld.db", snap_tmpdir(), (long)getpid());
    assert_string_equal(rec_path(), expect);
    rec_event(REC_ALLOC, 0, 0, 1, 1, 1, 1);
    rec_flush();
    struct stat st;
    assert_int_equal(stat(expect, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    char wal[700];
    assert_int_equal(rec_db_side(expect, REC_SIDE_WAL, wal, sizeof wal), 0);
    assert_int_equal(stat(wal, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    rec_test_reset();
}

static void refuses_symlink(void **state) {
    (void)state;
    char link[512], target[512];
    snap_path(link, sizeof link, "link.db");
    snap_path(target, sizeof target, "target.txt");
    FILE *f = fopen(target, "w");
    fputs("precious", f);
    fclose(f);
    unlink(link);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(open_at(link), -1); /* refused, with one line on stderr */
    assert_int_equal(rec_enabled(), 0);
    rec_event(REC_ALLOC, 0, 0, 1, 1, 1, 1); /* and recording is off, quietly */
    char buf[32] = {0};
    f = fopen(target, "r");
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "precious");
    rec_test_reset();
}

static void busy_file_gets_other_name_stale_is_replaced(void **state) {
    (void)state;
    char p[512], alt[600];
    snap_path(p, sizeof p, "busy.db");
    unlink(p);
    /* another recorder holds it: simulated with our own flock on a separate open */
    int fd = open(p, O_RDWR | O_CREAT, 0600);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    assert_int_equal(open_at(p), 0);
    snprintf(alt, sizeof alt, "%s/busy-%ld.db", snap_tmpdir(), (long)getpid());
    assert_string_equal(rec_path(), alt);
    rec_test_reset();
    close(fd);
    /* now nobody holds it, but it is not a gpumem database (a user's file): left untouched */
    FILE *f = fopen(p, "w");
    fputs("old junk", f);
    fclose(f);
    assert_int_equal(open_at(p), -1);
    rec_test_reset();
    char buf[32] = "";
    f = fopen(p, "r");
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "old junk");
    /* a stale gpumem database (an earlier run's) is replaced in place */
    unlink(p);
    assert_int_equal(open_at(p), 0);
    for (int i = 0; i < 5; i++) rec_event(REC_ALLOC, 0, 0, 1 + i, 1, 1, 1);
    rec_test_reset();
    assert_int_equal(snap_q(p, "SELECT count(*) FROM events"), 5);
    assert_int_equal(open_at(p), 0);
    assert_string_equal(rec_path(), p);
    rec_event(REC_ALLOC, 0, 0, 1, 1, 1, 1);
    rec_test_reset();
    assert_int_equal(snap_q(p, "SELECT count(*) FROM events"), 1);
}

static void fork_child_gets_own_file(void **state) {
    (void)state;
    char tmpl[512], child_db[600];
    snap_path(tmpl, sizeof tmpl, "parent.db");
    unlink(tmpl);
    assert_int_equal(open_at(tmpl), 0);
    for (int i = 0; i < 10; i++) rec_event(REC_ALLOC, 0, 0, 0x100 + i, 1, 1, 1);
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 7; i++) rec_event(REC_ALLOC, 0, 0, 0x900 + i, 1, 1, 1);
        rec_close();
        _exit(0);
    }
    for (int i = 0; i < 10; i++) rec_event(REC_FREE, 0, 0, 0x100 + i, 1, 0, 1);
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    rec_test_reset();
    assert_int_equal(snap_q(tmpl, "SELECT count(*) FROM events"), 20);
    assert_int_equal(snap_q(tmpl, "SELECT count(*) FROM events WHERE addr >= 0x900"), 0);
    char ok[16];
    snap_q_text(tmpl, "PRAGMA integrity_check", ok, sizeof ok);
    assert_string_equal(ok, "ok");
    snprintf(child_db, sizeof child_db, "%s/parent-%ld.db", snap_tmpdir(), (long)pid);
    assert_int_equal(snap_q(child_db, "SELECT count(*) FROM events"), 7);
    assert_int_equal(snap_q(child_db, "SELECT value FROM meta WHERE key='pid'"), pid);
}

static void fork_off_child_records_nothing(void **state) {
    (void)state;
    char tmpl[512], child_db[600];
    snap_path(tmpl, sizeof tmpl, "quiet.db");
    unlink(tmpl);
    rec_options o = {.path = tmpl, .stacks = 0, .fork_record = 0, .ring = 1024, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    rec_event(REC_ALLOC, 0, 0, 1, 1, 1, 1);
    pid_t pid = fork();
    if (pid == 0) {
        rec_event(REC_ALLOC, 0, 0, 2, 1, 1, 1);
        _exit(rec_enabled() ? 1 : 0);
    }
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    rec_test_reset();
    assert_int_equal(snap_q(tmpl, "SELECT count(*) FROM events"), 1);
    snprintf(child_db, sizeof child_db, "%s/quiet-%ld.db", snap_tmpdir(), (long)pid);
    assert_int_equal(access(child_db, F_OK), -1);
}

/* GPUMEM_DB=none turns recording off on purpose: nothing is created, and events are no-ops. */
static void db_none_records_nothing(void **state) {
    (void)state;
    rec_test_reset();
    unlink("none");
    rec_options o = {.path = "none", .stacks = 0, .fork_record = 0, .ring = 1024, .quiet = 1};
    assert_int_not_equal(rec_open(&o), 0);
    rec_event(REC_ALLOC, 0, 0, 1, 1, 1, 1);
    assert_false(rec_enabled());
    assert_int_equal(access("none", F_OK), -1);
    rec_test_reset();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(expand_path_placeholders),
        cmocka_unit_test(launch_rank_precedence),
        cmocka_unit_test(created_0600_with_pid),
        cmocka_unit_test(refuses_symlink),
        cmocka_unit_test(busy_file_gets_other_name_stale_is_replaced),
        cmocka_unit_test(fork_child_gets_own_file),
        cmocka_unit_test(fork_off_child_records_nothing),
        cmocka_unit_test(db_none_records_nothing),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", snap_tmpdir());
    if (system(cmd) != 0) return 1;
    return rc;
}
