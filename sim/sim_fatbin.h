/* sim_fatbin.h — kernel parameter layouts from a registered fat binary (sim_fatbin.c; linked
 * into the runtime and the driver, never installed). */
#ifndef GPUMEM_SIM_FATBIN_H
#define GPUMEM_SIM_FATBIN_H

#include <stddef.h>

typedef struct sim_fatbin_kernel {
    char *name; /* the kernel's device (mangled) name */
    unsigned nparams;
    size_t *offsets, *sizes;
    int unknown; /* sim_image_kernels only: the kernel is there, its layout is not complete */
    /* sim_image_kernels only: registers per thread from the cubin's EIATTR_REGCOUNT (-1: none
     * given) and its static shared memory (the size of its .nv.shared.<kernel> section) */
    int regs;
    size_t static_smem;
} sim_fatbin_kernel;

/* The layout of every kernel whose .nv.info the first readable cubin of the fat binary behind
 * `wrapper` (what __cudaRegisterFatBinary receives) describes completely. Returns 0 and a
 * malloc'd table (free with sim_fatbin_layouts_free), or -1 with none: not a fat binary, no
 * ELF entry, a compression it does not read. */
int sim_fatbin_layouts(const void *wrapper, sim_fatbin_kernel **out, size_t *n);
/* The same for the fat binary itself (its 0xba55ed50 header first), `len` bytes of it. */
int sim_fatbin_parse(const void *data, size_t len, sim_fatbin_kernel **out, size_t *n);
/* Every kernel of a module image (the driver's cuModuleLoadData): an ELF cubin or a fat binary,
 * `len` bytes; a kernel whose layout is not complete is listed with `unknown` set. 0, or -1 when
 * the image is neither or does not read. */
int sim_image_kernels(const void *data, size_t len, sim_fatbin_kernel **out, size_t *n);
/* The size of the ELF image at `data` from its own headers; 0 when it is not a 64-bit ELF. */
size_t sim_elf_extent(const void *data);
void sim_fatbin_layouts_free(sim_fatbin_kernel *v, size_t n);

#endif /* GPUMEM_SIM_FATBIN_H */
