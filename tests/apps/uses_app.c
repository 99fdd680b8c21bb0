/*
 * uses_app — kernel launches, copies and memsets for the access-tracking tests
 * (tests/integration/preload_uses.sh). Host kernels of the virtual GPU; allocations are named
 * with gpumem_name (found with dlsym, absent without gpumem) so the test's SQL can use names.
 *
 *   uses_app acceptance  one runtime launch whose arguments are an interior pointer into A, a
 *                        by-value struct {pointer into B, int, pointer into C} and a host
 *                        pointer; one launch of another kernel through the driver
 *                        (cuGetProcAddress) on E. D is allocated, named, and never passed.
 *   uses_app paths       one launch through each launch entry point, each with its own kernel
 *                        "k_<path>" and its own allocation "p_<path>"
 *   uses_app copies      runtime and driver copies and memsets on X, Y, Z (names below)
 *   uses_app sleep N     N launches of a kernel that sleeps 2 ms (device time is real)
 *   uses_app wide        one launch of a kernel whose one parameter is 2,003 words (a PyTorch
 *                        offset calculator's size): interior pointers into 280 allocations
 *                        W000..W279, one every seventh word from the third, among zeros
 *                        (first half) and sizes and zeros; W_unused is allocated and never passed
 *   uses_app wide pinned the same, and a pointer into a pinned host buffer W_pinned
 * (cudaMallocHost) among the sizes uses_app narrow      one launch of a kernel whose parameters all
 * fit the hook's stack buffer (the scan that checks no room): an int; a pointer into N0 (interior);
 * a by-value struct of 41 words, sizes and zeros around pointers into N1 (word 1), N2 (word 7) and
 * N3 (word 40, past the last group of four); a struct {pointer into N4, int, pointer into N5}; a
 * host pointer (to the stack). N_unused is allocated and never passed uses_app narrow pinned  the
 * same with the host pointer into a pinned buffer N_pinned uses_app groups      two launches whose
 * one parameter holds pointers in groups of four words in every pattern: the sixteen patterns of a
 * group (pattern g: a pointer at word j when bit j of g is set) in four blocks of sixteen words,
 * then three groups (11, 6, 15) and three single words (pointer, size, pointer), among sizes: 43
 * pointers. k_groups' parameter is those 79 words (it fits the hook's stack buffer), into G00..G42;
 * k_groups_wide's is 400 words, the same 79 from word 301 (sizes before), into H00..H42 uses_app
 * groups pinned  the same with a pinned host buffer allocated first (the scan tests the host span
 * too) uses_app hull        two launches of a kernel whose one parameter (80 words) holds 12
 *                        pointers into Q0..Q6 and a pinned buffer Q_pinned among words that lie
 *                        between the two spans (in their hull, in neither), sizes and zeros;
 *                        prints whether the host span is below or above the device span
 *   uses_app residue     per launch path (rt, rt_ex, rt_coop, drv_sym, drv_sym_ex, drv_sym_coop,
 *                        drv_proc, drv_proc_ex, drv_proc_coop), for PyTorch's trace entry
 *                        (trace: gpumem_torch_trace_entry, an allocation and a free of the
 *                        address) and a memset (rt_memset: cudaMemset; drv_memset: cuMemsetD8
 *                        through cuGetProcAddress): a first call handles a pointer into
 *                        RA_<path>; then (a runtime launch after trace and the memsets), from a
 *                        frame at the same depth, a launch of k_rb_<path> whose one parameter
 *                        (8 KiB) holds a pointer into RB_<path> in its first word and never
 *                        written stack bytes after it (PyTorch copies partly filled argument
 *                        structs whole). Whatever gpumem's hooks left on the stack is in those
 *                        bytes: k_rb_<path>'s uses must be RB_<path> alone
 *                        Then per allocation and free entry point (rt_malloc .. torch_free,
 *                        residue_paths): the first call allocates RA_<path> through it (named
 *                        after the second launch; from a pool the program made for the _pool
 *                        rows), or names it, or hands it to gpumem_record_stream, or frees it and another thread
 *                        allocates RX_<path> there (prints "uses_app: residue <path> reused"
 *                        when at the freed address)
 *   uses_app nest        launches inside a launch (the virtual GPU runs a kernel inside its
 *                        launch call): kernels k_nest_narrow0..3 (one pointer into NN<level>)
 *                        and k_nest_wide0..3 (a struct of 300 pointers into NW<level>), each
 *                        launching the next level from its body, through cuLaunchKernel; twice
 *   uses_app phases      NVTX phases of every kind (tests/integration/preload_nvtx.sh's table):
 *                        per case an allocation K_<case> kept to the end (its size says the
 *                        case: 1..6 MiB) and one T_<case> memset and freed inside the case —
 *                        pp: in a push/pop range "pp"; se: in a start/end range "se"; xt: in a
 *                        start/end range "xt" started on the main thread, allocated, used, freed
 *                        and ended on another; nest: a push/pop range "nest pp" inside a
 *                        start/end range "nest se"; nest_out: in "nest se" after that pop; none:
 *                        outside every range
 * Prints "uses_app: <mode> launches <n> copies <m>" (what it made) and exits 0 when every call
 * succeeded and every kernel saw the values it was given.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim/sim.h"

static int bad, launches, copies;
static int (*name_fn)(const void *, const char *);

static void check(int ok, const char *what)
{
    if (!ok) {
        printf("uses_app: %s failed\n", what);
        bad++;
    }
}
#define RT(call) check((call) == cudaSuccess, #call)
#define DRV(call) check((call) == CUDA_SUCCESS, #call)

static void *dev_alloc(const char *name, size_t n)
{
    void *p = NULL;
    RT(cudaMalloc(&p, n)); /* no memset here: a memset is a use, and D must have none */
    /* refused when gpumem is off (a bad setting): not the program's failure; the test's SQL
     * finds no name then */
    if (name_fn && name_fn(p, name) != 0)
        fprintf(stderr, "uses_app: gpumem_name(%s) refused\n", name);
    return p;
}

