/* torch_record.c — `gpumem record` on a Python program (torch_record.h).
 *
 * Nothing of the script is edited. gpumem's sitecustomize (preload/python/site/) goes first on
 * PYTHONPATH with the gpumem module (preload/python/); when the program imports torch it turns
 * on what GPUMEM_TORCH_* say (preload/python/gpumem/_torch.py). PyTorch's history is dumped
 * into a private file made here (mode 0600, O_EXCL, in TMPDIR), merged into the recording
 * after the program ends (formats/gm_torch.c), and removed. */
#include "snapshot/torch_record.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "snapshot/formats/gm_torch.h"

/* The virtual GPU's libraries a PyTorch program needs preloaded, in this order (the same list
 * as build/sim/torch-env, sim/README.md "PyTorch on the virtual GPU"). */
static const char *const sim_preload[] = {"libcuda.so.1", "libcudart.so.13", "libcublasLt.so.13",
                                          "libcublas.so.13", "libnvidia-ml.so.1"};

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* 1 when argv0 runs Python: its name is python*, or it is a script whose #! line names python */
static int is_python(const char *argv0)
{
    const char *b = strrchr(argv0, '/');
    b = b ? b + 1 : argv0;
    if (strncmp(b, "python", 6) == 0) {
        const char *p = b + 6;
        while (*p && (*p == '.' || (*p >= '0' && *p <= '9'))) p++;
        if (!*p) return 1;
    }
    char path[PATH_MAX];
    if (strchr(argv0, '/')) {
        snprintf(path, sizeof path, "%s", argv0);
    } else { /* found on PATH, as execvp will */
        const char *env = getenv("PATH");
        path[0] = 0;
        for (const char *d = env ? env : ""; *d;) {
            const char *e = strchr(d, ':');
            size_t len = e ? (size_t)(e - d) : strlen(d);
            char cand[PATH_MAX];
            snprintf(cand, sizeof cand, "%.*s/%s", (int)len, len ? d : ".", argv0);
            if (access(cand, X_OK) == 0) {
                snprintf(path, sizeof path, "%s", cand);
                break;
            }
            d += len + (e != NULL);
            if (!e) break;
        }
        if (!path[0]) return 0;
    }
    char line[256];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, line, sizeof line - 1);
    close(fd);
    if (n < 2 || line[0] != '#' || line[1] != '!') return 0;
    line[n] = 0;
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    return strstr(line, "python") != NULL;
}

static void prepend(const char *name, const char *value, char sep)
{
    const char *old = getenv(name);
    if (!old || !*old) {
        setenv(name, value, 1);
        return;
    }
    size_t n = strlen(value) + strlen(old) + 2;
    char *v = malloc(n);
    if (!v) return;
    snprintf(v, n, "%s%c%s", value, sep, old);
    setenv(name, v, 1);
    free(v);
}

/* the folder holding the gpumem module and the one holding the sitecustomize: the source tree
 * next to the build (build/gpumem, or a sanitizer's build/san-thread/gpumem), or the installed
 * share/gpumem */
static int python_dirs(const char *selfdir, char *mod, char *site, size_t n)
{
    static const char *const where[][2] = {{"%s/../preload/python", "%s/../preload/python/site"},
                                           {"%s/../../preload/python", "%s/../../preload/python/site"},
                                           {"%s/../share/gpumem/python", "%s/../share/gpumem/python-site"}};
    for (size_t k = 0; k < sizeof where / sizeof where[0]; k++) {
        char probe[PATH_MAX + 64];
        snprintf(mod, n, where[k][0], selfdir);
        snprintf(site, n, where[k][1], selfdir);
        snprintf(probe, sizeof probe, "%s/sitecustomize.py", site);
        if (exists(probe)) {
            char *a = realpath(mod, NULL), *b = realpath(site, NULL);
            if (a) snprintf(mod, n, "%s", a);
            if (b) snprintf(site, n, "%s", b);
            free(a), free(b);
            return 0;
        }
    }
    return -1;
}

