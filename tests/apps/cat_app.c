/* cat_app — a training loop planted in plain CUDA calls, with no names and no NVTX ranges, for
 * the categories gpumem infers from lifetimes alone (tests/integration/categories_app.sh).
 *
 * It allocates what a trainer does, in the order a trainer does, and prints the category of
 * every device allocation it makes, in allocation order ("expect INDEX CATEGORY"):
 *   - parameters, made before the loop and kept;
 *   - per step, a forward: the input batch, per layer an activation (kept for the backward) and
 *     a temporary freed at once, a library's workspace made on the first step's first layer and
 *     kept (its size is no parameter's), then the logits and probabilities (the largest);
 *   - a backward: the logits' gradient, the logits and probabilities freed, then per layer in
 *     reverse a gradient tensor (a temporary), the layer's activation freed, in the first step
 *     each parameter's gradient made at its layer and kept, the input freed last;
 *   - an update: per parameter a scratch buffer made and freed, and in the first step the two
 *     optimizer-state buffers (Adam's) made and kept;
 *   - a planted growth: one small buffer kept per step ("other");
 *   - teardown: everything freed.
 *   - with an argument "eval": after the loop, one evaluation forward on a larger batch
 *     (no backward: each layer's output freed by the next, the output kept to the teardown),
 *     what no step repeats and is made after the steps: temporaries;
 *   - with an argument "next": a PyTorch loop's order (`x = next batch`, then
 *     `zero_grad(set_to_none=True)`): each step's input is made before the last step's is
 *     dropped, then the gradients of the last backward are freed, and the backward makes them
 *     anew; the last input and gradients are held after the loop (an activation, gradients);
 *   - with an argument "copies": the backward begins with a copy of the last layer's parameter
 *     (mixed precision's fp32 copy of a bf16 weight, a gathered shard), made before the
 *     logits' gradient and freed once that layer's backward is done: a temporary;
 *   - with an argument "square": the logits and probabilities have the last parameter's size
 *     (a square layer's output), made after the forward's last free and freed first in the
 *     backward: activations, not copies.
 * Arguments: the number of steps (default 4), then any of "eval", "next", "copies", "square". */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define L 4     /* layers: one parameter each */
#define MAXN 4096

static void *ptrs[MAXN];
static int nptr;

static void *alloc(size_t bytes, const char *category)
{
    void *p = NULL;
    if (nptr >= MAXN || cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "cat_app: cudaMalloc(%zu) failed\n", bytes);
        exit(1);
    }
    printf("expect %d %s\n", nptr, category);
    ptrs[nptr++] = p;
    return p;
}

static void release(void *p)
{
    if (cudaFree(p) != cudaSuccess) {
        fprintf(stderr, "cat_app: cudaFree failed\n");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 4;
    int eval = 0, next = 0, copies = 0, square = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "eval")) eval = 1;
        else if (!strcmp(argv[i], "next")) next = 1;
        else if (!strcmp(argv[i], "copies")) copies = 1;
        else if (!strcmp(argv[i], "square")) square = 1;
        else return 2;
    }
    if (steps < 1 || steps > 50) return 2;
    const size_t act = 256 << 10, tmp = 512 << 10, big = 4 << 20, batch = 16 << 10;
    size_t psize[L];
    void *param[L], *grad[L] = {0}, *m[L] = {0}, *v[L] = {0}, *work = NULL;
    for (int l = 0; l < L; l++) {
        psize[l] = (size_t)(64 + 32 * l) << 10;
        param[l] = alloc(psize[l], "parameters");
    }
    void *grown[64], *input = NULL;
    for (int s = 0; s < steps; s++) {
        /* forward */
        void *last = input;
        input = alloc(batch, "activations");
        if (next) { /* the last input dropped, the gradients set to none */
            if (last) release(last);
            for (int l = 0; l < L; l++)
                if (grad[l]) release(grad[l]), grad[l] = NULL;
        }
        void *a[L];
        for (int l = 0; l < L; l++) {
            if (!work) work = alloc(3 << 20, "workspaces"); /* the library's, on its first call */
            void *t = alloc(tmp, "temporaries");
            a[l] = alloc(act, "activations");
            release(t);
        }
        const size_t out = square ? psize[L - 1] : big;
        void *logits = alloc(out, "activations"), *probs = alloc(out, "activations");
        /* backward */
        void *copy = copies ? alloc(psize[L - 1], "temporaries") : NULL;
        void *d = alloc(big, "temporaries");
        release(probs);
        release(logits);
        for (int l = L - 1; l >= 0; l--) {
            void *nd = alloc(act, "temporaries");
            if (!grad[l]) grad[l] = alloc(psize[l], "gradients");
            release(a[l]);
            release(d);
            d = nd;
            if (copy) release(copy), copy = NULL;
        }
        release(d);
        if (!next) release(input), input = NULL;
        /* update */
        for (int l = 0; l < L; l++) {
            if (!m[l]) {
                m[l] = alloc(psize[l], "optimizer_state");
                v[l] = alloc(psize[l], "optimizer_state");
            }
            void *scratch = alloc(psize[l], "temporaries");
            release(scratch);
        }
        grown[s] = alloc(8 << 10, "other"); /* planted growth: kept every step */
    }
    void *out = NULL;
    if (eval) {
        void *h = alloc(4 * batch, "temporaries");
        for (int l = 0; l < L; l++) {
            void *o = alloc(2 * act, "temporaries");
            release(h);
            h = o;
        }
        out = alloc(2 * big, "temporaries");
        release(h);
    }
    for (int s = 0; s < steps; s++)
        release(grown[s]);
    for (int l = 0; l < L; l++) {
        release(m[l]), release(v[l]), release(grad[l]), release(param[l]);
    }
    release(work);
    if (out) release(out);
    if (input) release(input);
    printf("done %d allocations\n", nptr);
    return 0;
}
