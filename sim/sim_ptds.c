/* sim_ptds.c — the per-thread default-stream entry points (_ptsz / _ptds).
 *
 * A program compiled with --default-stream per-thread (or CUDA_API_PER_THREAD_DEFAULT_STREAM)
 * calls these names; for them the NULL stream, and the implicit stream of the synchronous copies
 * and memsets, is the calling thread's per-thread default stream (CU_STREAM_PER_THREAD), not
 * the legacy stream. Each wrapper marks the call (a thread-local count read by sim_stream_get)
 * and runs the ordinary entry point. cuGetProcAddress with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM answers these wrappers (sim_ptds_variant).
 */
#include "sim/sim_internal.h"

__thread int sim_tls_ptds;

#define PT(name, base, params, args)                                                               \
    __attribute__((visibility("default"))) CUresult name params;                                   \
    CUresult name params                                                                           \
    {                                                                                              \
        sim_tls_ptds++;                                                                            \
        CUresult r_ = base args;                                                                   \
        sim_tls_ptds--;                                                                            \
        return r_;                                                                                 \
    }

#define SIM_PTDS_LIST(X)                                                                           \
    X(cuStreamSynchronize_ptsz, cuStreamSynchronize, (CUstream s), (s))                            \
    X(cuStreamQuery_ptsz, cuStreamQuery, (CUstream s), (s))                                        \
    X(cuStreamWaitEvent_ptsz, cuStreamWaitEvent, (CUstream s, CUevent e, unsigned f), (s, e, f))   \
    X(cuStreamGetFlags_ptsz, cuStreamGetFlags, (CUstream s, unsigned *f), (s, f))                  \
    X(cuStreamGetPriority_ptsz, cuStreamGetPriority, (CUstream s, int *p), (s, p))                 \
    X(cuStreamGetId_ptsz, cuStreamGetId, (CUstream s, unsigned long long *i), (s, i))              \
    X(cuStreamGetCtx_ptsz, cuStreamGetCtx, (CUstream s, CUcontext * c), (s, c))                    \
    X(cuStreamGetDevice_ptsz, cuStreamGetDevice, (CUstream s, CUdevice * d), (s, d))               \
    X(cuStreamIsCapturing_ptsz, cuStreamIsCapturing, (CUstream s, CUstreamCaptureStatus * c),      \
      (s, c))                                                                                      \
    X(cuEventRecord_ptsz, cuEventRecord, (CUevent e, CUstream s), (e, s))                          \
    X(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags, (CUevent e, CUstream s, unsigned f),    \
      (e, s, f))                                                                                   \
    X(cuLaunchKernel_ptsz, cuLaunchKernel,                                                         \
      (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
       unsigned sh, CUstream s, void **p, void **x),                                               \
      (f, gx, gy, gz, bx, by, bz, sh, s, p, x))                                                    \
    X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx,                                                     \
      (const CUlaunchConfig *c, CUfunction f, void **p, void **x), (c, f, p, x))                   \
    X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel,                                   \
      (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
       unsigned sh, CUstream s, void **p),                                                         \
      (f, gx, gy, gz, bx, by, bz, sh, s, p))                                                       \
    X(cuLaunchHostFunc_ptsz, cuLaunchHostFunc, (CUstream s, CUhostFn f, void *u), (s, f, u))       \
    X(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2, (CUstream s, CUstreamCaptureMode m),  \
      (s, m))                                                                                      \
    X(cuStreamEndCapture_ptsz, cuStreamEndCapture, (CUstream s, CUgraph * g), (s, g))              \
    X(cuStreamGetCaptureInfo_v3_ptsz, cuStreamGetCaptureInfo_v3,                                   \
      (CUstream s, CUstreamCaptureStatus * st, cuuint64_t * id, CUgraph * g,                       \
       const CUgraphNode **d, const CUgraphEdgeData **e, size_t *n),                               \
      (s, st, id, g, d, e, n))                                                                     \
    X(cuGraphLaunch_ptsz, cuGraphLaunch, (CUgraphExec x, CUstream s), (x, s))                      \
    X(cuMemAllocAsync_ptsz, cuMemAllocAsync, (CUdeviceptr * p, size_t n, CUstream s), (p, n, s))   \
    X(cuMemFreeAsync_ptsz, cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))                    \
    X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync,                                       \
      (CUdeviceptr * p, size_t n, CUmemoryPool m, CUstream s), (p, n, m, s))                       \
    X(cuMemcpy_ptds, cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n))                \
    X(cuMemcpyAsync_ptsz, cuMemcpyAsync, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream t),     \
      (d, s, n, t))                                                                                \
    X(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2, (CUdeviceptr d, const void *s, size_t n), (d, s, n))  \
    X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2, (void *d, CUdeviceptr s, size_t n), (d, s, n))        \
    X(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n))  \
    X(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2,                                             \
      (CUdeviceptr d, const void *s, size_t n, CUstream t), (d, s, n, t))                          \
    X(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2,                                             \
      (void *d, CUdeviceptr s, size_t n, CUstream t), (d, s, n, t))                                \
    X(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2,                                             \
      (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream t), (d, s, n, t))                          \
    X(cuMemcpyPeer_ptds, cuMemcpyPeer,                                                             \
      (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n), (d, dc, s, sc, n))     \
    X(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync,                                                   \
      (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream t),            \
      (d, dc, s, sc, n, t))                                                                        \
    X(cuMemsetD8_v2_ptds, cuMemsetD8_v2, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n))    \
    X(cuMemsetD16_v2_ptds, cuMemsetD16_v2, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n)) \
    X(cuMemsetD32_v2_ptds, cuMemsetD32_v2, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n))   \
    X(cuMemsetD8Async_ptsz, cuMemsetD8Async,                                                       \
      (CUdeviceptr d, unsigned char v, size_t n, CUstream s), (d, v, n, s))                        \
    X(cuMemsetD16Async_ptsz, cuMemsetD16Async,                                                     \
      (CUdeviceptr d, unsigned short v, size_t n, CUstream s), (d, v, n, s))                       \
    X(cuMemsetD32Async_ptsz, cuMemsetD32Async,                                                     \
      (CUdeviceptr d, unsigned int v, size_t n, CUstream s), (d, v, n, s))                         \
    X(cuMemPrefetchAsync_v2_ptsz, cuMemPrefetchAsync_v2,                                           \
      (CUdeviceptr p, size_t n, CUmemLocation l, unsigned f, CUstream s), (p, n, l, f, s))

SIM_PTDS_LIST(PT)

void *sim_ptds_variant(void *fn)
{
#define ENTRY(name, base, params, args) {(void *)base, (void *)name},
    static const struct {
        void *base, *pt;
    } table[] = {SIM_PTDS_LIST(ENTRY)};
#undef ENTRY
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].base == fn) return table[i].pt;
    return fn;
}
