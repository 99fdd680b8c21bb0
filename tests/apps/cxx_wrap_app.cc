/* cxx_wrap_app — a C++ program that allocates through CUDA's header templates (cudaMalloc<T>
 * and cudaMallocAsync<T> from cuda_runtime.h), compiled with optimisation so that they are
 * inlined into the program's helper. The call site a person needs is the helper's line and its
 * caller: alloc_floats < make_a and alloc_floats < make_b are two sites, never one site in
 * cuda_runtime.h. make_b's block is left alive at exit (a leak, for `gpumem leaks`). */
#include <cuda_runtime.h>
#include <stdio.h>

__attribute__((noinline)) static float *alloc_floats(size_t n)
{
    float *p = nullptr;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) return nullptr; /* the site */
    return p;
}

/* each keeps its frame (no tail call: it stores the block after the call) */
static float *volatile last;
__attribute__((noinline)) static float *make_a() { return last = alloc_floats(1u << 20); }
__attribute__((noinline)) static float *make_b() { return last = alloc_floats(2u << 20); }

int main()
{
    float *a = make_a(), *b = make_b(), *c = nullptr;
    if (!a || !b || cudaMallocAsync(&c, 3u << 20, 0) != cudaSuccess) { /* the async site */
        fprintf(stderr, "cxx_wrap_app: allocation failed\n");
        return 1;
    }
    cudaFree(a);
    cudaFreeAsync(c, 0);
    cudaDeviceSynchronize();
    printf("b=%p\n", (void *)b); /* b stays alive: a leak at make_b */
    return 0;
}
