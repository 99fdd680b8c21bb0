// torch_trace.cpp — libgpumem_torch.so: PyTorch's allocator trace entries, handed to libgpumem as
// PyTorch records them (preload/torch_trace.c says why and what is kept).
//
// C++ because the interface is: c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker
// takes a std::function of a TraceEntry. Built against the installed wheel's headers and linked
// with its libc10_cuda.so (preload/module.mk: only where PyTorch and a C++ compiler are), and
// loaded by preload/python/gpumem/_torch.py once torch has initialised CUDA (the native
// allocator attaches trackers to the devices it has set up). gpumem_torch_trace_entry is
// libgpumem.so's: the library is loaded only where libgpumem.so is (LD_PRELOAD), and a process
// without it fails the load, which _torch.py reports and goes on without exact placement.
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdint>
#include <exception>

extern "C" void gpumem_torch_trace_entry(int action, int device, uint64_t addr, uint64_t size, uint64_t stream,
                                         uint64_t pool_a, uint64_t pool_b);
#ifdef GM_TORCH_PREHOOK
void gm_torch_prehook_register(); // torch_prehook.cpp (built where Python's headers are)
#endif

// The PyTorch version whose headers this was built with (torch.__version__ of the wheel): _torch.py
// attaches the tracker only to that version, since TraceEntry's layout is that version's.
extern "C" __attribute__((visibility("default"))) const char *gpumem_torch_trace_built_for(void)
{
    return GM_TORCH_BUILT_FOR;
}

// 1: attached; 0: PyTorch refused (its exception's text is dropped: _torch.py names the failure).
extern "C" __attribute__((visibility("default"))) int gpumem_torch_trace_attach(void)
{
    try {
        c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(
            [](const c10::CachingDeviceAllocator::TraceEntry &e) {
                gpumem_torch_trace_entry(static_cast<int>(e.action_), static_cast<int>(e.device_),
                                         static_cast<uint64_t>(e.addr_), static_cast<uint64_t>(e.size_),
                                         static_cast<uint64_t>(reinterpret_cast<uintptr_t>(e.stream_)),
                                         static_cast<uint64_t>(e.mempool_.first),
                                         static_cast<uint64_t>(e.mempool_.second));
            });
    } catch (const std::exception &) {
        return 0;
    }
#ifdef GM_TORCH_PREHOOK
    gm_torch_prehook_register(); // the module hooks' backward pre-hooks in C++ from now on
#endif
    return 1;
}