int gm_torch_prepare(gm_torch_run *r, const char *argv0, const char *selfdir, const char *simdir,
                     const char *allocator, int history, int hooks, int quiet)
{
    memset(r, 0, sizeof *r);
    /* any command: a Python program, or one that runs Python (a launcher script, torchrun) */
    r->python = 1;
    char mod[PATH_MAX], site[PATH_MAX];
    if (python_dirs(selfdir, mod, site, sizeof mod) != 0) {
        if (!quiet && is_python(argv0))
            fprintf(stderr, "gpumem: gpumem's Python files are neither in %s/../preload/python nor in "
                            "%s/../share/gpumem; PyTorch is recorded by its segments only\n", selfdir, selfdir);
        r->python = 0;
        return 0;
    }
    prepend("PYTHONPATH", mod, ':');
    prepend("PYTHONPATH", site, ':');
    setenv("GPUMEM_TORCH_ALLOCATOR", allocator, 1);
    setenv("GPUMEM_TORCH_HOOKS", hooks ? "1" : "0", 1);
    r->history = history && strcmp(allocator, "torch") == 0;
    setenv("GPUMEM_TORCH_HISTORY", r->history ? "1" : "0", 1);
    /* the op log alone, under gpumem as PyTorch's allocator (no history): the same private file */
    const char *ops = getenv("GPUMEM_TORCH_OPS");
    int ops_only = !r->history && ops && !strcmp(ops, "1") && !strcmp(allocator, "gpumem");
    snprintf(r->torch_only, sizeof r->torch_only, "%s%s%s", strcmp(allocator, "gpumem") ? "" : "--allocator gpumem",
             ops && !strcmp(ops, "1") && strcmp(allocator, "gpumem") == 0 ? " and " : "",
             ops && !strcmp(ops, "1") ? "--torch-ops" : "");
    /* the private file also carries the word (SNAPSHOT.state) that says PyTorch was set up:
     * without it a torch-only option given to a program that never loads PyTorch goes unsaid */
    if (r->history || ops_only || r->torch_only[0]) {
        const char *td = getenv("TMPDIR");
        snprintf(r->snapshot, sizeof r->snapshot, "%s/gpumem-torch-XXXXXX", td && *td ? td : "/tmp");
        int fd = mkostemp(r->snapshot, O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "gpumem: cannot make a file for PyTorch's %s in %s: %s\n",
                    r->history ? "allocator trace" : "op log", td && *td ? td : "/tmp", strerror(errno));
            r->snapshot[0] = 0;
            r->history = 0;
            setenv("GPUMEM_TORCH_HISTORY", "0", 1);
            unsetenv("GPUMEM_TORCH_OPS");
        } else {
            close(fd);
            setenv("GPUMEM_TORCH_SNAPSHOT", r->snapshot, 1);
        }
    }
    if (simdir) {
        /* after libgpumem.so, which the caller puts first: an interposer precedes what it wraps */
        char list[8 * PATH_MAX] = "";
        for (size_t k = 0; k < sizeof sim_preload / sizeof sim_preload[0]; k++) {
            char p[PATH_MAX + 64];
            snprintf(p, sizeof p, "%s/%s", simdir, sim_preload[k]);
            if (!exists(p)) continue;
            size_t l = strlen(list);
            snprintf(list + l, sizeof list - l, "%s%s", l ? ":" : "", p);
        }
        if (list[0]) prepend("LD_PRELOAD", list, ':');
        if (!getenv("GPUMEM_SIM_PROFILE")) setenv("GPUMEM_SIM_PROFILE", "h100-80g", 1);
        /* Triton (torch.compile) builds its launcher against the libcuda.so.1 ldconfig knows:
         * the real driver, or none */
        if (!getenv("TRITON_LIBCUDA_PATH")) setenv("TRITON_LIBCUDA_PATH", simdir, 1);
    }
    return 0;
}

void gm_torch_warn_flags(const gm_torch_run *r, char *const *argv)
{
    if (!r->python || !argv[0] || !is_python(argv[0])) return;
    /* the interpreter's own options, up to the script (or -c CMD, -m MOD, "-", "--") */
    for (int k = 1; argv[k] && argv[k][0] == '-' && argv[k][1] && strcmp(argv[k], "--"); k++) {
        if (argv[k][1] == '-') continue; /* --help, --version ... */
        const char *why = NULL;
        for (const char *c = argv[k] + 1; *c; c++) {
            if (*c == 'I') why = "-I (isolated) ignores PYTHONPATH and the PYTHON* variables";
            else if (*c == 'E') why = "-E ignores PYTHONPATH and the PYTHON* variables";
            else if (*c == 'S') why = "-S imports no site module, so no sitecustomize";
            if (why) {
                fprintf(stderr, "gpumem: python %s: gpumem's sitecustomize cannot set PyTorch up, so PyTorch "
                                "is recorded by its segments only (no tensors, no phases, no names); run it "
                                "without that option to record it tensor by tensor\n", why);
                return;
            }
            if (*c == 'c' || *c == 'm') return; /* the rest is the command's */
            if (*c == 'W' || *c == 'X') { /* an option with an argument: here, or the next word */
                if (!c[1]) k++;
                break;
            }
        }
    }
}

