/* nvtx_fuzz.h — between the two halves of the NVTX fuzzer: the program (nvtx_fuzz.c, NVTX
 * calls through the NVTX3 headers) and the tool (nvtx_fuzz_tool.c, gpumem's handlers of
 * preload/nvtx.c with what they need from the rest of libgpumem.so). */
#ifndef GM_NVTX_FUZZ_H
#define GM_NVTX_FUZZ_H

/* 1 while the input is recorded: the handlers pass ranges and names to the recorder */
extern int nvtx_fuzz_recording;
/* gm_name_internal's stand-in: names the input's allocation holding ptr, -1 when none does */
int nvtx_fuzz_name(const void *ptr, const char *name);

/* preload/nvtx.c (declared in preload/gm_internal.h, which the program half cannot include
 * beside the NVTX implementation) */
void gm_nvtx_test_reset(void);

#endif
