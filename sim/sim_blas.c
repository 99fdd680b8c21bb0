/* sim_blas.c — the cuBLAS / cuBLASLt stand-ins' common part: handles, skipped launches, and
 * the note for what is not modelled. Compiled into each stand-in (its state is per library).
 *
 * The math entry points launch a "kernel" with device code only through the CUDA runtime, like
 * the real libraries launch theirs: the library registers one kernel per entry point the way
 * nvcc-compiled code does (__cudaRegisterFatBinary / __cudaRegisterFunction, with the address
 * of the name's slot as the host stub) and launches it with cudaLaunchKernel on the caller's
 * stream. The virtual GPU skips it and counts it by name, and an interposer that watches
 * launches (libgpumem.so) sees it where the real kernel would be.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "sim/sim_blas.h"

/* What nvcc-generated code calls; declared by no public header. */
void **__cudaRegisterFatBinary(void *fatbin);
void __cudaRegisterFunction(void **h, const char *host_fn, char *dev_fn, const char *dev_name,
                            int thread_limit, void *tid, void *bid, void *bdim, void *gdim,
                            int *wsize);

sim_blas_handle *sim_blas_handle_of(const void *h, bool lt_ok)
{
    sim_blas_handle *b = (sim_blas_handle *)h;
    if (!b) return NULL;
    if (b->magic == SIM_BLAS_MAGIC || (lt_ok && b->magic == SIM_BLASLT_MAGIC)) return b;
    return NULL;
}

static pthread_once_t registered = PTHREAD_ONCE_INIT;
static const char *const *kernel_names;

static void register_kernels(void)
{
    void **module = __cudaRegisterFatBinary(NULL);
    for (size_t i = 0; kernel_names[i]; i++)
        __cudaRegisterFunction(module, (const char *)&kernel_names[i], (char *)kernel_names[i],
                               kernel_names[i], -1, NULL, NULL, NULL, NULL, NULL);
}

cublasStatus_t sim_blas_launch(const char *const *names, size_t i, cudaStream_t stream)
{
    kernel_names = names;
    pthread_once(&registered, register_kernels);
    dim3 one = {1, 1, 1};
    cudaError_t before = cudaPeekAtLastError();
    cudaError_t e = cudaLaunchKernel((const void *)&names[i], one, one, NULL, 0, stream);
    if (e == cudaSuccess) return CUBLAS_STATUS_SUCCESS;
    /* The failure is the library's status; the caller's own pending error, if any, stays. */
    if (before == cudaSuccess) (void)cudaGetLastError();
    return CUBLAS_STATUS_EXECUTION_FAILED;
}

int sim_blas_unsupported(const char *name)
{
    void (*note)(const char *, const char *) =
        (void (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "sim_unsupported_note");
    if (note)
        note(name, "CUBLAS_STATUS_NOT_SUPPORTED");
    else
        fprintf(stderr,
                "gpumem sim: %s is not implemented by the cuBLAS stand-in; it returns "
                "CUBLAS_STATUS_NOT_SUPPORTED\n",
                name);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
