/* gpumem.c — the gpumem command: record, report, leaks, sql.
 *
 * The command analyses and never records (the recording happens in libgpumem.so inside the
 * program); `record` only sets up the environment, runs the program and reads the result.
 * Exit codes (also in `gpumem --help` and snapshot/README.md): 0 ok; 1 leaks found with
 * --fail-on-leak; 2 usage error; 3 the database cannot be read; 4 libgpumem.so not found;
 * `record` passes the program's own exit code through (128+N when killed by signal N, 127 when
 * the program cannot be started).
 */
#include "snapshot/gm.h"
#include "snapshot/gm_advise.h"
#include "snapshot/rec.h"

#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const usage_main =
    "usage: gpumem COMMAND [ARGS]\n"
    "\n"
    "Where GPU memory goes, from a recording of every allocation.\n"
    "\n"
    "commands:\n"
    "  record [-o FILE] -- CMD ARGS...   run CMD with gpumem loaded, record to FILE, print a summary\n"
    "  report DB [--json] [--top N]      summary, peak attribution, OOM forensics\n"
    "  leaks DB [--json] [--top N] [--fail-on-leak]\n"
    "                                    what was still allocated at exit, and growth per step\n"
    "  sql DB [-c QUERY]                 the sqlite3 shell on DB, or run one query\n"
    "  export --format trace DB [-o FILE] the allocations as a trace for gpumem-replay\n"
    "  advise DB [--budget SIZE] [--json] [--check] ...\n"
    "                                    predicted peaks under recompute, offload, accumulation,\n"
    "                                    set-to-none, bf16 (replayed), checked by re-running\n"
    "\n"
    "`gpumem COMMAND --help` tells more. The database schema is documented in\n"
    "snapshot/README.md; its SQL is installed as share/gpumem/schema.sql.\n"
    "\n"
    "exit codes: 0 ok; 1 leaks found (leaks --fail-on-leak); 2 usage error; 3 the database\n"
    "cannot be read (missing, damaged, not gpumem's, newer schema); 4 libgpumem.so not found;\n"
    "record: the exit code of CMD (128+N if it was killed by signal N, 127 if it could not run).\n";

static const char *const usage_record =
    "usage: gpumem record [-o FILE] [-q] -- CMD ARGS...\n"
    "\n"
    "Runs CMD with libgpumem.so preloaded (found next to gpumem or in ../lib/gpumem) and the\n"
    "recording written to FILE (default gpumem-<pid>.db; %p = pid, %r = rank), then prints a\n"
    "short summary. When no GPU driver is usable (no /dev/nvidiactl, or libcuda.so.1 does not\n"
    "load) the virtual GPU (sim/ next to gpumem, ../lib/gpumem/sim or ../lib/gpumem) is put first in\n"
    "LD_LIBRARY_PATH, and gpumem says so.\n"
    "  -o FILE   the database to write (an existing one is replaced)\n"
    "  -q        no summary\n"
    "Environment passed through: GPUMEM_STACKS (frames per stack, default 16, 0 = off),\n"
    "GPUMEM_MODE, GPUMEM_CONF, GPUMEM_FORK (record|off), GPUMEM_RING.\n"
    "Exit code: CMD's own (128+N if killed by signal N; 127 if CMD could not be run).\n";

static const char *const usage_report =
    "usage: gpumem report DB [--json] [--top N]\n"
    "\n"
    "Summary (peak allocated, peak reserved, utilization, allocation counts, cache hit rate,\n"
    "driver calls, OOMs, dropped events, recording overhead), what was live at the peak by NVTX\n"
    "phase and by call site (top N, default 10), and OOM forensics with what to change.\n"
    "Reads databases still being written or left by a killed process (it says so).\n"
    "  --json    one JSON object instead of text\n"
    "  --top N   rows per table (default 10)\n"
    "Exit code: 0, 2 usage, 3 unreadable database.\n";

static const char *const usage_leaks =
    "usage: gpumem leaks DB [--json] [--top N] [--fail-on-leak]\n"
    "\n"
    "Allocations still alive when the recording ended, grouped by call site (with the calling\n"
    "frames) and by NVTX phase (\"step N\" grouped as \"step *\"), and the growth across steps\n"
    "where ranges named \"step N\" exist. The last line is\n"
    "  LEAK SUMMARY: N bytes leaked in M allocations\n"
    "  --fail-on-leak   exit 1 when N > 0 (for CI)\n"
    "  --json           one JSON object instead of text\n"
    "  --top N          call sites shown (default 10)\n"
    "Exit code: 0, 1 leaks with --fail-on-leak, 2 usage, 3 unreadable database.\n";