static CUfunction kernel(const char *name, sim_host_kernel_fn fn, unsigned n, const size_t *sz)
{
    CUfunction f = NULL;
    DRV(sim_register_kernel(name, fn, n, sz, &f));
    return f;
}

/* cuGetProcAddress, the way cuBLAS or a static runtime reach the driver */
static void *driver_entry(const char *name)
{
    static CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    if (!gpa) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        gpa = h ? (CUresult(*)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *))dlsym(h, "cuGetProcAddress_v2")
                : NULL;
        if (!gpa) {
            printf("uses_app: no cuGetProcAddress_v2\n");
            exit(2);
        }
    }
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    if (gpa(name, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || !p) {
        printf("uses_app: no %s\n", name);
        exit(2);
    }
    return p;
}

/* ---- acceptance ---------------------------------------------------------------------------- */

struct pair {
    float *b; /* into B */
    int n;
    float *c; /* into C */
};

static void k_mix(void **p)
{
    float *a = *(float **)p[0];
    struct pair pr = *(struct pair *)p[1];
    int *host = *(int **)p[2];
    a[0] = (float)pr.n;
    pr.b[0] += 1;
    pr.c[0] += 2;
    *host = 7;
}

static void k_one(void **p)
{
    float *e = *(float **)p[0];
    e[1] = 5;
}

static void acceptance(void)
{
    char *A = dev_alloc("A", 4096), *B = dev_alloc("B", 4096), *C = dev_alloc("C", 4096);
    char *D = dev_alloc("D", 4096), *E = dev_alloc("E", 4096);
    (void)D;
    size_t mix_sz[] = {sizeof(float *), sizeof(struct pair), sizeof(int *)};
    CUfunction mix = kernel("k_mix", k_mix, 3, mix_sz);
    size_t one_sz[] = {sizeof(float *)};
    CUfunction one = kernel("k_one", k_one, 1, one_sz);

    float *a_in = (float *)(A + 256); /* interior */
    struct pair pr = {(float *)B, 3, (float *)(C + 1024)};
    int host = 0;
    int *hp = &host;
    void *args[] = {&a_in, &pr, &hp};
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    RT(cudaLaunchKernel((const void *)mix, g, b, args, 0, 0));
    launches++;
    check(host == 7, "k_mix wrote the host int");

    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **) = driver_entry("cuLaunchKernel");
    float *e = (float *)E;
    void *eargs[] = {&e};
    DRV(launch(one, 1, 1, 1, 1, 1, 1, 0, NULL, eargs, NULL));
    launches++;
    RT(cudaDeviceSynchronize());
    float got[2];
    RT(cudaMemcpy(got, E, sizeof got, cudaMemcpyDeviceToHost));
    copies++;
    check(got[1] == 5, "k_one result");
}

/* ---- every launch path ------------------------------------------------------------------- */

static void k_touch(void **p)
{
    int *x = *(int **)p[0];
    x[0] += 1;
}

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
cudaError_t cudaLaunchKernel_ptsz(const void *, dim3, dim3, void **, size_t, cudaStream_t);

static void paths(void)
{
    static const char *const names[] = {
        "rt",          "rt_ptsz",    "rt_ex",      "rt_coop",      "drv_sym",   "drv_sym_ex",
        "drv_sym_coop", "drv_proc",  "drv_proc_ex", "drv_proc_coop", "drv_extra"};
    enum { N = sizeof names / sizeof names[0] };
    size_t sz[] = {sizeof(int *)};
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    CUlaunchConfig cfg = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
                          .blockDimY = 1, .blockDimZ = 1};
    cudaLaunchConfig_t rcfg = {.gridDim = {1, 1, 1}, .blockDim = {1, 1, 1}};
    launch_fn proc_launch = driver_entry("cuLaunchKernel");
    launch_ex_fn proc_ex = driver_entry("cuLaunchKernelEx");
    CUresult (*proc_coop)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, CUstream, void **) = driver_entry("cuLaunchCooperativeKernel");
    for (int i = 0; i < N; i++) {
        char kname[64], pname[64];
        snprintf(kname, sizeof kname, "k_%s", names[i]);
        snprintf(pname, sizeof pname, "p_%s", names[i]);
        int *x = dev_alloc(pname, 512);
        RT(cudaMemset(x, 0, 512));
        copies++;
        CUfunction f = kernel(kname, k_touch, 1, sz);
        void *args[] = {&x};
        struct {
            int *x;
        } buf = {x};
        size_t bufsize = sizeof buf;
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE,
                         &bufsize, CU_LAUNCH_PARAM_END};
        const void *sym = (const void *)f;
        switch (i) {
        case 0: RT(cudaLaunchKernel(sym, g, b, args, 0, 0)); break;
        case 1: RT(cudaLaunchKernel_ptsz(sym, g, b, args, 0, 0)); break;
        case 2: RT(cudaLaunchKernelExC(&rcfg, sym, args)); break;
        case 3: RT(cudaLaunchCooperativeKernel(sym, g, b, args, 0, 0)); break;
        case 4: DRV(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL)); break;
        case 5: DRV(cuLaunchKernelEx(&cfg, f, args, NULL)); break;
        case 6: DRV(cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args)); break;
        case 7: DRV(proc_launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL)); break;
        case 8: DRV(proc_ex(&cfg, f, args, NULL)); break;
        case 9: DRV(proc_coop(f, 1, 1, 1, 1, 1, 1, 0, NULL, args)); break;
        case 10: DRV(proc_launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra)); break;
        }
        launches++;
        int v = 0;
        RT(cudaMemcpy(&v, x, sizeof v, cudaMemcpyDeviceToHost));
        copies++;
        if (v != 1) {
            printf("uses_app: path %s: kernel did not run once (%d)\n", names[i], v);
            bad++;
        }
    }
}

