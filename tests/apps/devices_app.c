/*
 * devices_app — memory on two devices of one process (GPUMEM_SIM_DEVICES=2), for the checks that
 * every figure of a recording with several devices is one device's, never their sum
 * (tests/torch/torch_devices.sh, the device view):
 *
 *   device 0: 64 MiB (dev0_alloc), kept;   device 1: 48 MiB (dev1_alloc), kept
 *   device 0: 16 MiB freed at once          (device 0's peak stays 64 MiB + 16 MiB = 80 MiB)
 *   device 1: a request larger than the device (dev1_huge): an out-of-memory error on device 1
 *
 * Each device's peak allocated is then 80 MiB and 48 MiB; the two together held 128 MiB, which no
 * device did. The sites differ per device, so "live at the OOM" shows which device's memory it
 * lists. Prints "devices_app ok" and exits 0, or names what went wrong and exits 1.
 *
 * `devices_app stream`: memory on device 0 only (32 MiB), and a stream made, used and destroyed
 * on device 1, which holds no memory: one device's figures, with no note that they add two.
 *
 * `devices_app steps`: four NVTX steps ("step N") for the commands that read steps and replays
 * (tests/integration/devices_cmds.sh): device 0 holds 64 MiB all run and in each step leaks
 * 1 MiB (dev0_leak), then a 16 MiB temporary made and freed (dev0_alloc); device 1 leaks 4 MiB a
 * step (dev1_alloc). Device 0 is the busiest (peak 84 MiB against 16 MiB); its leaks are 4 MiB,
 * 1 MiB a step, device 1's 16 MiB, 4 MiB a step: the sum (20 MiB, 5 MiB a step) is no device's.
 * Prints "LEAKED <device> <bytes> <bytes a step>" for each device. Each step's leak is named
 * "leak.<step>" on both devices (gpumem_name, found with dlsym: absent without gpumem), so one
 * name matches on two devices (`gpumem uses --name 'leak.*' --device N`).
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <string.h>

static int bad;
static void check(int ok, const char *what) {
    if (!ok) printf("devices_app: %s failed\n", what), bad++;
}

/* one function per device: the call sites the report names */
static __attribute__((noinline)) void *dev0_alloc(size_t n) {
    void *p = NULL;
    check(cudaSetDevice(0) == cudaSuccess && cudaMalloc(&p, n) == cudaSuccess, "cudaMalloc on device 0");
    return p;
}
static __attribute__((noinline)) void *dev1_alloc(size_t n) {
    void *p = NULL;
    check(cudaSetDevice(1) == cudaSuccess && cudaMalloc(&p, n) == cudaSuccess, "cudaMalloc on device 1");
    return p;
}
static __attribute__((noinline)) int dev1_huge(size_t n) {
    void *p = NULL;
    cudaSetDevice(1);
    cudaError_t e = cudaMalloc(&p, n);
    cudaGetLastError();
    return e;
}

/* a stream on device 1 with a host copy on it (an event of that stream, on device 1), then
 * destroyed; no memory there */
static __attribute__((noinline)) void dev1_stream(void) {
    cudaStream_t s = NULL;
    char from[64] = "devices_app", to[64];
    check(cudaSetDevice(1) == cudaSuccess && cudaStreamCreate(&s) == cudaSuccess, "cudaStreamCreate on device 1");
    check(cudaMemcpyAsync(to, from, sizeof to, cudaMemcpyHostToHost, s) == cudaSuccess, "a copy on device 1's stream");
    check(cudaStreamSynchronize(s) == cudaSuccess && cudaStreamDestroy(s) == cudaSuccess, "the stream on device 1");
}

static __attribute__((noinline)) void *dev0_leak(size_t n) {
    void *p = NULL;
    check(cudaSetDevice(0) == cudaSuccess && cudaMalloc(&p, n) == cudaSuccess, "cudaMalloc on device 0");
    return p;
}

static int steps(void) {
    const int nsteps = 4;
    const size_t leak0 = 1u << 20, leak1 = 4u << 20;
    int (*name_fn)(const void *, const char *) =
        (int (*)(const void *, const char *))dlsym(RTLD_DEFAULT, "gpumem_name");
    void *base = dev0_alloc(64u << 20);
    for (int s = 0; s < nsteps; s++) {
        char name[32], leak[32];
        snprintf(name, sizeof name, "step %d", s);
        snprintf(leak, sizeof leak, "leak.%d", s);
        nvtxRangePushA(name);
        void *l0 = dev0_leak(leak0);
        void *t = dev0_alloc(16u << 20);
        cudaSetDevice(0);
        check(cudaFree(t) == cudaSuccess, "cudaFree on device 0");
        void *l1 = dev1_alloc(leak1);
        if (name_fn) name_fn(l0, leak), name_fn(l1, leak);
        nvtxRangePop();
    }
    cudaSetDevice(0);
    check(cudaFree(base) == cudaSuccess, "cudaFree on device 0");
    printf("LEAKED 0 %zu %zu\nLEAKED 1 %zu %zu\n", nsteps * leak0, leak0, nsteps * leak1, leak1);
    if (!bad) printf("devices_app ok\n");
    return bad ? 1 : 0;
}

int main(int argc, char **argv) {
    int n = 0;
    check(cudaGetDeviceCount(&n) == cudaSuccess && n >= 2, "two devices (GPUMEM_SIM_DEVICES=2)");
    if (bad) return 1;
    if (argc > 1 && !strcmp(argv[1], "steps")) return steps();
    if (argc > 1 && !strcmp(argv[1], "stream")) {
        dev1_stream();
        void *a = dev0_alloc(32u << 20);
        cudaSetDevice(0);
        check(cudaFree(a) == cudaSuccess, "cudaFree on device 0");
        if (!bad) printf("devices_app ok\n");
        return bad ? 1 : 0;
    }
    void *a = dev0_alloc(64u << 20);
    void *b = dev1_alloc(48u << 20);
    void *c = dev0_alloc(16u << 20);
    cudaSetDevice(0);
    check(cudaFree(c) == cudaSuccess, "cudaFree on device 0");
    check(dev1_huge((size_t)1 << 40) == cudaErrorMemoryAllocation, "an out-of-memory error on device 1");
    cudaSetDevice(1);
    check(cudaFree(b) == cudaSuccess, "cudaFree on device 1");
    cudaSetDevice(0);
    check(cudaFree(a) == cudaSuccess, "cudaFree on device 0");
    if (!bad) printf("devices_app ok\n");
    return bad ? 1 : 0;
}