static const char *const usage_sql =
    "usage: gpumem sql DB [-c QUERY]\n"
    "\n"
    "Without -c, opens the sqlite3 shell on DB (or reads queries from standard input when the\n"
    "sqlite3 program is not installed). With -c, runs QUERY and prints the rows, columns\n"
    "separated by '|', with a header line. The schema is in snapshot/README.md; start with\n"
    "  gpumem sql run.db -c 'SELECT * FROM allocations ORDER BY size DESC LIMIT 10'\n"
    "Exit code: 0, 2 usage, 3 unreadable database or failed query.\n";

static const char *const usage_export =
    "usage: gpumem export --format trace DB [-o FILE]\n"
    "\n"
    "Writes the recording in another tool's format (default: standard output).\n"
    "  --format trace   the allocator replay engine's text trace (gpumem-replay, alloc/README):\n"
    "                   one line per event, in recorded order:\n"
    "                     a <id> <size> <stream>   a device allocation (cudaMalloc, cudaMallocAsync)\n"
    "                     f <id>                   its cudaFree\n"
    "                     fa <id> <stream>         its cudaFreeAsync\n"
    "                   id = the allocation's event number (birth seq), size = the bytes the\n"
    "                   program requested, stream = the database's stream number (streams.id).\n"
    "                   Frees of memory not allocated in the recording are left out.\n"
    "  -o FILE          write to FILE instead of standard output\n"
    "Example: gpumem export --format trace run.db -o run.trace &&\n"
    "         gpumem-replay --preset gpumem --conf expandable_segments:False run.trace\n"
    "Exit code: 0, 2 usage, 3 unreadable database (or FILE cannot be written).\n";

static int wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) return 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    }
    return 0;
}

static int usage_error(const char *usage, const char *fmt, const char *arg) {
    fprintf(stderr, "gpumem: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", usage);
    return GM_EXIT_USAGE;
}

/* ---------------------------------------------------------------- report / leaks */

static int parse_common(int argc, char **argv, const char *usage, gm_opts *o, const char **db,
                        int leaks) {
    o->json = 0, o->top = 10, o->fail_on_leak = 0;
    *db = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) o->json = 1;
        else if (leaks && strcmp(a, "--fail-on-leak") == 0) o->fail_on_leak = 1;
        else if (strcmp(a, "--top") == 0 || strncmp(a, "--top=", 6) == 0) {
            const char *v = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
            char *end;
            long n = v ? strtol(v, &end, 10) : 0;
            if (!v || *end || n < 1 || n > 1000000) return usage_error(usage, "--top needs a number from 1 to 1000000, got '%s'", v ? v : "");
            o->top = (int)n;
        } else if (a[0] == '-' && a[1]) return usage_error(usage, "unknown option '%s'", a);
        else if (!*db) *db = a;
        else return usage_error(usage, "one database only; '%s' is extra", a);
    }
    if (!*db) return usage_error(usage, "%s", "which database? give its path");
    return 0;
}