/* ---- copies and memsets ------------------------------------------------------------------ */

static void copy_ops(void)
{
    char host[4096];
    memset(host, 1, sizeof host);
    char *X = dev_alloc("X", 4096), *Y = dev_alloc("Y", 4096), *Z = dev_alloc("Z", 4096);
    char *W = dev_alloc("W", 4096);
    cudaStream_t s;
    RT(cudaStreamCreate(&s));
    RT(cudaMemcpy(X, host, 1024, cudaMemcpyHostToDevice));        /* X written */
    RT(cudaMemcpy(Y, X, 1024, cudaMemcpyDeviceToDevice));         /* X read, Y written */
    RT(cudaMemcpyAsync(host, Y + 8, 64, cudaMemcpyDeviceToHost, s)); /* Y read */
    RT(cudaMemsetAsync(W, 0, 128, s));                            /* W written */
    RT(cudaStreamSynchronize(s));
    copies += 4;
    CUresult (*htod)(CUdeviceptr, const void *, size_t) = driver_entry("cuMemcpyHtoD");
    CUresult (*dtoh)(void *, CUdeviceptr, size_t) = driver_entry("cuMemcpyDtoH");
    CUresult (*d32)(CUdeviceptr, unsigned, size_t) = driver_entry("cuMemsetD32");
    DRV(htod((CUdeviceptr)Z, host, 256)); /* Z written */
    DRV(d32((CUdeviceptr)(Z + 512), 7u, 16)); /* Z written */
    DRV(dtoh(host, (CUdeviceptr)(Z + 512), 64)); /* Z read */
    copies += 3;
    unsigned v = 0;
    memcpy(&v, host, sizeof v);
    check(v == 7u, "cuMemsetD32 value read back");
    RT(cudaStreamDestroy(s));
}

/* ---- sleeping kernel (timed mode) -------------------------------------------------------- */

static void k_sleep(void **p)
{
    int *x = *(int **)p[0];
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    x[0]++;
}

static void sleeper(int n)
{
    int *x = dev_alloc("S", 512);
    RT(cudaMemset(x, 0, 512));
    copies++;
    size_t sz[] = {sizeof(int *)};
    CUfunction f = kernel("k_sleep", k_sleep, 1, sz);
    void *args[] = {&x};
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    for (int i = 0; i < n; i++) {
        RT(cudaLaunchKernel((const void *)f, g, b, args, 0, 0));
        launches++;
    }
    RT(cudaDeviceSynchronize());
}

enum { WIDE_WORDS = 2003, WIDE_ALLOCS = 280 };
static int wide_pinned; /* uses_app wide pinned */
static void k_wide(void **p) { (void)p; }

static void wide(void)
{
    static uint64_t arg[WIDE_WORDS];
    size_t sz[] = {sizeof arg};
    CUfunction f = kernel("k_wide", k_wide, 1, sz);
    /* the first half zeros but for the pointers (the scan's groups of four zero words are
     * skipped: those with a pointer must not be), the second sizes and zeros */
    for (int i = 0; i < WIDE_WORDS; i++)
        arg[i] = i >= WIDE_WORDS / 2 && i % 5 ? (uint64_t)i * 3 : 0;
    for (int k = 0; k < WIDE_ALLOCS; k++) {
        char name[16];
        snprintf(name, sizeof name, "W%03d", k);
        char *p = dev_alloc(name, 4096);
        arg[2 + 7 * k] = (uint64_t)(uintptr_t)(p + 8 * (k % 100));
    }
    dev_alloc("W_unused", 4096);
    if (wide_pinned) { /* pinned host memory among the sizes: the scan tests the host span too */
        void *h = NULL;
        RT(cudaMallocHost(&h, 4096));
        if (name_fn) name_fn(h, "W_pinned");
        arg[WIDE_WORDS - 9] = (uint64_t)(uintptr_t)h + 16;
    }
    void *args[] = {arg};
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    RT(cudaLaunchKernel((const void *)f, g, b, args, 0, 0));
    launches++;
}

enum { MID_WORDS = 41 };
struct mid {
    uint64_t w[MID_WORDS];
};
static void k_narrow(void **p) { (void)p; }

