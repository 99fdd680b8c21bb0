/*
 * crash_app — a program that allocates and then dies at once, before the recorder's periodic
 * commit (every 100 ms) could have written its events: 100 cudaMalloc, 50 cudaFree, then
 *   crash_app abort     abort()
 *   crash_app segv      a write to a page mapped without access (SIGSEGV from the fault)
 *   crash_app kill9     kill(getpid(), SIGKILL): nothing can flush
 *   crash_app handler   its own SIGSEGV handler (installed before the first CUDA call), which
 *                       says "crash_app: handler ran" and _exits 3, then the faulting write
 * (tests/integration/snapshot_signals.sh: what gpumem record says and what the file holds).
 */
#include <cuda_runtime_api.h>
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

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "abort";
    if (!strcmp(how, "handler")) signal(SIGSEGV, own_handler);
    void *p[100];
    for (int i = 0; i < 100; i++)
        if (cudaMalloc(&p[i], 4096 * (size_t)(i + 1)) != cudaSuccess) return 1;
    for (int i = 0; i < 50; i++) cudaFree(p[i]);
    if (!strcmp(how, "kill9")) kill(getpid(), SIGKILL);
    /* a page no access is allowed to: the write really faults (a null pointer's store may be
     * dropped by the compiler as undefined) */
    volatile int *nowhere = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (nowhere != MAP_FAILED && (!strcmp(how, "segv") || !strcmp(how, "handler"))) *nowhere = 1;
    abort();
}
