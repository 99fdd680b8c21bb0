/*
 * crash_app — a program that allocates and then dies at once, before the recorder's periodic
 * commit (every 100 ms) could have written its events: 100 cudaMalloc, 50 cudaFree, then
 *   crash_app abort     abort()
 *   crash_app segv      a write to a page mapped without access (SIGSEGV from the fault)
 *   crash_app kill9     kill(getpid(), SIGKILL): nothing can flush
 *   crash_app handler   its own SIGSEGV handler (installed before the first CUDA call), which
 *                       says "crash_app: handler ran" and _exits 3, then the faulting write
 *   crash_app loader_lock SIG LIB   (after the 100 and 50) loads LIB (loader_lock.so) and,
 *                       with the dynamic linker's lock held (its dl_iterate_phdr callback), one
 *                       cudaMalloc more (its stack through LIB, which the recorder's writer has
 *                       not seen) and kill(getpid(), SIG); then, the lock given back, waits for
 *                       the signal to end it (exit 4 if it has not after 70 s); with a 4th
 *                       argument "exit" or "_exit", it returns 0 from main or calls _exit(0)
 *                       at once instead
 * (tests/integration/snapshot_signals.sh: what gpumem record says and what the file holds).
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void own_handler(int sig)
{
    (void)sig;
    static const char msg[] = "crash_app: handler ran\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

static int loader_lock_sig;
static void in_loader_lock(void *arg)
{
    void *p;
    if (cudaMalloc(&p, 1 << 20) != cudaSuccess) _exit(5);
    *(void **)arg = p;
    kill(getpid(), loader_lock_sig);
}

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "abort";
    if (!strcmp(how, "handler")) signal(SIGSEGV, own_handler);
    void *p[100];
    for (int i = 0; i < 100; i++)
        if (cudaMalloc(&p[i], 4096 * (size_t)(i + 1)) != cudaSuccess) return 1;
    for (int i = 0; i < 50; i++) cudaFree(p[i]);
    if (!strcmp(how, "kill9")) kill(getpid(), SIGKILL);
    if (!strcmp(how, "loader_lock") && argc > 3) {
        loader_lock_sig = atoi(argv[2]);
        void *lib = dlopen(argv[3], RTLD_NOW);
        void (*call)(void (*)(void *), void *) = lib ? (void (*)(void (*)(void *), void *))dlsym(lib, "loader_lock_call") : NULL;
        if (!call) {
            fprintf(stderr, "crash_app: %s\n", dlerror());
            return 2;
        }
        void *p = NULL;
        call(in_loader_lock, &p);
        /* then, if asked, it ends at once on its own */
        if (argc > 4 && !strcmp(argv[4], "exit")) return 0;
        if (argc > 4 && !strcmp(argv[4], "_exit")) _exit(0);
        for (int i = 0; i < 700; i++)
            usleep(100000);
        return 4;
    }
    /* a page no access is allowed to: the write really faults (a null pointer's store may be
     * dropped by the compiler as undefined) */
    volatile int *nowhere = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (nowhere != MAP_FAILED && (!strcmp(how, "segv") || !strcmp(how, "handler"))) *nowhere = 1;
    abort();
}
