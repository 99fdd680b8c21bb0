/* cublaslt.c — the virtual GPU's cuBLASLt stand-in, libcublasLt.so.13.
 *
 * What PyTorch's cuBLASLt path calls, with the real library's rules and without the math:
 *   - handles (cublasLtCreate / cublasLtDestroy; a cuBLAS handle is accepted wherever a cuBLASLt
 *     one is, as PyTorch passes one);
 *   - matmul descriptors, matrix layouts and preferences, kept in the caller-visible opaque
 *     storage the header sizes them with;
 *   - cublasLtMatmulAlgoGetHeuristic returns exactly one algorithm (id 0, no workspace needed,
 *     one wave); cublasLtMatmulAlgoInit / AlgoCheck / AlgoConfigGet/SetAttribute work on it;
 *   - cublasLtMatmul checks its arguments and launches a kernel with device code only named
 *     "cublasLtMatmul" on the caller's stream (sim_blas.c): counted, skipped, nothing computed;
 *     the workspace the caller passes is the caller's (cuBLASLt allocates none of its own);
 *   - every other function PyTorch's libraries import is a generated stub returning
 *     CUBLAS_STATUS_NOT_SUPPORTED, counted and named once.
 * The symbols carry the real library's version node, libcublasLt.so.13 (sim/libcublasLt.map).
 */
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_blas.h"

#define EXPORT __attribute__((visibility("default")))

enum { K_cublasLtMatmul };
static const char *const kernel_names[] = {"cublasLtMatmul", NULL};

#define LAYOUT_MAGIC 0x4c4c4159u
#define DESC_MAGIC 0x4c444553u
#define PREF_MAGIC 0x4c505246u
#define ALGO_MAGIC 0x4c414c47u