void gm_torch_child(const gm_torch_run *r)
{
    if (!r->python) return;
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv("GPUMEM_TORCH_PID", pid, 1);
}

/* No trace came back from the process whose files are at snapshot: why, from the word
 * gpumem/_torch.py left in SNAPSHOT.state. No word: it never imported torch, and there is
 * nothing to say; "no-cuda" is said only of the process gpumem record started (who: "" for it,
 * else " of pid N"), the rest only of a process that recorded. */
static void no_trace_line(const char *snapshot, const char *who, int recorded)
{
    char path[PATH_MAX + 320], word[16] = "";
    snprintf(path, sizeof path, "%s.state", snapshot);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, word, sizeof word - 1);
    close(fd);
    word[n > 0 ? n : 0] = 0;
    if (!strcmp(word, "no-cuda")) {
        if (!who[0])
            fprintf(stderr, "gpumem: PyTorch never used CUDA in this program: it has no allocator trace to merge\n");
    } else if (recorded) { /* (without a recording it never used CUDA: its own end says the rest) */
        fprintf(stderr, "gpumem: the program%s imported PyTorch but ended before its exit handlers ran "
                        "(os._exit, a fatal signal or a crash): PyTorch's allocator trace was not written, "
                        "and the recording holds the driver's allocations only\n", who);
    }
}

/* Removes PATH and its side files (.part, .state, .oom, .oom.part). */
static void remove_dump(const char *snapshot)
{
    static const char *const ext[] = {"", ".part", ".state", ".oom", ".oom.part"};
    for (size_t k = 0; k < sizeof ext / sizeof ext[0]; k++) {
        char p[PATH_MAX + 320];
        snprintf(p, sizeof p, "%s%s", snapshot, ext[k]);
        unlink(p);
    }
}

/* One process's dump at snapshot merged into its database dbpath (NULL: it recorded none), and
 * its OOM snapshot written beside it. who: "" for the process gpumem record started, else " of
 * pid N". Returns 1 when a dump was there. */
static int finish_one(const gm_torch_run *r, const char *snapshot, const char *dbpath, const char *who,
                      int quiet)
{
    struct stat st;
    int had = 0;
    int fd = open(snapshot, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_uid != geteuid())) { /* not this run's (a shared TMPDIR) */
        close(fd);
        return 0;
    }
    if (fd >= 0 && st.st_size > 0 && dbpath) {
        had = 1;
        unsigned char *buf = malloc((size_t)st.st_size);
        if (buf && read(fd, buf, (size_t)st.st_size) == st.st_size) {
            char err[1024];
            uint64_t n = 0;
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            int mrc = gm_torch_merge(dbpath, buf, (size_t)st.st_size, &n, err, sizeof err);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
            if (mrc != 0)
                fprintf(stderr, "gpumem: PyTorch's %s%s was not merged into %s: %s\n",
                        r->history ? "allocator trace" : "op log", who, dbpath, err);
            else if (!quiet && r->history)
                fprintf(stderr, "gpumem: merged PyTorch's allocator trace%s (%llu entries, %.2f s) into %s\n",
                        who, (unsigned long long)n, secs, dbpath);
            else if (!quiet)
                fprintf(stderr, "gpumem: merged PyTorch's op log%s (%llu ops, %.2f s) into %s\n",
                        who, (unsigned long long)n, secs, dbpath);
        } else {
            fprintf(stderr, "gpumem: cannot read PyTorch's %s%s from %s\n", r->history ? "allocator trace" : "op log",
                    who, snapshot);
        }
        free(buf);
    } else if (fd >= 0 && st.st_size > 0 && who[0]) {
        fprintf(stderr, "gpumem: PyTorch's %s%s has no recording to merge into: that process's CUDA calls "
                        "never reached gpumem\n", r->history ? "allocator trace" : "op log", who);
    }
    if (fd >= 0) close(fd);
    /* the hook's dump at the first OOM: PyTorch's snapshot of that moment, beside the database */
    char part[PATH_MAX + 320];
    snprintf(part, sizeof part, "%s.oom", snapshot);
    fd = open(part, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0 && dbpath) {
        unsigned char *buf = malloc((size_t)st.st_size);
        char err[1024], out[PATH_MAX + 32];
        if (buf && read(fd, buf, (size_t)st.st_size) == st.st_size &&
            gm_torch_write_oom(dbpath, buf, (size_t)st.st_size, out, sizeof out, err, sizeof err) == 0)
            fprintf(stderr, "gpumem: PyTorch ran out of memory%s: its snapshot at that moment is %s "
                            "(python -m torch.cuda._memory_viz stats %s, or gpumem import)\n",
                    who[0] ? " in that process" : "", out, out);
        else
            fprintf(stderr, "gpumem: PyTorch's snapshot%s at the OOM was not written: %s\n", who,
                    buf ? err : "out of memory");
        free(buf);
    }
    if (fd >= 0) close(fd);
    return had;
}

