/*
 * fork_ids_app — what a forked child records is named by its own recording, never by ids or
 * state its parent's recording left in gpumem's caches (tests/integration/preload_fork_ids.sh).
 *
 *   fork_ids_app before  the parent records NVTX ranges without touching CUDA (the recording
 *                        opens for them): a second thread pushes "p_thread" first, then the main
 *                        thread pushes "p_only_1", "p_only_2" and "shared" (one string literal,
 *                        the same address in both processes), and registers kernel k_parent.
 *                        Then it forks; the child (gpumem on: its parent never initialised it)
 *                        pushes "c_only", then "shared", and inside it allocates, launches
 *                        k_parent and k_child, copies host to device and sets memory.
 *   fork_ids_app after   the parent allocates, launches k_parent, copies and sets memory, then
 *                        forks; the child does the same and launches k_child too (gpumem is off
 *                        in it: nothing recorded), then makes the calls PyTorch's trace hook and
 *                        _torch.py make (gpumem_torch_trace_entry, _seq, _time: they read the
 *                        recorder's seq and clock) and prints "CHILD_TRACE <seq> <time> <db fds>",
 *                        the last the descriptors on a file named *.db* it holds that the parent
 *                        did not (the parent's connection stays in the child, left alone)
 *   fork_ids_app trace   a thread hands PyTorch-style trace entries to gpumem and copies them
 *                        out, over and over (gpumem_torch_trace_entry / _copy, the calls
 *                        preload/torch_trace.cpp and _torch.py make); once some are kept, the
 *                        main thread forks up to FORKS children; each child asks gpumem how
 *                        many entries it has seen (within 3 s, or SIGALRM ends it: the lock may
 *                        have been held at the fork; the first such child ends the loop) and
 *                        exits 0 when none (the entries are the parent's), 3 when some
 *
 * Prints "CHILD <pid>" (before, after) or "trace: forks N hung H inherited I" and exits non-zero
 * if a call failed.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/sim.h"

#define FORKS 40

static int bad;
static const char shared_name[] = "shared"; /* one address, pushed by parent and child */

static void check(int ok, const char *what)
{
    if (!ok) {
        printf("fork_ids_app: %s failed\n", what);
        bad++;
    }
}

static void k_touch(void **p)
{
    int *x = *(int **)p[0];
    x[0] += 1;
}

static CUfunction kernel(const char *name)
{
    size_t sz[] = {sizeof(int *)};
    CUfunction f = NULL;
    check(sim_register_kernel(name, k_touch, 1, sz, &f) == CUDA_SUCCESS, name);
    return f;
}

/* a launch, a copy and a memset on a new allocation, through the runtime and the driver */
static void use_gpu(CUfunction f1, CUfunction f2)
{
    int *d = NULL;
    check(cudaMalloc((void **)&d, 4096) == cudaSuccess, "cudaMalloc");
    void *args[] = {&d};
    check(cuLaunchKernel(f1, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL) == CUDA_SUCCESS, "launch 1");
    if (f2)
        check(cuLaunchKernel(f2, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL) == CUDA_SUCCESS,
              "launch 2");
    int h[16] = {0};
    check(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy");
    check(cudaMemset(d, 0, 64) == cudaSuccess, "cudaMemset");
    check(cudaDeviceSynchronize() == cudaSuccess, "sync");
    check(cudaFree(d) == cudaSuccess, "cudaFree");
}

static void *first_thread(void *arg)
{
    (void)arg;
    nvtxRangePushA("p_thread");
    nvtxRangePop();
    return NULL;
}

static int wait_child(pid_t pid)
{
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int before(void)
{
    pthread_t t;
    pthread_create(&t, NULL, first_thread, NULL);
    pthread_join(t, NULL);
    nvtxRangePushA("p_only_1");
    nvtxRangePushA("p_only_2");
    nvtxRangePushA(shared_name);
    nvtxRangePop();
    nvtxRangePop();
    nvtxRangePop();
    CUfunction kp = kernel("k_parent");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        nvtxRangePushA("c_only");
        nvtxRangePushA(shared_name);
        use_gpu(kp, kernel("k_child"));
        nvtxRangePop();
        nvtxRangePop();
        fflush(stdout);
        _exit(bad != 0);
    }
    check(wait_child(pid) == 0, "child");
    printf("CHILD %d\n", (int)pid);
    return bad != 0;
}

/* The descriptors this process holds open on a file whose name has ".db" in it (a database, its
 * -wal, -shm or lock file): each "fd target" into have (room for max), counted; with known
 * (n of them, or NULL), only those not among known are counted and kept. */
enum { DB_FDS_MAX = 64 };
static char db_fd_names[DB_FDS_MAX][600];
static int db_fds(char (*have)[600], int max, char (*known)[600], int nknown)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[300], t[256], name[sizeof e->d_name + sizeof t + 2];
        snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(p, t, sizeof t - 1);
        if (k <= 0)
            continue;
        t[k] = 0;
        if (!strstr(t, ".db"))
            continue;
        snprintf(name, sizeof name, "%s %s", e->d_name, t);
        int old = 0;
        for (int i = 0; known && i < nknown; i++)
            old |= strcmp(known[i], name) == 0;
        if (old)
            continue;
        if (have && n < max)
            snprintf(have[n], sizeof have[n], "%s", name);
        n++;
    }
    if (d)
        closedir(d);
    return n;
}

