/* sim_test.h — shared set-up for the virtual GPU's unit tests. */
#ifndef GPUMEM_SIM_TEST_H
#define GPUMEM_SIM_TEST_H

#include <cuda.h>

/* cuInit, then device `dev`'s primary context made current on the calling thread: what a real
 * driver needs before memory calls (without a current context they return
 * CUDA_ERROR_INVALID_CONTEXT). */
static inline CUresult sim_test_ctx(int dev)
{
    CUcontext ctx;
    CUresult rc = cuInit(0);
    if (!rc) rc = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (!rc) rc = cuCtxSetCurrent(ctx);
    return rc;
}

#endif
