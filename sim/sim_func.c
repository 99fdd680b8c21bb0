/* sim_func.c — functions (kernels) as objects: kernels with device code only, function
 * attributes and occupancy.
 *
 * A program built by nvcc carries device code the virtual GPU cannot run. Its kernels are
 * registered here without a host body (sim_register_device_kernel, called by the runtime for
 * every kernel __cudaRegisterFunction names, lazily at first use): a launch is checked like any
 * other (sim_exec.c's launch), counted per kernel name and skipped. That is what lets
 * PyTorch's CUDA build run here: eager PyTorch allocates the same sizes in the same order
 * whatever its tensors hold, so skipping the arithmetic keeps every allocation real.
 * GPUMEM_SIM_KERNELS=strict turns the skipping off (registration fails, so the runtime reports
 * cudaErrorInvalidDeviceFunction as it did before), for programs that rely on their kernels.
 *
 * Function attributes (cuFuncGetAttribute / cuFuncSetAttribute) and occupancy answer with the
 * figures of a typical compiled kernel on the device profile in use: 1024 threads, 32 registers
 * per thread, no static shared memory (a module's kernel: its cubin's registers and static shared
 * memory, sim_module.c), 48 KiB of dynamic shared memory until raised (up to the
 * profile's opt-in limit), PTX and binary versions of the profile's compute capability.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

#define FUNC_NUM_REGS 32
#define FUNC_DEFAULT_DYN_SMEM 49152
/* Shared memory the hardware reserves per resident block (sm_80 and later). */
#define SMEM_RESERVED_PER_BLOCK 1024

sim_kernel *sim_kernel_of(CUfunction f)
{
    if (!sim_pset_has(sim.kernels, sim.nkernels, f)) return NULL;
    sim_kernel *k = (sim_kernel *)(void *)f;
    return k->unloaded ? NULL : k;
}

void sim_kernel_init_attrs(sim_kernel *k)
{
    k->max_dyn_smem = FUNC_DEFAULT_DYN_SMEM;
    k->carveout = -1;
    k->num_regs = FUNC_NUM_REGS;
}

CUresult sim_register_device_kernel(const char *name, CUfunction *out)
{
    return sim_register_device_kernel_params(name, -1, NULL, NULL, out);
}

CUresult sim_register_device_kernel_params(const char *name, int nparams, const size_t *sizes,
                                           const size_t *offsets, CUfunction *out)
{
    sim_ensure_config();
    if (!name || !out || (nparams > 0 && (!sizes || !offsets))) return CUDA_ERROR_INVALID_VALUE;
    if (sim.kernels_strict) return CUDA_ERROR_NOT_FOUND;
    sim_kernel *k = calloc(1, sizeof *k);
    if (!k) return CUDA_ERROR_OUT_OF_MEMORY;
    k->magic = SIM_MAGIC_KERNEL;
    k->name = strdup(name);
    size_t n = nparams > 0 ? (size_t)nparams : 1;
    k->sizes = calloc(n, sizeof *k->sizes);
    k->offsets = calloc(n, sizeof *k->offsets);
    k->layout_unknown = nparams < 0;
    if (nparams > 0 && k->sizes && k->offsets) {
        k->nparams = (unsigned)nparams;
        for (unsigned i = 0; i < k->nparams; i++) {
            k->sizes[i] = sizes[i];
            k->offsets[i] = offsets[i];
            if (offsets[i] + sizes[i] > k->args_size) k->args_size = offsets[i] + sizes[i];
        }
    }
    sim_kernel_init_attrs(k);
    sim_lock();
    bool ok = k->name && k->sizes && k->offsets &&
              sim_pset_add(&sim.kernels, &sim.nkernels, &sim.capkernels, k);
    sim_unlock();
    if (!ok) {
        free(k->name);
        free(k->sizes);
        free(k->offsets);
        free(k);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (CUfunction)(void *)k;
    return CUDA_SUCCESS;
}

uint64_t sim_skipped_launches(const char *name)
{
    sim_ensure_config();
    uint64_t n = 0;
    sim_lock();
    for (size_t i = 0; i < sim.nkernels; i++) {
        const sim_kernel *k = sim.kernels[i];
        if (!k->fn && (!name || !strcmp(k->name, name))) n += k->launches;
    }
    sim_unlock();
    return n;
}

typedef struct {
    const char *name;
    uint64_t launches;
} name_count;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const name_count *)a)->name, ((const name_count *)b)->name);
}

static int by_launches_then_name(const void *a, const void *b)
{
    const name_count *x = a, *y = b;
    if (x->launches != y->launches) return x->launches < y->launches ? 1 : -1;
    return strcmp(x->name, y->name);
}

/* The skipped kernels, most launched first; handles of the same name (one kernel registered by
 * two libraries) are added up. */