static void narrow(int pinned)
{
    char *N[6];
    for (int k = 0; k < 6; k++) {
        char name[8];
        snprintf(name, sizeof name, "N%d", k);
        N[k] = dev_alloc(name, 4096);
    }
    dev_alloc("N_unused", 4096);
    size_t sz[] = {sizeof(int), sizeof(char *), sizeof(struct mid), sizeof(struct pair),
                   sizeof(void *)};
    CUfunction f = kernel("k_narrow", k_narrow, 5, sz);
    int n = 3;
    char *a = N[0] + 100;
    struct mid m;
    for (int i = 0; i < MID_WORDS; i++)
        m.w[i] = i % 3 ? (uint64_t)i * 5 : 0;
    m.w[1] = (uint64_t)(uintptr_t)N[1];
    m.w[7] = (uint64_t)(uintptr_t)(N[2] + 4095);
    m.w[40] = (uint64_t)(uintptr_t)(N[3] + 8);
    struct pair pr = {(float *)(N[4] + 64), 9, (float *)N[5]};
    int host = 0;
    void *h = &host;
    if (pinned) {
        RT(cudaMallocHost(&h, 4096));
        if (name_fn) name_fn(h, "N_pinned");
        h = (char *)h + 16;
    }
    void *args[] = {&n, &a, &m, &pr, &h};
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    RT(cudaLaunchKernel((const void *)f, g, b, args, 0, 0));
    launches++;
}

enum { GROUP_WORDS = 79, GROUP_PTRS = 43, GROUP_WIDE_WORDS = 400, GROUP_WIDE_AT = 301 };
static void k_groups(void **p) { (void)p; }

/* The 79 words of `groups` at w, pointers into allocations <prefix>00..<prefix>42 */
static void group_words(uint64_t *w, char prefix)
{
    static const unsigned tail[] = {11, 6, 15};
    int k = 0;
    for (int i = 0; i < GROUP_WORDS; i++)
        w[i] = (uint64_t)i * 8 + 1; /* a size: never in a span */
    for (int g = 0; g < 16 + 3; g++)
        for (int j = 0; j < 4; j++)
            if ((g < 16 ? (unsigned)g : tail[g - 16]) >> j & 1) {
                char name[16];
                snprintf(name, sizeof name, "%c%02d", prefix, k);
                w[4 * g + j] = (uint64_t)(uintptr_t)((char *)dev_alloc(name, 4096) + 8 * (k % 9));
                k++;
            }
    for (int i = 4 * 19; i < GROUP_WORDS; i += 2) {
        char name[16];
        snprintf(name, sizeof name, "%c%02d", prefix, k++);
        w[i] = (uint64_t)(uintptr_t)dev_alloc(name, 4096);
    }
    if (k != GROUP_PTRS) {
        printf("uses_app: groups made %d pointers, not %d\n", k, GROUP_PTRS);
        bad++;
    }
}

static void groups(int pinned)
{
    if (pinned) {
        void *h = NULL;
        RT(cudaMallocHost(&h, 4096));
    }
    static uint64_t arg[GROUP_WORDS], wide_arg[GROUP_WIDE_WORDS];
    group_words(arg, 'G');
    for (int i = 0; i < GROUP_WIDE_AT; i++)
        wide_arg[i] = (uint64_t)i * 8 + 3;
    group_words(wide_arg + GROUP_WIDE_AT, 'H');
    for (int i = GROUP_WIDE_AT + GROUP_WORDS; i < GROUP_WIDE_WORDS; i++)
        wide_arg[i] = 0;
    size_t sz[] = {sizeof arg}, szw[] = {sizeof wide_arg};
    CUfunction f = kernel("k_groups", k_groups, 1, sz), fw = kernel("k_groups_wide", k_groups, 1, szw);
    void *args[] = {arg}, *wargs[] = {wide_arg};
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    RT(cudaLaunchKernel((const void *)f, g, b, args, 0, 0));
    RT(cudaLaunchKernel((const void *)fw, g, b, wargs, 0, 0));
    launches += 2;
}

/* ---- words between the spans ---------------------------------------------------------------- */

static void k_hull(void **p) { (void)p; }

#define HULL_WORDS 80
#define HULL_DEV 7

/* Two launches of k_hull, whose one parameter (80 words, five blocks of sixteen) holds pointers
 * into Q0..Q6 and into a pinned buffer Q_pinned (its first and last byte among them) among words
 * that lie between the host span and the device span (the gap: host addresses of the process,
 * in neither span), sizes and zeros: a block of gap words alone, gap words in the groups of
 * blocks that hold pointers, a block of sizes. 12 words are candidates, two word records. */
