/* gm_rerun.c — `--check` of advise, frag and tune: the recorded command run again under
 * `gpumem record` (this very gpumem program, so the same libgpumem.so), with extra arguments
 * and/or a GPUMEM_CONF (a PYTORCH_CUDA_ALLOC_CONF for a PyTorch program on PyTorch's allocator,
 * whose peaks are then PyTorch's own), into scratch databases whose measured peaks are read back; with ranks,
 * under `mpirun -np N --oversubscribe`, one database per rank. The rest of the environment
 * (GPUMEM_SIM_*, GPUMEM_CONF when none is given) is the re-run's; where it runs is the
 * recording's: its working directory (meta.cwd: the command's relative paths), and argv[0] by the
 * path the exec found it at (meta.argv0_path), not the executable its links lead to (meta.exe):
 * a virtual environment's bin/python is a link to the system's python, which finds the
 * environment (pyvenv.cfg) through the path it was run by.
 *
 * Every re-run (tune, frag, advise, advise --ranks, the PyTorch ones) goes through rerun()
 * below, so one rule holds for all: the child's stdout is dropped (step lines), its stderr goes
 * to an unlinked temporary file, and a failure quotes that stderr's last lines (rerun_stderr_tail)
 * and the command to run by hand to see all of it. A re-run that fails for a reason its own
 * stderr states (Open MPI refusing root, a missing library, a trainer's bad flag) is then said,
 * not reduced to an exit code. As root under Open MPI the re-run passes --allow-run-as-root,
 * which the user had to pass to launch anything there. */
#include "snapshot/analyze/gm_report.h"
#include "snapshot/analyze/gm_replay.h"
#include "snapshot/record/rec.h" /* rec_db_unlink_sides */
#include "snapshot/read/gm_sig.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* How much of the re-run's stderr is read back, and how much of it a message quotes: the end is
 * where a program says why it stopped; the rest is for the command run by hand. */
enum { RERUN_TAIL_READ = 4096, RERUN_TAIL_QUOTE = 480, RERUN_TAIL_LINES = 3 };

/* -1 not asked yet, 0 no, 1 yes: whether `mpirun` is Open MPI's (asked once per command). */
static int mpirun_is_open_mpi = -1;
/* the note that an older recording's command line is split at spaces: once per command */
static int legacy_noted;

const char *gm_mpirun_root_flag(void) {
    if (geteuid() != 0) return "";
    if (mpirun_is_open_mpi < 0) {
        mpirun_is_open_mpi = 0;
        FILE *p = popen("mpirun --version 2>/dev/null", "r");
        if (p) {
            char line[256];
            while (fgets(line, sizeof line, p))
                if (strstr(line, "Open MPI") || strstr(line, "OpenRTE")) mpirun_is_open_mpi = 1;
            pclose(p);
        }
    }
    return mpirun_is_open_mpi ? "--allow-run-as-root" : "";
}

static int is_rule(const char *line, size_t n) { /* Open MPI frames its help messages in dashes */
    if (n < 10) return 0;
    for (size_t i = 0; i < n; i++)
        if (line[i] != '-') return 0;
    return 1;
}

/* The quotable end of a stderr text (buf, n bytes; partial: it begins mid-file): its last
 * RERUN_TAIL_LINES non-blank lines joined by " | ", at most RERUN_TAIL_QUOTE characters kept
 * from the end. Lines inside blocks framed by dashed lines (Open MPI's help messages: "a process
 * returned a non-zero exit code") are passed over, since under mpirun they come after the rank's
 * own last words and say only that it failed; a text of nothing but such blocks (mpirun itself
 * refused to start) is quoted from the top of its last block, where it says what happened. The
 * blocks are found from the end, where the text is known to be outside of one. */
