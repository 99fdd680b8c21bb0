/* fatbin_fuzz.c — libFuzzer target for the virtual GPU's fat binary reader (sim/sim_fatbin.c):
 * the bytes are a fat binary (header, entries, raw or zstd-compressed cubins), as a program
 * registers it, and a module image as the driver's cuModuleLoadData reads it (sim_image_kernels:
 * a cubin or a fat binary, every kernel listed, a layout it cannot read marked unknown).
 * Properties: nothing crashes, reads out of bounds or leaks; a layout it gives has a name and
 * parameters of 1 to 32764 bytes each (a kernel's most), at offsets below 64 KiB. */
#include <stdint.h>
#include <stdlib.h>

#include "sim/sim_fatbin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const sim_fatbin_kernel *k, size_t n, int unknown_ok)
{
    for (size_t i = 0; i < n; i++) {
        if (!k[i].name || !k[i].name[0] || (k[i].unknown && (!unknown_ok || k[i].nparams))) abort();
        for (unsigned j = 0; j < k[i].nparams; j++)
            if (!k[i].sizes[j] || k[i].sizes[j] > 32764 || k[i].offsets[j] > 0xffff) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sim_fatbin_kernel *k = NULL;
    size_t n = 0;
    if (sim_fatbin_parse(data, size, &k, &n) == 0) check(k, n, 0);
    sim_fatbin_layouts_free(k, n);
    if (sim_image_kernels(data, size, &k, &n) == 0) check(k, n, 1);
    sim_fatbin_layouts_free(k, n);
    return 0;
}
