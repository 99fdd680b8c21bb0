/* alloc_torch_bench.cpp — gpumem's allocator beside PyTorch's CUDACachingAllocator, in one
 * process, on the virtual GPU (`make bench` runs it through tests/bench/alloc_torch_bench.sh,
 * which skips without PyTorch).
 *
 * PyTorch's side is the installed wheel's libc10_cuda.so itself:
 * c10::cuda::CUDACachingAllocator::raw_alloc / raw_delete (the calls a framework makes; each
 * looks up the current device and stream as PyTorch's own allocations do). Its CUDA runtime is
 * the virtual one (build/sim/torch-env preloads it). gpumem's side is alloc/ (alloc_malloc,
 * alloc_free_async on the legacy stream: the block goes back to that stream's pool, as PyTorch's
 * raw_delete does without record_stream) over a backend of driver calls into the same virtual
 * driver (build/sim/libcuda.so.1). Both allocators serve the same size sequences:
 *
 *   alloc.torch_pair_ns          PyTorch: median ns of one raw_alloc + raw_delete pair served from
 *                                its cache (batches of 1,000 over the log-uniform 512 B – 4 MiB
 *                                sizes of alloc_bench.c)
 *   alloc.gpumem_pair_ns         gpumem, the same sizes, batches interleaved with PyTorch's
 *   alloc.pair_vs_torch          gpumem's over PyTorch's (goal: at most 0.5)
 *   alloc.replay_vs_torch        the synthetic GPT-2 trace (alloc_trace_synth "fixed", 20 steps)
 *                                end to end, each allocator fresh: gpumem's best time over
 *                                PyTorch's best (5 runs each, alternating)
 *   alloc.replay_vs_torch.jitter the same on the jittered trace
 *   alloc.replay_vs_torch_with_driver[.jitter]  the same with each replay's simulated driver time
 *                                added (what the driver calls would cost on a GPU, below)
 *   alloc.driver_calls.<torch|gpumem>.<gpt2|jitter>   driver calls during one replay (the virtual
 *                                driver's counters: cuMemAlloc/Free, cuMemCreate/Map/SetAccess/
 *                                Unmap/Release, address reserve/free, events, synchronizations)
 *   alloc.driver_us.<torch|gpumem>.<gpt2|jitter>      what those calls would cost a GPU, in
 *                                simulated µs (sim/README.md, "Cost model")
 *   alloc.peak_reserved_gib.<torch|gpumem>.<gpt2|jitter>  each allocator's peak reserved bytes
 *   alloc.stall_ms_per_step.<preset>  issue 41: the jittered trace with queued work (below): the
 *                                simulated ms per training step the launching thread spends in
 *                                the synchronizations the allocator makes (cuCtxSynchronize,
 *                                cuStreamSynchronize, cuEventSynchronize, with the time they wait
 *                                for the queue to drain). <preset>: gpumem; pytorch (PyTorch's
 *                                allocator, default configuration); pytorch-expandable
 *   alloc.stall_syncs_per_1k_allocs.<preset>  those synchronizations per 1,000 allocations
 *   alloc.queued_util.<preset>   peak allocated / peak reserved bytes in that run (what the
 *                                stalls would have bought: the trade-off)
 *
 * Queued work: each allocation is followed by a "kernel", an event recorded on the stream that
 * completes kQueueUs simulated µs after its record (GPUMEM_SIM_EVENT_DELAY's timed form), so
 * the device always has that much work queued behind the launching thread; at each step's end
 * the program synchronizes once (a loss.item()), which is not counted: it is the program's. The
 * simulated clock advances only by the driver calls' costs (sim/README.md, "Cost model").
 *
 * argv[1]: a label for PyTorch's configuration ("" for the default, e.g. "expandable" when the
 * script sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); a non-empty label is appended to
 * the torch figures' names (alloc.pair_vs_torch_expandable ...). Per-kind driver calls go to
 * stderr. */
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/PeerToPeerAccess.h>
#include <cuda.h>

#include "alloc/alloc.h"
#include "sim/sim.h"