static void rerun_stderr_tail(const char *buf, size_t n, int partial, char *out, size_t outsz) {
    enum { MAXL = 128 };
    const char *ls[MAXL];
    size_t ln[MAXL], nl = 0;
    size_t i = 0;
    if (partial) { /* the first line read is a piece of one */
        while (i < n && buf[i] != '\n') i++;
        if (i < n) i++;
    }
    while (i < n) {
        size_t b = i;
        while (i < n && buf[i] != '\n') i++;
        size_t e = i;
        if (i < n) i++;
        while (b < e && isspace((unsigned char)buf[b])) b++;
        while (e > b && isspace((unsigned char)buf[e - 1])) e--;
        if (e == b) continue;
        if (nl == MAXL) { /* keep the last MAXL */
            memmove(ls, ls + 1, sizeof ls - sizeof *ls);
            memmove(ln, ln + 1, sizeof ln - sizeof *ln);
            nl--;
        }
        ls[nl] = buf + b, ln[nl] = e - b, nl++;
    }
    size_t own[RERUN_TAIL_LINES], nown = 0, banner_top = nl, banner_end = nl;
    int inside = 0;
    for (size_t k = nl; k-- > 0 && nown < RERUN_TAIL_LINES;) {
        if (is_rule(ls[k], ln[k])) {
            if (!inside && banner_end == nl) banner_end = k; /* the last block's closing rule */
            if (inside && banner_top == nl) banner_top = k + 1;
            inside = !inside;
        } else if (!inside && !(nown && ln[own[nown - 1]] == ln[k] && !memcmp(ls[own[nown - 1]], ls[k], ln[k]))) {
            own[nown++] = k; /* each rank saying the same thing is said once */
        }
    }
    char q[RERUN_TAIL_READ + 256];
    size_t o = 0;
    int from_top = 0;
    q[0] = 0;
    for (size_t j = nown; j-- > 0 && o < sizeof q - 1;) { /* own[] runs backwards */
        int w = snprintf(q + o, sizeof q - o, "%s%.*s", j + 1 < nown ? " | " : "", (int)ln[own[j]], ls[own[j]]);
        if (w < 0) break;
        o += (size_t)w < sizeof q - o ? (size_t)w : sizeof q - o - 1;
    }
    if (!nown && banner_end < nl) {
        if (banner_top == nl) banner_top = 0; /* its opening rule was before what was read */
        from_top = 1;
        for (size_t k = banner_top; k < banner_end && o < sizeof q - 1; k++) {
            int w = snprintf(q + o, sizeof q - o, "%s%.*s", k > banner_top ? " " : "", (int)ln[k], ls[k]);
            if (w < 0) break;
            o += (size_t)w < sizeof q - o ? (size_t)w : sizeof q - o - 1;
        }
    }
    if (o <= RERUN_TAIL_QUOTE)
        snprintf(out, outsz, "%.*s", (int)o, q);
    else if (from_top)
        snprintf(out, outsz, "%.*s...", RERUN_TAIL_QUOTE, q);
    else
        snprintf(out, outsz, "...%.*s", RERUN_TAIL_QUOTE, q + o - RERUN_TAIL_QUOTE);
}

/* The last RERUN_TAIL_READ bytes of the file open at fd, quoted (rerun_stderr_tail). */
static void read_stderr_tail(int fd, char *out, size_t outsz) {
    char buf[RERUN_TAIL_READ];
    struct stat st;
    out[0] = 0;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0) return;
    off_t from = st.st_size > (off_t)sizeof buf ? st.st_size - (off_t)sizeof buf : 0;
    ssize_t got = pread(fd, buf, (size_t)(st.st_size - from), from);
    if (got > 0) rerun_stderr_tail(buf, (size_t)got, from > 0, out, outsz);
}

/* argv as one shell line for a person to paste: each word quoted as a shell reads it back
 * (gm_cmd_quote), the working directory and the configuration too. */
static void shell_line(char *const *argv, const char *cwd, const char *var, const char *conf, char *out,
                       size_t outsz) {
    char q[4200];
    size_t o = 0;
    out[0] = 0;
#define ADD(...) do { int w_ = snprintf(out + o, outsz - o, __VA_ARGS__); \
        if (w_ > 0) o += (size_t)w_ < outsz - o ? (size_t)w_ : outsz - o - 1; } while (0)
    if (cwd) { /* the re-run runs there: so must the line */
        gm_cmd_quote(cwd, q, sizeof q);
        ADD("cd %s && ", q);
    }
    if (conf && conf[0]) {
        gm_cmd_quote(conf, q, sizeof q);
        ADD("%s=%s ", var, q);
    }
    for (int k = 0; argv[k] && o < outsz - 1; k++) {
        gm_cmd_quote(argv[k], q, sizeof q);
        ADD("%s%s", k ? " " : "", q);
    }
