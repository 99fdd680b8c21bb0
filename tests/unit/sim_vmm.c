/* sim_vmm.c — the virtual GPU's virtual memory management: reservations, physical handles,
 * mapping, access, aliasing, faults on unmapped space, reference counting of handles, pointer
 * queries on mapped memory, map fault injection, and many mappings released in any order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/sim.h"
#include "tests/unit/sim_test.h"

#define OK(x) assert_int_equal((x), CUDA_SUCCESS)
#define MiB ((size_t)1 << 20)
#define G2 (2 * MiB)

static CUmemAllocationProp prop(void)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    return p;
}

static CUmemAccessDesc rw(void)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = 0;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return d;
}

static int setup(void **state)
{
    (void)state;
    unsetenv("GPUMEM_SIM_BACKING");
    unsetenv("GPUMEM_SIM_FAULTS");
    return sim_test_ctx(0) == CUDA_SUCCESS ? 0 : -1;
}

/* Runs fn in a child process; returns the signal that killed it, or 0 if it exited. */
static int dies_of(void (*fn)(volatile char *), volatile char *p)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The default action, so the child dies of the signal even under a sanitizer's handler. */
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        fn(p);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

static void touch_write(volatile char *p)
{
    p[0] = 1;
}
static void touch_read(volatile char *p)
{
    (void)p[0];
}

static void test_granularity_is_2mib(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop();
    size_t g = 0;
    OK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    assert_int_equal(g, G2);
    OK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    assert_int_equal(g, G2);
    p.location.id = 1;
    assert_int_equal(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                     CUDA_ERROR_INVALID_DEVICE);
}

static void test_one_handle_mapped_twice_aliases(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop();
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    assert_int_equal(va % G2, 0);
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, G2, &p, 0));
    OK(cuMemMap(va, G2, 0, h, 0));
    OK(cuMemMap(va + 4 * MiB, G2, 0, h, 0));
    CUmemAccessDesc d = rw();
    OK(cuMemSetAccess(va, G2, &d, 1));
    OK(cuMemSetAccess(va + 4 * MiB, G2, &d, 1));
    /* Written through the first mapping, read through the second: same physical memory. */
    char *a = (char *)va, *b = (char *)(va + 4 * MiB);
    strcpy(a + 12345, "through mapping A");
    assert_string_equal(b + 12345, "through mapping A");
    b[G2 - 1] = 'z';
    assert_int_equal(a[G2 - 1], 'z');
    /* Driver copies see it too. */
    char out[32] = {0};
    OK(cuMemcpyDtoH(out, va + 4 * MiB + 12345, 18));
    assert_string_equal(out, "through mapping A");
    unsigned long long flags = 0;
    CUmemLocation loc = d.location;
    OK(cuMemGetAccess(&flags, &loc, va + 100));
    assert_int_equal(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(cuMemUnmap(va, G2));
    OK(cuMemUnmap(va + 4 * MiB, G2));
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, 8 * MiB));
}

static void test_unmapped_reserved_space_faults(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop();
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0));
    volatile char *c = (volatile char *)va;
    /* Reserved, never mapped. */
    assert_int_equal(dies_of(touch_read, c), SIGSEGV);
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, G2, &p, 0));
    OK(cuMemMap(va, G2, 0, h, 0));
    /* Mapped but no access granted yet: still faults, as on a GPU. */
    assert_int_equal(dies_of(touch_write, c), SIGSEGV);
    CUmemAccessDesc d = rw();
    OK(cuMemSetAccess(va, G2, &d, 1));
    assert_int_equal(dies_of(touch_write, c), 0);
    /* Read-only access: reads work, writes fault. */
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    OK(cuMemSetAccess(va, G2, &d, 1));
    assert_int_equal(dies_of(touch_read, c), 0);
    assert_int_equal(dies_of(touch_write, c), SIGSEGV);
    char buf[16] = {0};
    assert_int_equal(cuMemcpyHtoD(va, buf, sizeof buf), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemcpyDtoH(buf, va, sizeof buf));
    /* After unmapping, faults again. */
    OK(cuMemUnmap(va, G2));
    assert_int_equal(dies_of(touch_read, c), SIGSEGV);
    assert_int_equal(cuMemcpyDtoH(buf, va, sizeof buf), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, 4 * MiB));
}