/* what PyTorch's trace hook (preload/torch_trace.cpp) and _torch.py call, in this process */
static void trace_calls(int inherited)
{
    char fresh[1][600];
    typedef void (*entry_t)(int, int, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);
    typedef uint64_t (*u64_t)(void);
    entry_t e = (entry_t)dlsym(RTLD_DEFAULT, "gpumem_torch_trace_entry");
    u64_t seq = (u64_t)dlsym(RTLD_DEFAULT, "gpumem_torch_trace_seq");
    u64_t t = (u64_t)dlsym(RTLD_DEFAULT, "gpumem_torch_trace_time");
    check(e && seq && t, "gpumem_torch_trace_entry/_seq/_time found");
    if (!e || !seq || !t)
        return;
    e(0, 0, 0x7f0000000000ull, 4096, 0, 0, 0);
    uint64_t s = seq(), ns = t();
    printf("CHILD_TRACE %llu %llu %d\n", (unsigned long long)s, (unsigned long long)ns, db_fds(fresh, 1, db_fd_names, inherited));
}

static int after(void)
{
    CUfunction kp = kernel("k_parent");
    nvtxRangePushA(shared_name);
    use_gpu(kp, NULL);
    nvtxRangePop();
    fflush(stdout);
    int inherited = db_fds(db_fd_names, DB_FDS_MAX, NULL, 0);
    pid_t pid = fork();
    if (pid == 0) {
        nvtxRangePushA(shared_name);
        use_gpu(kp, kernel("k_child"));
        nvtxRangePop();
        trace_calls(inherited);
        fflush(stdout);
        _exit(bad != 0);
    }
    check(wait_child(pid) == 0, "child");
    printf("CHILD %d\n", (int)pid);
    return bad != 0;
}

typedef void (*entry_fn)(int, int, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);
typedef size_t (*copy_fn)(void *, size_t, uint64_t *);
static entry_fn entry;
static copy_fn copy;
static atomic_int stop;

static void *trace_thread(void *arg)
{
    (void)arg;
    static char buf[72 * 4096];
    for (uint64_t i = 0; !atomic_load(&stop); i++) {
        entry((int)(i % 2), 0, 0x7f0000000000ull + (i % 2048) * 4096, 4096, 0, 0, 0);
        if (i % 16 == 0)
            copy(buf, sizeof buf, NULL); /* holds the lock while it copies up to 4096 entries */
    }
    return NULL;
}

static int trace(void)
{
    entry = (entry_fn)dlsym(RTLD_DEFAULT, "gpumem_torch_trace_entry");
    copy = (copy_fn)dlsym(RTLD_DEFAULT, "gpumem_torch_trace_copy");
    if (!entry || !copy) {
        printf("fork_ids_app: gpumem_torch_trace_entry/_copy not found (run with gpumem)\n");
        return 2;
    }
    pthread_t t;
    pthread_create(&t, NULL, trace_thread, NULL);
    uint64_t seen = 0;
    while (!seen) /* fork once there are entries (seq 0: an entry never opens the recording) */
        copy(NULL, 0, &seen);
    int hung = 0, inherited = 0;
    int forks = 0;
    while (forks < FORKS) {
        forks++;
        usleep(2000);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(3);
            uint64_t seen = 0;
            copy(NULL, 0, &seen);
            _exit(seen ? 3 : 0);
        }
        int rc = wait_child(pid);
        hung += rc == 128 + SIGALRM;
        inherited += rc == 3;
        check(rc == 0 || rc == 3 || rc == 128 + SIGALRM, "trace child");
        if (hung)
            break; /* one is enough: each costs the alarm's wait */
    }
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    copy(NULL, 0, &seen);
    check(seen > 0, "the parent's entries");
    printf("trace: forks %d hung %d inherited %d\n", forks, hung, inherited);
    return bad != 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "before"))
        return before();
    if (!strcmp(mode, "after"))
        return after();
    if (!strcmp(mode, "trace"))
        return trace();
    fprintf(stderr, "usage: fork_ids_app before|after|trace\n");
    return 2;
}