#undef ADD
}

static void unlink_db(const char *path) {
    unlink(path);
    rec_db_unlink_sides(path);
}

/* Reads the peaks of one re-run database into the running maxima: gpumem report's, or
 * with torch PyTorch's own (its merged history; an error without one). */
static int read_peaks(const char *path, int torch, int device, uint64_t *peak_allocated, uint64_t *peak_reserved,
                      char *err, size_t errsz) {
    gm_db r;
    char e2[4096];
    if (gm_db_open(path, &r, e2, sizeof e2) != 0) {
        snprintf(err, errsz, "%.1000s", e2);
        return -1;
    }
    /* several devices: the busiest device's (or --device's), as the prediction it is checked against */
    if (gm_db_scope_one(&r, NULL, device, e2, sizeof e2) < 0) {
        snprintf(err, errsz, "%.1000s", e2);
        gm_db_close(&r);
        return -1;
    }
    int have = 1;
    if (torch) {
        have = gm_torch_peaks(&r, peak_allocated, peak_reserved);
    } else {
        /* the report's peaks, which the recorded and predicted figures are: the allocator's own
         * statistics leave out what was passed through to the driver (a pool the program chose,
         * a graph's memory node), so a re-run under any configuration measured without them */
        uint64_t a, s;
        gm_recorded_peaks(&r, &a, &s);
        if (a > *peak_allocated) *peak_allocated = a;
        if (s > *peak_reserved) *peak_reserved = s;
    }
    gm_db_close(&r);
    if (!have) snprintf(err, errsz, "the re-run recorded no PyTorch memory history");
    return have ? 0 : -1;
}

/* The PyTorch script's re-run (advise --check): PyTorch's own peaks (its merged history), or
 * gpumem's recorded ones when gpumem was its allocator, and the device's beside them. */
static int read_script_peaks(const char *path, int device, gm_rerun_script *t, char *err, size_t errsz) {
    gm_db r;
    char e2[4096];
    if (gm_db_open(path, &r, e2, sizeof e2) != 0) {
        snprintf(err, errsz, "%.1000s", e2);
        return -1;
    }
    /* several devices: the busiest device's (or --device's), as the prediction it is checked against */
    if (gm_db_scope_one(&r, NULL, device, e2, sizeof e2) < 0) {
        snprintf(err, errsz, "%.1000s", e2);
        gm_db_close(&r);
        return -1;
    }
    /* gpumem's view as the report counts it (what the model's device figures are): with what
     * was passed through to the driver, which the allocator's own statistics leave out */
    gm_recorded_peaks(&r, &t->device_peak_allocated, &t->device_peak_reserved);
    int rc = 0;
    if (t->allocator_gpumem) { /* gpumem served PyTorch: gpumem's recorded peaks */
        t->peak_allocated = t->device_peak_allocated, t->peak_reserved = t->device_peak_reserved;
    } else if (!gm_torch_peaks(&r, &t->peak_allocated, &t->peak_reserved)) {
        snprintf(err, errsz, "the re-run recorded no PyTorch memory history");
        rc = -1;
    }
    gm_db_close(&r);
    return rc;
}

/* ---- the recorded command as one line of words ---- */

/* Whether a word is written as it is: nothing a shell or gm_cmd_split would read otherwise. */
static int word_plain(const char *w) {
    if (!w[0]) return 0;
    for (const unsigned char *p = (const unsigned char *)w; *p; p++)
        if (!(isalnum(*p) || *p >= 0x80 || strchr("_@%+=:,./-", *p))) return 0;
    return 1;
}