static void test_invalid_vmm_calls_are_rejected(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop();
    CUdeviceptr va, other;
    CUmemGenericAllocationHandle h;
    assert_int_equal(cuMemAddressReserve(&va, MiB, 0, 0, 0), CUDA_ERROR_INVALID_VALUE); /* not 2M */
    assert_int_equal(cuMemCreate(&h, 3 * MiB, &p, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    OK(cuMemAddressReserve(&other, 4 * MiB, 0, 0, 0));
    OK(cuMemCreate(&h, 4 * MiB, &p, 0));
    assert_int_equal(cuMemMap(va + MiB, G2, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* misaligned */
    assert_int_equal(cuMemMap(va + 6 * MiB, 4 * MiB, 0, h, 0),
                     CUDA_ERROR_INVALID_VALUE);                                  /* past end */
    assert_int_equal(cuMemMap(va, 4 * MiB, G2, h, 0), CUDA_ERROR_INVALID_VALUE); /* past handle */
    assert_int_equal(cuMemMap(va, G2, 0, h + 999, 0),
                     CUDA_ERROR_INVALID_VALUE); /* no such handle */
    assert_int_equal(cuMemMap((CUdeviceptr)0x10000000000ull, G2, 0, h, 0),
                     CUDA_ERROR_INVALID_VALUE);
    OK(cuMemMap(va, 4 * MiB, 0, h, 0));
    /* the codes an H200's driver gives (tests/gpu/sim_parity.sh): a part of a handle is not
     * supported (801), a whole handle over a mapping is an invalid value */
    assert_int_equal(cuMemMap(va + G2, G2, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(cuMemMap(va + 4 * MiB, G2, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(cuMemMap(va + G2, 4 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    /* CUDA 13: "offset ... currently must be zero". */
    assert_int_equal(cuMemMap(va + 4 * MiB, G2, G2, h, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemMap(va + 4 * MiB, 4 * MiB, 0, h, 0)); /* the whole handle, a second time */
    /* Access must cover mapped memory only. */
    CUmemAccessDesc d = rw();
    assert_int_equal(cuMemSetAccess(other, 4 * MiB, &d, 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemSetAccess(va, 8 * MiB, &d, 1));
    /* The second mapping aliases the start of the first one. */
    ((char *)va)[7] = 'q';
    assert_int_equal(((char *)va)[4 * MiB + 7], 'q');
    /* Unmap must be whole mappings; the reservation cannot be freed while mapped. */
    assert_int_equal(cuMemUnmap(va, G2), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemAddressFree(va, 4 * MiB), CUDA_ERROR_INVALID_VALUE); /* wrong size */
    OK(cuMemUnmap(va, 8 * MiB)); /* a run of two contiguous mappings at once */
    OK(cuMemRelease(h));
    assert_int_equal(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAddressFree(va, 8 * MiB));
    OK(cuMemAddressFree(other, 4 * MiB));
}

static void test_release_while_mapped_keeps_memory_until_unmap(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop();
    size_t free0, free1, total;
    OK(cuMemGetInfo(&free0, &total));
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    OK(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0));
    OK(cuMemGetInfo(&free1, &total));
    assert_int_equal(free1, free0); /* address space is not device memory */
    OK(cuMemCreate(&h, 4 * MiB, &p, 0));
    OK(cuMemGetInfo(&free1, &total));
    assert_int_equal(free0 - free1, 4 * MiB);
    OK(cuMemMap(va, 4 * MiB, 0, h, 0));
    CUmemAccessDesc d = rw();
    OK(cuMemSetAccess(va, 4 * MiB, &d, 1));
    OK(cuMemRelease(h)); /* released while mapped: the mapping keeps it alive */
    ((char *)va)[100] = 7;
    assert_int_equal(((char *)va)[100], 7);
    OK(cuMemGetInfo(&free1, &total));
    assert_int_equal(free0 - free1, 4 * MiB);
    /* Retain gives the handle back from an address and adds a reference. */
    CUmemGenericAllocationHandle h2;
    OK(cuMemRetainAllocationHandle(&h2, (void *)(va + MiB)));
    assert_int_equal(h2, h);
    CUmemAllocationProp got;
    OK(cuMemGetAllocationPropertiesFromHandle(&got, h2));
    assert_int_equal(got.location.id, 0);
    OK(cuMemUnmap(va, 4 * MiB));
    OK(cuMemGetInfo(&free1, &total));
    assert_int_equal(free0 - free1, 4 * MiB); /* the retained reference still holds it */
    OK(cuMemRelease(h2));
    OK(cuMemGetInfo(&free1, &total));
    assert_int_equal(free1, free0);
    OK(cuMemAddressFree(va, 4 * MiB));
}

static void test_pointer_queries_on_mapped_memory(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    OK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    OK(cuMemCreate(&h, G2, &p, 0));
    OK(cuMemMap(va + G2, G2, 0, h, 0));
    CUdeviceptr base;
    size_t size;
    /* the real driver answers only for its own allocations, not for a cuMemMap mapping */
    assert_int_equal(cuMemGetAddressRange(&base, &size, va + G2 + 5), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(cuMemGetAddressRange(&base, &size, va + 5), CUDA_ERROR_NOT_FOUND);
    unsigned type;
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + G2));
    assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
    unsigned long long block = 0;
    OK(cuPointerGetAttribute(&block, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, va + G2));
    assert_int_equal(block, h);
    unsigned access = 99;
    OK(cuPointerGetAttribute(&access, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, va + G2));
    assert_int_equal(access, CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE);
    assert_int_equal(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va),
                     CUDA_ERROR_INVALID_VALUE);
    OK(cuMemUnmap(va + G2, G2));
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, 8 * MiB));
}

/* Many mappings and handles (past several growths of the handle table), each 2 MiB or 4 MiB, in
 * one reservation, released in mixed order (every third from the front, then from the back,
 * then the rest): every address still finds its own mapping and handle, partial runs are
 * refused, access spans mappings from an inner address, and all device memory comes back. */
static void test_many_mappings_released_in_any_order(void **state)
{
    (void)state;
    enum { N = 600 };
    CUmemAllocationProp p = prop();
    size_t free0, free1, total;
    OK(cuMemGetInfo(&free0, &total));
    CUdeviceptr va;
    CUmemGenericAllocationHandle h[N];
    size_t off[N + 1], sz[N];
    off[0] = 0;
    for (int i = 0; i < N; i++) {
        sz[i] = i % 5 == 4 ? 2 * G2 : G2;
        off[i + 1] = off[i] + sz[i];
    }
    OK(cuMemAddressReserve(&va, off[N] + G2, 0, 0, 0));
    for (int i = 0; i < N; i++) {
        OK(cuMemCreate(&h[i], sz[i], &p, 0));
        OK(cuMemMap(va + off[i], sz[i], 0, h[i], 0));
    }
    OK(cuMemGetInfo(&free1, &total));
    assert_int_equal(free0 - free1, off[N]);
    for (int i = 0; i < N; i++) { /* the last byte of each mapping: its own handle */
        unsigned long long block = 0;
        OK(cuPointerGetAttribute(&block, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID,
                                 va + off[i + 1] - 1));
        assert_int_equal(block, h[i]);
    }
    /* access from inside mapping 4 (4 MiB) across mappings 5 and 6 */
    CUmemAccessDesc d = rw();
    OK(cuMemSetAccess(va + off[4] + G2, off[7] - off[4] - G2, &d, 1));
    unsigned long long flags = 0;
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    OK(cuMemGetAccess(&flags, &loc, va + off[6] + 5));
    assert_int_equal(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(cuMemGetAccess(&flags, &loc, va + off[7]));
    assert_int_equal(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    ((char *)va)[off[5] + 3] = 'z';
    assert_int_equal(((char *)va)[off[5] + 3], 'z');
    /* access and unmapping need mapped memory: the unmapped granule past the last mapping */
    assert_int_equal(cuMemSetAccess(va + off[N - 1], off[N] - off[N - 1] + G2, &d, 1),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemUnmap(va + off[4] + G2, G2),
                     CUDA_ERROR_INVALID_VALUE); /* inside a mapping */
    assert_int_equal(cuMemUnmap(va + off[3], G2 + G2),
                     CUDA_ERROR_INVALID_VALUE); /* ends inside one */
    /* retain from the second granule of a 4 MiB mapping */
    CUmemGenericAllocationHandle r;
    OK(cuMemRetainAllocationHandle(&r, (void *)(va + off[9] + G2 + 1)));
    assert_int_equal(r, h[9]);
    OK(cuMemRelease(r));
    bool gone[N] = {false};
    for (int i = 0; i < N; i += 3) /* front-first, every third */
        OK(cuMemUnmap(va + off[i], sz[i])), OK(cuMemRelease(h[i])), gone[i] = true;
    for (int i = N - 1; i >= 0; i -= 3) /* back-first */
        if (!gone[i]) OK(cuMemUnmap(va + off[i], sz[i])), OK(cuMemRelease(h[i])), gone[i] = true;
    for (int i = 0; i < N; i++) { /* what is left still finds its own handle */
        if (gone[i]) continue;
        unsigned long long block = 0;
        OK(cuPointerGetAttribute(&block, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, va + off[i]));
        assert_int_equal(block, h[i]);
        OK(cuMemRelease(h[i])); /* released while mapped: freed at the unmap below */
    }
    for (int i = 0; i < N; i++)
        if (!gone[i]) OK(cuMemUnmap(va + off[i], sz[i]));
    for (int i = 0; i < N; i++)
        assert_int_equal(cuMemRelease(h[i]), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr base;
    size_t size;
    assert_int_equal(cuMemGetAddressRange(&base, &size, va + off[1]), CUDA_ERROR_NOT_FOUND);
    OK(cuMemGetInfo(&free1, &total));
    assert_int_equal(free1, free0);
    OK(cuMemAddressFree(va, off[N] + G2));
}

static void test_address_hint_is_honoured_when_free(void **state)
{
    (void)state;
    CUdeviceptr a, b;
    OK(cuMemAddressReserve(&a, 4 * MiB, 0, 0, 0));
    OK(cuMemAddressFree(a, 4 * MiB));
    OK(cuMemAddressReserve(&b, 4 * MiB, 0, a, 0));
    assert_int_equal(b, a);
    CUdeviceptr c;
    OK(cuMemAddressReserve(&c, 4 * MiB, 0, a, 0)); /* taken: placed elsewhere */
    assert_true(c != a);
    OK(cuMemAddressFree(b, 4 * MiB));
    OK(cuMemAddressFree(c, 4 * MiB));
    OK(cuMemAddressReserve(&a, 8 * MiB, 64 * MiB, 0, 0));
    assert_int_equal(a % (64 * MiB), 0);
    OK(cuMemAddressFree(a, 8 * MiB));
}

static void test_map_fault_injection(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    OK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    OK(cuMemCreate(&h, G2, &p, 0));
    OK(sim_faults_set("map:2"));
    OK(cuMemMap(va, G2, 0, h, 0));
    assert_int_equal(cuMemMap(va + G2, G2, 0, h, 0), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemMap(va + G2, G2, 0, h, 0)); /* only the 2nd map fails */
    OK(sim_faults_set(NULL));
    OK(cuMemUnmap(va, 4 * MiB));
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, 8 * MiB));
}

/* After fork, parent and child each create and map new memory: each must see only its own
 * (memory created after the fork never aliases across the two processes). */
static void test_memory_created_after_fork_is_private(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop();
    CUmemAccessDesc d = rw();
    int ready[2], done[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(done), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    if (pid == 0) {
        char c;
        /* Only the ends this process uses stay open, so a peer that dies gives EOF, not a hang. */
        close(ready[0]);
        close(done[1]);
        alarm(20);
        if (cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0) || cuMemCreate(&h, 2 * MiB, &p, 0) ||
            cuMemMap(va, 2 * MiB, 0, h, 0) || cuMemSetAccess(va, 2 * MiB, &d, 1))
            _exit(2);
        memset((void *)va, 'C', 2 * MiB);
        if (write(ready[1], "x", 1) != 1) _exit(3);
        if (read(done[0], &c, 1) != 1) _exit(4); /* the parent has written its memory by now */
        for (size_t i = 0; i < 2 * MiB; i += 4096)
            if (((char *)va)[i] != 'C') _exit(5);
        _exit(0);
    }
    close(ready[1]);
    close(done[0]);
    char c;
    if (read(ready[0], &c, 1) != 1) { /* the child has written its memory, or died */
        close(ready[0]);
        close(done[1]);
        int st;
        waitpid(pid, &st, 0);
        fail_msg("the child failed before writing its memory (status %d)", st);
    }
    OK(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
    OK(cuMemCreate(&h, 2 * MiB, &p, 0));
    OK(cuMemMap(va, 2 * MiB, 0, h, 0));
    OK(cuMemSetAccess(va, 2 * MiB, &d, 1));
    bool fresh = true;
    for (size_t i = 0; i < 2 * MiB; i += 4096)
        fresh = fresh && ((char *)va)[i] == 0;
    memset((void *)va, 'P', 2 * MiB);
    assert_int_equal(write(done[1], "x", 1), 1);
    close(done[1]);
    close(ready[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(fresh); /* the parent's new memory did not show the child's writes */
    for (size_t i = 0; i < 2 * MiB; i += 4096)
        assert_int_equal(((char *)va)[i], 'P');
    OK(cuMemUnmap(va, 2 * MiB));
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, 2 * MiB));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_granularity_is_2mib),
        cmocka_unit_test(test_one_handle_mapped_twice_aliases),
        cmocka_unit_test(test_unmapped_reserved_space_faults),
        cmocka_unit_test(test_invalid_vmm_calls_are_rejected),
        cmocka_unit_test(test_release_while_mapped_keeps_memory_until_unmap),
        cmocka_unit_test(test_pointer_queries_on_mapped_memory),
        cmocka_unit_test(test_many_mappings_released_in_any_order),
        cmocka_unit_test(test_address_hint_is_honoured_when_free),
        cmocka_unit_test(test_map_fault_injection),
        cmocka_unit_test(test_memory_created_after_fork_is_private),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
