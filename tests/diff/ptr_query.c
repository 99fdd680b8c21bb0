/* Finding 2: pointer queries answer for the allocation the program asked for — range start and
 * size, a buffer id per allocation (the same at every byte, new after a free and reuse), NOT
 * FOUND one past the end and after a free, the memory type — through cuPointerGetAttribute,
 * cuPointerGetAttributes, cudaPointerGetAttributes and cuMemGetAddressRange (dlsym and
 * cuGetProcAddress). Device, stream-ordered, pinned host, managed and pageable memory. */
#include "tests/diff/diff.h"

static __typeof__(&cuPointerGetAttribute) getattr;
static __typeof__(&cuPointerGetAttributes) getattrs;
static __typeof__(&cuMemGetAddressRange_v2) range, range_p;

static void one(const char *what, uintptr_t base, size_t n, uintptr_t at)
{
    printf("%s @ base+%zu:\n", what, (size_t)(at - base));
    CUdeviceptr b = 0;
    size_t sz = 0;
    CUresult r = range(&b, &sz, at);
    printf("  cuMemGetAddressRange: rc %d start %s size %zu\n", (int)r, rel(b, base, n), sz);
    b = 0, sz = 0;
    r = range_p(&b, &sz, at);
    printf("  cuMemGetAddressRange (cuGetProcAddress): rc %d start %s size %zu\n", (int)r,
           rel(b, base, n), sz);
    unsigned type = 0;
    r = getattr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, at);
    printf("  MEMORY_TYPE: rc %d %u\n", (int)r, r ? 0 : type);
    CUdeviceptr start = 0;
    r = getattr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, at);
    printf("  RANGE_START_ADDR: rc %d %s\n", (int)r, r ? "-" : rel(start, base, n));
    size_t rs = 0;
    r = getattr(&rs, CU_POINTER_ATTRIBUTE_RANGE_SIZE, at);
    printf("  RANGE_SIZE: rc %d %zu\n", (int)r, r ? 0 : rs);
    unsigned long long id = 0;
    r = getattr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, at);
    printf("  BUFFER_ID: rc %d %s\n", (int)r, r ? "-" : idlabel(id));
    CUdeviceptr dp = 0;
    r = getattr(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, at);
    printf("  DEVICE_POINTER: rc %d %s\n", (int)r, r ? "-" : rel(dp, base, n));
    int ipc = -1;
    r = getattr(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, at);
    printf("  IS_LEGACY_CUDA_IPC_CAPABLE: rc %d %d\n", (int)r, r ? -1 : ipc);
    CUmemoryPool mp = (CUmemoryPool)1;
    r = getattr(&mp, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, at);
    printf("  MEMPOOL_HANDLE: rc %d %s\n", (int)r, r ? "-" : mp ? "a pool" : "NULL");
    size_t ms = 0;
    void *mb = NULL;
    r = getattr(&ms, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, at);
    printf("  MAPPING_SIZE: rc %d %zu\n", (int)r, r ? 0 : ms);
    r = getattr(&mb, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, at);
    printf("  MAPPING_BASE_ADDR: rc %d %s\n", (int)r, r ? "-" : rel((uintptr_t)mb, base, n));
    unsigned long long blk = 0, ht = 9;
    r = getattr(&blk, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, at);
    printf("  MEMORY_BLOCK_ID: rc %d %s\n", (int)r, r ? "-" : idlabel(blk));
    r = getattr(&ht, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, at);
    printf("  ALLOWED_HANDLE_TYPES: rc %d %llu\n", (int)r, r ? 0ull : ht);
    unsigned acc = 0;
    r = getattr(&acc, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, at);
    printf("  ACCESS_FLAGS: rc %d %u\n", (int)r, r ? 0 : acc);
    void *hp = NULL;
    r = getattr(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, at);
    printf("  HOST_POINTER: rc %d %s\n", (int)r, r ? "-" : rel((uintptr_t)hp, base, n));
    int managed = -1, ordinal = -1, mapped = -1;
    unsigned long long id2 = 0;
    size_t rs2 = 0;
    CUdeviceptr st2 = 0;
    unsigned type2 = 99;
    CUpointer_attribute as[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_MAPPED,
                                CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
    void *ds[] = {&type2, &managed, &ordinal, &mapped, &id2, &rs2, &st2};
    r = getattrs(7, as, ds, at);
    printf("  cuPointerGetAttributes: rc %d type %u managed %d ordinal %d mapped %d id %s size "
           "%zu start %s\n",
           (int)r, type2, managed, ordinal, mapped, idlabel(id2), rs2, rel(st2, base, n));
    struct cudaPointerAttributes pa;
    memset(&pa, 0x55, sizeof pa);
    cudaError_t e = cudaPointerGetAttributes(&pa, (void *)at);
    printf("  cudaPointerGetAttributes: rc %d type %d device %d devptr %s hostptr %s\n", (int)e,
           (int)pa.type, pa.device, rel((uintptr_t)pa.devicePointer, base, n),
           rel((uintptr_t)pa.hostPointer, base, n));
    printf("  last error %d\n", (int)cudaGetLastError());
}