void gm_torch_finish(gm_torch_run *r, const char *dbpath, const gm_run_db *dbs, size_t ndbs, int quiet)
{
    if (!r->snapshot[0]) return;
    /* the other Python processes' dumps first: SNAPSHOT.<pid> (gpumem/_torch.py, _path), each
     * into the database its process recorded */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", r->snapshot);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    char basecopy[PATH_MAX];
    snprintf(basecopy, sizeof basecopy, "%s", base);
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    size_t bl = strlen(basecopy);
    /* the names first (the loop below removes files from the folder it would be reading) */
    enum { MAXP = 1024 };
    static long pids[MAXP];
    static unsigned char dumped[MAXP];
    size_t np = 0;
    DIR *dh = opendir(dir);
    for (struct dirent *e; dh && (e = readdir(dh)) && np < MAXP;) {
        const char *nm = e->d_name;
        if (strncmp(nm, basecopy, bl) != 0 || nm[bl] != '.') continue;
        char *end;
        long pid = strtol(nm + bl + 1, &end, 10);
        int dump = !*end, state = !strcmp(end, ".state");
        if (pid <= 0 || (!dump && !state)) continue; /* .part, .oom, SNAPSHOT.<pid>.oom ... */
        size_t k = 0;
        while (k < np && pids[k] != pid) k++;
        if (k == np) pids[np] = pid, dumped[np++] = 0;
        dumped[k] |= (unsigned char)dump;
    }
    if (dh) closedir(dh);
    int others = 0;
    for (size_t i = 0; i < np; i++) {
        const char *db = NULL;
        int empty = 0;
        for (size_t k = 0; k < ndbs; k++)
            if (dbs[k].pid == pids[i]) db = dbs[k].path, empty = dbs[k].empty;
        char snap[PATH_MAX + 300], who[64];
        snprintf(snap, sizeof snap, "%s/%s.%ld", dir, basecopy, pids[i]);
        if (empty) { /* it used no GPU (its recorder removed its file): nothing of PyTorch's to keep */
            remove_dump(snap);
            continue;
        }
        snprintf(who, sizeof who, " of pid %ld", pids[i]);
        if (dumped[i]) others += finish_one(r, snap, db, who, quiet);
        else if (!quiet && r->history && db) { /* only its .state */
            snprintf(who, sizeof who, " (pid %ld)", pids[i]);
            no_trace_line(snap, who, 1);
        }
        remove_dump(snap);
    }
    /* PyTorch set up in some process of the run: its dump or its word (SNAPSHOT.state) */
    char state[PATH_MAX + 16];
    snprintf(state, sizeof state, "%s.state", r->snapshot);
    struct stat sst;
    int torch_seen = np > 0 || stat(state, &sst) == 0;
    /* the process gpumem record started: its own file */
    int had = finish_one(r, r->snapshot, dbpath, "", quiet);
    torch_seen |= had;
    /* a note, not an error: the run did what was asked of it, and a launcher may well start
     * Python in a later run with the same line */
    if (!torch_seen && r->torch_only[0] && !quiet)
        fprintf(stderr, "gpumem: note: %s %s for PyTorch programs only, and no process of this run imported "
                        "torch: %s nothing\n", r->torch_only, strstr(r->torch_only, " and ") ? "are" : "is",
                strstr(r->torch_only, " and ") ? "they changed" : "it changed");
    if (!had && !quiet && r->history && !others) no_trace_line(r->snapshot, "", dbpath != NULL);
    remove_dump(r->snapshot);
    r->snapshot[0] = 0;
}