static void hull(size_t pinned)
{
    void *hp = NULL;
    RT(cudaMallocHost(&hp, pinned));
    if (!hp)
        return;
    if (name_fn)
        name_fn(hp, "Q_pinned");
    uintptr_t h = (uintptr_t)hp, dlo = UINTPTR_MAX, dhi = 0, d[HULL_DEV];
    for (int i = 0; i < HULL_DEV; i++) {
        char name[8];
        snprintf(name, sizeof name, "Q%d", i);
        d[i] = (uintptr_t)dev_alloc(name, 4096);
        dlo = d[i] < dlo ? d[i] : dlo;
        dhi = d[i] + 4096 > dhi ? d[i] + 4096 : dhi;
    }
    /* the gap, a mebibyte in from either side (the spans may be rounded up a little) */
    uintptr_t glo = h < dlo ? h + pinned + (1u << 20) : dhi + (1u << 20), ghi = h < dlo ? dlo - (1u << 20) : h - (1u << 20);
    if (!(h + pinned <= dlo || dhi <= h) || ghi <= glo || ghi - glo < (1u << 20)) {
        printf("uses_app: hull: no gap between the pinned buffer %#lx and the device memory [%#lx, %#lx)\n",
               (unsigned long)h, (unsigned long)dlo, (unsigned long)dhi);
        bad++;
        return;
    }
    printf("uses_app: hull: the host span is %s the device span\n", h < dlo ? "below" : "above");
    static uint64_t arg[HULL_WORDS];
    for (int i = 0; i < HULL_WORDS; i++) /* gap words, 8-aligned, each its own */
        arg[i] = (glo + (ghi - glo) / HULL_WORDS * (uint64_t)i) & ~(uintptr_t)7;
    for (int i = 32; i < 48; i++) /* a block of sizes and zeros */
        arg[i] = i % 3 ? (uint64_t)i * 24 : 0;
    /* the candidates: a device pointer or a pinned one in groups that hold gap words too */
    arg[17] = d[0] + 8, arg[19] = h + 8, arg[20] = h, arg[23] = d[1];
    arg[28] = d[2] + 4088, arg[29] = h + 255, arg[30] = h - 1; /* h - 1: outside both spans */
    arg[63] = d[3], arg[64] = h + 16, arg[65] = d[4] + 16, arg[70] = d[5], arg[75] = h + 24, arg[79] = d[6];
    size_t sz[] = {sizeof arg};
    CUfunction f = kernel("k_hull", k_hull, 1, sz);
    void *args[] = {arg};
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    RT(cudaLaunchKernel((const void *)f, g, b, args, 0, 0));
    RT(cudaLaunchKernel((const void *)f, g, b, args, 0, 0));
    launches += 2;
}

/* ---- NVTX phases -------------------------------------------------------------------------- */

/* K_<c> (mib MiB, kept to the end) and T_<c> (4 KiB, memset and freed here) */
static void phase_case(const char *c, size_t mib)
{
    char k[32], t[32];
    snprintf(k, sizeof k, "K_%s", c);
    snprintf(t, sizeof t, "T_%s", c);
    (void)dev_alloc(k, mib << 20);
    void *p = dev_alloc(t, 4096);
    RT(cudaMemset(p, 0, 4096));
    copies++;
    RT(cudaFree(p));
}

static void *cross_thread(void *arg)
{
    phase_case("xt", 3);
    nvtxRangeEnd(*(nvtxRangeId_t *)arg); /* a start/end range may end on any thread */
    return NULL;
}

static void phases(void)
{
    nvtxRangePushA("pp");
    phase_case("pp", 1);
    nvtxRangePop();

    nvtxRangeId_t se = nvtxRangeStartA("se");
    phase_case("se", 2);
    nvtxRangeEnd(se);

    nvtxRangeId_t xt = nvtxRangeStartA("xt");
    pthread_t th;
    check(pthread_create(&th, NULL, cross_thread, &xt) == 0, "pthread_create");
    pthread_join(th, NULL);

    nvtxRangeId_t nest = nvtxRangeStartA("nest se");
    nvtxRangePushA("nest pp");
    phase_case("nest", 4);
    nvtxRangePop();
    phase_case("nest_out", 5);
    nvtxRangeEnd(nest);

    phase_case("none", 6);
}

/* ---- what gpumem's frames leave on the stack ---------------------------------------------- */

static const char *const residue_paths[] = {
    "rt",       "rt_ex",       "rt_coop",       "drv_sym", "drv_sym_ex", "drv_sym_coop",
    "drv_proc", "drv_proc_ex", "drv_proc_coop", "trace",   "rt_memset",  "drv_memset",
    /* allocations (RESIDUE_ALLOC0..): the entry point makes RA_<path> (its new address). Not the
     * runtime's cudaMallocPitch: the virtual GPU's keeps the address in its own frame (a local
     * for cuMemAllocPitch's answer), without gpumem too; drv_alloc_pitch is gpumem's hook */
    "rt_malloc", "rt_malloc_async", "rt_malloc_managed", "rt_malloc_host", "rt_host_alloc",
    "drv_sym_alloc", "drv_alloc", "drv_alloc_async", "drv_alloc_managed",
    "drv_alloc_host", "drv_host_alloc", "drv_alloc_pitch", "torch_malloc",
    /* a cudaMalloc named with gpumem_name (the name's call keeps the address too) */
    "name",
    /* from a pool the program made: the runtime's, the driver's by symbol and through
     * cuGetProcAddress; then a cudaMalloc handed to gpumem_record_stream (which keeps it too) */
    "rt_malloc_pool", "drv_sym_alloc_pool", "drv_alloc_pool", "record_stream",
    /* frees (RESIDUE_FREE0..): the entry point frees RA_<path>, another thread then allocates
     * RX_<path> of its size and kind (at the same address: the row prints whether it was) */
    "rt_free", "rt_free_async", "rt_free_managed", "rt_free_host", "drv_sym_free", "drv_free",
    "drv_free_async", "drv_free_host", "torch_free"};
enum {
    RESIDUE_PATHS = sizeof residue_paths / sizeof residue_paths[0],
    RESIDUE_ALLOC0 = 12,
    RESIDUE_FREE0 = 30
};

static void k_ra(void **p)
{
    **(int **)p[0] += 1;
}

/* The first word is the pointer; the rest is never written (by the program). */
struct residue_param {
    int *b;
    uint64_t rest[1023];
};

static void k_rb(void **p)
{
    ((struct residue_param *)p[0])->b[0] += 1;
}