namespace
{

namespace torch_alloc = c10::cuda::CUDACachingAllocator;

constexpr int kSizes = 4096;
constexpr int kBatch = 1000;
constexpr int kBatches = 41;
std::vector<size_t> g_sizes(kSizes);
CUdevice g_dev = 0;

double now_ns()
{
    return (double)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

uint64_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 17;
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

[[noreturn]] void die(const char *what)
{
    std::fprintf(stderr, "alloc_torch_bench: %s\n", what);
    std::exit(1);
}

/* ---- gpumem's backend: driver calls into the virtual GPU ----------------------------------- */

int be_code(CUresult r)
{
    if (r == CUDA_SUCCESS) return ALLOC_BE_OK;
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return ALLOC_BE_OOM;
    if (r == CUDA_ERROR_NOT_READY) return ALLOC_BE_NOT_READY;
    return 1000 + (int)r;
}

CUmemAllocationProp vmm_prop()
{
    CUmemAllocationProp p;
    std::memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = g_dev;
    return p;
}

int b_reserve(void *, size_t size, size_t align, uint64_t *addr)
{
    CUdeviceptr p = 0;
    int rc = be_code(cuMemAddressReserve(&p, size, align, 0, 0));
    *addr = p;
    return rc;
}
int b_free_range(void *, uint64_t addr, size_t size)
{
    return be_code(cuMemAddressFree(addr, size));
}
int b_create(void *, size_t size, uint64_t *h)
{
    CUmemAllocationProp p = vmm_prop();
    CUmemGenericAllocationHandle hh = 0;
    int rc = be_code(cuMemCreate(&hh, size, &p, 0));
    *h = hh;
    return rc;
}
int b_release(void *, uint64_t h)
{
    return be_code(cuMemRelease(h));
}
int b_map(void *, uint64_t addr, size_t size, uint64_t h)
{
    return be_code(cuMemMap(addr, size, 0, h, 0));
}
int b_set_access(void *, uint64_t addr, size_t size)
{
    CUmemAccessDesc d;
    std::memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = g_dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return be_code(cuMemSetAccess(addr, size, &d, 1));
}
int b_unmap(void *, uint64_t addr, size_t size)
{
    return be_code(cuMemUnmap(addr, size));
}
size_t b_granularity(void *)
{
    CUmemAllocationProp p = vmm_prop();
    size_t g = 0;
    return cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS
               ? g
               : 0;
}
int b_seg_alloc(void *, size_t size, uint64_t *addr)
{
    CUdeviceptr p = 0;
    int rc = be_code(cuMemAlloc(&p, size));
    *addr = p;
    return rc;
}
int b_seg_free(void *, uint64_t addr, size_t)
{
    return be_code(cuMemFree(addr));
}
int b_event_create(void *, void **ev)
{
    CUevent e = nullptr;
    int rc = be_code(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    *ev = e;
    return rc;
}
int b_event_record(void *, void *ev, uintptr_t s)
{
    return be_code(cuEventRecord((CUevent)ev, (CUstream)s));
}
int b_event_query(void *, void *ev)
{
    return be_code(cuEventQuery((CUevent)ev));
}
int b_event_destroy(void *, void *ev)
{
    return be_code(cuEventDestroy((CUevent)ev));
}
int b_sync(void *)
{
    return be_code(cuCtxSynchronize());
}
int b_mem_info(void *, size_t *f, size_t *t)
{
    return be_code(cuMemGetInfo(f, t));
}

alloc_backend_t driver_backend()
{
    alloc_backend_t b;
    std::memset(&b, 0, sizeof(b));
    b.reserve = b_reserve;
    b.free_range = b_free_range;
    b.create = b_create;
    b.release = b_release;
    b.map = b_map;
    b.set_access = b_set_access;
    b.unmap = b_unmap;
    b.granularity = b_granularity;
    b.seg_alloc = b_seg_alloc;
    b.seg_free = b_seg_free;
    b.event_create = b_event_create;
    b.event_record = b_event_record;
    b.event_query = b_event_query;
    b.event_destroy = b_event_destroy;
    b.synchronize = b_sync;
    b.mem_info = b_mem_info;
    return b;
}

alloc_t *gpumem_new()
{
    static alloc_backend_t be = driver_backend();
    alloc_config_t cfg;
    alloc_config_preset(&cfg, "gpumem");
    alloc_t *a = nullptr;
    if (alloc_create(&be, &cfg, &a))
        die("cannot create gpumem's allocator over the virtual driver");
    return a;
}

/* ---- pairs ---------------------------------------------------------------------------------- */

double batch_gpumem(alloc_t *a, size_t *pos)
{
    size_t j = *pos;
    double t0 = now_ns();
    for (int i = 0; i < kBatch; i++) {
        uint64_t p;
        if (alloc_malloc(a, g_sizes[j], 0, &p) || alloc_free_async(a, p, 0))
            die("gpumem: allocation failed");
        j = (j + 1) & (kSizes - 1);
    }
    double t = (now_ns() - t0) / kBatch;
    *pos = j;
    return t;
}

double batch_torch(size_t *pos)
{
    size_t j = *pos;
    double t0 = now_ns();
    for (int i = 0; i < kBatch; i++) {
        void *p = torch_alloc::raw_alloc(g_sizes[j]);
        torch_alloc::raw_delete(p);
        j = (j + 1) & (kSizes - 1);
    }
    double t = (now_ns() - t0) / kBatch;
    *pos = j;
    return t;
}

/* ---- replays -------------------------------------------------------------------------------- */

/* A trace with each allocation's id turned into a dense slot, so the replay loops hold only the
 * allocators' calls and an array index (no hash lookups in the timed part). */
struct trace_t {
    std::vector<alloc_trace_event_t> ev;
    std::vector<uint32_t> slot;
    std::vector<bool> step_end; /* the last event of a training step */
    size_t nslots = 0;
    size_t steps = 0;
};

trace_t load_trace(const char *name)
{
    alloc_trace_event_t *ev;
    size_t n;
    if (alloc_trace_synth(name, 0, 1, &ev, &n)) die("cannot build the synthetic trace");
    trace_t t;
    t.ev.assign(ev, ev + n);
    std::free(ev);
    t.slot.resize(n);
    /* a step ends with the gradient norm's scratch buffer: the one allocation freed at once */
    t.step_end.assign(n, false);
    for (size_t i = 0; i + 1 < n; i++)
        if (t.ev[i].kind == ALLOC_TR_ALLOC && t.ev[i + 1].kind == ALLOC_TR_FREE &&
            t.ev[i + 1].id == t.ev[i].id) {
            t.step_end[i + 1] = true;
            t.steps++;
        }
    std::unordered_map<uint64_t, uint32_t> live;
    std::vector<uint32_t> spare;
    for (size_t i = 0; i < n; i++) {
        const alloc_trace_event_t &e = t.ev[i];
        if (e.kind == ALLOC_TR_ALLOC) {
            uint32_t s;
            if (spare.empty()) {
                s = (uint32_t)t.nslots++;
            } else {
                s = spare.back();
                spare.pop_back();
            }
            live[e.id] = s;
            t.slot[i] = s;
        } else if (e.kind == ALLOC_TR_FREE || e.kind == ALLOC_TR_FREE_ASYNC) {
            auto it = live.find(e.id);
            if (it == live.end()) die("the trace frees an id it never allocated");
            t.slot[i] = it->second;
            spare.push_back(it->second);
            live.erase(it);
        } else if (e.kind != ALLOC_TR_EMPTY_CACHE) {
            die("the synthetic trace has an event kind this bench does not replay");
        }
    }
    return t;
}

struct replay_t {
    double seconds;
    uint64_t driver_calls;
    double driver_us;
    size_t peak_reserved;
    sim_stats per_op;
};

void driver_counts(replay_t *r)
{
    sim_stats_get(&r->per_op);
    r->driver_calls = 0;
    for (int k = 0; k < SIM_OP_COUNT; k++)
        r->driver_calls += r->per_op.op[k].calls;
    r->driver_us = r->per_op.total_us;
}

/* PyTorch's allocator after a replay: every block still held freed, its cache emptied. */
static void torch_give_back(const std::vector<void *> &ptr)
{
    for (void *p : ptr)
        if (p) torch_alloc::raw_delete(p);
    torch_alloc::emptyCache();
}

replay_t replay_torch(const trace_t &t)
{
    std::vector<void *> ptr(t.nslots, nullptr);
    torch_alloc::emptyCache();
    torch_alloc::resetPeakStats(0);
    sim_stats_reset();
    replay_t r{};
    double t0 = now_ns();
    for (size_t i = 0; i < t.ev.size(); i++) {
        const alloc_trace_event_t &e = t.ev[i];
        switch (e.kind) {
        case ALLOC_TR_ALLOC:
            ptr[t.slot[i]] = torch_alloc::raw_alloc(e.size);
            break;
        case ALLOC_TR_FREE:
        case ALLOC_TR_FREE_ASYNC:
            torch_alloc::raw_delete(ptr[t.slot[i]]);
            ptr[t.slot[i]] = nullptr;
            break;
        default:
            torch_alloc::emptyCache();
        }
    }
    r.seconds = (now_ns() - t0) / 1e9;
    driver_counts(&r);
    auto st = torch_alloc::getDeviceStats(0);
    r.peak_reserved = (size_t)st.reserved_bytes[0].peak; /* StatType::AGGREGATE */
    torch_give_back(ptr);
    return r;
}

/* gpumem's allocator after a replay: its invariants checked (the bench fails on a broken
 * one), then destroyed. */
static void gpumem_done(alloc_t *a)
{
    char err[256];
    if (alloc_check(a, err, sizeof(err))) {
        std::fprintf(stderr, "alloc_torch_bench: alloc_check: %s\n", err);
        std::exit(1);
    }
    alloc_destroy(a);
}

replay_t replay_gpumem(const trace_t &t)
{
    std::vector<uint64_t> ptr(t.nslots, 0);
    alloc_t *a = gpumem_new();
    sim_stats_reset();
    replay_t r{};
    double t0 = now_ns();
    for (size_t i = 0; i < t.ev.size(); i++) {
        const alloc_trace_event_t &e = t.ev[i];
        switch (e.kind) {
        case ALLOC_TR_ALLOC:
            if (alloc_malloc(a, e.size, 0, &ptr[t.slot[i]]))
                die("gpumem: replay allocation failed");
            break;
        case ALLOC_TR_FREE:
        case ALLOC_TR_FREE_ASYNC:
            alloc_free_async(a, ptr[t.slot[i]], 0);
            ptr[t.slot[i]] = 0;
            break;
        default:
            alloc_empty_cache(a);
        }
    }
    r.seconds = (now_ns() - t0) / 1e9;
    driver_counts(&r);
    alloc_stats_t st;
    alloc_get_stats(a, &st);
    r.peak_reserved = st.reserved_bytes.peak;
    gpumem_done(a);
    return r;
}

/* ---- stalls: the same replay with work queued on the device (issue 41) ----------------------- */

constexpr double kQueueUs = 2000; /* each kernel completes 2 ms (simulated) after its launch */

double sync_us()
{
    sim_stats st;
    sim_stats_get(&st);
    return st.op[SIM_OP_CTX_SYNC].us + st.op[SIM_OP_STREAM_SYNC].us + st.op[SIM_OP_EVENT_SYNC].us;
}

uint64_t sync_calls()
{
    sim_stats st;
    sim_stats_get(&st);
    return st.op[SIM_OP_CTX_SYNC].calls + st.op[SIM_OP_STREAM_SYNC].calls +
           st.op[SIM_OP_EVENT_SYNC].calls;
}

struct stall_t {
    double ms_per_step;
    double syncs_per_1k;
    double util;
};

/* One replay of t with queued work. alloc_fn(size, slot) / free_fn(slot) are the allocator's
 * calls; peak_fn() gives (peak allocated, peak reserved) at the end. */
template <class A, class F, class P>
stall_t replay_queued(const trace_t &t, A alloc_fn, F free_fn, P peak_fn)
{
    std::vector<CUevent> kernels(256);
    for (CUevent &e : kernels)
        if (cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) die("cuEventCreate");
    sim_set_event_delay_us(kQueueUs);
    double own_us = 0; /* the program's own step-end synchronizations */
    uint64_t own_calls = 0, allocs = 0;
    double us0 = sync_us();
    uint64_t calls0 = sync_calls();
    size_t k = 0;
    for (size_t i = 0; i < t.ev.size(); i++) {
        const alloc_trace_event_t &e = t.ev[i];
        if (e.kind == ALLOC_TR_ALLOC) {
            alloc_fn(e.size, t.slot[i]);
            allocs++;
            /* the kernel that writes the new tensor */
            if (cuEventRecord(kernels[k++ % kernels.size()], nullptr) != CUDA_SUCCESS)
                die("cuEventRecord");
        } else if (e.kind == ALLOC_TR_FREE || e.kind == ALLOC_TR_FREE_ASYNC) {
            free_fn(t.slot[i]);
        }
        if (t.step_end[i]) {
            double u = sync_us();
            if (cuCtxSynchronize() != CUDA_SUCCESS) die("cuCtxSynchronize");
            own_us += sync_us() - u;
            own_calls++;
        }
    }
    stall_t r;
    r.ms_per_step = (sync_us() - us0 - own_us) / 1000.0 / (double)(t.steps ? t.steps : 1);
    r.syncs_per_1k = 1000.0 * (double)(sync_calls() - calls0 - own_calls) / (double)allocs;
    std::pair<size_t, size_t> pk = peak_fn();
    r.util = pk.second ? (double)pk.first / (double)pk.second : 1.0;
    sim_set_event_delay_us(0);
    if (cuCtxSynchronize() != CUDA_SUCCESS) die("cuCtxSynchronize");
    for (CUevent e : kernels)
        cuEventDestroy(e);
    return r;
}

stall_t stall_torch(const trace_t &t)
{
    std::vector<void *> ptr(t.nslots, nullptr);
    torch_alloc::emptyCache();
    torch_alloc::resetPeakStats(0);
    stall_t r = replay_queued(
        t, [&](size_t size, uint32_t slot) { ptr[slot] = torch_alloc::raw_alloc(size); },
        [&](uint32_t slot) {
            torch_alloc::raw_delete(ptr[slot]);
            ptr[slot] = nullptr;
        },
        [&]() {
            auto st = torch_alloc::getDeviceStats(0);
            return std::make_pair((size_t)st.allocated_bytes[0].peak,
                                  (size_t)st.reserved_bytes[0].peak);
        });
    torch_give_back(ptr);
    return r;
}

stall_t stall_gpumem(const trace_t &t)
{
    std::vector<uint64_t> ptr(t.nslots, 0);
    alloc_t *a = gpumem_new();
    stall_t r = replay_queued(
        t,
        [&](size_t size, uint32_t slot) {
            if (alloc_malloc(a, size, 0, &ptr[slot])) die("gpumem: replay allocation failed");
        },
        [&](uint32_t slot) {
            alloc_free_async(a, ptr[slot], 0);
            ptr[slot] = 0;
        },
        [&]() {
            alloc_stats_t st;
            alloc_get_stats(a, &st);
            return std::make_pair((size_t)st.allocated_bytes.peak, (size_t)st.reserved_bytes.peak);
        });
    gpumem_done(a);
    return r;
}

void print_ops(const char *who, const char *trace, const replay_t &r)
{
    std::fprintf(stderr, "# %s on %s: %.3f s,", who, trace, r.seconds);
    for (int k = 0; k < SIM_OP_COUNT; k++)
        if (r.per_op.op[k].calls)
            std::fprintf(stderr, " %s %llu", sim_op_name(k),
                         (unsigned long long)r.per_op.op[k].calls);
    std::fprintf(stderr, "\n");
}

} // namespace

int main(int argc, char **argv)
{
    std::string label = argc > 1 && argv[1][0] ? std::string("_") + argv[1] : std::string();
    const char *lb = label.c_str();

    /* PyTorch first: its runtime makes the device's primary context current on this thread,
     * and gpumem's driver calls then run in that same context */
    if (c10::cuda::device_count() < 1) die("no CUDA device (run through build/sim/torch-env)");
    /* what PyTorch's lazy CUDA initialization does before the first allocation (expandable
     * segments ask the peer-access cache about the fabric) */
    c10::cuda::detail::init_p2p_access_cache(c10::cuda::device_count());
    torch_alloc::init(c10::cuda::device_count());
    torch_alloc::raw_delete(torch_alloc::raw_alloc(512));
    if (cuCtxGetDevice(&g_dev) != CUDA_SUCCESS)
        die("no current CUDA context after PyTorch's first allocation");

    uint64_t s = 12345; /* alloc_bench.c's sequence */
    for (int i = 0; i < kSizes; i++) {
        unsigned lg = 9 + (unsigned)(rnd(&s) % 13);
        g_sizes[i] = ((size_t)1 << lg) + rnd(&s) % ((size_t)1 << lg);
    }

    /* pairs: interleaved batches, after the caches of both hold every size */
    alloc_t *a = gpumem_new();
    size_t pos = 0, tpos = 0;
    for (int w = 0; w < 5; w++) {
        batch_gpumem(a, &pos);
        batch_torch(&tpos);
    }
    std::vector<double> ours(kBatches), theirs(kBatches);
    for (int b = 0; b < kBatches; b++) {
        ours[b] = batch_gpumem(a, &pos);
        theirs[b] = batch_torch(&tpos);
    }
    alloc_destroy(a);
    double pair = median(ours), tpair = median(theirs);
    /* gpumem's own figures once (the run with PyTorch's default configuration) */
    const bool own = label.empty();
    std::printf("BENCH alloc.torch%s_pair_ns %.1f ns\n", lb, tpair);
    if (own) std::printf("BENCH alloc.gpumem_pair_ns %.1f ns\n", pair);
    std::printf("BENCH alloc.pair_vs_torch%s %.2f x\n", lb, pair / tpair);
    std::fflush(stdout);

    /* replays: each allocator fresh (PyTorch's cache emptied), runs alternating, best of 5 */
    const char *traces[2] = {"fixed", "jitter"};
    const char *names[2] = {"gpt2", "jitter"};
    for (int k = 0; k < 2; k++) {
        trace_t t = load_trace(traces[k]);
        replay_t best_t{}, best_g{};
        best_t.seconds = best_g.seconds = 1e30;
        for (int r = 0; r < 5; r++) {
            replay_t rt = replay_torch(t);
            replay_t rg = replay_gpumem(t);
            if (r == 0) {
                print_ops(("torch" + label).c_str(), names[k], rt);
                print_ops("gpumem", names[k], rg);
            }
            if (rt.seconds < best_t.seconds) best_t = rt;
            if (rg.seconds < best_g.seconds) best_g = rg;
        }
        const char *suffix = k == 0 ? "" : ".jitter";
        std::printf("BENCH alloc.replay_vs_torch%s%s %.2f x\n", lb, suffix,
                    best_g.seconds / best_t.seconds);
        /* on a GPU the driver's own time comes on top: the virtual driver's cost model says how
         * much (its calls cost microseconds there, nanoseconds here) */
        std::printf("BENCH alloc.replay_vs_torch_with_driver%s%s %.2f x\n", lb, suffix,
                    (best_g.seconds + best_g.driver_us / 1e6) /
                        (best_t.seconds + best_t.driver_us / 1e6));
        std::printf("BENCH alloc.replay_events_per_s.torch%s.%s %.0f events/s\n", lb, names[k],
                    (double)t.ev.size() / best_t.seconds);
        if (own)
            std::printf("BENCH alloc.replay_events_per_s.gpumem.%s %.0f events/s\n", names[k],
                        (double)t.ev.size() / best_g.seconds);
        std::printf("BENCH alloc.driver_calls.torch%s.%s %llu calls\n", lb, names[k],
                    (unsigned long long)best_t.driver_calls);
        if (own)
            std::printf("BENCH alloc.driver_calls.gpumem.%s %llu calls\n", names[k],
                        (unsigned long long)best_g.driver_calls);
        std::printf("BENCH alloc.driver_us.torch%s.%s %.0f us\n", lb, names[k], best_t.driver_us);
        if (own)
            std::printf("BENCH alloc.driver_us.gpumem.%s %.0f us\n", names[k], best_g.driver_us);
        std::printf("BENCH alloc.peak_reserved_gib.torch%s.%s %.3f GiB\n", lb, names[k],
                    (double)best_t.peak_reserved / (1 << 30));
        if (own)
            std::printf("BENCH alloc.peak_reserved_gib.gpumem.%s %.3f GiB\n", names[k],
                        (double)best_g.peak_reserved / (1 << 30));
        std::fflush(stdout);
    }

    /* stalls under queued work (issue 41), on the jittered trace */
    {
        trace_t t = load_trace("jitter");
        if (t.steps == 0) die("no step ends found in the jittered trace");
        const std::string pname = own ? std::string("pytorch") : std::string("pytorch-") + argv[1];
        const char *preset = pname.c_str();
        stall_t rt = stall_torch(t);
        std::printf("BENCH alloc.stall_ms_per_step.%s %.3f ms\n", preset, rt.ms_per_step);
        std::printf("BENCH alloc.stall_syncs_per_1k_allocs.%s %.2f syncs\n", preset,
                    rt.syncs_per_1k);
        std::printf("BENCH alloc.queued_util.%s %.4f x\n", preset, rt.util);
        if (own) {
            stall_t rg = stall_gpumem(t);
            std::printf("BENCH alloc.stall_ms_per_step.gpumem %.3f ms\n", rg.ms_per_step);
            std::printf("BENCH alloc.stall_syncs_per_1k_allocs.gpumem %.2f syncs\n",
                        rg.syncs_per_1k);
            std::printf("BENCH alloc.queued_util.gpumem %.4f x\n", rg.util);
        }
        std::fflush(stdout);
    }
    return 0;
}
