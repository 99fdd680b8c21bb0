/* sim_fatbin.h — kernel parameter layouts from a registered fat binary (sim_fatbin.c; runtime
 * only, never installed). */
#ifndef GPUMEM_SIM_FATBIN_H
#define GPUMEM_SIM_FATBIN_H

#include <stddef.h>

typedef struct sim_fatbin_kernel {
    char *name; /* the kernel's device (mangled) name */
    unsigned nparams;
    size_t *offsets, *sizes;
} sim_fatbin_kernel;

/* The layout of every kernel whose .nv.info the first readable cubin of the fat binary behind
 * `wrapper` (what __cudaRegisterFatBinary receives) describes completely. Returns 0 and a
 * malloc'd table (free with sim_fatbin_layouts_free), or -1 with none: not a fat binary, no
 * ELF entry, a compression it does not read. */
int sim_fatbin_layouts(const void *wrapper, sim_fatbin_kernel **out, size_t *n);
/* The same for the fat binary itself (its 0xba55ed50 header first), `len` bytes of it. */
int sim_fatbin_parse(const void *data, size_t len, sim_fatbin_kernel **out, size_t *n);
void sim_fatbin_layouts_free(sim_fatbin_kernel *v, size_t n);

#endif /* GPUMEM_SIM_FATBIN_H */