/* One launch of f with args through launch path `path` (an index in residue_paths). */
static __attribute__((noinline)) void residue_launch(int path, CUfunction f, void **args)
{
    static launch_fn proc_launch;
    static launch_ex_fn proc_ex;
    static CUresult (*proc_coop)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 unsigned, unsigned, CUstream, void **);
    if (!proc_launch) {
        proc_launch = driver_entry("cuLaunchKernel");
        proc_ex = driver_entry("cuLaunchKernelEx");
        proc_coop = driver_entry("cuLaunchCooperativeKernel");
    }
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    CUlaunchConfig cfg = {.gridDimX = 1,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 1,
                          .blockDimY = 1,
                          .blockDimZ = 1};
    cudaLaunchConfig_t rcfg = {.gridDim = {1, 1, 1}, .blockDim = {1, 1, 1}};
    const void *sym = (const void *)f;
    switch (path) {
    case 0:
    case 9:
        RT(cudaLaunchKernel(sym, g, b, args, 0, 0));
        break;
    case 1:
        RT(cudaLaunchKernelExC(&rcfg, sym, args));
        break;
    case 2:
        RT(cudaLaunchCooperativeKernel(sym, g, b, args, 0, 0));
        break;
    case 3:
        DRV(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        break;
    case 4:
        DRV(cuLaunchKernelEx(&cfg, f, args, NULL));
        break;
    case 5:
        DRV(cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args));
        break;
    case 6:
        DRV(proc_launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        break;
    case 7:
        DRV(proc_ex(&cfg, f, args, NULL));
        break;
    case 8:
        DRV(proc_coop(f, 1, 1, 1, 1, 1, 1, 0, NULL, args));
        break;
    }
    launches++;
}

/* The allocations of the path under test, read from here where they are needed: a pointer the
 * program itself kept in a register across a call would be saved in a frame where the second
 * launch's parameter lies (the program's own leftover, not gpumem's). */
static int *volatile residue_a, *volatile residue_b;

/* The allocation and free rows. Every word the entry point is given or hands back goes through
 * a global (residue_out, residue_pitch), not this frame: the second launch's parameter lies
 * where this frame was. */
