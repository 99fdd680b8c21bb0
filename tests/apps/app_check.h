/* app_check.h — the test apps' checks of a CUDA call: a failed call is said with the app's name
 * and the code, and the app returns 1 from the function it is in (the test reads the message). */
#ifndef GPUMEM_TESTS_APP_CHECK_H
#define GPUMEM_TESTS_APP_CHECK_H
#include <errno.h> /* program_invocation_short_name (_GNU_SOURCE) */
#include <stdio.h>

#define CHECK_RT(call)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s failed: %d\n", program_invocation_short_name, #call, (int)e_); \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#define CHECK_DRV(call)                                                                            \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "%s: %s failed: %d\n", program_invocation_short_name, #call, (int)r_); \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#endif
