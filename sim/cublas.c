/* cublas.c — the virtual GPU's cuBLAS stand-in, libcublas.so.13.
 *
 * PyTorch's CUDA build needs cuBLAS, and the real library cannot run here: it reaches the driver
 * through private export tables only NVIDIA's driver has. This stand-in does what the real one
 * does to memory and streams, and skips the math:
 *   - handles (cublasCreate / cublasDestroy), streams, pointer, math and atomics modes, SM-count
 *     targets, workspaces: as documented for cuBLAS;
 *   - cublasCreate allocates the handle's default workspace through the CUDA runtime, as the real
 *     library does (4 MiB, or 32 MiB on compute capability 9.0 and later: the sizes cuBLAS
 *     recommends, quoted by PyTorch PR #120925), so it shows in a recording as device memory
 *     taken outside PyTorch's allocator; cublasDestroy frees it;
 *   - GEMM and GEMV calls (S/D/C/Z, batched, strided, Ex, 64-bit) check their arguments as cuBLAS
 *     documents and launch, on the handle's stream, a kernel with device code only named after
 *     the call (sim_blas.c): the virtual GPU skips it and counts it, and the output keeps what it
 *     held (zeros on fresh memory). No value is computed;
 *   - cublasSet/GetVectorAsync and cublasSet/GetMatrixAsync copy for real (through the runtime);
 *   - every other function PyTorch's libraries import (sim/torch_imports.txt) exists and returns
 *     CUBLAS_STATUS_NOT_SUPPORTED, counted and named once (generated stubs).
 * The symbols carry the real library's version node, libcublas.so.13 (sim/libcublas.map).
 */
#include <cublas_v2.h>
#include <stdlib.h>

#include "sim/sim_blas.h"

#define EXPORT __attribute__((visibility("default")))
#define MIB ((size_t)1 << 20)

/* ---- the skipped kernels: one per math entry point ----------------------------------------- */

#define PRECISIONS(X, what) X(S, what) X(D, what) X(C, what) X(Z, what)
#define KERNEL_NAMES(X)                                                                            \
    X(cublasSgemm_v2)                                                                              \
    X(cublasDgemm_v2) X(cublasCgemm_v2) X(cublasZgemm_v2) X(cublasSgemm_v2_64)                     \
        X(cublasDgemm_v2_64) X(cublasCgemm_v2_64) X(cublasZgemm_v2_64) X(cublasSgemmBatched) X(    \
            cublasDgemmBatched) X(cublasCgemmBatched) X(cublasZgemmBatched)                        \
            X(cublasSgemmStridedBatched) X(cublasDgemmStridedBatched) X(cublasCgemmStridedBatched) \
                X(cublasZgemmStridedBatched) X(cublasSgemmStridedBatched_64)                       \
                    X(cublasDgemmStridedBatched_64) X(cublasCgemmStridedBatched_64)                \
                        X(cublasZgemmStridedBatched_64) X(cublasSgemv_v2) X(cublasDgemv_v2)        \
                            X(cublasCgemv_v2) X(cublasZgemv_v2) X(cublasSgemv_v2_64)               \
                                X(cublasDgemv_v2_64) X(cublasCgemv_v2_64) X(cublasZgemv_v2_64)     \
                                    X(cublasSgemvStridedBatched_64)                                \
                                        X(cublasDgemvStridedBatched_64)                            \
                                            X(cublasCgemvStridedBatched_64)                        \
                                                X(cublasZgemvStridedBatched_64) X(cublasGemmEx)    \
                                                    X(cublasGemmStridedBatchedEx) X(cublasSgemmEx)

enum {
#define X(n) K_##n,
    KERNEL_NAMES(X)
#undef X
};
static const char *const kernel_names[] = {
#define X(n) #n,
    KERNEL_NAMES(X)
#undef X
        NULL,
};

/* ---- handles ----------------------------------------------------------------------------------
 */

