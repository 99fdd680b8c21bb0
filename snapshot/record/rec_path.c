/* rec_path.c — what the recorder and gpumem record share about the database file: expanding
 * the GPUMEM_DB template, and telling a gpumem database from a file that must not be touched. */
#include "snapshot/record/rec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void rec_status(const char *what, const char *text) {
    const char *p = getenv("GPUMEM_RECORD_STATUS");
    if (!p || !*p) return;
    char line[1024];
    int n = snprintf(line, sizeof line, "%ld %s %s", (long)getpid(), what, text);
    if (n < 0) return;
    if ((size_t)n >= sizeof line - 1) n = (int)sizeof line - 2;
    for (int i = 0; i < n; i++)
        if (line[i] == '\n') line[i] = ' ';
    line[n++] = '\n';
    int fd = open(p, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t w = write(fd, line, (size_t)n);
    (void)w; /* best effort: the program's run matters more than the summary */
    close(fd);
}

/* The ".db" a database's name ends with, if it does: names are changed before it. */
static size_t stem_len(const char *path) {
    size_t n = strlen(path);
    return n > 3 && strcmp(path + n - 3, ".db") == 0 ? n - 3 : n;
}

void rec_insert_before_ext(const char *in, const char *ins, char *out, size_t outsz) {
    size_t s = stem_len(in);
    snprintf(out, outsz, "%.*s%s%s", (int)s, in, ins, in + s);
}

void rec_exec_image_path(const char *path, int k, char *out, size_t outsz) {
    size_t s = stem_len(path);
    snprintf(out, outsz, "%.*s-exec%d%s", (int)s, path, k, path + s);
}

void rec_exec_next_path(const char *path, char *out, size_t outsz) {
    size_t s = stem_len(path), cut = s;
    long k = 0;
    const char *mark = NULL; /* the last "-exec" in the stem, followed by digits to its end */
    for (const char *p = path; (p = strstr(p, "-exec")) && (size_t)(p - path) < s; p++) mark = p;
    if (mark) {
        char *end;
        long v = strtol(mark + 5, &end, 10);
        if (end == path + s && v > 0) k = v, cut = (size_t)(mark - path);
    }
    snprintf(out, outsz, "%.*s-exec%ld%s", (int)cut, path, k + 1, path + s);
}

int rec_db_side(const char *path, int which, char *out, size_t outsz) {
    static const char *const suffix[REC_SIDES] = {"-wal", "-shm", "-journal"};
    if (which < 0 || which >= REC_SIDES || (size_t)snprintf(out, outsz, "%s%s", path, suffix[which]) >= outsz) {
        if (outsz) out[0] = 0;
        return -1;
    }
    return 0;
}

void rec_db_unlink_sides(const char *path) {
    for (int k = 0; k < REC_SIDES; k++) {
        char side[4200];
        if (rec_db_side(path, k, side, sizeof side) == 0) unlink(side);
    }
}

int rec_db_replaceable(int fd) {
    unsigned char h[100];
    ssize_t n;
    do n = pread(fd, h, sizeof h, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0) return -1;
    if (n == 0) return 1; /* empty: nothing to lose (also a recording killed before its first write) */
    if ((size_t)n < sizeof h || memcmp(h, "SQLite format 3", 16) != 0) return 0;
    uint32_t app = (uint32_t)h[68] << 24 | (uint32_t)h[69] << 16 | (uint32_t)h[70] << 8 | h[71];
    return app == REC_APPLICATION_ID;
}

/* The launchers' variables, one family per line: a rank is taken from the first family whose
 * rank variable is set, and that family's size and local rank go with it (mixing families would
 * pair an outer Slurm allocation's size with mpirun's rank). torchrun first: RANK is also what
 * PyTorch programs read. Slurm last: under `srun mpirun ...` SLURM_PROCID is the one mpirun
 * step, the same on every rank. */
static const struct {
    const char *rank, *size, *local;
} launchers[] = {
    {"RANK", "WORLD_SIZE", "LOCAL_RANK"},                                           /* torchrun */
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"}, /* Open MPI */
    {"MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK"},    /* MVAPICH */
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},       /* PMI: MPICH, Intel MPI */
    {"PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK"},     /* PMIx: srun --mpi=pmix, prterun */
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}, /* Slurm (srun) */
};

static long env_number(const char *name)
{
    const char *v = name ? getenv(name) : NULL;
    if (!v || !*v) return -1;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 0 ? -1 : x;
}

int rec_launch_rank(rec_rank *out)
{
    memset(out, 0, sizeof *out);
    out->rank = out->world_size = out->local_rank = -1;
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
        const char *r = getenv(launchers[i].rank);
        if (!r || !*r) continue;
        snprintf(out->rank_text, sizeof out->rank_text, "%s", r);
        out->rank = env_number(launchers[i].rank);
        out->world_size = env_number(launchers[i].size);
        out->local_rank = env_number(launchers[i].local);
        out->from = launchers[i].rank;
        return 1;
    }
    return 0;
}

int rec_path_from(const char *dir, const char *path, char *out, size_t outsz) {
    if (outsz == 0) return -1;
    size_t dl = dir ? strlen(dir) : 0;
    int n = path[0] == '/' || dl == 0 ? snprintf(out, outsz, "%s", path)
                                      : snprintf(out, outsz, "%s%s%s", dir, dir[dl - 1] == '/' ? "" : "/", path);
    if (n < 0 || (size_t)n >= outsz) {
        out[0] = 0;
        return -1;
    }
    return 0;
}

int rec_expand_path(const char *tmpl, long pid, char *out, size_t outsz) {
    size_t o = 0;
    int ok = 1;
    if (outsz == 0) return -1;
    for (const char *p = tmpl; *p; p++) {
        char tmp[32];
        const char *ins = NULL;
        if (*p == '%' && p[1] == 'p') {
            snprintf(tmp, sizeof tmp, "%ld", pid);
            ins = tmp;
            p++;
        } else if (*p == '%' && p[1] == 'r') {
            rec_rank rk;
            const char *r = rec_launch_rank(&rk) ? rk.rank_text : "0";
            /* a rank is a number: anything else must not smuggle '/' into the path */
            size_t k = 0;
            for (; r[k] && k < sizeof tmp - 1; k++) tmp[k] = (r[k] >= '0' && r[k] <= '9') ? r[k] : '_';
            tmp[k] = 0;
            ins = tmp;
            p++;
        } else if (*p == '%' && p[1] == '%') {
            tmp[0] = '%', tmp[1] = 0;
            ins = tmp;
            p++;
        } else {
            tmp[0] = *p, tmp[1] = 0;
            ins = tmp;
        }
        for (; *ins; ins++) {
            if (o + 1 >= outsz) { ok = 0; break; }
            out[o++] = *ins;
        }
        if (!ok) break;
    }
    out[o] = 0;
    return ok ? 0 : -1;
}

