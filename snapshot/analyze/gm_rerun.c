/* gm_rerun.c — `--check` of advise, frag and tune: the recorded command run again under
 * `gpumem record` (this very gpumem program, so the same libgpumem.so), with extra arguments
 * and/or a GPUMEM_CONF (a PYTORCH_CUDA_ALLOC_CONF for a PyTorch program on PyTorch's allocator,
 * whose peaks are then PyTorch's own), into scratch databases whose measured peaks are read back; with ranks,
 * under `mpirun -np N --oversubscribe`, one database per rank. The rest of the environment
 * (GPUMEM_SIM_*, GPUMEM_CONF when none is given) is the re-run's. */
#include "snapshot/analyze/gm_report.h"
#include "snapshot/analyze/gm_replay.h"
#include "snapshot/record/rec.h" /* rec_db_unlink_sides */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void unlink_db(const char *path) {
    unlink(path);
    rec_db_unlink_sides(path);
}

/* Reads the peaks of one re-run database into the running maxima: gpumem's recorded ones, or
 * with torch PyTorch's own (its merged history; an error without one). */
static int read_peaks(const char *path, int torch, uint64_t *peak_allocated, uint64_t *peak_reserved,
                      char *err, size_t errsz) {
    gm_db r;
    char e2[4096];
    if (gm_db_open(path, &r, e2, sizeof e2) != 0) {
        snprintf(err, errsz, "%.1000s", e2);
        return -1;
    }
    int have = 1;
    if (torch) {
        have = gm_torch_peaks(&r, peak_allocated, peak_reserved);
    } else {
        uint64_t a = (uint64_t)gm_meta_int(&r, "stat.peak_allocated", 0);
        uint64_t s = (uint64_t)gm_meta_int(&r, "stat.peak_reserved", 0);
        if (a > *peak_allocated) *peak_allocated = a;
        if (s > *peak_reserved) *peak_reserved = s;
    }
    gm_db_close(&r);
    if (!have) snprintf(err, errsz, "the re-run recorded no PyTorch memory history");
    return have ? 0 : -1;
}

/* The PyTorch script's re-run (advise --check): PyTorch's own peaks (its merged history), or
 * gpumem's recorded ones when gpumem was its allocator, and the device's beside them. */
static int read_script_peaks(const char *path, gm_rerun_script *t, char *err, size_t errsz) {
    gm_db r;
    char e2[4096];
    if (gm_db_open(path, &r, e2, sizeof e2) != 0) {
        snprintf(err, errsz, "%.1000s", e2);
        return -1;
    }
    t->device_peak_allocated = (uint64_t)gm_meta_int(&r, "stat.peak_allocated", 0);
    t->device_peak_reserved = (uint64_t)gm_meta_int(&r, "stat.peak_reserved", 0);
    int rc = 0;
    if (t->allocator_gpumem) { /* gpumem served PyTorch: gpumem's own recorded peaks */
        t->peak_allocated = t->device_peak_allocated, t->peak_reserved = t->device_peak_reserved;
    } else if (!gm_torch_peaks(&r, &t->peak_allocated, &t->peak_reserved)) {
        snprintf(err, errsz, "the re-run recorded no PyTorch memory history");
        rc = -1;
    }
    gm_db_close(&r);
    return rc;
}

static int rerun(const char *exe, const char *cmdline, const char *extra_args, const char *var, const char *conf,
                 unsigned ranks, int torch, gm_rerun_script *script, uint64_t *peak_allocated,
                 uint64_t *peak_reserved, uint64_t *min_allocated, uint64_t *min_reserved, char *err,
                 size_t errsz);

int gm_rerun(const char *exe, const char *cmdline, const char *extra_args, const char *conf, unsigned ranks,
             uint64_t *peak_allocated, uint64_t *peak_reserved, char *err, size_t errsz) {
    return rerun(exe, cmdline, extra_args, "GPUMEM_CONF", conf, ranks, 0, NULL, peak_allocated, peak_reserved, NULL, NULL, err,
                 errsz);
}

int gm_rerun_ranks(const char *exe, const char *cmdline, const char *extra_args, unsigned ranks,
                   uint64_t *max_allocated, uint64_t *max_reserved, uint64_t *min_allocated, uint64_t *min_reserved,
                   char *err, size_t errsz) {
    return rerun(exe, cmdline, extra_args, "GPUMEM_CONF", NULL, ranks, 0, NULL, max_allocated, max_reserved,
                 min_allocated, min_reserved, err, errsz);
}

int gm_rerun_torch(const char *exe, const char *cmdline, const char *pytorch_conf, uint64_t *peak_allocated,
                   uint64_t *peak_reserved, char *err, size_t errsz) {
    /* PYTORCH_CUDA_ALLOC_CONF: the variable PyTorch reads first (PYTORCH_ALLOC_CONF, if this
     * environment has one, is then not read at all: alloc_config_torch_env) */
    return rerun(exe, cmdline, NULL, "PYTORCH_CUDA_ALLOC_CONF", pytorch_conf, 0, 1, NULL, peak_allocated,
                 peak_reserved, NULL, NULL, err, errsz);
}

