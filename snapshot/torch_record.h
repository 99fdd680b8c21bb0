/* torch_record.h — what `gpumem record` does for Python (torch_record.c), in the program or in any
 * Python it runs: gpumem's
 * sitecustomize on PYTHONPATH, the virtual GPU's libraries preloaded (PyTorch's wheels find
 * their CUDA libraries through DT_RPATH, which outranks LD_LIBRARY_PATH), and PyTorch's memory
 * history, dumped by the hook, merged into the recording after the program ends. */
#ifndef GPUMEM_SNAPSHOT_TORCH_RECORD_H
#define GPUMEM_SNAPSHOT_TORCH_RECORD_H

#include <limits.h>
#include <sys/types.h>

typedef struct gm_torch_run {
    int python;       /* gpumem's Python files were found: the rest applies */
    int history;      /* PyTorch's memory history is dumped and merged */
    char snapshot[PATH_MAX]; /* the private file the hook dumps into ("" none) */
    /* the options given that only a PyTorch program uses ("--allocator gpumem", "--torch-ops"):
     * when no process of the run set PyTorch up, the end of the run says they did nothing */
    char torch_only[64];
} gm_torch_run;

/* Before the fork: sets PYTHONPATH and GPUMEM_TORCH_* (for the program, or any Python it runs)
 * and, on the virtual GPU (simdir not NULL), preloads its libraries after libgpumem.so; argv0
 * (and its #! line) only decides whether missing Python files are worth a line. allocator:
 * "torch" or "gpumem". Returns 0, or -1 with a message on stderr (the program is not run). */
int gm_torch_prepare(gm_torch_run *r, const char *argv0, const char *selfdir, const char *simdir,
                     const char *allocator, int history, int hooks, int quiet);
/* Says (on stderr) when argv runs Python with an option that keeps the sitecustomize out
 * (-I, -E, -S): PyTorch is then recorded by its segments only. */
void gm_torch_warn_flags(const gm_torch_run *r, char *const *argv);
/* In the child, before exec: names the process whose dump is SNAPSHOT itself (others' are
 * SNAPSHOT.<pid>). */
void gm_torch_child(const gm_torch_run *r);
/* A process of the run and the database it recorded (the last, for one that exec'd). */
typedef struct gm_run_db {
    long pid;
    char path[PATH_MAX];
    int empty; /* the process used no GPU and its recorder removed the file (rec.c remove_if_unused) */
} gm_run_db;
/* After the program: merges the dump of the process gpumem record started into the recording
 * at dbpath (NULL: nothing was recorded), and each other Python process's (SNAPSHOT.<pid>: a
 * launcher script's, torchrun's workers) into that process's database in dbs; says so unless
 * quiet, and removes the dumps. */
void gm_torch_finish(gm_torch_run *r, const char *dbpath, const gm_run_db *dbs, size_t ndbs, int quiet);

#endif
