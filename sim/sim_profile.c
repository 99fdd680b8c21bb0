/* sim_profile.c — device profiles: what a virtual device says it is (GPUMEM_SIM_PROFILE).
 *
 * A profile is the handful of properties programs read to choose their code paths and sizes:
 * the name, the memory cuDeviceTotalMem reports, compute capability, SM count, L2, clocks,
 * shared-memory limits and thread/block limits per SM. PyTorch reads them (the name, the
 * compute capability for its kernels and cuBLAS workspace sizes, the memory for its OOM
 * messages), so a run on the h100-80g profile takes the code paths it takes on an H100.
 *
 * The memory figures are what CUDA reports as total memory on those parts (below nvidia-smi's
 * total, which counts memory the driver keeps for itself); they vary a little with the driver
 * and ECC, and GPUMEM_SIM_MEMORY overrides them. The default profile keeps the virtual GPU's
 * historical identity (A100-class attributes, its own name, 16 GiB), which the project's tests
 * rely on.
 */
#include <string.h>

#include "sim/sim_internal.h"

#define MIB ((size_t)1 << 20)

static const sim_profile profiles[] = {
    {
        .key = "default",
        .name = "gpumem virtual GPU (A100-class, host memory)",
        .memory = (size_t)16 << 30,
        .cc_major = 8,
        .cc_minor = 0,
        .sm_count = 108,
        .l2_bytes = 40 << 20,
        .clock_khz = 1410000,
        .mem_clock_khz = 1593000,
        .bus_width = 5120,
        .smem_per_sm = 167936,
        .smem_optin = 166912,
        .threads_per_sm = 2048,
        .blocks_per_sm = 32,
        .copy_engines = 3,
        .fabric = false,
    },
    {
        .key = "a100-80g",
        .name = "NVIDIA A100-SXM4-80GB",
        .memory = 81050 * MIB, /* "79.15 GiB total capacity" in PyTorch's OOM messages */
        .cc_major = 8,
        .cc_minor = 0,
        .sm_count = 108,
        .l2_bytes = 40 << 20,
        .clock_khz = 1410000,
        .mem_clock_khz = 1593000,
        .bus_width = 5120,
        .smem_per_sm = 167936,
        .smem_optin = 166912,
        .threads_per_sm = 2048,
        .blocks_per_sm = 32,
        .copy_engines = 3,
        .fabric = false,
    },
    {
        .key = "a100-40g",
        .name = "NVIDIA A100-SXM4-40GB",
        .memory = 42298834944, /* deviceQuery, bottlerocket-os/bottlerocket PR #3873 */
        .cc_major = 8,
        .cc_minor = 0,
        .sm_count = 108,
        .l2_bytes = 40 << 20,
        .clock_khz = 1410000,
        .mem_clock_khz = 1215000,
        .bus_width = 5120,
        .smem_per_sm = 167936,
        .smem_optin = 166912,
        .threads_per_sm = 2048,
        .blocks_per_sm = 32,
        .copy_engines = 3,
        .fabric = false,
    },
    {
        .key = "h100-80g",
        .name = "NVIDIA H100 80GB HBM3",
        .memory = 81008 * MIB, /* 79.11 GiB: deviceQuery / PyTorch's "total capacity" */
        .cc_major = 9,
        .cc_minor = 0,
        .sm_count = 132,
        .l2_bytes = 50 << 20,
        .clock_khz = 1980000,
        .mem_clock_khz = 2619000,
        .bus_width = 5120,
        .smem_per_sm = 233472,
        .smem_optin = 232448,
        .threads_per_sm = 2048,
        .blocks_per_sm = 32,
        .copy_engines = 3,
        .fabric = true,
    },
    {
        .key = "h200",
        .name = "NVIDIA H200",
        .memory = 143165 * MIB, /* 139.81 GiB; nvidia-smi's 143771 MiB less the driver's share */
        .cc_major = 9,
        .cc_minor = 0,
        .sm_count = 132,
        .l2_bytes = 50 << 20,
        .clock_khz = 1980000,
        .mem_clock_khz = 3201000,
        .bus_width = 6144,
        .smem_per_sm = 233472,
        .smem_optin = 232448,
        .threads_per_sm = 2048,
        .blocks_per_sm = 32,
        .copy_engines = 3,
        .fabric = true,
        /* measured on two H200s (driver 580.159.04, tests/gpu/sim_parity.sh, 2026-12-04): the
         * mean of the two runs' fits, sim/README.md "Cost model" */
        .costs = "cuMemAlloc=44.2+0.117,cuMemFree=36.35+0.523,cuMemCreate=9.55+0.076,"
                 "cuMemMap=0.68+0.0045,cuMemSetAccess=26.25+0.0995,cuMemUnmap=17.45+0.026,"
                 "cuMemRelease=10.7+0.58",
    },
    {
        .key = "l4",
        .name = "NVIDIA L4",
        .memory = 22559 * MIB, /* 22.03 GiB; nvidia-smi's 23034 MiB less the driver's share */
        .cc_major = 8,
        .cc_minor = 9,
        .sm_count = 58,
        .l2_bytes = 48 << 20,
        .clock_khz = 2040000,
        .mem_clock_khz = 6251000,
        .bus_width = 192,
        .smem_per_sm = 102400,
        .smem_optin = 101376,
        .threads_per_sm = 1536,
        .blocks_per_sm = 24,
        .copy_engines = 2,
        .fabric = false,
    },
};

const sim_profile *sim_profile_find(const char *key)
{
    if (!key || !*key) return &profiles[0];
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++)
        if (!strcmp(profiles[i].key, key)) return &profiles[i];
    return NULL;
}

const char *sim_profile_keys(void)
{
    return "h100-80g, h200, a100-80g, a100-40g, l4, default";
}