int gm_rerun_torch_script(const char *exe, const char *cmdline, gm_rerun_script *t, char *err, size_t errsz) {
    uint64_t a = 0, r = 0;
    /* PYTORCH_CUDA_ALLOC_CONF as the change has it, unset when it has none */
    return rerun(exe, cmdline, NULL, "PYTORCH_CUDA_ALLOC_CONF", t->alloc_conf, 0, 1, t, &a, &r, NULL, NULL, err, errsz);
}

static int rerun(const char *exe, const char *cmdline, const char *extra_args, const char *var, const char *conf,
                 unsigned ranks, int torch, gm_rerun_script *script, uint64_t *peak_allocated,
                 uint64_t *peak_reserved, uint64_t *min_allocated, uint64_t *min_reserved, char *err,
                 size_t errsz) {
    char self[4096], cmd[8192], dbpath[96], np[16];
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
    /* one database, or one per rank: the recorder expands %r to each rank's number */
    if (ranks)
        snprintf(dbpath, sizeof dbpath, "/tmp/gpumem-check-%d-%%r.db", (int)getpid());
    else
        snprintf(dbpath, sizeof dbpath, "/tmp/gpumem-check-%d.db", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s%s%s", cmdline, extra_args && *extra_args ? " " : "", extra_args ? extra_args : "");
    char *argv[280];
    int argc = 0;
    if (ranks) {
        snprintf(np, sizeof np, "%u", ranks);
        argv[argc++] = "mpirun";
        argv[argc++] = "-np";
        argv[argc++] = np;
        argv[argc++] = "--oversubscribe";
    }
    argv[argc++] = self;
    argv[argc++] = "record";
    argv[argc++] = "-q";
    argv[argc++] = "--force";
    if (script && script->allocator_gpumem) {
        argv[argc++] = "--allocator";
        argv[argc++] = "gpumem";
    }
    if (script && !script->hooks) argv[argc++] = "--no-torch-hooks";
    argv[argc++] = "-o";
    argv[argc++] = dbpath;
    argv[argc++] = "--";
    /* the recorded argv[0] may be relative to where it ran: the recorded executable instead */
    int use_exe = exe && exe[0] && access(exe, X_OK) == 0;
    char *save = NULL;
    int first = argc;
    for (char *t = strtok_r(cmd, " ", &save); t && argc < 278; t = strtok_r(NULL, " ", &save)) {
        /* ... but an argv[0] that runs as recorded is kept: a virtual environment's python is a
         * link to the system's, whose executable runs without the environment's packages */
        if (argc == first && strchr(t, '/') && access(t, X_OK) == 0) use_exe = 0;
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
        if (conf && (conf[0] || !script)) {
            setenv(var, conf, 1);
            if (!torch) unsetenv("GPUMEM_LIMIT"); /* the configuration carries the recorded limit */
        } else if (script) {
            unsetenv(var);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    int rc = 0, code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (code != 0) {
        int with = extra_args && *extra_args;
        snprintf(err, errsz, "the re-run%s%s%s%s%s%s%s%s%s failed (exit %d%s)", ranks ? " under mpirun -np " : "",
                 ranks ? np : "", with ? " with '" : "", with ? extra_args : "", with ? "'" : "",
                 conf && conf[0] ? " under " : "", conf && conf[0] ? var : "", conf && conf[0] ? "=" : "", conf && conf[0] ? conf : "", code,
                 ranks && code == 127 ? ": no mpirun" : "");
        rc = -1;
    }
    *peak_allocated = *peak_reserved = 0;
    for (unsigned r = 0; r < (ranks ? ranks : 1); r++) {
        char path[128];
        if (ranks)
            snprintf(path, sizeof path, "/tmp/gpumem-check-%d-%u.db", (int)getpid(), r);
        else
            snprintf(path, sizeof path, "%s", dbpath);
        uint64_t ra = 0, rs = 0; /* this rank's */
        if (rc == 0 && (script  ? read_script_peaks(path, script, err, errsz)
                        : read_peaks(path, torch, &ra, &rs, err, errsz)) != 0) {
            if (ranks) {
                char why[1100];
                snprintf(why, sizeof why, "rank %u: %.1000s", r, err);
                snprintf(err, errsz, "%s", why);
            }
            rc = -1;
        } else if (rc == 0 && !script) {
            if (ra > *peak_allocated) *peak_allocated = ra;
            if (rs > *peak_reserved) *peak_reserved = rs;
            if (min_allocated && (r == 0 || ra < *min_allocated)) *min_allocated = ra;
            if (min_reserved && (r == 0 || rs < *min_reserved)) *min_reserved = rs;
        }
        unlink_db(path);
    }
    return rc;
}