int gm_cmd_quote(const char *word, char *out, size_t n) {
    size_t o = 0;
#define PUT(c) do { if (o + 1 < n) out[o] = (c); o++; } while (0)
    if (word_plain(word)) {
        for (const char *p = word; *p; p++) PUT(*p);
    } else {
        PUT('\'');
        for (const char *p = word; *p; p++) {
            if (*p == '\'') { /* close, an escaped quote, open again: '\'' */
                PUT('\''); PUT('\\'); PUT('\''); PUT('\'');
            } else {
                PUT(*p);
            }
        }
        PUT('\'');
    }
#undef PUT
    if (n) out[o < n ? o : n - 1] = 0;
    return o < n ? 0 : -1;
}

int gm_cmd_join(char *const *words, int nw, char *out, size_t n) {
    size_t o = 0;
    int rc = 0;
    char q[8192];
    if (n) out[0] = 0;
    for (int k = 0; k < nw; k++) {
        if (gm_cmd_quote(words[k], q, sizeof q) != 0) rc = -1;
        int w = n > o ? snprintf(out + o, n - o, "%s%s", k ? " " : "", q) : -1;
        if (w < 0 || (size_t)w >= n - o) return -1; /* out holds the words that fit */
        o += (size_t)w;
    }
    return rc;
}

int gm_cmd_split(const char *line, char *buf, size_t bufsz, char **words, int max) {
    size_t o = 0;
    int nw = 0;
    const char *p = line ? line : "";
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        if (nw == max) return -1;
        words[nw++] = buf + o;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n') {
            char c;
            if (*p == '\'') { /* literal up to the next quote */
                const char *e = strchr(p + 1, '\'');
                if (!e) return -1;
                for (p++; p < e; p++) {
                    if (o + 1 >= bufsz) return -1;
                    buf[o++] = *p;
                }
                p++;
                continue;
            }
            if (*p == '\\' && p[1]) p++; /* the next character as it is */
            c = *p++;
            if (o + 1 >= bufsz) return -1;
            buf[o++] = c;
        }
        if (o + 1 >= bufsz) return -1;
        buf[o++] = 0;
    }
    return nw;
}

/* Older recordings' meta.cmdline split as re-runs always split it: at spaces, runs of them one. */
static int split_spaces(const char *line, char *buf, size_t bufsz, char **words, int max) {
    int nw = 0;
    snprintf(buf, bufsz, "%s", line);
    char *save = NULL;
    for (char *t = strtok_r(buf, " ", &save); t && nw < max; t = strtok_r(NULL, " ", &save)) words[nw++] = t;
    return nw;
}

int gm_meta_command(gm_db *d, char *out, size_t n) {
    enum { MAXW = 1024 };
    char *words[MAXW];
    size_t at[MAXW];
    int nw = 0, exact = 0;
    out[0] = 0;
    sqlite3_stmt *st = NULL;
    /* meta.argv: a JSON array of the arguments as the program got them (SQLite's json_each
     * reads it back: escapes undone, bytes as they were) */
    if (d->db && sqlite3_prepare_v2(d->db,
                                    "SELECT j.value FROM meta, json_each(meta.value) AS j "
                                    "WHERE meta.key = 'argv' AND json_valid(meta.value) ORDER BY j.id",
                                    -1, &st, NULL) == SQLITE_OK) {
        size_t cap = 0, used = 0;
        char *all = NULL;
        int ok = 1;
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *v = (const char *)sqlite3_column_text(st, 0);
            size_t l = (size_t)sqlite3_column_bytes(st, 0);
            char *g = nw < MAXW ? realloc(all, used + l + 1) : NULL;
            if (!g) {
                ok = 0;
                break;
            }
            all = g, cap = used + l + 1;
            memcpy(all + used, v ? v : "", l);
            all[used + l] = 0;
            at[nw++] = used;
            used = cap;
        }
        exact = ok && nw > 0;
        for (int k = 0; exact && k < nw; k++) words[k] = all + at[k];
        if (exact) gm_cmd_join(words, nw, out, n);
        free(all);
    }
    sqlite3_finalize(st);
    if (exact) return 1;
    /* older recordings: meta.cmdline alone, the arguments joined by spaces; they are split
     * there again, as re-runs always did (an argument that had a space is then two) */
    char line[8192], buf[8192];
    gm_meta_text(d, "cmdline", line, sizeof line);
    nw = split_spaces(line, buf, sizeof buf, words, MAXW);
    gm_cmd_join(words, nw, out, n);
    return 0;
}