static int load(const char *path, gm_db *d, gm_model *m) {
    char err[8192];
    if (gm_db_open(path, d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        return GM_EXIT_BADDB;
    }
    if (gm_model_load(d, m, 1, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        gm_model_free(m);
        gm_db_close(d);
        return GM_EXIT_BADDB;
    }
    gm_symbolize(d, m);
    return 0;
}

static int cmd_report(int argc, char **argv, int leaks) {
    const char *usage = leaks ? usage_leaks : usage_report;
    if (wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    gm_opts o;
    const char *path;
    int rc = parse_common(argc, argv, usage, &o, &path, leaks);
    if (rc) return rc;
    gm_db d;
    gm_model m;
    if ((rc = load(path, &d, &m)) != 0) return rc;
    uint64_t leaked = 0;
    rc = leaks ? gm_leaks(&d, &m, &o, stdout, &leaked) : gm_report(&d, &m, &o, stdout);
    gm_model_free(&m);
    gm_db_close(&d);
    fflush(stdout);
    return rc;
}

/* ---------------------------------------------------------------- export */

static int cmd_export(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(usage_export, stdout);
        return 0;
    }
    const char *path = NULL, *format = NULL, *outpath = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--format") == 0 || strcmp(a, "-f") == 0) {
            if (i + 1 >= argc) return usage_error(usage_export, "%s needs a format (trace)", a);
            format = argv[++i];
        } else if (strncmp(a, "--format=", 9) == 0) {
            format = a + 9;
        } else if (strcmp(a, "-o") == 0) {
            if (i + 1 >= argc) return usage_error(usage_export, "%s", "-o needs a file name");
            outpath = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            return usage_error(usage_export, "unknown option '%s'", a);
        } else if (!path) {
            path = a;
        } else {
            return usage_error(usage_export, "one database only; '%s' is extra", a);
        }
    }
    if (!format) return usage_error(usage_export, "%s", "which format? give --format trace");
    if (strcmp(format, "trace") != 0)
        return usage_error(usage_export, "unknown format '%s' (known: trace)", format);
    if (!path) return usage_error(usage_export, "%s", "which database? give its path");
    char err[8192];
    gm_db d;
    if (gm_db_open(path, &d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        return GM_EXIT_BADDB;
    }
    FILE *out = stdout;
    if (outpath && !(out = fopen(outpath, "w"))) {
        fprintf(stderr, "gpumem: cannot write %s: %s\n", outpath, strerror(errno));
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    int rc = gm_export_trace(&d, out);
    if ((out != stdout ? fclose(out) : fflush(out)) != 0 && rc == 0) {
        fprintf(stderr, "gpumem: writing %s failed: %s\n", outpath ? outpath : "the trace", strerror(errno));
        rc = GM_EXIT_BADDB;
    }
    gm_db_close(&d);
    return rc;
}

/* ---------------------------------------------------------------- sql */

static int print_row(void *arg, int n, char **vals, char **cols) {
    int *header = arg;
    if (!*header) {
        for (int i = 0; i < n; i++) printf("%s%s", i ? "|" : "", cols[i]);
        putchar('\n');
        *header = 1;
    }
    for (int i = 0; i < n; i++) printf("%s%s", i ? "|" : "", vals[i] ? vals[i] : "");
    putchar('\n');
    return 0;
}

static int run_query(sqlite3 *db, const char *q) {
    int header = 0;
    char *err = NULL;
    if (sqlite3_exec(db, q, print_row, &header, &err) != SQLITE_OK) {
        fprintf(stderr, "gpumem sql: %s\n", err ? err : "query failed");
        sqlite3_free(err);
        return GM_EXIT_BADDB;
    }
    return 0;
}

static int cmd_sql(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(usage_sql, stdout);
        return 0;
    }
    const char *path = NULL, *query = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-c") == 0) {
            if (i + 1 >= argc) return usage_error(usage_sql, "%s", "-c needs a query");
            query = argv[++i];
        } else if (argv[i][0] == '-') return usage_error(usage_sql, "unknown option '%s'", argv[i]);
        else if (!path) path = argv[i];
        else return usage_error(usage_sql, "one database only; '%s' is extra", argv[i]);
    }
    if (!path) return usage_error(usage_sql, "%s", "which database? give its path");
    gm_db d;
    char err[8192];
    if (gm_db_open(path, &d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        return GM_EXIT_BADDB;
    }
    int rc = 0;
    if (query) {
        rc = run_query(d.db, query);
    } else if (isatty(0)) {
        gm_db_close(&d);
        execlp("sqlite3", "sqlite3", path, (char *)NULL);
        fprintf(stderr, "gpumem: the sqlite3 shell is not installed (apt-get install sqlite3); "
                        "reading queries from standard input instead\n");
        if (gm_db_open(path, &d, err, sizeof err) != 0) return GM_EXIT_BADDB;
    }
    if (!query) {
        char line[65536];
        while (fgets(line, sizeof line, stdin))
            if (line[strspn(line, " \t\r\n")] && run_query(d.db, line) != 0) rc = GM_EXIT_BADDB;
    }
    gm_db_close(&d);
    return rc;
}

/* ---------------------------------------------------------------- record */

