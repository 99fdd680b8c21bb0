/* sim_kernels.c — what lets real CUDA programs (PyTorch) run on the virtual GPU:
 *   - kernels with device code only are launched, checked, counted per name and skipped;
 *     GPUMEM_SIM_KERNELS=strict refuses them;
 *   - function attributes and occupancy answer with real-looking figures;
 *   - device profiles (GPUMEM_SIM_PROFILE) set name, memory, compute capability, SMs, L2;
 *   - modules: a cubin Triton built and an nvcc fat binary (tests/fuzz/corpus/fatbin) load through
 *     cuModuleLoad*, one function per (module, name) with the cubin's parameter layout, launched
 *     and skipped; unloading retires the functions;
 *   - what is not modelled is counted by name and named once;
 *   - VMM handles with the POSIX fd type work under virtual backing; fabric handles are refused
 *     the way a GPU without an IMEX channel refuses them.
 * Settings read from the environment are checked in forked children (the driver reads them
 * once per process); the parent runs with the defaults. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/sim.h"
#include "tests/unit/sim_test.h"

#define OK(x) assert_int_equal((x), CUDA_SUCCESS)

static int setup(void **state)
{
    (void)state;
    return sim_test_ctx(0) == CUDA_SUCCESS ? 0 : -1;
}

static CUresult launch(CUfunction f, unsigned grid, unsigned block, unsigned shmem, CUstream s)
{
    return cuLaunchKernel(f, grid, 1, 1, block, 1, 1, shmem, s, NULL, NULL);
}

/* A launch of a kernel with no host body succeeds, does nothing, and is counted by name; two
 * registrations are two handles and their counts add up under the name. */
static void test_device_kernel_is_skipped_and_counted(void **state)
{
    (void)state;
    CUfunction a, b, c;
    OK(sim_register_device_kernel("_Z3addPi", &a));
    OK(sim_register_device_kernel("_Z3addPi", &b));
    OK(sim_register_device_kernel("_Z3mulPf", &c));
    assert_true(a && b && a != b && a != c);
    const char *name = NULL;
    OK(cuFuncGetName(&name, a));
    assert_string_equal(name, "_Z3addPi");
    /* its parameters are in device code the sim does not read: no layout, which is not "no
     * parameter at index 0" (INVALID_VALUE), so access tracking knows its arguments are unread */
    size_t off = 0, sz = 0;
    assert_int_equal(cuFuncGetParamInfo(a, 0, &off, &sz), CUDA_ERROR_NOT_SUPPORTED);
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 256));
    OK(cuMemsetD8(d, 7, 256));
    int x = 0;
    void *args[] = {&d, &x};
    uint64_t before = sim_skipped_launches(NULL);
    OK(cuLaunchKernel(a, 4, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
    OK(launch(b, 1, 32, 0, NULL));
    OK(launch(c, 1, 32, 0, NULL));
    assert_int_equal(sim_skipped_launches("_Z3addPi"), 2);
    assert_int_equal(sim_skipped_launches("_Z3mulPf"), 1);
    assert_int_equal(sim_skipped_launches(NULL) - before, 3);
    unsigned char h[4];
    OK(cuMemcpyDtoH(h, d, 4));
    assert_int_equal(h[3], 7); /* skipped: device memory keeps what it held */
    OK(cuMemFree(d));
    sim_stats st;
    sim_stats_get(&st);
    assert_true(st.op[SIM_OP_LAUNCH].calls >= 3); /* a skipped launch still costs a launch */
}

static void *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 20];
    *len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(*len > 0 && *len < sizeof buf);
    void *copy = malloc(*len);
    assert_non_null(copy);
    memcpy(copy, buf, *len);
    return copy;
}

#define TRITON_CUBIN "tests/fuzz/corpus/fatbin/cubin_triton0"
#define TRITON_KERNEL "triton_poi_fused_addmm_relu_0"