/* One past the end may be another allocation (the layout is the allocator's business): what
 * must hold is that no query answers for this one. */
static void past_end(const char *what, uintptr_t base, size_t n)
{
    uintptr_t at = base + n;
    unsigned long long own = 0, id = 0;
    getattr(&own, CU_POINTER_ATTRIBUTE_BUFFER_ID, base);
    printf("%s one past the end:\n", what);
    CUdeviceptr b = 0;
    size_t sz = 0;
    CUresult r = range(&b, &sz, at);
    printf("  cuMemGetAddressRange answers this allocation: %s\n", !r && b == base ? "yes" : "no");
    b = 0;
    r = getattr(&b, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, at);
    printf("  RANGE_START_ADDR is this allocation's: %s\n", !r && b == base ? "yes" : "no");
    r = getattr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, at);
    printf("  BUFFER_ID is this allocation's: %s\n", !r && id == own ? "yes" : "no");
    struct cudaPointerAttributes pa;
    cudaError_t e = cudaPointerGetAttributes(&pa, (void *)at);
    printf("  cudaPointerGetAttributes: rc %d\n", (int)e);
}

static void all(const char *what, uintptr_t p, size_t n)
{
    char w[96];
    snprintf(w, sizeof w, "%s start", what);
    one(w, p, n, p);
    snprintf(w, sizeof w, "%s last byte", what);
    one(w, p, n, p + n - 1);
    past_end(what, p, n);
}

int main(void)
{
    getattr = (__typeof__(getattr))drv_sym("cuPointerGetAttribute");
    getattrs = (__typeof__(getattrs))drv_proc("cuPointerGetAttributes");
    range = (__typeof__(range))drv_sym("cuMemGetAddressRange_v2");
    range_p = (__typeof__(range_p))drv_proc("cuMemGetAddressRange");
    void *a, *b, *c, *h, *m, *x;
    cudaMalloc(&a, 1000);
    all("cudaMalloc(1000)", (uintptr_t)a, 1000);
    cudaMalloc(&b, (size_t)3 << 20);
    all("cudaMalloc(3 MiB)", (uintptr_t)b, (size_t)3 << 20);
    one("cudaMalloc(3 MiB) second page", (uintptr_t)b, (size_t)3 << 20, (uintptr_t)b + (5u << 19));
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaMallocAsync(&c, 4096, s);
    all("cudaMallocAsync(4096)", (uintptr_t)c, 4096);
    cudaFreeAsync(c, s);
    cudaStreamSynchronize(s);
    one("cudaMallocAsync(4096) after cudaFreeAsync", (uintptr_t)c, 4096, (uintptr_t)c);
    cudaMallocHost(&h, 3000);
    all("cudaMallocHost(3000)", (uintptr_t)h, 3000);
    one("cudaMallocHost(3000) interior", (uintptr_t)h, 3000, (uintptr_t)h + 1500);
    cudaMallocManaged(&m, 5000, cudaMemAttachGlobal);
    all("cudaMallocManaged(5000)", (uintptr_t)m, 5000);
    x = malloc(100);
    one("malloc(100)", (uintptr_t)x, 100, (uintptr_t)x);
    uintptr_t olda = (uintptr_t)a;
    cudaFree(a);
    one("cudaMalloc(1000) after cudaFree", olda, 1000, olda);
    cudaFreeHost(h);
    one("cudaMallocHost(3000) after cudaFreeHost", (uintptr_t)h, 3000, (uintptr_t)h);
    /* the same size again: a cache hit under gpumem, a fresh buffer id either way */
    cudaMalloc(&a, 1000);
    all("cudaMalloc(1000) again", (uintptr_t)a, 1000);
    cudaFree(a);
    cudaFree(b);
    cudaFree(m);
    cudaStreamDestroy(s);
    free(x);
    return 0;
}