void gm_rerun_origin_read(gm_db *d, gm_rerun_origin *o) {
    gm_meta_text(d, "argv0_path", o->argv0_path, sizeof o->argv0_path);
    char a[2];
    gm_meta_text(d, "argv", a, sizeof a); /* recorded since gpumem wrote it: the words exactly */
    o->argv_exact = a[0] == '[';
    gm_meta_text(d, "exe", o->exe, sizeof o->exe);
    gm_meta_text(d, "cwd", o->cwd, sizeof o->cwd);
    snprintf(o->path, sizeof o->path, "%s", d->path);
    o->device = d->device_asked - 1;
}

/* The program execvp would run for name (no '/') in this PATH, into buf; "" when none. */
static void path_lookup(const char *name, char *buf, size_t n) {
    const char *path = getenv("PATH");
    buf[0] = 0;
    for (const char *dir = path ? path : "/usr/local/bin:/usr/bin:/bin";;) {
        const char *end = strchr(dir, ':');
        size_t dl = end ? (size_t)(end - dir) : strlen(dir);
        int w = snprintf(buf, n, "%.*s%s%s", (int)dl, dir, dl ? "/" : "", name);
        if (w > 0 && (size_t)w < n && access(buf, X_OK) == 0) return;
        buf[0] = 0;
        if (!end) return;
        dir = end + 1;
    }
}

const char *gm_rerun_program(const gm_rerun_origin *o, const char *cmdline, char *buf, size_t n) {
    char a0[1024], wbuf[8192], *w[1024];
    if (gm_cmd_split(cmdline, wbuf, sizeof wbuf, w, 1024) > 0) snprintf(a0, sizeof a0, "%s", w[0]);
    else a0[0] = 0;
    if (o && o->argv0_path[0]) {
        snprintf(buf, n, "%s", o->argv0_path);
    } else if (strchr(a0, '/') && access(a0, X_OK) == 0) {
        snprintf(buf, n, "%s", a0); /* runs as recorded (from here: the recording has no cwd) */
    } else {
        char found[4096], real[4096];
        /* a name that PATH finds now, the very program recorded: run through the path found
         * (a virtual environment's python, active again, keeps its environment) */
        if (!strchr(a0, '/') && a0[0]) path_lookup(a0, found, sizeof found);
        else found[0] = 0;
        if (found[0] && o && o->exe[0] && realpath(found, real) && !strcmp(real, o->exe))
            snprintf(buf, n, "%s", found);
        else if (o && o->exe[0] && access(o->exe, X_OK) == 0)
            snprintf(buf, n, "%s", o->exe); /* argv[0] may have been relative to where it ran */
        else
            snprintf(buf, n, "%s", a0);
    }
    return buf;
}

static int rerun(const gm_rerun_origin *o, const char *cmdline, const char *extra_args, const char *var, const char *conf,
                 unsigned ranks, int torch, gm_rerun_script *script, uint64_t *peak_allocated,
                 uint64_t *peak_reserved, uint64_t *min_allocated, uint64_t *min_reserved, char *err,
                 size_t errsz);

int gm_rerun(const gm_rerun_origin *o, const char *cmdline, const char *extra_args, const char *conf, unsigned ranks,
             uint64_t *peak_allocated, uint64_t *peak_reserved, char *err, size_t errsz) {
    return rerun(o, cmdline, extra_args, "GPUMEM_CONF", conf, ranks, 0, NULL, peak_allocated, peak_reserved, NULL, NULL, err,
                 errsz);
}

