/*
 * unread_app — a program whose kernel has no parameter layout anyone can give: it registers the
 * kernel the way nvcc-generated code does, but with no fat binary behind it (as a library that
 * builds its registration by hand would), so neither the virtual GPU nor a driver knows its
 * parameters. It allocates a buffer, sets it, launches the kernel twice on it (skipped on the
 * virtual GPU) and copies it back: gpumem records the memset's and the copy's uses, and the two
 * launches as unread (tests/integration/snapshot_uses_unread.sh). `unread_app hang` then waits
 * (up to a minute) to be killed, its buffer still allocated.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void **__cudaRegisterFatBinary(void *fatbin);
void __cudaRegisterFunction(void **h, const char *host_fn, char *dev_fn, const char *dev_name,
                            int thread_limit, void *tid, void *bid, void *bdim, void *gdim,
                            int *wsize);

static void opaque_stub(void) {}

int main(int argc, char **argv)
{
    char name[] = "_Z6opaquePi";
    void **mod = __cudaRegisterFatBinary(NULL);
    __cudaRegisterFunction(mod, (const char *)(uintptr_t)opaque_stub, name, name, -1, NULL, NULL,
                           NULL, NULL, NULL);
    int *d = NULL, h[64];
    if (cudaMalloc((void **)&d, sizeof h) != cudaSuccess) return 1;
    if (cudaMemset(d, 7, sizeof h) != cudaSuccess) return 1;
    void *args[] = {&d};
    dim3 g = {1, 1, 1}, b = {64, 1, 1};
    for (int i = 0; i < 2; i++)
        if (cudaLaunchKernel((const void *)(uintptr_t)opaque_stub, g, b, args, 0, NULL) !=
            cudaSuccess)
            return 2;
    if (cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
    printf("unread_app: %d\n", h[3]);
    if (argc > 1 && !strcmp(argv[1], "hang")) {
        fflush(stdout);
        sleep(60);
    }
    return cudaFree(d) == cudaSuccess ? 0 : 1;
}
