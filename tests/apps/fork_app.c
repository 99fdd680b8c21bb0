/*
 * fork_app — allocation in forked children. The first child is forked before the parent has
 * touched CUDA (gpumem initialises normally in it); the second after the parent allocated (a
 * child never uses the parent's CUDA state: gpumem is off in it and the child's calls go to
 * the real runtime). Each child allocates, checks the memory and frees. Prints one line per
 * process; exits non-zero if anything failed.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int use_memory(const char *who)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, 3 << 20);
    if (e != cudaSuccess) {
        printf("fork_app: %s cudaMalloc failed %d\n", who, (int)e);
        return 1;
    }
    char in[4096], out[4096];
    for (int i = 0; i < 4096; i++)
        in[i] = (char)(i ^ 0x5a);
    if (cudaMemcpy(p, in, sizeof in, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(out, p, sizeof out, cudaMemcpyDeviceToHost) != cudaSuccess ||
        memcmp(in, out, sizeof in)) {
        printf("fork_app: %s memory check failed\n", who);
        return 1;
    }
    void *h = NULL;
    if (cudaMallocHost(&h, 10000) != cudaSuccess || cudaFreeHost(h) != cudaSuccess) {
        printf("fork_app: %s pinned alloc failed\n", who);
        return 1;
    }
    if (cudaFree(p) != cudaSuccess) {
        printf("fork_app: %s cudaFree failed\n", who);
        return 1;
    }
    return 0;
}

static int run_child(const char *who)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        int bad = use_memory(who);
        printf("fork_app: %s %s\n", who, bad ? "FAILED" : "ok");
        fflush(stdout);
        exit(bad);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
    int bad = run_child("child1"); /* before the parent touched CUDA */
    void *keep = NULL;
    if (cudaMalloc(&keep, 1 << 20) != cudaSuccess) {
        printf("fork_app: parent cudaMalloc failed\n");
        return 1;
    }
    bad |= run_child("child2"); /* after */
    bad |= use_memory("parent");
    cudaFree(keep);
    printf("fork_app: parent %s\n", bad ? "FAILED" : "ok");
    return bad;
}
