/* torch_record.h — what `gpumem record` does for a Python program (torch_record.c): gpumem's
 * sitecustomize on PYTHONPATH, the virtual GPU's libraries preloaded (PyTorch's wheels find
 * their CUDA libraries through DT_RPATH, which outranks LD_LIBRARY_PATH), and PyTorch's memory
 * history, dumped by the hook, merged into the recording after the program ends. */
#ifndef GPUMEM_SNAPSHOT_TORCH_RECORD_H
#define GPUMEM_SNAPSHOT_TORCH_RECORD_H

#include <limits.h>
#include <sys/types.h>

typedef struct gm_torch_run {
    int python;       /* the command is a Python program: the rest applies */
    int history;      /* PyTorch's memory history is dumped and merged */
    char snapshot[PATH_MAX]; /* the private file the hook dumps into ("" none) */
} gm_torch_run;

/* Before the fork: looks at the command (argv0, and its #! line); for a Python program sets
 * PYTHONPATH and GPUMEM_TORCH_* and, on the virtual GPU (simdir not NULL), preloads its
 * libraries after libgpumem.so. allocator: "torch" or "gpumem". Returns 0, or -1 with a message
 * on stderr (the program is not run). */
int gm_torch_prepare(gm_torch_run *r, const char *argv0, const char *selfdir, const char *simdir,
                     const char *allocator, int history, int hooks, int quiet);
/* In the child, before exec: the hook acts only in this process (not in its workers). */
void gm_torch_child(const gm_torch_run *r);
/* After the program: merges the dump into the recording at dbpath (NULL: nothing was
 * recorded), says so unless quiet, and removes the dump. */
void gm_torch_finish(gm_torch_run *r, const char *dbpath, int quiet);

#endif