void sim_kernels_print(void *fp)
{
    FILE *f = fp;
    sim_lock();
    size_t n = 0;
    name_count *v = malloc((sim.nkernels ? sim.nkernels : 1) * sizeof *v);
    for (size_t i = 0; v && i < sim.nkernels; i++) {
        const sim_kernel *k = sim.kernels[i];
        if (!k->fn && k->launches) v[n++] = (name_count){k->name, k->launches};
    }
    sim_unlock();
    if (!v) return;
    qsort(v, n, sizeof *v, by_name);
    size_t m = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        total += v[i].launches;
        if (m && !strcmp(v[m - 1].name, v[i].name))
            v[m - 1].launches += v[i].launches;
        else
            v[m++] = v[i];
    }
    qsort(v, m, sizeof *v, by_launches_then_name);
    if (m)
        fprintf(f,
                "gpumem sim: kernels skipped (device code only): %llu launch%s of %zu kernel%s\n",
                (unsigned long long)total, total == 1 ? "" : "es", m, m == 1 ? "" : "s");
    for (size_t i = 0; i < m; i++)
        fprintf(f, "gpumem sim: skipped %10llu  %s\n", (unsigned long long)v[i].launches,
                v[i].name);
    free(v);
}

/* ---- attributes ---------------------------------------------------------------------------- */

CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction f)
{
    SIM_CHECK_INIT();
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_kernel *k = sim_kernel_of(f);
    sim_kernel copy = k ? *k : (sim_kernel){0};
    sim_unlock();
    if (!k) return CUDA_ERROR_INVALID_HANDLE;
    const sim_profile *p = sim.profile;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *pi = 1024;
        break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
        *pi = copy.static_smem;
        break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
        *pi = 0;
        break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
        *pi = copy.num_regs;
        break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
        *pi = p->cc_major * 10 + p->cc_minor;
        break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        *pi = copy.max_dyn_smem;
        break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        *pi = copy.carveout;
        break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
        *pi = 0;
        break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
        *pi = copy.cluster[attrib - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH];
        break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        *pi = copy.nonportable;
        break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        *pi = copy.sched_policy;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* The settable attributes, with CUDA's ranges; the read-only ones are CUDA_ERROR_INVALID_VALUE. */
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attrib, int value)
{
    SIM_CHECK_INIT();
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    sim_kernel *k = sim_kernel_of(f);
    if (!k)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        switch (attrib) {
        case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            if (value < 0 || value > sim.profile->smem_optin)
                rc = CUDA_ERROR_INVALID_VALUE;
            else
                k->max_dyn_smem = value;
            break;
        case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
            if (value < -1 || value > 100)
                rc = CUDA_ERROR_INVALID_VALUE;
            else
                k->carveout = value;
            break;
        case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
        case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
        case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
            if (value < 0 || value > 16)
                rc = CUDA_ERROR_INVALID_VALUE;
            else
                k->cluster[attrib - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = value;
            break;
        case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
            if (value != 0 && value != 1)
                rc = CUDA_ERROR_INVALID_VALUE;
            else
                k->nonportable = value;
            break;
        case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
            if (value < CU_CLUSTER_SCHEDULING_POLICY_DEFAULT ||
                value > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
                rc = CUDA_ERROR_INVALID_VALUE;
            else
                k->sched_policy = value;
            break;
        default:
            rc = CUDA_ERROR_INVALID_VALUE;
            break;
        }
    sim_unlock();
    return rc;
}

/* Cache preferences only steer the hardware: accepted and without effect. */
CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config)
{
    SIM_CHECK_INIT();
    if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_kernel *k = sim_kernel_of(f);
    sim_unlock();
    return k ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- occupancy ------------------------------------------------------------------------------ */

/* Blocks of `block` threads with `smem` bytes of dynamic shared memory resident on one SM of the
 * profile: the least of the thread, block, register and shared-memory limits. */
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *blocks, CUfunction f, int block,
                                                              size_t smem, unsigned int flags)
{
    SIM_CHECK_INIT();
    if (!blocks || block <= 0 || flags > CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_kernel *k = sim_kernel_of(f);
    int max_dyn = k ? k->max_dyn_smem : 0, regs = k ? k->num_regs : 0,
        smem_static = k ? k->static_smem : 0;
    sim_unlock();
    if (!k) return CUDA_ERROR_INVALID_HANDLE;
    const sim_profile *p = sim.profile;
    if (block > 1024 || smem > (size_t)max_dyn) {
        *blocks = 0;
        return CUDA_SUCCESS;
    }
    int warps = (block + 31) / 32;
    int n = p->threads_per_sm / (warps * 32);
    if (p->blocks_per_sm < n) n = p->blocks_per_sm;
    int by_regs = regs ? 65536 / (warps * 32 * regs) : n;
    if (by_regs < n) n = by_regs;
    size_t per_block = smem + (size_t)smem_static + SMEM_RESERVED_PER_BLOCK;
    int by_smem = (int)((size_t)p->smem_per_sm / per_block);
    if (by_smem < n) n = by_smem;
    *blocks = n;
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction f, int block,
                                                     size_t smem)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, block, smem, 0);
}

/* The dynamic shared memory each of `nblocks` blocks of `block` threads can have on one SM. */
CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *smem, CUfunction f, int nblocks, int block)
{
    SIM_CHECK_INIT();
    if (!smem || nblocks <= 0 || block <= 0) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_kernel *k = sim_kernel_of(f);
    sim_unlock();
    if (!k) return CUDA_ERROR_INVALID_HANDLE;
    const sim_profile *p = sim.profile;
    size_t per = (size_t)p->smem_per_sm / (size_t)nblocks;
    per = per > SMEM_RESERVED_PER_BLOCK ? per - SMEM_RESERVED_PER_BLOCK : 0;
    if (per > (size_t)p->smem_optin) per = (size_t)p->smem_optin;
    *smem = block > 1024 ? 0 : per;
    return CUDA_SUCCESS;
}
