/* Driver entry points and the thread's context: a thread whose first CUDA call is
 * cudaGetDriverEntryPointByVersion, then driver calls through what it returned. Does the query
 * make the primary context current on the thread, as other runtime calls do? On an H200 the
 * test program rt_app failed its "driver entry point alloc" on a thread that had made no other
 * runtime call, with and without gpumem (tests/gpu/preload_gpu.sh); this program asks the GPU
 * (tests/gpu/graphs_parity.sh) and holds the virtual GPU and gpumem to its answer.
 *  - thread 1: the entry points first; the current context; cuMemAlloc through the entry point;
 *    then cudaFree(NULL), the usual way to initialize a thread, and the same again;
 *  - thread 2: cudaMalloc first, then cuMemAlloc through the entry point;
 *  - a versioned name ("cuMemAlloc_v2") and a name newer than the version asked for.
 */
#include <pthread.h>

#include "tests/diff/diff.h"

static void entry(const char *name, int version, void **fn)
{
    enum cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
    *fn = NULL;
    char what[96];
    snprintf(what, sizeof what, "entry point %s at %d", name, version);
    rt(what, cudaGetDriverEntryPointByVersion(name, fn, version, cudaEnableDefault, &st));
    printf("  status %d, function %s\n", (int)st, *fn ? "set" : "NULL");
}

/* The three driver functions drive() calls, found through entry points in turn. */
struct entries {
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*cur)(CUcontext *);
};
static struct entries entries(void)
{
    struct entries e;
    entry("cuMemAlloc", 13000, (void **)&e.alloc);
    entry("cuMemFree", 13000, (void **)&e.free);
    entry("cuCtxGetCurrent", 13000, (void **)&e.cur);
    return e;
}

/* The current context, a 1 MiB cuMemAlloc and its free, all through entry points. */
static void drive(const char *when, const struct entries *e)
{
    CUcontext c = NULL;
    printf("-- %s\n", when);
    if (e->cur) {
        cu("cuCtxGetCurrent", e->cur(&c));
        printf("  current context: %s\n", c ? "set" : "NULL");
    }
    if (!e->alloc || !e->free) return;
    CUdeviceptr d = 0;
    CUresult r = e->alloc(&d, 1 << 20);
    cu("cuMemAlloc(1 MiB)", r);
    printf("  out: %s\n", d ? "set" : "0");
    if (r == CUDA_SUCCESS) cu("cuMemFree", e->free(d));
}

static void *first_entry(void *arg)
{
    (void)arg;
    struct entries e = entries();
    drive("thread 1, after the entry points only", &e);
    rt("cudaFree(NULL)", cudaFree(NULL));
    drive("thread 1, after cudaFree(NULL)", &e);
    return NULL;
}

static void *first_malloc(void *arg)
{
    (void)arg;
    void *p = NULL;
    rt("thread 2: cudaMalloc(4096)", cudaMalloc(&p, 4096));
    struct entries e = entries();
    drive("thread 2, after a cudaMalloc", &e);
    rt("cudaFree", cudaFree(p));
    return NULL;
}

int main(void)
{
    pthread_t t;
    pthread_create(&t, NULL, first_entry, NULL);
    pthread_join(t, NULL);
    pthread_create(&t, NULL, first_malloc, NULL);
    pthread_join(t, NULL);
    printf("-- names\n");
    void *fn = NULL;
    entry("cuMemAlloc_v2", 13000, &fn);
    entry("cuMemCreate", 10000, &fn);
    entry("cuNoSuchFunction", 13000, &fn);
    return 0;
}
