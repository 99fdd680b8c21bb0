/*
 * libgpumem_caller.so — a gpumem object that calls libgpumem.so's API the way libgpumem_torch.so
 * does (PyTorch's allocator shim): its frames are gpumem's, so a recorded stack leaves them out
 * like libgpumem.so's (tests/apps/stack_top_app.c, tests/integration/stack_top.sh). The names
 * stay undefined here: the preloaded libgpumem.so provides them.
 */
#include <stddef.h>
#include <sys/types.h>

void *gpumem_torch_malloc(ssize_t size, int device, void *stream);
void gpumem_torch_free(void *ptr, ssize_t size, int device, void *stream);
int gpumem_record_stream(const void *ptr, void *stream);

static volatile int sink; /* written after each call: no tail calls, each function a frame */

__attribute__((visibility("default"), noinline)) void *gpumem_caller_malloc(ssize_t size, int device, void *stream)
{
    void *p = gpumem_torch_malloc(size, device, stream);
    sink++;
    return p;
}

__attribute__((visibility("default"), noinline)) void gpumem_caller_free(void *p, ssize_t size, int device, void *stream)
{
    gpumem_torch_free(p, size, device, stream);
    sink++;
}

__attribute__((visibility("default"), noinline)) int gpumem_caller_record_stream(const void *p, void *stream)
{
    int r = gpumem_record_stream(p, stream);
    sink++;
    return r;
}
