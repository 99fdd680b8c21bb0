/* sim_fuzz.c — libFuzzer target for what the virtual GPU parses from users: the fault plans
 * (GPUMEM_SIM_FAULTS / sim_faults_set), the cost overrides (GPUMEM_SIM_COSTS / sim_costs_set) and
 * sizes (GPUMEM_SIM_MEMORY). First byte picks the parser; the rest is the string.
 *
 * Properties: nothing crashes or leaks; an accepted size is finite and below 2^64; an accepted
 * cost table has finite, non-negative entries; an accepted fault plan then drives real
 * allocations, after which all device memory is accounted back (used == 0). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096) return 0;
    char *s = malloc(size);
    if (!s) return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    static int ready;
    if (!ready) {
        if (cuInit(0) != CUDA_SUCCESS) abort();
        CUcontext ctx;
        if (cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx)) abort();
        if (sim_set_context_bytes(0) != CUDA_SUCCESS) abort();
        if (sim_set_capacity((size_t)64 << 20) != CUDA_SUCCESS) abort();
        ready = 1;
    }
    switch (data[0] % 3) {
    case 0: {
        if (sim_faults_set(s) == CUDA_SUCCESS) {
            CUdeviceptr p[8];
            int ok[8];
            for (int i = 0; i < 8; i++)
                ok[i] = cuMemAlloc(&p[i], (size_t)(i + 1) << 20) == CUDA_SUCCESS;
            for (int i = 0; i < 8; i++)
                if (ok[i] && cuMemFree(p[i]) != CUDA_SUCCESS) abort();
            sim_stats st;
            sim_stats_get(&st);
            if (st.used != 0) abort();
            sim_faults_set(NULL);
        }
        break;
    }
    case 1:
        if (sim_costs_set(s) == CUDA_SUCCESS) {
            for (int op = 0; op < SIM_OP_COUNT; op++) {
                double f, m;
                if (sim_cost_get(op, &f, &m) != CUDA_SUCCESS) abort();
                if (!isfinite(f) || !isfinite(m) || f < 0 || m < 0) abort();
            }
            sim_costs_set(NULL);
        }
        break;
    default: {
        size_t v;
        if (sim_parse_size(s, &v) == 0 && (double)v >= 18.5e18) abort();
        break;
    }
    }
    free(s);
    return 0;
}
