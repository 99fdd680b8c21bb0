/* sim_cublas.c — the cuBLAS and cuBLASLt stand-ins (build/sim/libcublas.so.13,
 * libcublasLt.so.13), in a program linked to them and the virtual runtime as a program is
 * linked to the real ones:
 *   - a handle allocates its default workspace through the runtime (visible in the device's
 *     free memory) and gives it back on destroy; streams, modes and workspaces behave as cuBLAS
 *     documents;
 *   - GEMMs check their arguments, launch a skipped kernel named after the call on the handle's
 *     stream (counted by the virtual GPU), and compute nothing; nothing to do is no launch;
 *   - cuBLASLt accepts the cuBLAS handle, returns one algorithm, and skips its matmul likewise;
 *   - the vector/matrix copies move bytes for real;
 *   - a function that is exported but not modelled returns CUBLAS_STATUS_NOT_SUPPORTED and is
 *     counted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <string.h>

#define OK(x) assert_int_equal((x), CUBLAS_STATUS_SUCCESS)
#define RT_OK(x) assert_int_equal((x), cudaSuccess)
#define MIB ((size_t)1 << 20)

typedef uint64_t (*count_fn)(const char *);

static uint64_t launches(const char *name)
{
    count_fn f = (count_fn)dlsym(RTLD_DEFAULT, "sim_skipped_launches");
    assert_non_null(f);
    return f(name);
}

static uint64_t unsupported(const char *name)
{
    count_fn f = (count_fn)dlsym(RTLD_DEFAULT, "sim_unsupported_calls");
    assert_non_null(f);
    return f(name);
}

static size_t free_mem(void)
{
    size_t fr = 0, total = 0;
    RT_OK(cudaMemGetInfo(&fr, &total));
    return fr;
}

static void test_handle_workspace_streams_modes(void **state)
{
    (void)state;
    size_t before = free_mem();
    cublasHandle_t h;
    OK(cublasCreate(&h));
    assert_int_equal(before - free_mem(), 4 * MIB); /* the default profile is sm_80: 4 MiB */
    cudaStream_t s, got;
    RT_OK(cudaStreamCreate(&s));
    OK(cublasSetStream(h, s));
    OK(cublasGetStream(h, &got));
    assert_ptr_equal(got, s);
    cublasPointerMode_t pm;
    OK(cublasGetPointerMode(h, &pm));
    assert_int_equal(pm, CUBLAS_POINTER_MODE_HOST);
    OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    assert_int_equal(cublasSetPointerMode(h, (cublasPointerMode_t)7), CUBLAS_STATUS_INVALID_VALUE);
    OK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
    cublasMath_t mm;
    OK(cublasGetMathMode(h, &mm));
    assert_int_equal(mm, CUBLAS_TF32_TENSOR_OP_MATH);
    assert_int_equal(cublasSetMathMode(h, (cublasMath_t)77), CUBLAS_STATUS_INVALID_VALUE);
    void *ws;
    RT_OK(cudaMalloc(&ws, 8 * MIB));
    OK(cublasSetWorkspace(h, ws, 8 * MIB));
    assert_int_equal(cublasSetWorkspace(h, (char *)ws + 4, 64), CUBLAS_STATUS_INVALID_VALUE);
    OK(cublasDestroy(h));
    RT_OK(cudaFree(ws));
    RT_OK(cudaStreamDestroy(s));
    assert_int_equal(free_mem(), before); /* the default workspace went back */
    assert_int_equal(cublasSetStream(NULL, NULL), CUBLAS_STATUS_NOT_INITIALIZED);
    int v = 0;
    OK(cublasGetProperty(MAJOR_VERSION, &v));
    assert_int_equal(v, CUBLAS_VER_MAJOR);
    assert_string_equal(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
                        "CUBLAS_STATUS_NOT_SUPPORTED");
}

static void test_gemm_checked_launched_skipped(void **state)
{
    (void)state;
    cublasHandle_t h;
    OK(cublasCreate(&h));
    float *a, *b, *c;
    RT_OK(cudaMalloc((void **)&a, 64 * 64 * 4));
    RT_OK(cudaMalloc((void **)&b, 64 * 64 * 4));
    RT_OK(cudaMalloc((void **)&c, 64 * 64 * 4));
    RT_OK(cudaMemset(c, 0, 64 * 64 * 4));
    float one = 1, zero = 0;
    uint64_t n0 = launches("cublasSgemm_v2");
    OK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, 64, 32, 16, &one, a, 64, b, 32, &zero, c, 64));
    assert_int_equal(launches("cublasSgemm_v2"), n0 + 1);
    assert_int_equal(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 64, 32, 16, &one, a, 8, b, 16, &zero, c, 64),
        CUBLAS_STATUS_INVALID_VALUE); /* lda < m */
    assert_int_equal(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 32, 16, &one, a, 64, b, 16, &zero, c, 64),
        CUBLAS_STATUS_INVALID_VALUE);
    OK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 32, 16, &one, a, 1, b, 16, &zero, c, 1));
    assert_int_equal(launches("cublasSgemm_v2"), n0 + 1); /* nothing to compute: no launch */
    OK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 16, 16, 16, &one, a, CUDA_R_32F, 16,
                                  256, b, CUDA_R_32F, 16, 256, &zero, c, CUDA_R_32F, 16, 256, 4,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    assert_int_equal(launches("cublasGemmStridedBatchedEx"), 1);
    float h_c[4] = {9, 9, 9, 9};
    RT_OK(cudaMemcpy(h_c, c, sizeof h_c, cudaMemcpyDeviceToHost));
    assert_true(h_c[0] == 0 && h_c[3] == 0); /* skipped: C keeps what it held */
    /* a stream that does not exist fails the launch */
    int not_a_stream;
    OK(cublasSetStream(h, (cudaStream_t)&not_a_stream));
    assert_int_equal(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, b, 4, &zero, c, 4),
        CUBLAS_STATUS_EXECUTION_FAILED);
    RT_OK(cudaGetLastError()); /* reported as the status, not left behind */
    OK(cublasSetStream(h, NULL));
    /* exported, not modelled */
    uint64_t u0 = unsupported("cublasStrsm_v2");
    assert_int_equal(cublasStrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                                 CUBLAS_DIAG_UNIT, 4, 4, &one, a, 4, c, 4),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(unsupported("cublasStrsm_v2"), u0 + 1);
    RT_OK(cudaFree(a));
    RT_OK(cudaFree(b));
    RT_OK(cudaFree(c));
    OK(cublasDestroy(h));
}