static void *residue_out;
static size_t residue_pitch;
typedef CUresult (*dalloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*dfree_fn)(CUdeviceptr);
/* gpumem's allocator as PyTorch's pluggable allocator (absent without gpumem) */
static void *(*torch_malloc)(ssize_t, int, void *);
static void (*torch_free)(void *, ssize_t, int, void *);
static int (*record_stream)(const void *, cudaStream_t);
/* The program's own pool on device 0 (made once, before the rows) */
static cudaMemPool_t residue_pool;
static __attribute__((noinline)) void residue_mem_first(int path)
{
    static dalloc_fn alloc;
    static CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
    static CUresult (*alloc_managed)(CUdeviceptr *, size_t, unsigned);
    static CUresult (*alloc_host)(void **, size_t);
    static CUresult (*host_alloc)(void **, size_t, unsigned);
    static CUresult (*alloc_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
    static dfree_fn dfree;
    static CUresult (*free_async)(CUdeviceptr, CUstream);
    static CUresult (*free_host)(void *);
    static CUresult (*alloc_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    if (!alloc) {
        alloc_pool = driver_entry("cuMemAllocFromPoolAsync");
        alloc = driver_entry("cuMemAlloc");
        alloc_async = driver_entry("cuMemAllocAsync");
        alloc_managed = driver_entry("cuMemAllocManaged");
        alloc_host = driver_entry("cuMemAllocHost");
        host_alloc = driver_entry("cuMemHostAlloc");
        alloc_pitch = driver_entry("cuMemAllocPitch");
        dfree = driver_entry("cuMemFree");
        free_async = driver_entry("cuMemFreeAsync");
        free_host = driver_entry("cuMemFreeHost");
    }
    CUdeviceptr *d = (CUdeviceptr *)&residue_out;
    CUdeviceptr a = (CUdeviceptr)(uintptr_t)residue_out;
    switch (path - RESIDUE_ALLOC0) {
    case 0: RT(cudaMalloc(&residue_out, 512)); break;
    case 1: RT(cudaMallocAsync(&residue_out, 512, 0)); break;
    case 2: RT(cudaMallocManaged(&residue_out, 512, cudaMemAttachGlobal)); break;
    case 3: RT(cudaMallocHost(&residue_out, 512)); break;
    case 4: RT(cudaHostAlloc(&residue_out, 512, 0)); break;
    case 5: DRV(cuMemAlloc_v2(d, 512)); break;
    case 6: DRV(alloc(d, 512)); break;
    case 7: DRV(alloc_async(d, 512, NULL)); break;
    case 8: DRV(alloc_managed(d, 512, CU_MEM_ATTACH_GLOBAL)); break;
    case 9: DRV(alloc_host(&residue_out, 512)); break;
    case 10: DRV(host_alloc(&residue_out, 512, 0)); break;
    case 11: DRV(alloc_pitch(d, &residue_pitch, 512, 1, 4)); break;
    case 12: residue_out = torch_malloc ? torch_malloc(512, 0, NULL) : NULL; break;
    case 13:
        RT(cudaMalloc(&residue_out, 512));
        if (name_fn) name_fn(residue_out, "RA_name");
        break;
    case 14: RT(cudaMallocFromPoolAsync(&residue_out, 512, residue_pool, 0)); break;
    case 15: DRV(cuMemAllocFromPoolAsync(d, 512, (CUmemoryPool)residue_pool, NULL)); break;
    case 16: DRV(alloc_pool(d, 512, (CUmemoryPool)residue_pool, NULL)); break;
    case 17:
        RT(cudaMalloc(&residue_out, 512));
        if (record_stream) record_stream(residue_out, NULL);
        break;
    case 18: RT(cudaFree(residue_out)); break;
    case 19: RT(cudaFreeAsync(residue_out, 0)); break;
    case 20: RT(cudaFree(residue_out)); break;
    case 21: RT(cudaFreeHost(residue_out)); break;
    case 22: DRV(cuMemFree_v2(a)); break;
    case 23: DRV(dfree(a)); break;
    case 24: DRV(free_async(a, NULL)); break;
    case 25: DRV(free_host(residue_out)); break;
    case 26: if (torch_free) torch_free(residue_out, 512, 0, NULL); break;
    }
}

/* The free rows' reallocation: on a thread of its own, so its words stay off this stack; the
 * main thread waits for it without a call deeper than a system call's. */
static atomic_int reuse_req, reuse_done;
static void *reuse_ptr, *volatile residue_freed;
static void *reuse_thread(void *unused)
{
    (void)unused;
    for (;;) {
        int path;
        while (!(path = atomic_load(&reuse_req)))
            sched_yield();
        if (path < 0)
            return NULL;
        atomic_store(&reuse_req, 0);
        char name[64];
        snprintf(name, sizeof name, "RX_%s", residue_paths[path]);
        reuse_ptr = NULL;
        switch (path - RESIDUE_FREE0) {
        case 1: case 6: RT(cudaMallocAsync(&reuse_ptr, 512, 0)); break;
        case 2: RT(cudaMallocManaged(&reuse_ptr, 512, cudaMemAttachGlobal)); break;
        case 3: case 7: RT(cudaMallocHost(&reuse_ptr, 512)); break;
        case 8: reuse_ptr = torch_malloc ? torch_malloc(512, 0, NULL) : NULL; break;
        default: RT(cudaMalloc(&reuse_ptr, 512)); break;
        }
        if (name_fn && reuse_ptr) name_fn(reuse_ptr, name);
        atomic_store(&reuse_done, 1);
    }
}

/* The first call: a launch on residue_a (for "trace" a trace entry's allocation and free of it;
 * for rt_memset and drv_memset a memset of it, runtime and driver). */
static __attribute__((noinline)) void residue_first(int path, CUfunction f)
{
    if (path >= RESIDUE_ALLOC0) {
        residue_mem_first(path);
        return;
    }
    if (path == 9) {
        void (*entry)(int, int, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t) =
            (void (*)(int, int, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t))dlsym(
                RTLD_DEFAULT, "gpumem_torch_trace_entry");
        if (entry) { /* absent without gpumem: then nothing is recorded to check */
            entry(0, 0, (uint64_t)(uintptr_t)residue_a, 512, 0, 0, 0);
            entry(1, 0, (uint64_t)(uintptr_t)residue_a, 512, 0, 0, 0);
        }
        return;
    }
    if (path == 10) {
        RT(cudaMemset(residue_a, 0, 512));
        copies++;
        return;
    }
    if (path == 11) {
        static CUresult (*memset_d8)(CUdeviceptr, unsigned char, size_t);
        if (!memset_d8) memset_d8 = driver_entry("cuMemsetD8");
        DRV(memset_d8((CUdeviceptr)(uintptr_t)residue_a, 0, 512));
        copies++;
        return;
    }
    static int *arg;
    arg = residue_a;
    void *args[] = {&arg};
    residue_launch(path, f, args);
}

/* The second launch, its parameter built in this frame: as deep as residue_first's callees. */
static __attribute__((noinline)) void residue_second(int path, CUfunction f)
{
    struct residue_param rp;
    rp.b = residue_b;
    struct residue_param *prp = &rp;
    void *args[] = {prp};
    residue_launch(path >= 9 ? 0 : path, f, args); /* after a trace entry or a memset: runtime */
}

static void residue(void)
{
    size_t sa[] = {sizeof(int *)}, sb[] = {sizeof(struct residue_param)};
    torch_malloc = (void *(*)(ssize_t, int, void *))dlsym(RTLD_DEFAULT, "gpumem_torch_malloc");
    torch_free = (void (*)(void *, ssize_t, int, void *))dlsym(RTLD_DEFAULT, "gpumem_torch_free");
    record_stream = (int (*)(const void *, cudaStream_t))dlsym(RTLD_DEFAULT, "gpumem_record_stream");
    struct cudaMemPoolProps props = {0};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    RT(cudaMemPoolCreate(&residue_pool, &props));
    pthread_t th;
    check(pthread_create(&th, NULL, reuse_thread, NULL) == 0, "pthread_create");
    for (int i = 0; i < RESIDUE_PATHS; i++) {
        char name[64];
        snprintf(name, sizeof name, "RA_%s", residue_paths[i]);
        if (i < RESIDUE_ALLOC0) {
            residue_a = dev_alloc(name, 512);
        } else if (i >= RESIDUE_FREE0) { /* the allocation the entry point frees */
            int k = i - RESIDUE_FREE0;
            residue_out = NULL;
            if (k == 2)
                RT(cudaMallocManaged(&residue_out, 512, cudaMemAttachGlobal));
            else if (k == 3 || k == 7)
                RT(cudaMallocHost(&residue_out, 512));
            else if (k == 1 || k == 6)
                RT(cudaMallocAsync(&residue_out, 512, 0));
            else if (k == 8)
                residue_out = torch_malloc ? torch_malloc(512, 0, NULL) : NULL;
            else
                RT(cudaMalloc(&residue_out, 512));
            if (name_fn && residue_out) name_fn(residue_out, name);
        }
        snprintf(name, sizeof name, "RB_%s", residue_paths[i]);
        residue_b = dev_alloc(name, 512);
        snprintf(name, sizeof name, "k_ra_%s", residue_paths[i]);
        CUfunction fa = kernel(name, k_ra, 1, sa);
        snprintf(name, sizeof name, "k_rb_%s", residue_paths[i]);
        CUfunction fb = kernel(name, k_rb, 1, sb);
        residue_freed = residue_out;
        residue_first(i, fa);
        if (i >= RESIDUE_FREE0) {
            atomic_store(&reuse_done, 0);
            atomic_store(&reuse_req, i);
            while (!atomic_load(&reuse_done))
                sched_yield();
        }
        residue_second(i, fb);
        if (i >= RESIDUE_ALLOC0 && i < RESIDUE_FREE0) { /* named now: the name's call is gpumem's */
            snprintf(name, sizeof name, "RA_%s", residue_paths[i]);
            if (name_fn && residue_out) name_fn(residue_out, name);
        }
        if (i >= RESIDUE_FREE0)
            printf("uses_app: residue %s %s\n", residue_paths[i],
                   reuse_ptr == residue_freed ? "reused" : "not reused");
    }
    atomic_store(&reuse_req, -1);
    pthread_join(th, NULL);
    RT(cudaDeviceSynchronize());
}

/* ---- launches inside a launch ------------------------------------------------------------ */

/* The virtual GPU runs a kernel inside its launch call, so a kernel that launches the next one
 * nests the hooks: each level's candidates are collected before its real call and recorded
 * after it, around the inner launches. Two chains of NEST_DEPTH driver launches (by symbol):
 * narrow (one pointer: the level's buffer) and wide (a struct of NEST_WIDE pointers, more than
 * a level's buffer holds: the spill buffer or memory of its own). */
enum { NEST_DEPTH = 4, NEST_WIDE = 300 };
struct nest_wide {
    int *p[NEST_WIDE];
};
static int *nest_mem[2][NEST_DEPTH];
static CUfunction nest_fn[2][NEST_DEPTH];

static void nest_launch(int wide, int level)
{
    static struct nest_wide ws[NEST_DEPTH];
    static int *np[NEST_DEPTH];
    static int lv[NEST_DEPTH];
    lv[level] = level;
    void *args[2] = {NULL, &lv[level]};
    if (wide) {
        for (int i = 0; i < NEST_WIDE; i++)
            ws[level].p[i] = nest_mem[1][level] + i % 128;
        args[0] = &ws[level];
    } else {
        np[level] = nest_mem[0][level];
        args[0] = &np[level];
    }
    DRV(cuLaunchKernel(nest_fn[wide][level], 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    launches++;
}

static void k_nest_narrow(void **p)
{
    int level = *(int *)p[1];
    **(int **)p[0] += 1;
    if (level + 1 < NEST_DEPTH)
        nest_launch(0, level + 1);
}

static void k_nest_wide(void **p)
{
    int level = *(int *)p[1];
    ((struct nest_wide *)p[0])->p[0][0] += 1;
    if (level + 1 < NEST_DEPTH)
        nest_launch(1, level + 1);
}

static void nest(void)
{
    size_t sn[] = {sizeof(int *), sizeof(int)}, sw[] = {sizeof(struct nest_wide), sizeof(int)};
    for (int wide = 0; wide < 2; wide++)
        for (int l = 0; l < NEST_DEPTH; l++) {
            char name[64];
            snprintf(name, sizeof name, "N%s%d", wide ? "W" : "N", l);
            nest_mem[wide][l] = dev_alloc(name, 512);
            snprintf(name, sizeof name, "k_nest_%s%d", wide ? "wide" : "narrow", l);
            nest_fn[wide][l] = kernel(name, wide ? k_nest_wide : k_nest_narrow, 2, wide ? sw : sn);
        }
    for (int rep = 0; rep < 2; rep++) {
        nest_launch(0, 0);
        nest_launch(1, 0);
    }
    RT(cudaDeviceSynchronize());
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "acceptance";
    name_fn = (int (*)(const void *, const char *))dlsym(RTLD_DEFAULT, "gpumem_name");
    RT(cudaFree(NULL));
    if (!strcmp(mode, "acceptance"))
        acceptance();
    else if (!strcmp(mode, "paths"))
        paths();
    else if (!strcmp(mode, "copies"))
        copy_ops();
    else if (!strcmp(mode, "wide")) {
        wide_pinned = argc > 2 && !strcmp(argv[2], "pinned");
        wide();
    }
    else if (!strcmp(mode, "narrow"))
        narrow(argc > 2 && !strcmp(argv[2], "pinned"));
    else if (!strcmp(mode, "groups"))
        groups(argc > 2 && !strcmp(argv[2], "pinned"));
    else if (!strcmp(mode, "hull"))
        hull(argc > 2 && !strcmp(argv[2], "big") ? 64u << 20 : 256);
    else if (!strcmp(mode, "residue"))
        residue();
    else if (!strcmp(mode, "nest"))
        nest();
    else if (!strcmp(mode, "phases"))
        phases();
    else if (!strcmp(mode, "sleep"))
        sleeper(argc > 2 ? atoi(argv[2]) : 3);
    else {
        printf("uses_app: unknown mode '%s'\n", mode);
        return 2;
    }
    printf("uses_app: %s launches %d copies %d\n", mode, launches, copies);
    return bad ? 1 : 0;
}
