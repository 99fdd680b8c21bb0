/* gm_rerun.c — `--check` of advise, frag and tune: the recorded command run again under
 * `gpumem record` (this very gpumem program, so the same libgpumem.so), with extra arguments
 * and/or a GPUMEM_CONF, into a scratch database whose measured peaks are read back. The rest of
 * the environment (GPUMEM_SIM_*, GPUMEM_CONF when none is given) is the re-run's. */
#include "snapshot/gm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void unlink_db(const char *path) {
    char side[160];
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
}

int gm_rerun(const char *exe, const char *cmdline, const char *extra_args, const char *conf,
             uint64_t *peak_allocated, uint64_t *peak_reserved, char *err, size_t errsz) {
    char self[4096], cmd[8192], dbpath[96];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(err, errsz, "cannot find the gpumem program (/proc/self/exe)");
        return -1;
    }
    self[n] = 0;
    if (!cmdline || !cmdline[0]) {
        snprintf(err, errsz, "the database does not say which command was recorded (meta.cmdline)");
        return -1;
    }
    snprintf(dbpath, sizeof dbpath, "/tmp/gpumem-check-%d.db", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s%s%s", cmdline, extra_args && *extra_args ? " " : "", extra_args ? extra_args : "");
    char *argv[260];
    int argc = 0;
    argv[argc++] = self;
    argv[argc++] = "record";
    argv[argc++] = "-q";
    argv[argc++] = "--force";
    argv[argc++] = "-o";
    argv[argc++] = dbpath;
    argv[argc++] = "--";
    /* the recorded argv[0] may be relative to where it ran: the recorded executable instead */
    int use_exe = exe && exe[0] && access(exe, X_OK) == 0;
    char *save = NULL;
    int first = argc;
    for (char *t = strtok_r(cmd, " ", &save); t && argc < 258; t = strtok_r(NULL, " ", &save)) {
        argv[argc] = argc == first && use_exe ? (char *)exe : t;
        argc++;
    }
    argv[argc] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errsz, "cannot fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        if (conf) {
            setenv("GPUMEM_CONF", conf, 1);
            unsetenv("GPUMEM_LIMIT"); /* the configuration carries the recorded limit */
        }
        execv(self, argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    int rc = 0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(err, errsz, "the re-run%s%s%s%s%s failed (exit %d)", extra_args && *extra_args ? " with '" : "",
                 extra_args && *extra_args ? extra_args : "", extra_args && *extra_args ? "'" : "",
                 conf ? " under GPUMEM_CONF=" : "", conf ? conf : "", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        rc = -1;
    } else {
        gm_db r;
        char e2[4096];
        if (gm_db_open(dbpath, &r, e2, sizeof e2) != 0) {
            snprintf(err, errsz, "%s", e2);
            rc = -1;
        } else {
            *peak_allocated = (uint64_t)gm_meta_int(&r, "stat.peak_allocated", 0);
            *peak_reserved = (uint64_t)gm_meta_int(&r, "stat.peak_reserved", 0);
            gm_db_close(&r);
        }
    }
    unlink_db(dbpath);
    return rc;
}