typedef struct {
    uint32_t magic;
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t order, batch;
    int64_t batch_stride;
} layout;
_Static_assert(sizeof(layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout too big");

typedef struct {
    uint32_t magic;
    int32_t compute, scale, pointer_mode, transa, transb, transc, epilogue;
} desc;
_Static_assert(sizeof(desc) <= sizeof(cublasLtMatmulDescOpaque_t), "desc too big");

typedef struct {
    uint32_t magic;
    uint32_t search_mode;
    uint64_t max_workspace;
} pref;
_Static_assert(sizeof(pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "pref too big");

/* The one algorithm: its id and config attributes in the caller's cublasLtMatmulAlgo_t. */
typedef struct {
    uint32_t magic;
    int32_t id;
    uint64_t config[7]; /* CUBLASLT_ALGO_CONFIG_TILE_ID .. _STAGES_ID and after, by attribute */
} algo;
_Static_assert(sizeof(algo) <= sizeof(cublasLtMatmulAlgo_t), "algo too big");

/* The caller owns cublasLtMatmulAlgo_t storage: read and written by copy, never through a cast. */
static bool algo_get(const cublasLtMatmulAlgo_t *from, algo *out)
{
    if (!from) return false;
    memcpy(out, from, sizeof *out);
    return out->magic == ALGO_MAGIC;
}

static void algo_put(cublasLtMatmulAlgo_t *to, const algo *g)
{
    memset(to, 0, sizeof *to);
    memcpy(to, g, sizeof *g);
}

#define LT_HANDLE(b, h)                                                                            \
    sim_blas_handle *b = sim_blas_handle_of(h, true);                                              \
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED

static const layout *layout_of(cublasLtMatrixLayout_t l)
{
    const layout *v = (const layout *)(const void *)l;
    return v && v->magic == LAYOUT_MAGIC ? v : NULL;
}

static const desc *desc_of(cublasLtMatmulDesc_t d)
{
    const desc *v = (const desc *)(const void *)d;
    return v && v->magic == DESC_MAGIC ? v : NULL;
}

/* An attribute value of 1, 2, 4 or 8 bytes, read as a signed integer. */
static bool read_int(const void *buf, size_t size, int64_t *out)
{
    if (!buf) return false;
    switch (size) {
    case 1:
        *out = *(const int8_t *)buf;
        return true;
    case 2:
        *out = *(const int16_t *)buf;
        return true;
    case 4:
        *out = *(const int32_t *)buf;
        return true;
    case 8:
        *out = *(const int64_t *)buf;
        return true;
    default:
        return false;
    }
}

/* ---- handles ----------------------------------------------------------------------------------
 */

EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle)
{
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    sim_blas_handle *b = calloc(1, sizeof *b);
    if (!b) return CUBLAS_STATUS_ALLOC_FAILED;
    b->magic = SIM_BLASLT_MAGIC;
    b->device = dev;
    *handle = (cublasLtHandle_t)(void *)b;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle)
{
    sim_blas_handle *b = sim_blas_handle_of(handle, true);
    if (!b || b->magic != SIM_BLASLT_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    b->magic = 0;
    free(b);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT size_t cublasLtGetVersion(void)
{
    return CUBLAS_VERSION;
}

EXPORT size_t cublasLtGetCudartVersion(void)
{
    return CUDART_VERSION;
}

/* ---- descriptors ------------------------------------------------------------------------------
 */

EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type,
                                                 uint64_t rows, uint64_t cols, int64_t ld)
{
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatrixLayoutOpaque_t *o = calloc(1, sizeof *o);
    if (!o) return CUBLAS_STATUS_ALLOC_FAILED;
    layout *l = (layout *)(void *)o;
    *l = (layout){.magic = LAYOUT_MAGIC,
                  .type = type,
                  .rows = rows,
                  .cols = cols,
                  .ld = ld,
                  .order = CUBLASLT_ORDER_COL,
                  .batch = 1};
    *out = o;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    if (l && !layout_of(l)) return CUBLAS_STATUS_INVALID_VALUE;
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t ml,
                                                       cublasLtMatrixLayoutAttribute_t attr,
                                                       const void *buf, size_t size)
{
    layout *l = (layout *)(void *)ml;
    int64_t v;
    if (!layout_of(ml) || !read_int(buf, size, &v)) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
        l->type = (cudaDataType)v;
        break;
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
        l->order = (int32_t)v;
        break;
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
        l->rows = (uint64_t)v;
        break;
    case CUBLASLT_MATRIX_LAYOUT_COLS:
        l->cols = (uint64_t)v;
        break;
    case CUBLASLT_MATRIX_LAYOUT_LD:
        l->ld = v;
        break;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
        if (v < 1) return CUBLAS_STATUS_INVALID_VALUE;
        l->batch = (int32_t)v;
        break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
        l->batch_stride = v;
        break;
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET:
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE:
        break;
    default:
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out,
                                               cublasComputeType_t compute, cudaDataType_t scale)
{
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulDescOpaque_t *o = calloc(1, sizeof *o);
    if (!o) return CUBLAS_STATUS_ALLOC_FAILED;
    desc *d = (desc *)(void *)o;
    *d = (desc){.magic = DESC_MAGIC,
                .compute = (int32_t)compute,
                .scale = (int32_t)scale,
                .transa = CUBLAS_OP_N,
                .transb = CUBLAS_OP_N,
                .transc = CUBLAS_OP_N,
                .epilogue = CUBLASLT_EPILOGUE_DEFAULT};
    *out = o;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    if (d && !desc_of(d)) return CUBLAS_STATUS_INVALID_VALUE;
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

/* The attributes that shape the operation are kept; the others (scale and bias pointers, amax,
 * fast-accumulation, ...) only steer the arithmetic and are checked for shape. */
EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t md,
                                                     cublasLtMatmulDescAttributes_t attr,
                                                     const void *buf, size_t size)
{
    desc *d = (desc *)(void *)md;
    int64_t v;
    if (!desc_of(md) || !read_int(buf, size, &v)) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
        d->compute = (int32_t)v;
        break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
        d->scale = (int32_t)v;
        break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
        d->pointer_mode = (int32_t)v;
        break;
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
    case CUBLASLT_MATMUL_DESC_TRANSC:
        if (v != CUBLAS_OP_N && v != CUBLAS_OP_T && v != CUBLAS_OP_C)
            return CUBLAS_STATUS_INVALID_VALUE;
        if (attr == CUBLASLT_MATMUL_DESC_TRANSA)
            d->transa = (int32_t)v;
        else if (attr == CUBLASLT_MATMUL_DESC_TRANSB)
            d->transb = (int32_t)v;
        else
            d->transc = (int32_t)v;
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        d->epilogue = (int32_t)v;
        break;
    default:
        if ((int)attr < 0 || (int)attr > 255) return CUBLAS_STATUS_INVALID_VALUE;
        break;
    }
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out)
{
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulPreferenceOpaque_t *o = calloc(1, sizeof *o);
    if (!o) return CUBLAS_STATUS_ALLOC_FAILED;
    ((pref *)(void *)o)->magic = PREF_MAGIC;
    *out = o;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    if (p && ((pref *)(void *)p)->magic != PREF_MAGIC) return CUBLAS_STATUS_INVALID_VALUE;
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t mp, cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
    size_t size)
{
    pref *p = (pref *)(void *)mp;
    int64_t v;
    if (!p || p->magic != PREF_MAGIC || !read_int(buf, size, &v))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
        p->max_workspace = (uint64_t)v;
    else if (attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE)
        p->search_mode = (uint32_t)v;
    else if ((int)attr < 0 || (int)attr > 255)
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the algorithm ------------------------------------------------------------------------------
 */

static void one_result(cublasLtMatmulHeuristicResult_t *r, const cublasLtMatmulAlgo_t *from)
{
    memset(r, 0, sizeof *r);
    if (from)
        r->algo = *from;
    else
        algo_put(&r->algo, &(algo){.magic = ALGO_MAGIC});
    r->workspaceSize = 0;
    r->state = CUBLAS_STATUS_SUCCESS;
    r->wavesCount = 1.0f;
}

static bool shapes_ok(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                      cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd)
{
    return desc_of(d) && layout_of(a) && layout_of(b) && layout_of(c) && layout_of(dd);
}

EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p,
    int requested, cublasLtMatmulHeuristicResult_t results[], int *returned)
{
    LT_HANDLE(bh, h);
    (void)bh;
    if (!shapes_ok(d, a, b, c, dd) || !p || requested < 1 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    one_result(&results[0], NULL);
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulAlgoInit(cublasLtHandle_t h, cublasComputeType_t compute,
                                             cudaDataType_t scale, cudaDataType_t at,
                                             cudaDataType_t bt, cudaDataType_t ct,
                                             cudaDataType_t dt, int id, cublasLtMatmulAlgo_t *out)
{
    LT_HANDLE(bh, h);
    (void)bh, (void)compute, (void)scale, (void)at, (void)bt, (void)ct, (void)dt;
    if (!out || id < 0) return CUBLAS_STATUS_INVALID_VALUE;
    algo_put(out, &(algo){.magic = ALGO_MAGIC, .id = id});
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                              const cublasLtMatmulAlgo_t *g,
                                              cublasLtMatmulHeuristicResult_t *result)
{
    LT_HANDLE(bh, h);
    (void)bh;
    algo check;
    if (!shapes_ok(d, a, b, c, dd) || !algo_get(g, &check) || !result)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulAlgo_t copy = *g; /* g may point into *result */
    one_result(result, &copy);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(
    cublasLtMatmulAlgo_t *ga, cublasLtMatmulAlgoConfigAttributes_t attr, const void *buf,
    size_t size)
{
    algo g;
    int64_t v;
    if (!algo_get(ga, &g) || !read_int(buf, size, &v)) return CUBLAS_STATUS_INVALID_VALUE;
    if (attr == CUBLASLT_ALGO_CONFIG_ID) return CUBLAS_STATUS_INVALID_VALUE; /* read-only */
    if ((int)attr < 1 || (size_t)attr > sizeof g.config / sizeof g.config[0])
        return CUBLAS_STATUS_INVALID_VALUE;
    g.config[attr - 1] = (uint64_t)v;
    algo_put(ga, &g);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(
    const cublasLtMatmulAlgo_t *ga, cublasLtMatmulAlgoConfigAttributes_t attr, void *buf,
    size_t size, size_t *written)
{
    algo g;
    if (!algo_get(ga, &g)) return CUBLAS_STATUS_INVALID_VALUE;
    int64_t v;
    if (attr == CUBLASLT_ALGO_CONFIG_ID)
        v = g.id;
    else if ((int)attr >= 1 && (size_t)attr <= sizeof g.config / sizeof g.config[0])
        v = (int64_t)g.config[attr - 1];
    else
        return CUBLAS_STATUS_INVALID_VALUE;
    size_t need = attr == CUBLASLT_ALGO_CONFIG_ID ? sizeof(int32_t) : sizeof(uint32_t);
    if (written) *written = need;
    if (!buf && size == 0 && written) return CUBLAS_STATUS_SUCCESS; /* a size query */
    if (!buf || size < need) return CUBLAS_STATUS_INVALID_VALUE;
    uint32_t u = (uint32_t)v;
    memcpy(buf, &u, need);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the matmul: checked, launched, skipped
 * ------------------------------------------------------- */

EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                                     const void *A, cublasLtMatrixLayout_t ad, const void *B,
                                     cublasLtMatrixLayout_t bd, const void *beta, const void *C,
                                     cublasLtMatrixLayout_t cd, void *D, cublasLtMatrixLayout_t dd,
                                     const cublasLtMatmulAlgo_t *g, void *ws, size_t ws_size,
                                     cudaStream_t stream)
{
    LT_HANDLE(bh, h);
    (void)bh;
    if (!shapes_ok(d, ad, bd, cd, dd) || !alpha || !beta || (ws_size && !ws))
        return CUBLAS_STATUS_INVALID_VALUE;
    algo check;
    if (g && !algo_get(g, &check)) return CUBLAS_STATUS_INVALID_VALUE;
    const layout *out = layout_of(dd);
    if (!out->rows || !out->cols) return CUBLAS_STATUS_SUCCESS;
    const void *ops[SIM_BLAS_OPERANDS] = {A, B, C, D, ws_size ? ws : NULL};
    return sim_blas_launch(kernel_names, K_cublasLtMatmul, stream, ops);
}