int gm_rerun_ranks(const gm_rerun_origin *o, const char *cmdline, const char *extra_args, unsigned ranks,
                   uint64_t *max_allocated, uint64_t *max_reserved, uint64_t *min_allocated, uint64_t *min_reserved,
                   char *err, size_t errsz) {
    return rerun(o, cmdline, extra_args, "GPUMEM_CONF", NULL, ranks, 0, NULL, max_allocated, max_reserved,
                 min_allocated, min_reserved, err, errsz);
}

int gm_rerun_torch(const gm_rerun_origin *o, const char *cmdline, const char *pytorch_conf, uint64_t *peak_allocated,
                   uint64_t *peak_reserved, char *err, size_t errsz) {
    /* PYTORCH_CUDA_ALLOC_CONF: the variable PyTorch reads first (PYTORCH_ALLOC_CONF, if this
     * environment has one, is then not read at all: alloc_config_torch_env) */
    return rerun(o, cmdline, NULL, "PYTORCH_CUDA_ALLOC_CONF", pytorch_conf, 0, 1, NULL, peak_allocated,
                 peak_reserved, NULL, NULL, err, errsz);
}

int gm_rerun_torch_script(const gm_rerun_origin *o, const char *cmdline, gm_rerun_script *t, char *err, size_t errsz) {
    uint64_t a = 0, r = 0;
    /* PYTORCH_CUDA_ALLOC_CONF as the change has it, unset when it has none */
    return rerun(o, cmdline, NULL, "PYTORCH_CUDA_ALLOC_CONF", t->alloc_conf, 0, 1, t, &a, &r, NULL, NULL, err, errsz);
}

