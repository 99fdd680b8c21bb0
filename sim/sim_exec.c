/* sim_exec.c — streams, events and host kernels.
 *
 * Execution model: work runs at issue time, on the calling thread. That trivially keeps every
 * stream in order and makes every cross-stream dependency hold, so streams carry no queue.
 * What the allocator must not rely on is *completion being visible*: in delayed-completion mode
 * (GPUMEM_SIM_EVENT_DELAY=N or sim_set_event_delay) a recorded event reports NOT_READY for its
 * first N queries, exactly as an event behind slow kernels would; synchronizing on the event,
 * its stream, the context, or freeing with cuMemFree (which synchronizes) completes it.
 *
 * Host kernels: sim_register_kernel turns a C function and its parameter sizes into a
 * CUfunction; cuLaunchKernel validates the launch and calls the function with the caller's
 * kernelParams (or with an array built from the CU_LAUNCH_PARAM_BUFFER_POINTER `extra` form),
 * without the lock held.
 */
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

static bool is_default_stream(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

bool sim_stream_valid(CUstream s)
{
    return is_default_stream(s) || sim_pset_has(sim.streams, sim.nstreams, s);
}

static sim_stream *stream_of(CUstream s)
{
    return is_default_stream(s) ? NULL : (sim_stream *)(void *)s;
}

static bool event_done(const sim_event *e)
{
    return e->pending == 0 && sim.clock_us >= e->deadline_us;
}

/* Completes e; returns how long (simulated µs) a caller waiting for it would have waited. */
static double event_complete(sim_event *e)
{
    e->pending = 0;
    return e->deadline_us > sim.clock_us ? e->deadline_us - sim.clock_us : 0;
}

double sim_events_complete_all(void)
{
    double wait = 0;
    for (size_t i = 0; i < sim.nevents; i++) {
        double w = event_complete(sim.events[i]);
        if (w > wait) wait = w; /* the device drains in parallel: the last one decides */
    }
    return wait;
}

size_t sim_events_pending(void)
{
    sim_ensure_config();
    size_t n = 0;
    sim_lock();
    for (size_t i = 0; i < sim.nevents; i++)
        n += !event_done(sim.events[i]);
    sim_unlock();
    return n;
}

/* ---- streams ----------------------------------------------------------------------------- */

CUresult cuStreamCreateWithPriority(CUstream *ps, unsigned int flags, int priority)
{
    SIM_CHECK_INIT();
    if (!ps || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    sim_stream *st = calloc(1, sizeof *st);
    if (!st) return CUDA_ERROR_OUT_OF_MEMORY;
    st->magic = SIM_MAGIC_STREAM;
    st->flags = flags;
    st->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
    sim_lock();
    st->id = sim.next_id++;
    bool ok = sim_pset_add(&sim.streams, &sim.nstreams, &sim.capstreams, st);
    sim_unlock();
    if (!ok) {
        free(st);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ps = (CUstream)(void *)st;
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *ps, unsigned int flags)
{
    return cuStreamCreateWithPriority(ps, flags, 0);
}

CUresult cuStreamDestroy_v2(CUstream s)
{
    SIM_CHECK_INIT();
    if (is_default_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
    sim_lock();
    bool ok = sim_pset_has(sim.streams, sim.nstreams, s);
    if (ok) {
        sim_pset_del(sim.streams, &sim.nstreams, s);
        /* Events recorded on it keep their state; they just forget the stream. */
        for (size_t i = 0; i < sim.nevents; i++) {
            sim_event *e = sim.events[i];
            if (e->stream == (sim_stream *)(void *)s) e->stream = NULL;
        }
    }
    sim_unlock();
    if (!ok) return CUDA_ERROR_INVALID_HANDLE;
    free((void *)s);
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream s)
{
    SIM_CHECK_INIT();
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    double wait = 0;
    if (!sim_stream_valid(s))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (is_default_stream(s))
        wait = sim_events_complete_all(); /* the legacy stream: all */
    else
        for (size_t i = 0; i < sim.nevents; i++) {
            sim_event *e = sim.events[i];
            if (e->stream == stream_of(s)) {
                double w = event_complete(e);
                if (w > wait) wait = w;
            }
        }
    sim_cost(SIM_OP_STREAM_SYNC, 0);
    sim_cost_wait(SIM_OP_STREAM_SYNC, wait);
    sim_unlock();
    return rc;
}

/* NOT_READY while an event recorded on s is pending; each query counts as one query of those
 * events, so polling a stream terminates just like polling its events. */
CUresult cuStreamQuery(CUstream s)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_cost(SIM_OP_EVENT_QUERY, 0); /* a query takes (simulated) time: timed delays run out */
    CUresult rc = CUDA_SUCCESS;
    if (!sim_stream_valid(s))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        for (size_t i = 0; i < sim.nevents; i++) {
            sim_event *e = sim.events[i];
            if ((is_default_stream(s) || e->stream == stream_of(s)) && !event_done(e)) {
                if (e->pending > 0) e->pending--;
                rc = CUDA_ERROR_NOT_READY;
            }
        }
    sim_unlock();
    return rc;
}

CUresult cuStreamWaitEvent(CUstream s, CUevent ev, unsigned int flags)
{
    SIM_CHECK_INIT();
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    if (!sim_stream_valid(s) || !sim_pset_has(sim.events, sim.nevents, ev))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        rc = CUDA_ERROR_INVALID_VALUE;
    /* Work already ran at issue time, so the dependency holds with nothing to do. */
    sim_unlock();
    return rc;
}

CUresult cuStreamGetFlags(CUstream s, unsigned int *flags)
{
    SIM_CHECK_INIT();
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    bool ok = sim_stream_valid(s);
    if (ok) *flags = is_default_stream(s) ? 0 : stream_of(s)->flags;
    sim_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuStreamGetPriority(CUstream s, int *priority)
{
    SIM_CHECK_INIT();
    if (!priority) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    bool ok = sim_stream_valid(s);
    if (ok) *priority = is_default_stream(s) ? 0 : stream_of(s)->priority;
    sim_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuStreamGetId(CUstream s, unsigned long long *id)
{
    SIM_CHECK_INIT();
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    bool ok = sim_stream_valid(s);
    if (ok) *id = is_default_stream(s) ? (unsigned long long)(uintptr_t)s : stream_of(s)->id;
    sim_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuStreamGetCtx(CUstream s, CUcontext *pctx)
{
    SIM_CHECK_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    bool ok = sim_stream_valid(s);
    sim_unlock();
    if (!ok) return CUDA_ERROR_INVALID_HANDLE;
    *pctx = &sim.primary;
    return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    SIM_CHECK_INIT();
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    bool ok = sim_stream_valid(s);
    sim_unlock();
    if (!ok) return CUDA_ERROR_INVALID_HANDLE;
    *status = CU_STREAM_CAPTURE_STATUS_NONE; /* the sim has no graphs */
    return CUDA_SUCCESS;
}

/* ---- events ------------------------------------------------------------------------------ */

CUresult cuEventCreate(CUevent *pe, unsigned int flags)
{
    SIM_CHECK_INIT();
    if (!pe || (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                    CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    sim_event *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = SIM_MAGIC_EVENT;
    e->flags = flags;
    sim_lock();
    bool ok = sim_pset_add(&sim.events, &sim.nevents, &sim.capevents, e);
    sim_unlock();
    if (!ok) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pe = (CUevent)(void *)e;
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent ev)
{
    SIM_CHECK_INIT();
    sim_lock();
    bool ok = sim_pset_has(sim.events, sim.nevents, ev);
    if (ok) sim_pset_del(sim.events, &sim.nevents, ev);
    sim_unlock();
    if (!ok) return CUDA_ERROR_INVALID_HANDLE;
    free((void *)ev);
    return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent ev, CUstream s)
{
    SIM_CHECK_INIT();
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    if (!sim_pset_has(sim.events, sim.nevents, ev) || !sim_stream_valid(s)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        sim_event *e = (sim_event *)(void *)ev;
        e->recorded = true;
        e->pending = sim.event_delay;
        e->deadline_us = sim.event_delay_us > 0 ? sim.clock_us + sim.event_delay_us : 0;
        e->stream = stream_of(s);
        e->t_ms = sim_now_ms();
    }
    sim_cost(SIM_OP_EVENT_RECORD, 0);
    sim_unlock();
    return rc;
}

CUresult cuEventRecordWithFlags(CUevent ev, CUstream s, unsigned int flags)
{
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    return cuEventRecord(ev, s);
}

CUresult cuEventQuery(CUevent ev)
{
    SIM_CHECK_INIT();
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    if (!sim_pset_has(sim.events, sim.nevents, ev))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else {
        sim_event *e = (sim_event *)(void *)ev;
        if (e->pending > 0) {
            e->pending--;
            rc = CUDA_ERROR_NOT_READY;
        } else if (!event_done(e))
            rc = CUDA_ERROR_NOT_READY;
    }
    sim_cost(SIM_OP_EVENT_QUERY, 0);
    sim_unlock();
    return rc;
}

CUresult cuEventSynchronize(CUevent ev)
{
    SIM_CHECK_INIT();
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    if (!sim_pset_has(sim.events, sim.nevents, ev)) rc = CUDA_ERROR_INVALID_HANDLE;
    double wait = rc ? 0 : event_complete((sim_event *)(void *)ev);
    sim_cost(SIM_OP_EVENT_SYNC, 0);
    sim_cost_wait(SIM_OP_EVENT_SYNC, wait);
    sim_unlock();
    return rc;
}

CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
    SIM_CHECK_INIT();
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    if (!sim_pset_has(sim.events, sim.nevents, start) ||
        !sim_pset_has(sim.events, sim.nevents, end)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        sim_event *a = (sim_event *)(void *)start, *b = (sim_event *)(void *)end;
        if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
            rc = CUDA_ERROR_INVALID_HANDLE;
        else if (!a->recorded || !b->recorded)
            rc = CUDA_ERROR_INVALID_HANDLE;
        else if (!event_done(a) || !event_done(b))
            rc = CUDA_ERROR_NOT_READY;
        else
            *ms = (float)(b->t_ms - a->t_ms);
    }
    sim_unlock();
    return rc;
}

/* The CUDA <= 12.7 name; same semantics in the sim. Exported as "cuEventElapsedTime". */
CUresult sim_cuEventElapsedTime_v1(float *ms, CUevent start, CUevent end)
{
    return cuEventElapsedTime_v2(ms, start, end);
}

/* ---- host kernels ------------------------------------------------------------------------ */

static size_t natural_align(size_t size)
{
    size_t a = 1;
    while (a < 8 && size % (a * 2) == 0)
        a *= 2;
    return a;
}

CUresult sim_register_kernel(const char *name, sim_host_kernel_fn fn, unsigned nparams,
                             const size_t *sizes, CUfunction *out)
{
    sim_ensure_config();
    if (!name || !fn || !out || (nparams && !sizes) || nparams > 256)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < nparams; i++)
        if (sizes[i] == 0) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    for (size_t i = 0; i < sim.nkernels; i++) {
        sim_kernel *k = sim.kernels[i];
        if (k->fn == fn && !strcmp(k->name, name) && k->nparams == nparams &&
            (!nparams || !memcmp(k->sizes, sizes, nparams * sizeof *sizes))) {
            *out = (CUfunction)(void *)k;
            sim_unlock();
            return CUDA_SUCCESS;
        }
    }
    sim_unlock();
    sim_kernel *k = calloc(1, sizeof *k);
    if (!k) return CUDA_ERROR_OUT_OF_MEMORY;
    k->magic = SIM_MAGIC_KERNEL;
    k->name = strdup(name);
    k->fn = fn;
    k->nparams = nparams;
    k->sizes = calloc(nparams ? nparams : 1, sizeof *k->sizes);
    k->offsets = calloc(nparams ? nparams : 1, sizeof *k->offsets);
    if (!k->name || !k->sizes || !k->offsets) goto oom;
    size_t off = 0;
    for (unsigned i = 0; i < nparams; i++) {
        size_t a = natural_align(sizes[i]);
        off = (off + a - 1) / a * a;
        k->sizes[i] = sizes[i];
        k->offsets[i] = off;
        off += sizes[i];
    }
    k->args_size = off;
    sim_lock();
    bool ok = sim_pset_add(&sim.kernels, &sim.nkernels, &sim.capkernels, k);
    sim_unlock();
    if (!ok) goto oom;
    *out = (CUfunction)(void *)k;
    return CUDA_SUCCESS;
oom:
    free(k->name);
    free(k->sizes);
    free(k->offsets);
    free(k);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static sim_kernel *kernel_of(CUfunction f)
{
    return sim_pset_has(sim.kernels, sim.nkernels, f) ? (sim_kernel *)(void *)f : NULL;
}

CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_kernel *k = kernel_of(f);
    sim_unlock();
    if (!k) return CUDA_ERROR_INVALID_HANDLE;
    if (index >= k->nparams || (!offset && !size)) return CUDA_ERROR_INVALID_VALUE;
    if (offset) *offset = k->offsets[index];
    if (size) *size = k->sizes[index];
    return CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char **name, CUfunction f)
{
    SIM_CHECK_INIT();
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_kernel *k = kernel_of(f);
    sim_unlock();
    if (!k) return CUDA_ERROR_INVALID_HANDLE;
    *name = k->name;
    return CUDA_SUCCESS;
}

/* Every launch entry point (cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel and
 * their _ptsz names) ends here, through a static call: an interposer that exports the driver's
 * launch names (libgpumem.so does) must see one call per launch, never the driver calling its
 * own exported names. The library is also linked -Bsymbolic-functions for the same reason. */
static CUresult launch(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                       CUstream s, void **params, void **extra)
{
    sim_lock();
    sim_kernel *k = kernel_of(f);
    bool stream_ok = sim_stream_valid(s);
    sim_cost(SIM_OP_LAUNCH, 0);
    sim_unlock();
    if (!k) return CUDA_ERROR_INVALID_HANDLE;
    if (!stream_ok) return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz) return CUDA_ERROR_INVALID_VALUE;
    if ((unsigned long long)bx * by * bz > 1024 || bz > 64 || gy > 65535 || gz > 65535)
        return CUDA_ERROR_INVALID_VALUE;
    if (shmem > 166912) return CUDA_ERROR_INVALID_VALUE;
    if (params && extra) return CUDA_ERROR_INVALID_VALUE;
    if (k->nparams && !params && !extra) return CUDA_ERROR_INVALID_VALUE;
    if (params || !extra) {
        k->fn(params);
        return CUDA_SUCCESS;
    }
    /* The `extra` form: one packed argument buffer laid out as cuFuncGetParamInfo says. */
    char *buf = NULL;
    size_t *bufsize = NULL;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
            bufsize = extra[i + 1];
        else
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (!buf || !bufsize || *bufsize < k->args_size) return CUDA_ERROR_INVALID_VALUE;
    void *stack_args[16];
    void **args = k->nparams <= 16 ? stack_args : calloc(k->nparams, sizeof *args);
    if (!args) return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < k->nparams; i++)
        args[i] = buf + k->offsets[i];
    k->fn(args);
    if (args != stack_args) free(args);
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                        CUstream s, void **params, void **extra)
{
    SIM_CHECK_INIT();
    return launch(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

/* Launch attributes (clusters, priorities, programmatic serialization...) only schedule work,
 * and work runs at issue time here: they are validated for shape, not acted on. */
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    SIM_CHECK_INIT();
    if (!config || (config->numAttrs && !config->attrs)) return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                  config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
                  params, extra);
}

/* Every block of a host kernel runs in the one call, so a grid-wide sync always holds. */
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                   unsigned int gz, unsigned int bx, unsigned int by,
                                   unsigned int bz, unsigned int shmem, CUstream s,
                                   void **params)
{
    SIM_CHECK_INIT();
    if (!params) {
        sim_lock();
        sim_kernel *k = kernel_of(f);
        sim_unlock();
        if (k && k->nparams) return CUDA_ERROR_INVALID_VALUE; /* no `extra` form here */
    }
    return launch(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}

CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user)
{
    SIM_CHECK_INIT();
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    bool ok = sim_stream_valid(s);
    sim_cost(SIM_OP_LAUNCH, 0);
    sim_unlock();
    if (!ok) return CUDA_ERROR_INVALID_HANDLE;
    fn(user);
    return CUDA_SUCCESS;
}

/* ---- per-thread default-stream symbols --------------------------------------------------- */
SIM_ALIAS(cuStreamSynchronize_ptsz, cuStreamSynchronize)
SIM_ALIAS(cuStreamQuery_ptsz, cuStreamQuery)
SIM_ALIAS(cuStreamWaitEvent_ptsz, cuStreamWaitEvent)
SIM_ALIAS(cuStreamGetFlags_ptsz, cuStreamGetFlags)
SIM_ALIAS(cuStreamGetPriority_ptsz, cuStreamGetPriority)
SIM_ALIAS(cuStreamGetId_ptsz, cuStreamGetId)
SIM_ALIAS(cuStreamGetCtx_ptsz, cuStreamGetCtx)
SIM_ALIAS(cuStreamIsCapturing_ptsz, cuStreamIsCapturing)
SIM_ALIAS(cuEventRecord_ptsz, cuEventRecord)
SIM_ALIAS(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags)
SIM_ALIAS(cuLaunchKernel_ptsz, cuLaunchKernel)
SIM_ALIAS(cuLaunchKernelEx_ptsz, cuLaunchKernelEx)
SIM_ALIAS(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel)
SIM_ALIAS(cuLaunchHostFunc_ptsz, cuLaunchHostFunc)
