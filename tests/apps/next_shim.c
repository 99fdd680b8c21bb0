/*
 * next_shim.so — a preloaded wrapper of cudaMalloc of the most common kind: it finds "the
 * next" cudaMalloc with dlsym(RTLD_NEXT, ...) and counts its calls. Preloaded before
 * libgpumem.so it proves gpumem's exported dlsym keeps RTLD_NEXT relative to the *caller*
 * (this shim): the next cudaMalloc must be gpumem's, not the runtime's one after gpumem.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>

static atomic_int calls;

cudaError_t cudaMalloc(void **p, size_t size)
{
    typedef cudaError_t (*fn)(void **, size_t);
    static _Atomic(fn) next_fn;
    fn next = atomic_load(&next_fn);
    if (!next) {
        next = (fn)dlsym(RTLD_NEXT, "cudaMalloc");
        atomic_store(&next_fn, next);
    }
    atomic_fetch_add(&calls, 1);
    return next ? next(p, size) : cudaErrorInitializationError;
}

__attribute__((destructor)) static void report(void)
{
    fprintf(stderr, "next_shim: cudaMalloc calls %d\n", atomic_load(&calls));
}