static int rerun(const gm_rerun_origin *o, const char *cmdline, const char *extra_args, const char *var, const char *conf,
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
        /* Open MPI refuses to start as root without it (a container, a CI job) */
        const char *root_flag = gm_mpirun_root_flag();
        if (root_flag[0]) argv[argc++] = (char *)root_flag;
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
    /* argv[0] through the path it was found at when recorded, not the executable its links lead
     * to: a virtual environment's python is a link to the system's, which run by its own path
     * has none of the environment's packages */
    char prog[4096];
    gm_rerun_program(o, cmd, prog, sizeof prog);
    /* an older recording names only the executable: a failure says what that may have cost */
    int resolved = !(o && o->argv0_path[0]) && o && !strcmp(prog, o->exe);
    const char *cwd = o && o->cwd[0] ? o->cwd : NULL;
    struct stat cst;
    int e = 0;
    if (cwd && stat(cwd, &cst) != 0)
        e = errno;
    else if (cwd && !S_ISDIR(cst.st_mode))
        e = ENOTDIR;
    if (e) {
        snprintf(err, errsz,
                 "the recorded working directory %.1000s (meta.cwd) is not there (%s): the command's relative "
                 "paths are from it; create it again, or record the command again",
                 cwd, strerror(e));
        return -1;
    }
    int first = argc;
    char words_buf[sizeof cmd];
    int nw = gm_cmd_split(cmd, words_buf, sizeof words_buf, argv + argc, 278 - argc);
    if (nw <= 0) {
        snprintf(err, errsz, "the command to re-run is not a line of words (unbalanced quote, or too long): %.1000s",
                 cmd);
        return -1;
    }
    argv[argc] = prog;
    argc += nw;
    argv[argc] = NULL;
    if (o && !o->argv_exact && !legacy_noted) {
        legacy_noted = 1;
        fprintf(stderr,
                "gpumem: note: %s has no meta.argv (recorded by an older gpumem): its command line is re-run as "
                "meta.cmdline has it, split at spaces, so an argument that had a space, a quote or nothing in it "
                "does not run as it was; record again to re-run it exactly\n",
                o->path[0] ? o->path : "the recording");
    }
    /* the child's stderr, read back when it fails (unlinked at once: nothing left behind) */
    char errpath[] = "/tmp/gpumem-check-stderr-XXXXXX";
    int errfd = mkstemp(errpath);
    if (errfd >= 0) unlink(errpath);
    /* the re-run's databases go if a signal ends this command (Ctrl-C, kill): the re-run is
     * told, waited for, and its files removed before we die of it (gm_sig.h) */
    int slots[64], nslots = 0;
    for (unsigned r = 0; r < (ranks ? ranks : 1) && nslots < 64; r++) {
        char path[128];
        if (ranks)
            snprintf(path, sizeof path, "/tmp/gpumem-check-%d-%u.db", (int)getpid(), r);
        else
            snprintf(path, sizeof path, "%s", dbpath);
        slots[nslots++] = gm_sig_remove_on_exit(path);
    }
    fflush(NULL);
    pid_t pid = gm_sig_fork();
    if (pid < 0) {
        snprintf(err, errsz, "cannot fork: %s", strerror(errno));
        if (errfd >= 0) close(errfd);
        for (int k = 0; k < nslots; k++) gm_sig_forget(slots[k]);
        return -1;
    }
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 1);
        if (errfd >= 0) dup2(errfd, 2), close(errfd);
        /* the recorded command's relative paths are from where it ran */
        if (cwd && chdir(cwd) != 0) {
            fprintf(stderr, "cannot enter the recorded working directory %s: %s\n", cwd, strerror(errno));
            _exit(127);
        }
        if (conf && (conf[0] || !script)) {
            setenv(var, conf, 1);
            if (!torch) unsetenv("GPUMEM_LIMIT"); /* the configuration carries the recorded limit */
        } else if (script) {
            unsetenv(var);
        }
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int st = 0;
    int sig = gm_sig_wait_child(pid, &st);
    if (sig) gm_sig_die(sig); /* removes the re-run's databases */
    int rc = 0, code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (code != 0) {
        int with = extra_args && *extra_args, conf_set = conf && conf[0];
        char how[64], tail[RERUN_TAIL_QUOTE + 8], line[2048];
        if (WIFSIGNALED(st))
            snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(st));
        else
            snprintf(how, sizeof how, "exit %d", code);
        read_stderr_tail(errfd, tail, sizeof tail);
        shell_line(argv, cwd, var, conf_set ? conf : NULL, line, sizeof line);
        char why[1600] = "";
        const char *a0 = argv[first];
        char rec0[1024];
        gm_rerun_program(NULL, cmdline, rec0, sizeof rec0); /* the recorded argv[0] */
        if (resolved && strcmp(a0, rec0))
            snprintf(why, sizeof why,
                     "; the recording does not say through which path its '%.200s' ran (meta.argv0_path, written "
                     "by newer recorders), so it ran %.900s, where its links lead: a program that finds its "
                     "files through its own path (a virtual environment's python) may fail so; put the "
                     "program's directory first in PATH (activate the environment), or record again",
                     rec0, a0);
        snprintf(err, errsz,
                 "the re-run%s%s%s%s%s%s%s%s%s failed (%s)%s%s%s%s; to see all of its output, run: %s",
                 ranks ? " under mpirun -np " : "", ranks ? np : "", with ? " with '" : "", with ? extra_args : "",
                 with ? "'" : "", conf_set ? " under " : "", conf_set ? var : "", conf_set ? "=" : "",
                 conf_set ? conf : "", how, tail[0] ? ": its stderr ends: \"" : " and wrote nothing on stderr",
                 tail, tail[0] ? "\"" : "", why, line);
        rc = -1;
    }
    if (errfd >= 0) close(errfd);
    *peak_allocated = *peak_reserved = 0;
    for (unsigned r = 0; r < (ranks ? ranks : 1); r++) {
        char path[128];
        if (ranks)
            snprintf(path, sizeof path, "/tmp/gpumem-check-%d-%u.db", (int)getpid(), r);
        else
            snprintf(path, sizeof path, "%s", dbpath);
        uint64_t ra = 0, rs = 0; /* this rank's */
        int device = o ? o->device : -1;
        if (rc == 0 && (script  ? read_script_peaks(path, device, script, err, errsz)
                        : read_peaks(path, torch, device, &ra, &rs, err, errsz)) != 0) {
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
    for (int k = 0; k < nslots; k++) gm_sig_forget(slots[k]);
    return rc;
}