static void test_lt_heuristic_and_matmul(void **state)
{
    (void)state;
    cublasHandle_t h;
    OK(cublasCreate(&h));
    cublasLtHandle_t lt = (cublasLtHandle_t)h; /* as PyTorch does */
    cublasLtMatmulDesc_t d;
    OK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t t = CUBLAS_OP_T;
    OK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    t = 9;
    assert_int_equal(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof t),
                     CUBLAS_STATUS_INVALID_VALUE);
    cublasLtMatrixLayout_t la, lb, lc;
    OK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 32, 64, 32));
    OK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 32, 16, 32));
    OK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 64, 16, 64));
    cublasLtMatmulPreference_t p;
    OK(cublasLtMatmulPreferenceCreate(&p));
    uint64_t ws_size = 32 * MIB;
    OK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size,
                                            sizeof ws_size));
    cublasLtMatmulHeuristicResult_t r[4];
    int got = 0;
    OK(cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, p, 4, r, &got));
    assert_int_equal(got, 1);
    assert_int_equal(r[0].state, CUBLAS_STATUS_SUCCESS);
    assert_true(r[0].workspaceSize <= ws_size);
    void *a, *b, *c, *ws;
    RT_OK(cudaMalloc(&a, 32 * 64 * 4));
    RT_OK(cudaMalloc(&b, 32 * 16 * 4));
    RT_OK(cudaMalloc(&c, 64 * 16 * 4));
    RT_OK(cudaMalloc(&ws, ws_size));
    float one = 1, zero = 0;
    uint64_t n0 = launches("cublasLtMatmul");
    OK(cublasLtMatmul(lt, d, &one, a, la, b, lb, &zero, c, lc, c, lc, &r[0].algo, ws, ws_size,
                      NULL));
    assert_int_equal(launches("cublasLtMatmul"), n0 + 1);
    assert_int_equal(cublasLtMatmul(lt, d, &one, a, la, b, lb, &zero, c, lc, c, lc, &r[0].algo,
                                    NULL, ws_size, NULL),
                     CUBLAS_STATUS_INVALID_VALUE); /* a workspace size without a workspace */
    cublasLtMatmulAlgo_t algo;
    OK(cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
                              CUDA_R_32F, CUDA_R_32F, 5, &algo));
    uint32_t tile = 7, back = 0;
    OK(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                            sizeof tile));
    size_t written = 0;
    OK(cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &back, sizeof back,
                                            &written));
    assert_int_equal(back, 7);
    OK(cublasLtMatmulAlgoCheck(lt, d, la, lb, lc, lc, &algo, &r[1]));
    assert_int_equal(r[1].state, CUBLAS_STATUS_SUCCESS);
    OK(cublasLtMatrixLayoutDestroy(la));
    OK(cublasLtMatrixLayoutDestroy(lb));
    OK(cublasLtMatrixLayoutDestroy(lc));
    OK(cublasLtMatmulPreferenceDestroy(p));
    OK(cublasLtMatmulDescDestroy(d));
    cublasLtHandle_t own;
    OK(cublasLtCreate(&own));
    OK(cublasLtDestroy(own));
    RT_OK(cudaFree(a));
    RT_OK(cudaFree(b));
    RT_OK(cudaFree(c));
    RT_OK(cudaFree(ws));
    OK(cublasDestroy(h));
}

static void test_copies_are_real(void **state)
{
    (void)state;
    float host[6] = {1, 2, 3, 4, 5, 6}, back[6] = {0};
    float *dev;
    RT_OK(cudaMalloc((void **)&dev, sizeof host));
    /* a 2x3 column-major matrix with leading dimension 2 */
    OK(cublasSetMatrixAsync(2, 3, sizeof(float), host, 2, dev, 2, NULL));
    OK(cublasGetMatrixAsync(2, 3, sizeof(float), dev, 2, back, 2, NULL));
    RT_OK(cudaStreamSynchronize(NULL));
    assert_memory_equal(host, back, sizeof host);
    float every_other[3] = {0};
    OK(cublasGetVectorAsync(3, sizeof(float), dev, 2, every_other, 1, NULL)); /* 1, 3, 5 */
    RT_OK(cudaStreamSynchronize(NULL));
    assert_true(every_other[0] == 1 && every_other[1] == 3 && every_other[2] == 5);
    RT_OK(cudaFree(dev));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handle_workspace_streams_modes),
        cmocka_unit_test(test_gemm_checked_launched_skipped),
        cmocka_unit_test(test_lt_heuristic_and_matmul),
        cmocka_unit_test(test_copies_are_real),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
