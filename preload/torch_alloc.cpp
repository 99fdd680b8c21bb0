// torch_alloc.cpp — gpumem as PyTorch's CUDA allocator, failing the way PyTorch's own allocator
// fails (libgpumem_torch.so, beside torch_trace.cpp).
//
// PyTorch's CUDAPluggableAllocator hands the pointer its malloc function returns to the tensor
// without a check: gpumem_torch_malloc's NULL (an out-of-memory) became a tensor with no memory
// and no exception, which failed later, far from the allocation. Here the allocator is made in
// C++ with a malloc that throws c10::OutOfMemoryError (Python: torch.OutOfMemoryError) when
// gpumem refuses a non-zero size, with gpumem's words for it (gpumem_torch_oom_message: what was
// asked, allocated, reserved, the limit). The recording holds the OOM as before: gpumem's
// allocator wrote it when it refused. The same allocator gets the hooks the Python class cannot
// set, each PyTorch's own way in, whatever Python name the program calls it by:
//   - set_memory_fraction_fn: set_per_process_memory_fraction caps gpumem's allocator
//     (gpumem_torch_memory_fraction: fraction x the device's total, recorded);
//   - set_record_stream_fn: Tensor.record_stream names the stream to gpumem
//     (gpumem_record_stream), whose free of the block then waits for that stream's work;
//   - set_reset_fn: PyTorch's emptyCache (torch.cuda.empty_cache, torch._C._cuda_emptyCache)
//     empties gpumem's cache (gpumem_empty_cache, recorded as event 36).
// And PyTorch's memory statistics, which its CUDAPluggableAllocator refuses (getDeviceStats,
// resetPeakStats and resetAccumulatedStats threw "does not yet support", so memory_allocated(),
// max_memory_reserved(), memory_stats(), memory_summary(), reset_peak_memory_stats() ... raised
// in every training loop that logs them): the allocator here is a subclass that answers them
// from gpumem's allocator (gpumem_torch_stats, preload/gpumem.h says what each figure is), and
// PyTorch's own Python code does the rest. Only the aggregate ("all") figures: gpumem's pools are
// not PyTorch's small and large pools, whose rows stay 0.
//
// gpumem.use_as_allocator (preload/python/gpumem/__init__.py) calls gpumem_torch_allocator_use
// when this library is there and was built for the running torch; otherwise it warns once and
// plugs gpumem_torch_malloc in through torch.cuda.memory.CUDAPluggableAllocator, as before.
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <c10/util/Exception.h>

#include <cstdio>
#include <exception>
#include <sys/types.h>

// libgpumem.so's (preload/core.c), found in the process: this library is loaded only where it is
extern "C" void *gpumem_torch_malloc(ssize_t size, int device, void *stream);
extern "C" void gpumem_torch_free(void *ptr, ssize_t size, int device, void *stream);
extern "C" size_t gpumem_torch_oom_message(char *buf, size_t cap);
extern "C" void gpumem_torch_memory_fraction(double fraction, int device);
extern "C" int gpumem_record_stream(const void *ptr, struct CUstream_st *stream);
extern "C" void gpumem_empty_cache(void);
#include "gpumem.h" // gpumem_torch_stats and its struct (beside this file)

namespace {

void *malloc_or_raise(size_t size, int device, cudaStream_t stream)
{
    void *p = gpumem_torch_malloc(static_cast<ssize_t>(size), device, stream);
    if (!p && size > 0) {
        char msg[1024];
        gpumem_torch_oom_message(msg, sizeof msg);
        TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    }
    return p;
}

void free_block(void *p, size_t size, int device, cudaStream_t stream)
{
    gpumem_torch_free(p, static_cast<ssize_t>(size), device, stream);
}

// Tensor.record_stream(s): a pointer gpumem does not own (not a tensor of this allocator's) is
// left alone, as PyTorch's own allocator leaves it
void record_stream(void *p, cudaStream_t stream)
{
    gpumem_record_stream(p, reinterpret_cast<struct CUstream_st *>(stream));
}

namespace pa = torch::cuda::CUDAPluggableAllocator;
namespace cda = c10::CachingDeviceAllocator;

// PyTorch's Stat from gpumem's: the aggregate row ("all") of a StatArray
void put(cda::StatArray &arr, const gpumem_torch_stat_t &s)
{
    auto &a = arr[static_cast<size_t>(cda::StatType::AGGREGATE)];
    a.current = s.current;
    a.peak = s.peak;
    a.allocated = s.allocated;
    a.freed = s.freed;
}

struct GpumemAllocator final : pa::CUDAPluggableAllocator {
    GpumemAllocator() : pa::CUDAPluggableAllocator(malloc_or_raise, free_block) {}

    cda::DeviceStats getDeviceStats(c10::DeviceIndex device) override
    {
        gpumem_torch_stats_t g;
        TORCH_CHECK(gpumem_torch_stats(device, &g, sizeof g) == 0,
                    "gpumem: no memory statistics for device ", static_cast<int>(device),
                    ": gpumem's allocator does not serve PyTorch's tensors here (GPUMEM_MODE=record "
                    "or off: the driver serves each); run in mode replace (the default)");
        cda::DeviceStats st;
        put(st.allocated_bytes, g.allocated_bytes);
        put(st.requested_bytes, g.requested_bytes);
        put(st.allocation, g.allocation);
        put(st.reserved_bytes, g.reserved_bytes);
        put(st.segment, g.segment);
        put(st.active_bytes, g.active_bytes);
        put(st.active, g.active);
        put(st.inactive_split_bytes, g.inactive_split_bytes);
        put(st.inactive_split, g.inactive_split);
        st.num_alloc_retries = g.num_alloc_retries;
        st.num_ooms = g.num_ooms;
        st.num_device_alloc = g.num_device_alloc;
        st.num_device_free = g.num_device_free;
        st.num_sync_all_streams = g.num_sync_all_streams;
        st.max_split_size = g.max_split_size;
        return st;
    }

    // get_per_process_memory_fraction (PyTorch's pluggable allocator refuses it too)
    double getMemoryFraction(c10::DeviceIndex device) override
    {
        return gpumem_torch_get_memory_fraction(device);
    }

    void resetPeakStats(c10::DeviceIndex device) override { gpumem_torch_reset_peak_stats(device); }

    void resetAccumulatedStats(c10::DeviceIndex device) override
    {
        gpumem_torch_reset_accumulated_stats(device);
    }
};

} // namespace

// 1: gpumem is PyTorch's CUDA allocator from now on; 0: PyTorch refused (its allocator was
// already used, ...), its words in err.
extern "C" __attribute__((visibility("default"))) int gpumem_torch_allocator_use(char *err, size_t cap)
{
    try {
        auto a = std::make_shared<GpumemAllocator>();
        a->set_memory_fraction_fn(gpumem_torch_memory_fraction);
        a->set_record_stream_fn(record_stream);
        a->set_reset_fn(gpumem_empty_cache);
        a->init(0); // as createCustomAllocator does; no init_fn is set, so the count goes nowhere
        pa::changeCurrentAllocator(a);
    } catch (const std::exception &e) {
        std::snprintf(err, cap, "%s", e.what());
        return 0;
    }
    return 1;
}