/* A cubin Triton built (torch.compile's): loaded from a file and from memory, its kernel is one
 * handle per module with the layout its PTX declares (.u64 x2, .u32, .u64 x2), launched, checked
 * and skipped; a missing name, file or a non-image are the driver's errors; unloading retires the
 * module's functions (the other module's stay), and their launches stay counted. */
static void test_module_cubin(void **state)
{
    (void)state;
    CUmodule m1, m2;
    OK(cuModuleLoad(&m1, TRITON_CUBIN));
    size_t len;
    void *image = read_file(TRITON_CUBIN, &len);
    OK(cuModuleLoadData(&m2, image));
    free(image); /* the module keeps what it read, not the image */
    CUfunction f, again, g;
    OK(cuModuleGetFunction(&f, m1, TRITON_KERNEL));
    OK(cuModuleGetFunction(&again, m1, TRITON_KERNEL));
    OK(cuModuleGetFunction(&g, m2, TRITON_KERNEL));
    assert_true(f && f == again && f != g);
    assert_int_equal(cuModuleGetFunction(&again, m1, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    unsigned n = 0;
    OK(cuModuleGetFunctionCount(&n, m1));
    assert_int_equal(n, 1);
    const size_t want_off[] = {0, 8, 16, 24, 32}, want_size[] = {8, 8, 4, 8, 8};
    for (size_t i = 0; i < 5; i++) {
        size_t off = 0, sz = 0;
        OK(cuFuncGetParamInfo(f, i, &off, &sz));
        assert_int_equal(off, want_off[i]);
        assert_int_equal(sz, want_size[i]);
    }
    size_t off, sz;
    assert_int_equal(cuFuncGetParamInfo(f, 5, &off, &sz), CUDA_ERROR_INVALID_VALUE);
    /* its resources are the cubin's (cuobjdump -res-usage: REG:10 SHARED:0) */
    int regs = 0, shared = -1;
    OK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
    OK(cuFuncGetAttribute(&shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
    assert_int_equal(regs, 10);
    assert_int_equal(shared, 0);
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 4096));
    unsigned x = 4096;
    CUdeviceptr scratch = 0;
    void *args[] = {&d, &d, &x, &scratch, &scratch};
    assert_int_equal(launch(f, 32, 128, 0, NULL), CUDA_ERROR_INVALID_VALUE); /* its parameters missing */
    OK(cuLaunchKernel(f, 32, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    OK(cuLaunchKernel(g, 32, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    assert_int_equal(sim_skipped_launches(TRITON_KERNEL), 2);
    CUmodule bad;
    assert_int_equal(cuModuleLoad(&bad, "tests/fuzz/corpus/fatbin/no-such-file"), CUDA_ERROR_FILE_NOT_FOUND);
    assert_int_equal(cuModuleLoadData(&bad, "\x01\x02\x03\x04 not an image"), CUDA_ERROR_INVALID_IMAGE);
    OK(cuModuleUnload(m1));
    assert_int_equal(cuLaunchKernel(f, 32, 1, 1, 128, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuFuncGetParamInfo(f, 0, &off, &sz), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuModuleUnload(m1), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuModuleGetFunction(&again, m1, TRITON_KERNEL), CUDA_ERROR_INVALID_HANDLE);
    OK(cuLaunchKernel(g, 32, 1, 1, 128, 1, 1, 0, NULL, args, NULL)); /* the other module's */
    assert_int_equal(sim_skipped_launches(TRITON_KERNEL), 3);
    OK(cuModuleUnload(m2));
    OK(cuMemFree(d));
    /* a module belongs to a context: none current, none loaded */
    CUcontext cur;
    OK(cuCtxGetCurrent(&cur));
    OK(cuCtxSetCurrent(NULL));
    assert_int_equal(cuModuleLoad(&bad, TRITON_CUBIN), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuCtxSetCurrent(cur));
}

/* A Triton reduction's cubin: its registers and static shared memory (cuobjdump -res-usage:
 * REG:29 SHARED:1024) in its attributes and its occupancy (the shared memory counts per block). */
static void test_module_resources(void **state)
{
    (void)state;
    CUmodule m;
    OK(cuModuleLoad(&m, "tests/fuzz/corpus/fatbin/cubin_triton1"));
    CUfunction f;
    OK(cuModuleGetFunction(&f, m, "triton_per_fused_sum_threshold_backward_1"));
    int regs = 0, shared = 0, blocks = 0, typical = 0;
    OK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
    OK(cuFuncGetAttribute(&shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
    assert_int_equal(regs, 29);
    assert_int_equal(shared, 1024);
    CUfunction plain;
    OK(sim_register_device_kernel("typical", &plain));
    /* 1024 threads: 65536 / (1024 * 29) = 2 blocks by registers, as by threads (2048 per SM) */
    OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 1024, 0));
    assert_int_equal(blocks, 2);
    /* 64 threads and 40 KiB each on the default profile's 164 KiB per SM: 40 + 1 reserved fit 4
     * times, 40 + 1 + its static 1 only 3 */
    OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 64, 40 << 10));
    OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&typical, plain, 64, 40 << 10));
    assert_int_equal(typical, 4);
    assert_int_equal(blocks, 3);
    OK(cuModuleUnload(m));
}

/* An nvcc fat binary (tests/unit/sim_nvcc_app.cu's) as a module: every kernel is a function with
 * its name, the same ones through cuModuleLoadFatBinary and cuModuleLoadData. */
static void test_module_fatbin(void **state)
{
    (void)state;
    size_t len;
    void *image = read_file("tests/fuzz/corpus/fatbin/raw1", &len);
    CUmodule a, b;
    OK(cuModuleLoadFatBinary(&a, image));
    OK(cuModuleLoadData(&b, image));
    unsigned na = 0, nb = 0;
    OK(cuModuleGetFunctionCount(&na, a));
    OK(cuModuleGetFunctionCount(&nb, b));
    assert_true(na > 0 && na == nb);
    CUfunction fs[64];
    assert_true(na <= 64);
    assert_int_equal(cuModuleEnumerateFunctions(fs, na - 1, a), CUDA_ERROR_INVALID_VALUE);
    OK(cuModuleEnumerateFunctions(fs, na, a));
    for (unsigned i = 0; i < na; i++) {
        const char *name = NULL;
        OK(cuFuncGetName(&name, fs[i]));
        CUfunction same;
        OK(cuModuleGetFunction(&same, a, name));
        assert_ptr_equal(same, fs[i]);
    }
    OK(cuModuleUnload(a));
    OK(cuModuleUnload(b));
    free(image);
}

/* The launch is checked like any other: configuration, shared memory, stream. */
static void test_device_kernel_launch_is_checked(void **state)
{
    (void)state;
    CUfunction f;
    OK(sim_register_device_kernel("checked", &f));
    assert_int_equal(launch(f, 0, 32, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(launch(f, 1, 2048, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(launch(f, 1, 32, 1 << 20, NULL), CUDA_ERROR_INVALID_VALUE);
    int not_a_stream;
    assert_int_equal(launch(f, 1, 32, 0, (CUstream)&not_a_stream), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(sim_skipped_launches("checked"), 0);
    assert_int_equal(sim_register_device_kernel(NULL, &f), CUDA_ERROR_INVALID_VALUE);
    CUlaunchConfig cfg = {.gridDimX = 2,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 128,
                          .blockDimY = 1,
                          .blockDimZ = 1};
    OK(cuLaunchKernelEx(&cfg, f, NULL, NULL));
    assert_int_equal(sim_skipped_launches("checked"), 1);
}

/* A captured launch becomes a graph node that replays as a no-op. */
static void test_device_kernel_in_a_graph(void **state)
{
    (void)state;
    CUfunction f;
    OK(sim_register_device_kernel("captured", &f));
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(launch(f, 1, 32, 0, s));
    CUgraph g;
    OK(cuStreamEndCapture(s, &g));
    size_t n = 0;
    OK(cuGraphGetNodes(g, NULL, &n));
    assert_int_equal(n, 1);
    CUgraphExec x;
    OK(cuGraphInstantiate(&x, g, 0));
    OK(cuGraphLaunch(x, s));
    OK(cuGraphLaunch(x, s));
    OK(cuStreamSynchronize(s));
    assert_int_equal(sim_skipped_launches("captured"), 1); /* counted at capture */
    OK(cuGraphExecDestroy(x));
    OK(cuGraphDestroy(g));
    OK(cuStreamDestroy(s));
}

/* cuFuncGetAttribute / cuFuncSetAttribute and occupancy, on the default profile (A100-class:
 * 2048 threads, 32 blocks, 164 KiB of shared memory per SM, 163 KiB opt-in per block). */
static void test_function_attributes_and_occupancy(void **state)
{
    (void)state;
    CUfunction f;
    OK(sim_register_device_kernel("attrs", &f));
    int v = -1;
    OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
    assert_int_equal(v, 1024);
    OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
    assert_int_equal(v, 32);
    OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_BINARY_VERSION, f));
    assert_int_equal(v, 80);
    OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
    assert_int_equal(v, 48 * 1024);
    OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 * 1024));
    OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
    assert_int_equal(v, 100 * 1024);
    assert_int_equal(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 200000),
                     CUDA_ERROR_INVALID_VALUE); /* above the opt-in limit */
    assert_int_equal(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NUM_REGS, 64),
                     CUDA_ERROR_INVALID_VALUE); /* read-only */
    OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50));
    int not_a_kernel;
    assert_int_equal(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, (CUfunction)&not_a_kernel),
                     CUDA_ERROR_INVALID_HANDLE);
    int n = -1;
    OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, 256, 0));
    assert_int_equal(n, 8); /* 2048 threads / 256 */
    OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, 32, 0));
    assert_int_equal(n, 32); /* the block limit */
    OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, 128, 80 * 1024));
    assert_int_equal(n, 2); /* 164 KiB / (80 KiB + 1 KiB reserved) */
    OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, 128, 120 * 1024));
    assert_int_equal(n, 0); /* more than the function may use */
    size_t smem = 0;
    OK(cuOccupancyAvailableDynamicSMemPerBlock(&smem, f, 2, 128));
    assert_int_equal(smem, 167936 / 2 - 1024);
}

