/* sim_blas.h — what the cuBLAS and cuBLASLt stand-ins share (sim_blas.c is linked into both
 * libcublas.so.13 and libcublasLt.so.13; nothing here is exported).
 *
 * A cuBLAS handle and a cuBLASLt handle are one struct told apart by its magic: PyTorch hands
 * its cuBLAS handle to cuBLASLt calls (a real cublasHandle_t starts with a cuBLASLt context),
 * so every cuBLASLt function accepts both.
 */
#ifndef GPUMEM_SIM_BLAS_H
#define GPUMEM_SIM_BLAS_H

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_BLAS_MAGIC 0x53424c41u   /* made by cublasCreate */
#define SIM_BLASLT_MAGIC 0x53424c54u /* made by cublasLtCreate */

typedef struct sim_blas_handle {
    uint32_t magic;
    int device; /* current device at creation */
    cudaStream_t stream;
    cublasPointerMode_t pointer_mode;
    cublasMath_t math_mode;
    cublasAtomicsMode_t atomics;
    int sm_count_target;
    int emulation_strategy;
    void *workspace; /* the caller's (cublasSetWorkspace), or the default one */
    size_t workspace_size;
    void *default_workspace; /* allocated by cublasCreate, freed by cublasDestroy */
    size_t default_workspace_size;
} sim_blas_handle;

/* The handle behind h if it is a live one of an accepted kind (cuBLAS only, or either for
 * cuBLASLt calls), else NULL. */
sim_blas_handle *sim_blas_handle_of(const void *h, bool lt_ok);

/* The library's skipped "kernels": one per entry point that does math, named after it. The
 * library lists them (NULL-terminated) and sim_blas_launch(names, i, stream, ops) launches the
 * i-th on the stream, as a kernel with device code only whose arguments are the call's operands
 * (A, B, C, D, workspace; NULL where the call has none; ops NULL: none): the virtual GPU checks
 * the stream, puts the launch in stream order (captures and graphs included) and counts it in
 * GPUMEM_SIM_STATS under that name. CUBLAS_STATUS_EXECUTION_FAILED if the driver refuses (an
 * invalid stream; GPUMEM_SIM_KERNELS=strict). */
#define SIM_BLAS_OPERANDS 5
cublasStatus_t sim_blas_launch(const char *const *names, size_t i, cudaStream_t stream,
                               const void *const ops[SIM_BLAS_OPERANDS]);

/* A function the stand-in exports but does not model: counted and named once by the virtual
 * GPU (GPUMEM_SIM_STATS), CUBLAS_STATUS_NOT_SUPPORTED. The generated stubs call it. */
int sim_blas_unsupported(const char *name);

#endif /* GPUMEM_SIM_BLAS_H */
