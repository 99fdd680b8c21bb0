/*
 * diff.h — helpers shared by the differential corpus (the tests/diff programs).
 *
 * Every program prints only what a program can observe and what must not change under
 * libgpumem.so: return codes (with their names), the runtime's last error, out-parameters
 * (NULL or not), attributes, sizes, memory-info deltas. Addresses never appear: they are printed
 * relative to the allocation they belong to, and buffer ids as labels in order of first
 * appearance ("id1", "id2", ...), so two runs compare line by line. See tests/diff/README.md.
 */
#ifndef GM_DIFF_H
#define GM_DIFF_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "2 cudaErrorMemoryAllocation" */
static inline void rt(const char *what, cudaError_t e)
{
    printf("%s = %d %s\n", what, (int)e, cudaGetErrorName(e));
}

/* a runtime call's code, then the runtime's error state: peek, get, peek again */
static inline void rt_state(const char *what, cudaError_t e)
{
    rt(what, e);
    cudaError_t peek = cudaPeekAtLastError();
    cudaError_t get = cudaGetLastError();
    cudaError_t after = cudaPeekAtLastError();
    printf("  last error: peek %d get %d then %d\n", (int)peek, (int)get, (int)after);
}

static inline void cu(const char *what, CUresult r)
{
    const char *n = NULL;
    static CUresult (*name)(CUresult, const char **);
    if (!name) {
        /* the driver the runtime loaded: the real runtime loads it privately (RTLD_LOCAL), so
         * the global scope may not show its names */
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        name = (CUresult(*)(CUresult, const char **))(h ? dlsym(h, "cuGetErrorName")
                                                        : dlsym(RTLD_DEFAULT, "cuGetErrorName"));
    }
    if (!name || name(r, &n) != CUDA_SUCCESS)
        n = "?";
    printf("%s = %d %s\n", what, (int)r, n);
}

/* Buffer ids as labels in order of first appearance. */
static inline const char *idlabel(unsigned long long id)
{
    static unsigned long long seen[256];
    static char names[256][16];
    static int n;
    if (!id)
        return "0";
    for (int i = 0; i < n; i++)
        if (seen[i] == id)
            return names[i];
    if (n == 256)
        return "id?";
    seen[n] = id;
    snprintf(names[n], sizeof names[n], "id%d", n + 1);
    return names[n++];
}

/* An address relative to a base it should lie in ("base+12", "none", "other"). */
static inline const char *rel(uintptr_t a, uintptr_t base, size_t size)
{
    static char buf[4][48];
    static int k;
    char *b = buf[k++ & 3];
    if (!a)
        snprintf(b, 48, "none");
    else if (a >= base && a - base <= size)
        snprintf(b, 48, "base+%zu", (size_t)(a - base));
    else
        snprintf(b, 48, "other");
    return b;
}

/* ---- the driver, found the way a program without a link to libcuda finds it ------------------ */
static void *drv_handle;
static inline void *drv_sym(const char *name)
{
    if (!drv_handle)
        drv_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    void *f = drv_handle ? dlsym(drv_handle, name) : NULL;
    if (!f) {
        printf("driver symbol %s missing\n", name);
        exit(2);
    }
    return f;
}
/* Through cuGetProcAddress (what the runtime, cuBLAS and PyTorch do). */
static inline void *drv_proc(const char *name)
{
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))
            drv_sym("cuGetProcAddress_v2");
    void *f = NULL;
    CUdriverProcAddressQueryResult st;
    if (gpa(name, &f, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || !f) {
        printf("cuGetProcAddress(%s) failed\n", name);
        exit(2);
    }
    return f;
}
#define DRV(var, name) __typeof__(&name) var = (__typeof__(&name))drv_sym(#name)
#define PROC(var, name, proc) __typeof__(&name) var = (__typeof__(&name))drv_proc(proc)

/* ---- memory info --------------------------------------------------------------------------- */
static size_t mem_base_free;
static inline void mem_baseline(void)
{
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    mem_base_free = f;
}
/* used bytes since the baseline, in KiB (the unit both sides round to: 512 B) */
static inline void mem_used(const char *when)
{
    size_t f = 0, t = 0;
    cudaError_t e = cudaMemGetInfo(&f, &t);
    long long d = (long long)mem_base_free - (long long)f;
    printf("meminfo %s: rc %d used %+lld B\n", when, (int)e, d);
}

#endif
