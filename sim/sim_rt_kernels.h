/* sim_rt_kernels.h — the runtime's table of registered kernels (sim_rt_kernels.c; runtime
 * only, never installed). */
#ifndef GPUMEM_SIM_RT_KERNELS_H
#define GPUMEM_SIM_RT_KERNELS_H

#include <cuda.h>

#include "sim/sim_fatbin.h"

typedef struct rt_module rt_module; /* one __cudaRegisterFatBinary */

typedef struct rt_kernel {
    const void *stub; /* the host stub's address: how launches name the kernel */
    const char *name; /* its device name (the registering library's string) */
    rt_module *module;
    CUfunction f; /* the driver's function, made at first use; NULL before */
    int failed;   /* the driver refused it (GPUMEM_SIM_KERNELS=strict) */
    struct rt_kernel *next_in_bucket, *next_in_module;
} rt_kernel;

/* A new module for the fat binary `fatbin` (NULL when out of memory: its kernels are then not
 * registered). */
rt_module *rt_module_new(const void *fatbin);
/* Registers stub -> name in module m. Out of memory leaves the kernel unknown. */
void rt_kernel_add(rt_module *m, const void *stub, const char *name);
/* The entry of a registered stub, or NULL. Entries live until their module is freed. */
rt_kernel *rt_kernel_find(const void *stub);
/* The parameter layout of e's kernel from its module's fat binary, or NULL when that does not
 * give one (read once per module; the entry lives as long as the module). */
const sim_fatbin_kernel *rt_kernel_layout(rt_kernel *e);
/* Forgets the module's kernels (__cudaUnregisterFatBinary). */
void rt_module_free(rt_module *m);

#endif /* GPUMEM_SIM_RT_KERNELS_H */