/* What is not modelled is counted by name (GPUMEM_SIM_STATS) and named once. */
static void test_unsupported_calls_are_counted(void **state)
{
    (void)state;
    uint64_t before = sim_unsupported_calls("cuArrayCreate_v2");
    CUarray a;
    CUDA_ARRAY_DESCRIPTOR d = {
        .Width = 4, .Height = 4, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    assert_int_equal(cuArrayCreate(&a, &d), CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(cuArrayCreate(&a, &d), CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(sim_unsupported_calls("cuArrayCreate_v2") - before, 2);
    sim_unsupported_note("libfoo: fooBar", "FOO_NOT_SUPPORTED");
    assert_int_equal(sim_unsupported_calls("libfoo: fooBar"), 1);
    assert_true(sim_unsupported_calls(NULL) >= 3);
}

/* ---- in forked children: settings from the environment ---------------------------------- */

typedef int (*child_fn)(void);

static int run_child(const char *const *env, child_fn fn, char *err, size_t errlen)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        for (size_t i = 0; env[i]; i += 2)
            setenv(env[i], env[i + 1], 1);
        _exit(fn());
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < errlen && (r = read(fds[0], err + n, errlen - 1 - n)) > 0)
        n += (size_t)r;
    err[n] = '\0';
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static int child_strict(void)
{
    CUfunction f;
    if (sim_test_ctx(0)) return 10;
    if (sim_register_device_kernel("k", &f) != CUDA_ERROR_NOT_FOUND) return 1;
    return 0;
}

static int attr(CUdevice_attribute a)
{
    int v = -1;
    return cuDeviceGetAttribute(&v, a, 0) ? -1 : v;
}

static int child_h100(void)
{
    if (sim_test_ctx(0)) return 10;
    char name[256];
    size_t total = 0;
    if (cuDeviceGetName(name, sizeof name, 0) || strcmp(name, "NVIDIA H100 80GB HBM3")) return 1;
    if (cuDeviceTotalMem(&total, 0) || total != (size_t)81008 << 20) return 2;
    if (attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) != 9 ||
        attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) != 0)
        return 3;
    if (attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) != 132) return 4;
    if (attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE) != 50 << 20) return 5;
    if (attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) != 232448) return 6;
    if (attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED) != 1) return 7;
    /* no IMEX channel: a fabric handle is refused, a POSIX fd one is made */
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                             .requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC};
    CUmemGenericAllocationHandle h;
    if (cuMemCreate(&h, 2 << 20, &p, 0) != CUDA_ERROR_NOT_PERMITTED) return 8;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (cuMemCreate(&h, 2 << 20, &p, 0) || cuMemRelease(h)) return 9;
    /* launches may use the profile's larger shared memory */
    CUfunction f;
    if (sim_register_device_kernel("big_smem", &f) || launch(f, 1, 32, 200000, NULL)) return 11;
    return 0;
}