static void self_dir(char *out, size_t n) {
    ssize_t r = readlink("/proc/self/exe", out, n - 1);
    out[r > 0 ? r : 0] = 0;
    char *s = strrchr(out, '/');
    if (s) *s = 0;
    else snprintf(out, n, ".");
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int gpu_driver_usable(void) {
    if (!file_exists("/dev/nvidiactl")) return 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
    dlclose(h);
    return 1;
}

static void prepend_env(const char *name, const char *value, char sep) {
    const char *old = getenv(name);
    if (old && *old) {
        size_t n = strlen(value) + strlen(old) + 2;
        char *v = malloc(n);
        if (!v) return;
        snprintf(v, n, "%s%c%s", value, sep, old);
        setenv(name, v, 1);
        free(v);
    } else {
        setenv(name, value, 1);
    }
}

static int cmd_record(int argc, char **argv) {
    const char *out = NULL;
    int quiet = 0, i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_record, stdout);
            return 0;
        }
        if (strcmp(argv[i], "-o") == 0) {
            if (i + 1 >= argc) return usage_error(usage_record, "%s", "-o needs a file name");
            out = argv[++i];
        } else if (strcmp(argv[i], "-q") == 0) quiet = 1;
        else if (argv[i][0] == '-') return usage_error(usage_record, "unknown option '%s'", argv[i]);
        else break; /* the command, without "--" */
    }
    if (i >= argc) return usage_error(usage_record, "%s", "which command to record? gpumem record -- ./prog args");
    char dir[PATH_MAX], lib[PATH_MAX + 64], sim[PATH_MAX + 64];
    self_dir(dir, sizeof dir);
    snprintf(lib, sizeof lib, "%s/libgpumem.so", dir);
    if (!file_exists(lib)) snprintf(lib, sizeof lib, "%s/../lib/gpumem/libgpumem.so", dir);
    if (!file_exists(lib)) {
        fprintf(stderr, "gpumem: libgpumem.so is neither in %s nor in %s/../lib/gpumem; build it "
                        "(make) or reinstall gpumem\n", dir, dir);
        return GM_EXIT_NOLIB;
    }
    char *rl = realpath(lib, NULL);
    if (rl) {
        snprintf(lib, sizeof lib, "%s", rl);
        free(rl);
    }
    if (!gpu_driver_usable()) {
        /* the virtual GPU: build tree (sim/ next to gpumem) or installed (../lib/gpumem/sim, or
         * ../lib/gpumem itself, where make install puts its libraries) */
        static const char *const where[] = {"%s/sim", "%s/../lib/gpumem/sim", "%s/../lib/gpumem"};
        int found = 0;
        for (size_t k = 0; k < sizeof where / sizeof where[0] && !found; k++) {
            char probe[PATH_MAX + 96];
            snprintf(sim, sizeof sim, where[k], dir);
            snprintf(probe, sizeof probe, "%s/libcuda.so.1", sim);
            found = file_exists(probe);
        }
        if (found) {
            char *rs = realpath(sim, NULL);
            if (rs) {
                snprintf(sim, sizeof sim, "%s", rs);
                free(rs);
            }
            prepend_env("LD_LIBRARY_PATH", sim, ':');
            if (!quiet) fprintf(stderr, "gpumem: no usable GPU driver; running on the virtual GPU (%s)\n", sim);
        } else if (!quiet) {
            fprintf(stderr, "gpumem: no usable GPU driver and no virtual GPU next to gpumem; "
                            "CUDA calls of the program will fail\n");
        }
    }
    prepend_env("LD_PRELOAD", lib, ':');
    setenv("GPUMEM_QUIET", "1", 1);
    const char *tmpl = out ? out : "gpumem-%p.db";
    /* Ctrl-C is for the program: we stay to report */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_int, old_quit;
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "gpumem: cannot fork: %s\n", strerror(errno));
        return 127;
    }
    if (pid == 0) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGQUIT, &old_quit, NULL);
        setenv("GPUMEM_DB", tmpl, 1);
        execvp(argv[i], argv + i);
        fprintf(stderr, "gpumem: cannot run %s: %s\n", argv[i], strerror(errno));
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
    char path[PATH_MAX];
    rec_expand_path(tmpl, (long)pid, path, sizeof path);
    if (rc == 127 && !file_exists(path)) return rc;
    if (!quiet) {
        gm_db d;
        gm_model m;
        char err[8192];
        if (!file_exists(path)) {
            fprintf(stderr, "gpumem: no database was written (%s): the program made no CUDA "
                            "allocation, or libgpumem.so could not be loaded\n", path);
        } else if (gm_db_open(path, &d, err, sizeof err) != 0) {
            fprintf(stderr, "gpumem: %s\n", err);
        } else {
            if (gm_model_load(&d, &m, 0, err, sizeof err) == 0) gm_summary_short(&d, &m, stderr);
            else fprintf(stderr, "gpumem: %s\n", err);
            gm_model_free(&m);
            gm_db_close(&d);
            fprintf(stderr, "gpumem: recorded to %s; see gpumem report %s\n", path, path);
        }
    }
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage_main, stderr);
        return GM_EXIT_USAGE;
    }
    const char *c = argv[1];
    if (strcmp(c, "--help") == 0 || strcmp(c, "-h") == 0 || strcmp(c, "help") == 0) {
        fputs(usage_main, stdout);
        return 0;
    }
    if (strcmp(c, "--version") == 0) {
        puts("gpumem 0.1.0 (database schema 1.1)");
        return 0;
    }
    if (strcmp(c, "record") == 0) return cmd_record(argc - 1, argv + 1);
    if (strcmp(c, "report") == 0) return cmd_report(argc - 1, argv + 1, 0);
    if (strcmp(c, "leaks") == 0) return cmd_report(argc - 1, argv + 1, 1);
    if (strcmp(c, "sql") == 0) return cmd_sql(argc - 1, argv + 1);
    if (strcmp(c, "export") == 0) return cmd_export(argc - 1, argv + 1);
    if (strcmp(c, "advise") == 0) return gm_advise_main(argc - 1, argv + 1);
    fprintf(stderr, "gpumem: unknown command '%s'\n\n%s", c, usage_main);
    return GM_EXIT_USAGE;
}
