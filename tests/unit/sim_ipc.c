/* sim_ipc.c — sharing device memory on the virtual GPU: VMM handles created with the POSIX
 * file-descriptor type are exported and imported (in this process and in a forked child), and
 * cuMemAlloc memory is shared with another process through cuIpcGetMemHandle /
 * cuIpcOpenMemHandle / cuIpcCloseMemHandle. The bytes written on one side are read on the
 * other. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/sim.h"
#include "tests/unit/sim_test.h"

#define OK(x) assert_int_equal((x), CUDA_SUCCESS)
#define MiB ((size_t)1 << 20)
#define G2 (2 * MiB)

static int setup(void **state)
{
    (void)state;
    unsetenv("GPUMEM_SIM_BACKING");
    return sim_test_ctx(0) ? -1 : 0;
}

static CUmemAllocationProp prop(unsigned types)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.requestedHandleTypes = (CUmemAllocationHandleType)types;
    return p;
}

static CUdeviceptr map_rw(CUmemGenericAllocationHandle h)
{
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, G2, 0, 0, 0));
    OK(cuMemMap(va, G2, 0, h, 0));
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    OK(cuMemSetAccess(va, G2, &d, 1));
    return va;
}

static void unmap(CUdeviceptr va)
{
    OK(cuMemUnmap(va, G2));
    OK(cuMemAddressFree(va, G2));
}

static void test_posix_fd_handles_export_and_import(void **state)
{
    (void)state;
    int v = 0;
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                            0));
    assert_int_equal(v, 1);
    CUmemAllocationProp p = prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle h, plain, imp;
    OK(cuMemCreate(&h, G2, &p, 0));
    CUmemAllocationProp p0 = prop(0);
    OK(cuMemCreate(&plain, G2, &p0, 0));
    int fd = -1;
    assert_int_equal(
        cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        CUDA_ERROR_INVALID_VALUE); /* not created shareable */
    OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    assert_true(fd >= 0);
    sim_device_accounting a0, a1;
    OK(sim_device_info(0, &a0));
    OK(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    OK(sim_device_info(0, &a1));
    assert_int_equal(a1.allocated, a0.allocated); /* the same memory, charged once */
    CUmemAllocationProp got;
    OK(cuMemGetAllocationPropertiesFromHandle(&got, imp));
    assert_int_equal(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUdeviceptr a = map_rw(h), b = map_rw(imp);
    ((char *)a)[12345] = 'x';
    assert_int_equal(((char *)b)[12345], 'x'); /* one memory, two handles */
    /* A forked child imports the descriptor (as one received over a socket) and writes. */
    pid_t pid = fork();
    if (pid == 0) {
        CUmemGenericAllocationHandle c;
        if (cuMemImportFromShareableHandle(&c, (void *)(intptr_t)fd,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
            _exit(2);
        CUdeviceptr va;
        CUmemAccessDesc d;
        memset(&d, 0, sizeof d);
        d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        if (cuMemAddressReserve(&va, G2, 0, 0, 0) || cuMemMap(va, G2, 0, c, 0) ||
            cuMemSetAccess(va, G2, &d, 1))
            _exit(3);
        if (((char *)va)[12345] != 'x') _exit(4);
        ((char *)va)[777] = 'c';
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(((char *)a)[777], 'c');
    unmap(a);
    unmap(b);
    OK(cuMemRelease(h));
    OK(cuMemRelease(imp));
    OK(cuMemRelease(plain));
    close(fd);
    assert_int_equal(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)-1,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                     CUDA_ERROR_INVALID_VALUE);
    CUmemAllocationProp pf = prop(CU_MEM_HANDLE_TYPE_FABRIC);
    assert_int_equal(cuMemCreate(&h, G2, &pf, 0), CUDA_ERROR_NOT_SUPPORTED);
}

static void test_ipc_mem_handle_across_fork(void **state)
{
    (void)state;
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 3 * 4096 + 100));
    OK(cuMemsetD8(d, 0x5c, 3 * 4096 + 100));
    CUipcMemHandle h;
    OK(cuIpcGetMemHandle(&h, d + 10)); /* an interior pointer names its allocation */
    unsigned char b[4];
    OK(cuMemcpyDtoH(b, d + 3 * 4096 + 96, 4)); /* exporting kept address and contents */
    assert_int_equal(b[3], 0x5c);
    CUipcMemHandle h2;
    OK(cuIpcGetMemHandle(&h2, d));
    assert_memory_equal(&h, &h2, sizeof h);
    CUdeviceptr mine;
    assert_int_equal(cuIpcOpenMemHandle(&mine, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                     CUDA_ERROR_INVALID_CONTEXT); /* not in the process that exported it */
    pid_t pid = fork();
    if (pid == 0) {
        CUdeviceptr p, q;
        if (cuIpcOpenMemHandle(&p, h, 0) != CUDA_ERROR_INVALID_VALUE) _exit(2); /* flags */
        if (cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) _exit(3);
        if (cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) || q != p) _exit(4);
        unsigned char c[4];
        if (cuMemcpyDtoH(c, p + 3 * 4096 + 96, 4) || c[0] != 0x5c) _exit(5);
        if (cuMemsetD8(p, 0x21, 64)) _exit(6);
        if (cuMemFree(p) != CUDA_ERROR_INVALID_VALUE) _exit(7); /* imported: close it instead */
        if (cuIpcCloseMemHandle(p) || cuIpcCloseMemHandle(p)) _exit(8);
        if (cuIpcCloseMemHandle(p) != CUDA_ERROR_INVALID_VALUE) _exit(9);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    OK(cuMemcpyDtoH(b, d, 4));
    assert_int_equal(b[0], 0x21); /* the child's write */
    OK(cuMemFree(d));
    /* Pool memory is not exported this way. */
    CUdeviceptr q;
    OK(cuMemAllocAsync(&q, 4096, NULL));
    assert_int_equal(cuIpcGetMemHandle(&h, q), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFreeAsync(q, NULL));
    memset(&h, 0, sizeof h);
    assert_int_equal(cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                     CUDA_ERROR_INVALID_VALUE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_posix_fd_handles_export_and_import),
        cmocka_unit_test(test_ipc_mem_handle_across_fork),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
