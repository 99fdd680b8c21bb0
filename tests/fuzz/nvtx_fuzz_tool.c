/* nvtx_fuzz_tool.c — the tool half of the NVTX fuzzer (nvtx_fuzz.c is the program half).
 *
 * gpumem's NVTX handlers (preload/nvtx.c, built into this executable) become a statically
 * injected NVTX tool: the NVTX3 loader, finding no NVTX_INJECTION64_PATH, calls the function
 * these pointers name (nvtxDetail/nvtxInit.h and nvtxExtInit.h, "static injection"). What
 * preload/nvtx.c needs from the rest of libgpumem.so is here too, reduced to what the NVTX layer
 * sees of it: statistics counters, a warning sink, no chained tool, recording on or off per
 * input, and allocation naming against the input's own allocations.
 */
#define NVTX_NO_IMPL
#define NVTX_STATIC_INJECTION_IMPL
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>

#include <stdarg.h>
#include <stdio.h>

#include "preload/gm_internal.h"
#include "tests/fuzz/nvtx_fuzz.h"

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get);
int InitializeInjectionNvtxExtension(nvtxExtModuleInfo_t *info);
NvtxInitializeInjectionNvtxFunc_t InitializeInjectionNvtx2_fnptr = InitializeInjectionNvtx2;
NvtxExtInitializeInjectionFunc_t InitializeInjectionNvtxExtension_fnptr = InitializeInjectionNvtxExtension;

_Atomic unsigned long long gm_stats[GM_ST_COUNT];

void gm_warn(const char *fmt, ...) {
    char buf[1024]; /* formatted (that is what is under test), not printed */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
}

void *gm_real_dlsym_fn(void *handle, const char *name) {
    (void)handle, (void)name;
    return NULL; /* never reached: no chained tool in this process */
}

int gm_nvtx_recording(void) { return nvtx_fuzz_recording; }
void gm_exit_register_nvtx(void) {}
int gm_name_internal(const void *ptr, const char *name) { return nvtx_fuzz_name(ptr, name); }