static int child_l4_with_memory(void)
{
    if (sim_test_ctx(0)) return 10;
    char name[256];
    size_t total = 0;
    if (cuDeviceGetName(name, sizeof name, 0) || strcmp(name, "NVIDIA L4")) return 1;
    if (cuDeviceTotalMem(&total, 0) || total != (size_t)8 << 30) return 2; /* GPUMEM_SIM_MEMORY */
    if (attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) != 9) return 3;
    if (attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) != 1536) return 4;
    return 0;
}

static int child_default_name(void)
{
    if (sim_test_ctx(0)) return 10;
    char name[256];
    if (cuDeviceGetName(name, sizeof name, 0) ||
        strcmp(name, "gpumem virtual GPU (A100-class, host memory)"))
        return 1;
    return 0;
}

/* Virtual backing: the POSIX fd type is accepted (PyTorch's expandable segments ask for it);
 * exporting such a handle is what is not supported. */
static int child_virtual_posix_fd(void)
{
    if (sim_test_ctx(0)) return 10;
    if (attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) != 1) return 1;
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                             .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
    CUmemGenericAllocationHandle h;
    if (cuMemCreate(&h, 4 << 20, &p, 0)) return 2;
    CUdeviceptr va;
    CUmemAccessDesc acc = {.location = p.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (cuMemAddressReserve(&va, 4 << 20, 0, 0, 0) || cuMemMap(va, 4 << 20, 0, h, 0) ||
        cuMemSetAccess(va, 4 << 20, &acc, 1))
        return 3;
    int fd;
    if (cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
        CUDA_ERROR_NOT_SUPPORTED)
        return 4;
    if (cuMemUnmap(va, 4 << 20) || cuMemAddressFree(va, 4 << 20) || cuMemRelease(h)) return 5;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC; /* the default profile: no fabric */
    if (cuMemCreate(&h, 2 << 20, &p, 0) != CUDA_ERROR_NOT_SUPPORTED) return 6;
    return 0;
}