#define HANDLE(b, handle)                                                                          \
    sim_blas_handle *b = sim_blas_handle_of(handle, false);                                        \
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED

EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    sim_blas_handle *b = calloc(1, sizeof *b);
    if (!b) return CUBLAS_STATUS_ALLOC_FAILED;
    b->magic = SIM_BLAS_MAGIC;
    b->device = dev;
    b->pointer_mode = CUBLAS_POINTER_MODE_HOST;
    b->math_mode = CUBLAS_DEFAULT_MATH;
    b->atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
    b->default_workspace_size = major >= 9 ? 32 * MIB : 4 * MIB;
    if (cudaMalloc(&b->default_workspace, b->default_workspace_size) != cudaSuccess) {
        (void)cudaGetLastError();
        free(b);
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    b->workspace = b->default_workspace;
    b->workspace_size = b->default_workspace_size;
    *handle = (cublasHandle_t)(void *)b;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    HANDLE(b, handle);
    b->magic = 0;
    if (b->default_workspace && cudaFree(b->default_workspace) != cudaSuccess)
        (void)cudaGetLastError();
    free(b);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version)
{
    HANDLE(b, handle);
    (void)b;
    if (!version) return CUBLAS_STATUS_INVALID_VALUE;
    *version = CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value)
{
    if (!value) return CUBLAS_STATUS_INVALID_VALUE;
    switch (type) {
    case MAJOR_VERSION:
        *value = CUBLAS_VER_MAJOR;
        return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION:
        *value = CUBLAS_VER_MINOR;
        return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL:
        *value = CUBLAS_VER_PATCH;
        return CUBLAS_STATUS_SUCCESS;
    default:
        return CUBLAS_STATUS_INVALID_VALUE;
    }
}

EXPORT size_t cublasGetCudartVersion(void)
{
    return CUDART_VERSION;
}

EXPORT const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
#define S(x)                                                                                       \
    case x:                                                                                        \
        return #x;
        S(CUBLAS_STATUS_SUCCESS)
        S(CUBLAS_STATUS_NOT_INITIALIZED)
        S(CUBLAS_STATUS_ALLOC_FAILED)
        S(CUBLAS_STATUS_INVALID_VALUE)
        S(CUBLAS_STATUS_ARCH_MISMATCH)
        S(CUBLAS_STATUS_MAPPING_ERROR)
        S(CUBLAS_STATUS_EXECUTION_FAILED)
        S(CUBLAS_STATUS_INTERNAL_ERROR)
        S(CUBLAS_STATUS_NOT_SUPPORTED)
        S(CUBLAS_STATUS_LICENSE_ERROR)
#undef S
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

EXPORT const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
        return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
        return "error detected trying to check the license";
    }
    return "unknown error";
}

/* A workspace the caller owns: cuBLAS documents 256-byte alignment for it. */
EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *ws, size_t size)
{
    HANDLE(b, handle);
    if ((size && !ws) || ((uintptr_t)ws % 256)) return CUBLAS_STATUS_INVALID_VALUE;
    b->workspace = ws;
    b->workspace_size = size;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t s)
{
    HANDLE(b, handle);
    /* Like cuBLAS: a new stream puts the default workspace back in use. */
    if (s != b->stream) {
        b->workspace = b->default_workspace;
        b->workspace_size = b->default_workspace_size;
    }
    b->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *s)
{
    HANDLE(b, handle);
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    *s = b->stream;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode)
{
    HANDLE(b, handle);
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = b->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode)
{
    HANDLE(b, handle);
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_INVALID_VALUE;
    b->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t *mode)
{
    HANDLE(b, handle);
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = b->atomics;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode)
{
    HANDLE(b, handle);
    if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED)
        return CUBLAS_STATUS_INVALID_VALUE;
    b->atomics = mode;
    return CUBLAS_STATUS_SUCCESS;
}

/* The math mode: one of the modes, optionally with CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_
 * REDUCTION (the flags cuBLAS documents). */
EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
    HANDLE(b, handle);
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = b->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    HANDLE(b, handle);
    unsigned base = (unsigned)mode & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH &&
        base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH &&
        base != CUBLAS_FP32_EMULATED_BF16X9_MATH && base != CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    b->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetSmCountTarget(cublasHandle_t handle, int *n)
{
    HANDLE(b, handle);
    if (!n) return CUBLAS_STATUS_INVALID_VALUE;
    *n = b->sm_count_target;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetSmCountTarget(cublasHandle_t handle, int n)
{
    HANDLE(b, handle);
    if (n < 0) return CUBLAS_STATUS_INVALID_VALUE;
    b->sm_count_target = n;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetEmulationStrategy(cublasHandle_t handle,
                                                 cublasEmulationStrategy_t strategy)
{
    HANDLE(b, handle);
    b->emulation_strategy = (int)strategy;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- copies (real: they move bytes) ------------------------------------------------------------
 */

/* A strided vector copy of n elements: a 2D copy whose rows are single elements. */
static cublasStatus_t copy_vector(int n, int es, const void *src, int incs, void *dst, int incd,
                                  cudaStream_t s)
{
    if (n < 0 || es <= 0 || incs <= 0 || incd <= 0 || !src || !dst)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (n == 0) return CUBLAS_STATUS_SUCCESS;
    cudaError_t e =
        cudaMemcpy2DAsync(dst, (size_t)incd * (size_t)es, src, (size_t)incs * (size_t)es,
                          (size_t)es, (size_t)n, cudaMemcpyDefault, s);
    if (e == cudaSuccess) return CUBLAS_STATUS_SUCCESS;
    (void)cudaGetLastError();
    return CUBLAS_STATUS_MAPPING_ERROR;
}

/* A column-major matrix copy: `cols` columns of `rows` elements, leading dimensions lda/ldb. */
static cublasStatus_t copy_matrix(int rows, int cols, int es, const void *a, int lda, void *b,
                                  int ldb, cudaStream_t s)
{
    if (rows < 0 || cols < 0 || es <= 0 || lda < (rows > 1 ? rows : 1) ||
        ldb < (rows > 1 ? rows : 1) || !a || !b)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (rows == 0 || cols == 0) return CUBLAS_STATUS_SUCCESS;
    cudaError_t e =
        cudaMemcpy2DAsync(b, (size_t)ldb * (size_t)es, a, (size_t)lda * (size_t)es,
                          (size_t)rows * (size_t)es, (size_t)cols, cudaMemcpyDefault, s);
    if (e == cudaSuccess) return CUBLAS_STATUS_SUCCESS;
    (void)cudaGetLastError();
    return CUBLAS_STATUS_MAPPING_ERROR;
}

EXPORT cublasStatus_t cublasSetVectorAsync(int n, int es, const void *host, int incx, void *dev,
                                           int incy, cudaStream_t s)
{
    return copy_vector(n, es, host, incx, dev, incy, s);
}

EXPORT cublasStatus_t cublasGetVectorAsync(int n, int es, const void *dev, int incx, void *host,
                                           int incy, cudaStream_t s)
{
    return copy_vector(n, es, dev, incx, host, incy, s);
}

EXPORT cublasStatus_t cublasSetMatrixAsync(int rows, int cols, int es, const void *a, int lda,
                                           void *b, int ldb, cudaStream_t s)
{
    return copy_matrix(rows, cols, es, a, lda, b, ldb, s);
}

EXPORT cublasStatus_t cublasGetMatrixAsync(int rows, int cols, int es, const void *a, int lda,
                                           void *b, int ldb, cudaStream_t s)
{
    return copy_matrix(rows, cols, es, a, lda, b, ldb, s);
}

/* ---- GEMM and GEMV: checked, launched, skipped
 * --------------------------------------------------- */

static bool op_ok(cublasOperation_t op)
{
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

static int64_t at_least_1(int64_t v)
{
    return v > 1 ? v : 1;
}

/* C = alpha op(A) op(B) + beta C, `batch` times: cuBLAS's argument rules, then the skipped
 * launch (none when there is nothing to compute, as cuBLAS returns early). */
static cublasStatus_t gemm(size_t kernel, cublasHandle_t handle, cublasOperation_t ta,
                           cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const void *alpha,
                           const void *beta, int64_t lda, int64_t ldb, int64_t ldc, int64_t batch,
                           const void *A, const void *B, const void *C)
{
    HANDLE(b, handle);
    if (!op_ok(ta) || !op_ok(tb) || m < 0 || n < 0 || k < 0 || batch < 0 || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < at_least_1(ta == CUBLAS_OP_N ? m : k) ||
        ldb < at_least_1(tb == CUBLAS_OP_N ? k : n) || ldc < at_least_1(m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n || !batch) return CUBLAS_STATUS_SUCCESS;
    const void *ops[SIM_BLAS_OPERANDS] = {A, B, C, NULL, NULL};
    return sim_blas_launch(kernel_names, kernel, b->stream, ops);
}

/* y = alpha op(A) x + beta y. */
static cublasStatus_t gemv(size_t kernel, cublasHandle_t handle, cublasOperation_t t, int64_t m,
                           int64_t n, const void *alpha, const void *beta, int64_t lda,
                           int64_t incx, int64_t incy, int64_t batch, const void *A, const void *x,
                           const void *y)
{
    HANDLE(b, handle);
    if (!op_ok(t) || m < 0 || n < 0 || batch < 0 || !alpha || !beta || lda < at_least_1(m) ||
        !incx || !incy)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n || !batch) return CUBLAS_STATUS_SUCCESS;
    const void *ops[SIM_BLAS_OPERANDS] = {A, x, y, NULL, NULL};
    return sim_blas_launch(kernel_names, kernel, b->stream, ops);
}

#define T_S float
#define T_D double
#define T_C cuComplex
#define T_Z cuDoubleComplex

#define GEMM_FUNCS(P, unused)                                                                      \
    EXPORT cublasStatus_t cublas##P##gemm_v2(                                                      \
        cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,         \
        const T_##P *alpha, const T_##P *A, int lda, const T_##P *B, int ldb, const T_##P *beta,   \
        T_##P *C, int ldc)                                                                         \
    {                                                                                              \
                                                                                                   \
        return gemm(K_cublas##P##gemm_v2, h, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, 1, A, B, \
                    C);                                                                            \
    }                                                                                              \
    EXPORT cublasStatus_t cublas##P##gemm_v2_64(                                                   \
        cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,        \
        int64_t k, const T_##P *alpha, const T_##P *A, int64_t lda, const T_##P *B, int64_t ldb,   \
        const T_##P *beta, T_##P *C, int64_t ldc)                                                  \
    {                                                                                              \
                                                                                                   \
        return gemm(K_cublas##P##gemm_v2_64, h, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, 1, A, \
                    B, C);                                                                         \
    }                                                                                              \
    EXPORT cublasStatus_t cublas##P##gemmBatched(                                                  \
        cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,         \
        const T_##P *alpha, const T_##P *const A[], int lda, const T_##P *const B[], int ldb,      \
        const T_##P *beta, T_##P *const C[], int ldc, int batch)                                   \
    {                                                                                              \
        if (batch > 0 && (!A || !B || !C)) return CUBLAS_STATUS_INVALID_VALUE;                     \
        return gemm(K_cublas##P##gemmBatched, h, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc,      \
                    batch, A, B, C);                                                               \
    }                                                                                              \
    EXPORT cublasStatus_t cublas##P##gemmStridedBatched(                                           \
        cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,         \
        const T_##P *alpha, const T_##P *A, int lda, long long sa, const T_##P *B, int ldb,        \
        long long sb, const T_##P *beta, T_##P *C, int ldc, long long sc, int batch)               \
    {                                                                                              \
        (void)sa, (void)sb, (void)sc;                                                              \
        return gemm(K_cublas##P##gemmStridedBatched, h, ta, tb, m, n, k, alpha, beta, lda, ldb,    \
                    ldc, batch, A, B, C);                                                          \
    }                                                                                              \
    EXPORT cublasStatus_t cublas##P##gemmStridedBatched_64(                                        \
        cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,        \
        int64_t k, const T_##P *alpha, const T_##P *A, int64_t lda, long long sa, const T_##P *B,  \
        int64_t ldb, long long sb, const T_##P *beta, T_##P *C, int64_t ldc, long long sc,         \
        int64_t batch)                                                                             \
    {                                                                                              \
        (void)sa, (void)sb, (void)sc;                                                              \
        return gemm(K_cublas##P##gemmStridedBatched_64, h, ta, tb, m, n, k, alpha, beta, lda, ldb, \
                    ldc, batch, A, B, C);                                                          \
    }                                                                                              \
    EXPORT cublasStatus_t cublas##P##gemv_v2(                                                      \
        cublasHandle_t h, cublasOperation_t t, int m, int n, const T_##P *alpha, const T_##P *A,   \
        int lda, const T_##P *x, int incx, const T_##P *beta, T_##P *y, int incy)                  \
    {                                                                                              \
                                                                                                   \
        return gemv(K_cublas##P##gemv_v2, h, t, m, n, alpha, beta, lda, incx, incy, 1, A, x, y);   \
    }                                                                                              \
    EXPORT cublasStatus_t cublas##P##gemv_v2_64(cublasHandle_t h, cublasOperation_t t, int64_t m,  \
                                                int64_t n, const T_##P *alpha, const T_##P *A,     \
                                                int64_t lda, const T_##P *x, int64_t incx,         \
                                                const T_##P *beta, T_##P *y, int64_t incy)         \
    {                                                                                              \
                                                                                                   \
        return gemv(K_cublas##P##gemv_v2_64, h, t, m, n, alpha, beta, lda, incx, incy, 1, A, x,    \
                    y);                                                                            \
    }                                                                                              \
    EXPORT cublasStatus_t cublas##P##gemvStridedBatched_64(                                        \
        cublasHandle_t h, cublasOperation_t t, int64_t m, int64_t n, const T_##P *alpha,           \
        const T_##P *A, int64_t lda, long long sa, const T_##P *x, int64_t incx, long long sx,     \
        const T_##P *beta, T_##P *y, int64_t incy, long long sy, int64_t batch)                    \
    {                                                                                              \
        (void)sa, (void)sx, (void)sy;                                                              \
        return gemv(K_cublas##P##gemvStridedBatched_64, h, t, m, n, alpha, beta, lda, incx, incy,  \
                    batch, A, x, y);                                                               \
    }

PRECISIONS(GEMM_FUNCS, )

EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, const void *alpha, const void *A,
                                   cudaDataType at, int lda, const void *B, cudaDataType bt,
                                   int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)at, (void)bt, (void)ct, (void)compute, (void)algo;
    return gemm(K_cublasGemmEx, h, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, 1, A, B, C);
}

EXPORT cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType at, int lda, long long sa, const void *B,
    cudaDataType bt, int ldb, long long sb, const void *beta, void *C, cudaDataType ct, int ldc,
    long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)at, (void)bt, (void)ct, (void)compute, (void)algo;
    (void)sa, (void)sb, (void)sc;
    return gemm(K_cublasGemmStridedBatchedEx, h, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, batch,
                A, B, C);
}

EXPORT cublasStatus_t cublasSgemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                    int m, int n, int k, const float *alpha, const void *A,
                                    cudaDataType at, int lda, const void *B, cudaDataType bt,
                                    int ldb, const float *beta, void *C, cudaDataType ct, int ldc)
{
    (void)at, (void)bt, (void)ct;
    return gemm(K_cublasSgemmEx, h, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, 1, A, B, C);
}
