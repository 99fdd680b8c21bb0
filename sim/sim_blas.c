/* sim_blas.c — the cuBLAS / cuBLASLt stand-ins' common part: handles, skipped launches, and
 * the note for what is not modelled. Compiled into each stand-in (its state is per library).
 *
 * The math entry points launch a "kernel" with device code only, like the real libraries launch
 * theirs: through the driver's cuLaunchKernel, found with cuGetProcAddress as the real
 * libraries' runtime finds it, on the caller's stream, with the call's operands (A, B, C, D,
 * workspace) as its pointer arguments and their layout given to the virtual GPU
 * (sim_register_device_kernel_params). The virtual GPU skips it and counts it by name, and an
 * interposer that watches launches and reads their arguments (libgpumem.so) sees it where the
 * real kernel would be, using what the real one uses. With a driver that is not the virtual
 * GPU's, the kernels are registered the way nvcc-compiled code does (__cudaRegisterFatBinary /
 * __cudaRegisterFunction, with the address of the name's slot as the host stub) and launched
 * with cudaLaunchKernel, without arguments.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

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

/* The driver, reached as the real libraries reach it: cuGetProcAddress (which an interposer
 * such as libgpumem.so answers for, so it sees the launch), plus the virtual GPU's own
 * sim_register_device_kernel_params. NULL members: another driver, use the runtime path. */
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);
typedef CUresult (*reg_fn)(const char *, int, const size_t *, const size_t *, CUfunction *);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static reg_fn drv_register;
static launch_fn drv_launch;
static pthread_mutex_t fn_lock = PTHREAD_MUTEX_INITIALIZER;
static CUfunction *fns; /* per kernel name, made at first use */
static size_t nfns;

static void find_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) return;
    reg_fn reg = (reg_fn)dlsym(h, "sim_register_device_kernel_params");
    gpa_fn gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
    void *launch = NULL;
    CUdriverProcAddressQueryResult q;
    if (reg && gpa &&
        gpa("cuLaunchKernel", &launch, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS &&
        launch) {
        drv_register = reg;
        drv_launch = (launch_fn)launch;
    }
    dlclose(h); /* NOLOAD: the runtime keeps it loaded */
}

/* The i-th kernel's function: device code only, with SIM_BLAS_OPERANDS pointer parameters. */
static CUfunction function_of(const char *const *names, size_t i)
{
    static const size_t sizes[SIM_BLAS_OPERANDS] = {8, 8, 8, 8, 8};
    static const size_t offsets[SIM_BLAS_OPERANDS] = {0, 8, 16, 24, 32};
    pthread_mutex_lock(&fn_lock);
    if (!fns) {
        while (names[nfns])
            nfns++;
        fns = calloc(nfns ? nfns : 1, sizeof *fns);
    }
    CUfunction f = fns && i < nfns ? fns[i] : NULL;
    if (fns && i < nfns && !f &&
        drv_register(names[i], SIM_BLAS_OPERANDS, sizes, offsets, &f) == CUDA_SUCCESS)
        fns[i] = f;
    pthread_mutex_unlock(&fn_lock);
    return f;
}

cublasStatus_t sim_blas_launch(const char *const *names, size_t i, cudaStream_t stream,
                               const void *const ops[SIM_BLAS_OPERANDS])
{
    pthread_once(&driver_once, find_driver);
    if (drv_launch) {
        /* the operands as the kernel's arguments, as a real cuBLAS kernel carries them: an
         * interposer that reads kernel arguments (gpumem's access tracking) sees the GEMM use
         * A, B and C */
        const void *a[SIM_BLAS_OPERANDS];
        void *args[SIM_BLAS_OPERANDS];
        for (size_t k = 0; k < SIM_BLAS_OPERANDS; k++) {
            a[k] = ops ? ops[k] : NULL;
            args[k] = &a[k];
        }
        CUfunction f = function_of(names, i);
        if (!f) return CUBLAS_STATUS_EXECUTION_FAILED; /* GPUMEM_SIM_KERNELS=strict */
        return drv_launch(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, args, NULL) == CUDA_SUCCESS
                   ? CUBLAS_STATUS_SUCCESS
                   : CUBLAS_STATUS_EXECUTION_FAILED;
    }
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