static int child_async_skip(void)
{
    if (sim_test_ctx(0)) return 10;
    CUfunction f;
    CUstream s;
    if (sim_register_device_kernel("async", &f) || cuStreamCreate(&s, 0)) return 1;
    for (int i = 0; i < 100; i++)
        if (launch(f, 1, 32, 0, s)) return 2;
    if (cuStreamSynchronize(s) || sim_skipped_launches("async") != 100) return 3;
    return 0;
}

static void test_settings_from_env(void **state)
{
    (void)state;
    char err[4096];
    const char *strict[] = {"GPUMEM_SIM_KERNELS", "strict", NULL};
    assert_int_equal(run_child(strict, child_strict, err, sizeof err), 0);
    const char *h100[] = {"GPUMEM_SIM_PROFILE", "h100-80g", NULL};
    assert_int_equal(run_child(h100, child_h100, err, sizeof err), 0);
    const char *l4[] = {"GPUMEM_SIM_PROFILE", "l4", "GPUMEM_SIM_MEMORY", "8G", NULL};
    assert_int_equal(run_child(l4, child_l4_with_memory, err, sizeof err), 0);
    const char *bad[] = {"GPUMEM_SIM_PROFILE", "h300", NULL};
    assert_int_equal(run_child(bad, child_default_name, err, sizeof err), 0);
    assert_non_null(strstr(err, "GPUMEM_SIM_PROFILE='h300' is not a known profile"));
    const char *badk[] = {"GPUMEM_SIM_KERNELS", "maybe", NULL};
    assert_int_equal(run_child(badk, child_default_name, err, sizeof err), 0);
    assert_non_null(strstr(err, "GPUMEM_SIM_KERNELS='maybe'"));
    const char *virt[] = {"GPUMEM_SIM_BACKING", "virtual", NULL};
    assert_int_equal(run_child(virt, child_virtual_posix_fd, err, sizeof err), 0);
    assert_int_equal(strstr(err, "cuMemExportToShareableHandle with virtual backing") != NULL, 1);
    const char *async[] = {"GPUMEM_SIM_ASYNC", "1", NULL};
    assert_int_equal(run_child(async, child_async_skip, err, sizeof err), 0);
}

static int child_stats(void)
{
    CUfunction f;
    if (sim_test_ctx(0) || sim_register_device_kernel("_Z6kernelv", &f)) return 1;
    for (int i = 0; i < 3; i++)
        if (launch(f, 1, 32, 0, NULL)) return 2;
    CUarray a;
    CUDA_ARRAY_DESCRIPTOR d = {
        .Width = 1, .Height = 1, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    (void)cuArrayCreate(&a, &d);
    (void)cuArrayCreate(&a, &d);
    sim_stats_print(stderr);
    return 0;
}

/* The GPUMEM_SIM_STATS table names the skipped kernels and what was not modelled. */
static void test_stats_name_kernels_and_unsupported(void **state)
{
    (void)state;
    char err[8192];
    const char *none[] = {NULL};
    assert_int_equal(run_child(none, child_stats, err, sizeof err), 0);
    assert_non_null(strstr(err, "kernels skipped (device code only): 3 launches of 1 kernel"));
    assert_non_null(strstr(err, "skipped          3  _Z6kernelv"));
    assert_non_null(strstr(err, "not modelled: cuArrayCreate_v2, 2 calls"));
    const char *once = strstr(err, "cuArrayCreate_v2 is not implemented");
    assert_non_null(once);
    assert_null(strstr(once + 1, "cuArrayCreate_v2 is not implemented")); /* named once */
}

int main(void)
{
    unsetenv("GPUMEM_SIM_PROFILE");
    unsetenv("GPUMEM_SIM_KERNELS");
    unsetenv("GPUMEM_SIM_MEMORY");
    unsetenv("GPUMEM_SIM_BACKING");
    unsetenv("GPUMEM_SIM_ASYNC");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_settings_from_env),
        cmocka_unit_test(test_stats_name_kernels_and_unsupported),
        cmocka_unit_test_setup(test_device_kernel_is_skipped_and_counted, setup),
        cmocka_unit_test_setup(test_device_kernel_launch_is_checked, setup),
        cmocka_unit_test_setup(test_device_kernel_in_a_graph, setup),
        cmocka_unit_test_setup(test_function_attributes_and_occupancy, setup),
        cmocka_unit_test_setup(test_unsupported_calls_are_counted, setup),
        cmocka_unit_test_setup(test_module_cubin, setup),
        cmocka_unit_test_setup(test_module_fatbin, setup),
        cmocka_unit_test_setup(test_module_resources, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
