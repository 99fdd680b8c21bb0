/* sim_exec.c — streams, events and host kernels.
 *
 * Every stream is a queue of work with sequence numbers: `issued` (the last work issued),
 * `executed` (the last work that ran) and `done` (the completion frontier: everything up to it
 * is complete). An event record is a point (stream, seq) on its stream; the event is complete
 * once the stream's frontier has passed it. The frontier advances in stream order, and only
 * past work that is complete:
 *  - an event record completes after its delay (GPUMEM_SIM_EVENT_DELAY: N queries, or a
 *    simulated interval), so a later record on the same stream cannot complete before it;
 *  - a wait (cuStreamWaitEvent) completes once the event's stream has completed its record, so
 *    work after a wait is never complete before the work it waits for;
 *  - the legacy default stream waits for every blocking stream of its device, and blocking
 *    streams wait for the legacy stream (the implicit synchronization of the NULL stream).
 *
 * Two execution modes:
 *  - synchronous (the default): work runs at issue time on the calling thread, so `executed`
 *    is always `issued`; only records with a delay and waits not yet satisfied are queued (to
 *    hold the frontier back). Completion is in stream order, the side effects happen at once.
 *  - asynchronous (GPUMEM_SIM_ASYNC=1): every piece of work (kernel, copy, memset, host
 *    function, record, wait, cuMemFreeAsync) is queued and run later by the stream's own worker
 *    thread, in stream order; a wait blocks the worker until the other stream has executed the
 *    event's record. A kernel on stream B that was not told to wait really can run before, or at
 *    the same time as, a kernel on stream A: races between streams become observable.
 *
 * Synchronizing (cuStreamSynchronize, cuEventSynchronize, cuCtxSynchronize, cuMemFree) waits
 * until the work has executed, then completes the delayed records it covers at once and charges
 * the remaining simulated time as waiting.
 *
 * Host kernels: sim_register_kernel turns a C function and its parameter sizes into a
 * CUfunction; a launch validates it and runs the function with the caller's kernelParams (at
 * once) or with a copy of the parameters (asynchronous mode), without the lock held.
 */
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

static __thread sim_stream *tls_ptds[SIM_MAX_DEVICES]; /* per-thread default streams */
static uint64_t poke_epoch;

static bool is_default_stream(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

bool sim_is_async(void)
{
    return sim.async;
}

bool sim_stream_valid(CUstream s)
{
    sim_stream *st;
    return sim_stream_get(s, &st) == CUDA_SUCCESS;
}

static void stream_init(sim_stream *st, int dev, unsigned flags, int priority)
{
    st->magic = SIM_MAGIC_STREAM;
    st->flags = flags;
    st->priority = priority;
    st->dev = dev;
    st->refs = 1;
    st->id = sim.next_id++;
}

CUresult sim_stream_get(CUstream s, sim_stream **out)
{
    *out = NULL;
    if (!is_default_stream(s)) {
        if (!sim_pset_has(sim.streams, sim.nstreams, s)) return CUDA_ERROR_INVALID_HANDLE;
        *out = (sim_stream *)(void *)s;
        return CUDA_SUCCESS;
    }
    int dev;
    CUresult rc = sim_current_dev(&dev);
    if (rc) return rc;
    sim_device *d = &sim.dev[dev];
    if (s == NULL && sim_tls_ptds > 0) s = CU_STREAM_PER_THREAD; /* a _ptsz/_ptds entry point */
    if (s != CU_STREAM_PER_THREAD) {
        if (!d->legacy.magic) {
            stream_init(&d->legacy, dev, 0, 0);
            d->legacy.legacy = true;
            if (!sim_pset_add(&sim.allstreams, &sim.nallstreams, &sim.capallstreams, &d->legacy)) {
                d->legacy.magic = 0;
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
        *out = &d->legacy;
        return CUDA_SUCCESS;
    }
    if (!tls_ptds[dev]) {
        sim_stream *st = calloc(1, sizeof *st);
        if (!st) return CUDA_ERROR_OUT_OF_MEMORY;
        stream_init(st, dev, 0, 0);
        st->per_thread = true;
        if (!sim_pset_add(&sim.allstreams, &sim.nallstreams, &sim.capallstreams, st)) {
            free(st);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        tls_ptds[dev] = st; /* lives as long as the process (threads do not tell us they end) */
    }
    *out = tls_ptds[dev];
    return CUDA_SUCCESS;
}

static void stream_unref(sim_stream *st);

CUresult sim_stream_for_work(CUstream s, sim_stream **out)
{
    CUresult rc = sim_stream_get(s, out);
    if (rc) return rc;
    sim_stream *st = *out;
    if (st->capture && st->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (st->legacy && sim.ncaptures && sim_capture_on_device(st->dev, true, true))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return CUDA_SUCCESS;
}

void sim_work_free(sim_work *w);
static void work_free(sim_work *w)
{
    sim_work_free(w);
}

sim_work *sim_work_clone(const sim_work *w, size_t argbytes)
{
    sim_work *c = malloc(sizeof *c);
    if (!c) return NULL;
    *c = *w;
    c->next = NULL;
    c->ev = NULL;
    c->target = NULL;
    c->args = NULL;
    c->argbuf = NULL;
    if (w->kind == SIM_W_GALLOC || w->kind == SIM_W_GFREE) sim_graph_mem_ref(w->user);
    if (w->kind == SIM_W_KERNEL) {
        (void)argbytes;
        c->argbuf = malloc(w->argbytes ? w->argbytes : 1);
        c->args = calloc(w->nargs ? w->nargs : 1, sizeof *c->args);
        if (!c->argbuf || !c->args) {
            free(c->argbuf);
            free(c->args);
            free(c);
            return NULL;
        }
        memcpy(c->argbuf, w->argbuf, w->argbytes);
        for (unsigned i = 0; i < w->nargs; i++)
            c->args[i] = c->argbuf + ((char *)w->args[i] - w->argbuf);
    }
    return c;
}

void sim_work_free(sim_work *w)
{
    if (w->kind == SIM_W_WAIT && w->target) stream_unref(w->target);
    if (w->kind == SIM_W_RECORD && w->ev) w->ev->rec = NULL;
    if (w->kind == SIM_W_GALLOC || w->kind == SIM_W_GFREE) sim_graph_mem_unref(w->user);
    free(w->args);
    free(w->argbuf);
    free(w);
}

static void stream_unref(sim_stream *st)
{
    if (--st->refs > 0 || st->legacy || st->per_thread) return;
    while (st->head) {
        sim_work *w = st->head;
        st->head = w->next;
        work_free(w);
    }
    sim_pset_del(sim.allstreams, &sim.nallstreams, st);
    free(st);
}

static bool reached(sim_stream *st, uint64_t seq);

/* Moves st's completion frontier forward over complete work, up to seq `upto`. Lock held. */
static void advance(sim_stream *st, uint64_t upto)
{
    while (st->head && st->head->seq <= upto && st->head->seq <= st->executed) {
        sim_work *w = st->head;
        if (w->kind == SIM_W_RECORD && (w->pending > 0 || sim.clock_us < w->deadline_us)) break;
        if (w->kind == SIM_W_WAIT && !reached(w->target, w->tseq)) break;
        st->head = w->next;
        if (!st->head) st->tail = NULL;
        if (st->exec_next == w) st->exec_next = w->next;
        st->done = w->seq;
        work_free(w);
    }
    uint64_t f = st->head ? st->head->seq - 1 : st->executed;
    if (f > st->executed) f = st->executed;
    if (f > st->done) st->done = f;
}

/* Has st completed its work up to seq? */
static bool reached(sim_stream *st, uint64_t seq)
{
    if (st->done >= seq) return true;
    advance(st, seq);
    return st->done >= seq;
}

/* One query of everything (st, upto) depends on: each delayed record counts one query. */
static void poke(sim_stream *st, uint64_t upto)
{
    uint64_t from = st->poke_epoch == poke_epoch ? st->poke_upto : 0;
    if (from >= upto) return;
    st->poke_epoch = poke_epoch;
    st->poke_upto = upto;
    for (sim_work *w = st->head; w && w->seq <= upto; w = w->next) {
        if (w->seq <= from) continue;
        if (w->kind == SIM_W_RECORD && w->pending > 0) w->pending--;
        if (w->kind == SIM_W_WAIT) poke(w->target, w->tseq);
    }
}

/* Completes every delayed record (st, upto) depends on; returns the longest simulated wait. */
static double force(sim_stream *st, uint64_t upto)
{
    uint64_t from = st->poke_epoch == poke_epoch ? st->poke_upto : 0;
    if (from >= upto) return 0;
    st->poke_epoch = poke_epoch;
    st->poke_upto = upto;
    double wait = 0;
    for (sim_work *w = st->head; w && w->seq <= upto; w = w->next) {
        if (w->seq <= from) continue;
        double x = 0;
        if (w->kind == SIM_W_RECORD) {
            w->pending = 0;
            x = w->deadline_us > sim.clock_us ? w->deadline_us - sim.clock_us : 0;
        } else if (w->kind == SIM_W_WAIT) {
            x = force(w->target, w->tseq);
        }
        if (x > wait) wait = x;
    }
    return wait;
}

/* ---- the workers (asynchronous mode) ------------------------------------------------------ */

static void run_work(sim_work *w)
{
    switch (w->kind) {
    case SIM_W_KERNEL:
        if (w->fn) w->fn(w->args); /* NULL: device code only, skipped */
        break;
    case SIM_W_COPY:
        if (w->zero_dst)
            sim_zero_host(w);
        else
            memmove((void *)w->dst, (const void *)w->src, w->n);
        break;
    case SIM_W_MEMSET:
        if (w->elem == 1)
            memset((void *)w->dst, (int)(w->value & 0xff), w->n);
        else if (w->elem == 2)
            for (size_t i = 0; i < w->n / 2; i++)
                ((uint16_t *)w->dst)[i] = (uint16_t)w->value;
        else
            for (size_t i = 0; i < w->n / 4; i++)
                ((uint32_t *)w->dst)[i] = w->value;
        break;
    case SIM_W_HOSTFN:
        w->hfn(w->user);
        break;
    case SIM_W_GALLOC: /* lock held: the worker and sim_submit call it so */
    case SIM_W_GFREE:
        sim_graph_mem_run(w);
        break;
    default:
        break;
    }
}

static void *worker_main(void *arg)
{
    sim_stream *st = arg;
    sim_lock();
    for (;;) {
        while (!st->exec_next && !st->stop)
            pthread_cond_wait(&sim.cond, &sim.lock);
        if (!st->exec_next) break;
        sim_work *w = st->exec_next;
        if (w->kind == SIM_W_WAIT) {
            while (w->target->executed < w->tseq)
                pthread_cond_wait(&sim.cond, &sim.lock);
        } else if (w->kind == SIM_W_RECORD) {
            if (w->ev) w->ev->t_ms = sim_now_ms();
        } else if (w->kind == SIM_W_FREE) {
            size_t freed;
            sim_device_free(w->ptr, true, &freed);
        } else if (w->kind == SIM_W_GALLOC || w->kind == SIM_W_GFREE) {
            sim_graph_mem_run(w);
        } else if (w->kind != SIM_W_NOP) {
            sim_unlock();
            run_work(w);
            sim_lock();
        }
        st->exec_next = w->next;
        st->executed = w->seq;
        advance(st, st->executed);
        pthread_cond_broadcast(&sim.cond);
    }
    sim_unlock();
    return NULL;
}

static void append(sim_stream *st, sim_work *w)
{
    w->next = NULL;
    if (st->tail)
        st->tail->next = w;
    else
        st->head = w;
    st->tail = w;
}

static sim_work *wait_work(sim_stream *target, uint64_t tseq)
{
    sim_work *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->kind = SIM_W_WAIT;
    w->target = target;
    w->tseq = tseq;
    target->refs++;
    return w;
}

static void start_worker(sim_stream *st)
{
    if (st->has_worker) return;
    st->stop = false;
    st->has_worker = pthread_create(&st->worker, NULL, worker_main, st) == 0;
    if (!st->has_worker) sim_note("cannot start a stream worker thread; its work will not run");
}

void sim_stream_wait_executed(sim_stream *st, uint64_t seq)
{
    if (!sim.async) return;
    if (st->executed < seq) start_worker(st);
    while (st->executed < seq)
        pthread_cond_wait(&sim.cond, &sim.lock);
}

void sim_submit(sim_stream *st, sim_work *w)
{
    if (sim.async) {
        sim_issue(st, w, NULL);
        return;
    }
    if (w->kind == SIM_W_KERNEL || w->kind == SIM_W_HOSTFN) {
        sim_unlock();
        run_work(w);
        sim_lock();
    } else {
        run_work(w);
    }
    work_free(w);
    sim_issue(st, NULL, NULL);
}

/* Queues w on st (or, synchronous mode, records its place). Lock held. */
static uint64_t push(sim_stream *st, sim_work *w, bool *queued)
{
    uint64_t seq = ++st->issued;
    bool keep;
    if (sim.async) {
        keep = true;
    } else {
        st->executed = seq;
        keep =
            w && ((w->kind == SIM_W_RECORD && (w->pending > 0 || w->deadline_us > sim.clock_us)) ||
                  (w->kind == SIM_W_WAIT && !reached(w->target, w->tseq)));
    }
    if (w) w->seq = seq;
    if (keep) {
        append(st, w);
        if (sim.async) {
            if (!st->exec_next) st->exec_next = w;
            start_worker(st);
            pthread_cond_broadcast(&sim.cond);
        }
    } else if (w) {
        work_free(w);
    }
    if (queued) *queued = keep;
    if (!keep) advance(st, seq);
    return seq;
}

uint64_t sim_issue(sim_stream *st, sim_work *w, bool *queued)
{
    /* The legacy default stream synchronizes with the blocking streams of its device. */
    if (!(st->flags & CU_STREAM_NON_BLOCKING)) {
        for (size_t i = 0; i < sim.nallstreams; i++) {
            sim_stream *o = sim.allstreams[i];
            if (o == st || o->dev != st->dev || (o->flags & CU_STREAM_NON_BLOCKING)) continue;
            if (!st->legacy && !o->legacy) continue;
            if (reached(o, o->issued)) continue;
            sim_work *ww = wait_work(o, o->issued);
            if (ww) push(st, ww, NULL);
        }
    }
    return push(st, w, queued);
}

double sim_stream_drain(sim_stream *st, uint64_t seq)
{
    sim_stream_wait_executed(st, seq);
    poke_epoch++;
    double wait = force(st, seq);
    advance(st, seq);
    return wait;
}

static bool drained_by(const sim_stream *o, int dev, bool blocking_only)
{
    return (dev < 0 || o->dev == dev) && !(blocking_only && (o->flags & CU_STREAM_NON_BLOCKING));
}

/* Drains the streams of device dev (all devices: dev < 0), the non-blocking ones too unless
 * blocking_only, and returns the longest wait (the device drains in parallel: the last one
 * decides). Each drain can drop the lock while it waits, and another thread may destroy a
 * stream meanwhile (or create one): the streams are taken from a copy of the list, each held by
 * a reference until all are drained, so none is freed under the wait and none is skipped. A
 * stream created meanwhile is not waited for, as on a device. Without memory for the copy, the
 * list itself is walked (the old way: safe while no other thread destroys a stream). */
static double drain_streams(int dev, bool blocking_only)
{
    size_t n = sim.nallstreams, k = 0;
    sim_stream **v = n ? malloc(n * sizeof *v) : NULL;
    for (size_t i = 0; v && i < n; i++)
        if (drained_by(sim.allstreams[i], dev, blocking_only)) {
            v[k] = sim.allstreams[i];
            v[k++]->refs++;
        }
    double wait = 0;
    for (size_t i = 0; i < (v ? k : sim.nallstreams); i++) {
        sim_stream *o = v ? v[i] : sim.allstreams[i];
        if (!v && !drained_by(o, dev, blocking_only)) continue;
        double w = sim_stream_drain(o, o->issued);
        if (w > wait) wait = w;
    }
    for (size_t i = 0; i < k; i++) stream_unref(v[i]);
    free(v);
    return wait;
}

/* Synchronizing the legacy stream also covers the blocking streams of its device. */
static double stream_sync(sim_stream *st)
{
    double wait = sim_stream_drain(st, st->issued);
    if (st->legacy) {
        double w = drain_streams(st->dev, true);
        if (w > wait) wait = w;
    }
    return wait;
}

double sim_device_drain(int dev)
{
    return drain_streams(dev, false);
}

static bool event_done(sim_event *e)
{
    return !e->stream || reached(e->stream, e->seq);
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
    sim_lock();
    int dev;
    CUresult rc = sim_current_dev(&dev);
    if (rc) {
        sim_unlock();
        free(st);
        return rc;
    }
    stream_init(st, dev, flags, priority < -5 ? -5 : priority > 0 ? 0 : priority);
    bool ok = sim_pset_add(&sim.streams, &sim.nstreams, &sim.capstreams, st);
    if (ok && !sim_pset_add(&sim.allstreams, &sim.nallstreams, &sim.capallstreams, st)) {
        sim_pset_del(sim.streams, &sim.nstreams, st);
        ok = false;
    }
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

/* Waits for the stream's work to execute (delayed records stay as they are: events recorded on
 * it keep their state), stops its worker and drops the handle. */
CUresult cuStreamDestroy_v2(CUstream s)
{
    SIM_CHECK_INIT();
    if (is_default_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
    sim_lock();
    bool ok = sim_pset_has(sim.streams, sim.nstreams, s);
    if (!ok) {
        sim_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    sim_stream *st = (sim_stream *)(void *)s;
    if (st->capture) {
        sim_capture_invalidate(st->capture);
        sim_pset_del((void **)st->capture->streams, &st->capture->nstreams, st);
        if (st->capture->origin == st) st->capture->origin = NULL;
        st->capture = NULL;
    }
    sim_pset_del(sim.streams, &sim.nstreams, s);
    st->destroyed = true;
    sim_stream_wait_executed(st, st->issued);
    if (st->has_worker) {
        st->stop = true;
        pthread_cond_broadcast(&sim.cond);
        pthread_t t = st->worker;
        st->has_worker = false;
        sim_unlock();
        pthread_join(t, NULL);
        sim_lock();
    }
    stream_unref(st);
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream s)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_get(s, &st);
    if (!rc && st->capture) {
        /* Capturing work is not scheduled for execution: nothing to synchronize with. */
        sim_capture_invalidate(st->capture);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (!rc && st->legacy && sim.ncaptures && sim_capture_on_device(st->dev, true, true))
        rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    double wait = rc ? 0 : stream_sync(st);
    sim_cost(SIM_OP_STREAM_SYNC, 0);
    sim_cost_wait(SIM_OP_STREAM_SYNC, wait);
    sim_unlock();
    return rc;
}

/* NOT_READY while work issued on s is not complete; each query counts as one query of the
 * delayed records that work depends on, so polling a stream terminates just like polling its
 * events. The legacy stream covers the blocking streams of its device. */
CUresult cuStreamQuery(CUstream s)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_cost(SIM_OP_EVENT_QUERY, 0); /* a query takes (simulated) time: timed delays run out */
    sim_stream *st;
    CUresult rc = sim_stream_get(s, &st);
    if (!rc && st->capture) {
        sim_capture_invalidate(st->capture);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (!rc && st->legacy && sim.ncaptures && sim_capture_on_device(st->dev, true, true))
        rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    if (!rc) {
        poke_epoch++;
        bool done = reached(st, st->issued);
        if (!done) poke(st, st->issued);
        if (st->legacy)
            for (size_t i = 0; i < sim.nallstreams; i++) {
                sim_stream *o = sim.allstreams[i];
                if (o == st || o->dev != st->dev || (o->flags & CU_STREAM_NON_BLOCKING)) continue;
                if (!reached(o, o->issued)) {
                    done = false;
                    poke(o, o->issued);
                }
            }
        if (!done) rc = CUDA_ERROR_NOT_READY;
    }
    sim_unlock();
    return rc;
}

CUresult cuStreamWaitEvent(CUstream s, CUevent ev, unsigned int flags)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_for_work(s, &st);
    if (!rc && !sim_pset_has(sim.events, sim.nevents, ev)) rc = CUDA_ERROR_INVALID_HANDLE;
    if (!rc && (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)) rc = CUDA_ERROR_INVALID_VALUE;
    sim_event *e = rc ? NULL : (sim_event *)(void *)ev;
    if (!rc && e->capture) {
        /* A captured event: the waiting stream joins that capture (a fork), or, for its own
         * capture, depends on the work before the record (a join when it is the origin). */
        sim_capture *c = e->capture;
        if (c->invalidated)
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        else if (st->capture && st->capture != c) {
            sim_capture_invalidate(st->capture);
            sim_capture_invalidate(c);
            rc = CUDA_ERROR_STREAM_CAPTURE_MERGE;
        } else if (!st->capture) {
            if (!sim_pset_add((void ***)&c->streams, &c->nstreams, &c->capstreams, st))
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            else {
                st->capture = c;
                st->cap_nodes = st->cap_joined = 0;
            }
        } else if (st == c->origin && e->cap_stream && e->cap_nodes > e->cap_stream->cap_joined) {
            e->cap_stream->cap_joined = e->cap_nodes;
        }
        e = NULL;
    } else if (!rc && st->capture) {
        /* Work outside the capture cannot be a dependency of captured work. */
        if (!(flags & CU_EVENT_WAIT_EXTERNAL)) {
            sim_capture_invalidate(st->capture);
            rc = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        }
        e = NULL;
    }
    if (e) {
        /* The wait is on the event's latest record at the time of the call (none: nothing). */
        if (e->stream && e->stream != st) {
            sim_work *w = wait_work(e->stream, e->seq);
            if (!w)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            else
                sim_issue(st, w, NULL);
        }
    }
    sim_unlock();
    return rc;
}

CUresult cuStreamGetFlags(CUstream s, unsigned int *flags)
{
    SIM_CHECK_INIT();
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_get(s, &st);
    if (!rc) *flags = st->flags;
    sim_unlock();
    return rc;
}

CUresult cuStreamGetPriority(CUstream s, int *priority)
{
    SIM_CHECK_INIT();
    if (!priority) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_get(s, &st);
    if (!rc) *priority = st->priority;
    sim_unlock();
    return rc;
}

CUresult cuStreamGetId(CUstream s, unsigned long long *id)
{
    SIM_CHECK_INIT();
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_get(s, &st);
    if (!rc) *id = st->id;
    sim_unlock();
    return rc;
}

CUresult cuStreamGetCtx(CUstream s, CUcontext *pctx)
{
    SIM_CHECK_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_get(s, &st);
    if (!rc) *pctx = &sim.dev[st->dev].primary;
    sim_unlock();
    return rc;
}

CUresult cuStreamGetDevice(CUstream s, CUdevice *dev)
{
    SIM_CHECK_INIT();
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_get(s, &st);
    if (!rc) *dev = st->dev;
    sim_unlock();
    return rc;
}

CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    SIM_CHECK_INIT();
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_get(s, &st);
    if (!rc)
        *status = !st->capture               ? CU_STREAM_CAPTURE_STATUS_NONE
                  : st->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                             : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    sim_unlock();
    return rc;
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
    CUresult rc = sim_current_dev(&e->dev);
    bool ok = !rc && sim_pset_add(&sim.events, &sim.nevents, &sim.capevents, e);
    sim_unlock();
    if (!ok) {
        free(e);
        return rc ? rc : CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pe = (CUevent)(void *)e;
    return CUDA_SUCCESS;
}

static void event_forget(sim_event *e)
{
    e->capture = NULL;
    e->cap_stream = NULL;
    if (e->rec) e->rec->ev = NULL;
    e->rec = NULL;
    if (e->stream) stream_unref(e->stream);
    e->stream = NULL;
}

CUresult cuEventDestroy_v2(CUevent ev)
{
    SIM_CHECK_INIT();
    sim_lock();
    bool ok = sim_pset_has(sim.events, sim.nevents, ev);
    if (ok) {
        sim_pset_del(sim.events, &sim.nevents, ev);
        event_forget((sim_event *)(void *)ev);
    }
    sim_unlock();
    if (!ok) return CUDA_ERROR_INVALID_HANDLE;
    free((void *)ev);
    return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent ev, CUstream s)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_stream *st = NULL;
    CUresult rc = CUDA_SUCCESS;
    if (!sim_pset_has(sim.events, sim.nevents, ev))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = sim_stream_for_work(s, &st);
    if (!rc && st->capture) {
        /* Inside a capture a record marks a point of the graph being built: no execution. */
        sim_event *e = (sim_event *)(void *)ev;
        event_forget(e);
        e->recorded = true;
        e->capture = st->capture;
        e->cap_stream = st;
        e->cap_nodes = st->cap_nodes;
        sim_cost(SIM_OP_EVENT_RECORD, 0);
        sim_unlock();
        return CUDA_SUCCESS;
    }
    sim_work *w = NULL;
    if (!rc && !(w = calloc(1, sizeof *w))) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        sim_event *e = (sim_event *)(void *)ev;
        event_forget(e);
        w->kind = SIM_W_RECORD;
        w->pending = sim.event_delay;
        w->deadline_us = sim.event_delay_us > 0 ? sim.clock_us + sim.event_delay_us : 0;
        w->ev = e;
        e->recorded = true;
        e->stream = st;
        st->refs++;
        if (!sim.async) e->t_ms = sim_now_ms();
        bool queued;
        e->seq = sim_issue(st, w, &queued);
        e->rec = queued ? w : NULL;
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
    else if (((sim_event *)(void *)ev)->capture) {
        /* "attempting cuEventQuery on an event that was last recorded inside a capture
         * sequence" conflicts with capture in every mode. */
        sim_capture_invalidate(((sim_event *)(void *)ev)->capture);
        rc = CUDA_ERROR_CAPTURED_EVENT;
    } else {
        sim_event *e = (sim_event *)(void *)ev;
        if (!event_done(e)) {
            poke_epoch++;
            poke(e->stream, e->seq);
            rc = CUDA_ERROR_NOT_READY;
        }
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
    double wait = 0;
    if (!sim_pset_has(sim.events, sim.nevents, ev))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (((sim_event *)(void *)ev)->capture) {
        sim_capture_invalidate(((sim_event *)(void *)ev)->capture);
        rc = CUDA_ERROR_CAPTURED_EVENT;
    } else {
        sim_event *e = (sim_event *)(void *)ev;
        if (e->stream) {
            sim_stream *st = e->stream;
            st->refs++; /* the event may be re-recorded while this waits */
            wait = sim_stream_drain(st, e->seq);
            stream_unref(st);
        }
    }
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
    sim_kernel_init_attrs(k);
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
    return sim_kernel_of(f);
}

CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_kernel *k = kernel_of(f);
    sim_unlock();
    if (!k) return CUDA_ERROR_INVALID_HANDLE;
    /* a kernel with device code only registered without its layout (its fat binary did not
     * give one, sim_fatbin.c): nothing to give, which is not "no parameters" (what INVALID_VALUE
     * at index 0 says) */
    if (k->layout_unknown) return CUDA_ERROR_NOT_SUPPORTED;
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

/* A kernel with device code only (sim_register_device_kernel), its launch already checked: it
 * is counted and takes its place in stream order, doing nothing. A capture records it as a
 * kernel node with no body, so a graph replays it as a no-op too. */
static CUresult launch_skipped(sim_kernel *k, CUstream s)
{
    sim_work *w = calloc(1, sizeof *w); /* SIM_W_NOP */
    if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_for_work(s, &st);
    if (rc) {
        free(w);
    } else {
        k->launches++;
        if (st->capture) {
            /* a kernel node without a body or parameters (empty buffers, as copies expect) */
            w->kind = SIM_W_KERNEL;
            w->argbuf = malloc(1);
            w->args = calloc(1, sizeof *w->args);
            if (w->argbuf && w->args) {
                rc = sim_capture_add(st, w, 0); /* takes w */
            } else {
                sim_work_free(w);
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            }
        } else {
            sim_issue(st, w, NULL);
        }
    }
    sim_unlock();
    return rc;
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
    sim_stream *st;
    CUresult src = sim_stream_get(s, &st);
    sim_cost(SIM_OP_LAUNCH, 0);
    sim_unlock();
    if (!k) return CUDA_ERROR_INVALID_HANDLE;
    if (src) return src;
    if (!gx || !gy || !gz || !bx || !by || !bz) return CUDA_ERROR_INVALID_VALUE;
    if ((unsigned long long)bx * by * bz > 1024 || bz > 64 || gy > 65535 || gz > 65535)
        return CUDA_ERROR_INVALID_VALUE;
    if (shmem > (unsigned)sim.profile->smem_optin) return CUDA_ERROR_INVALID_VALUE;
    if (params && extra) return CUDA_ERROR_INVALID_VALUE;
    if (k->nparams && !params && !extra) return CUDA_ERROR_INVALID_VALUE;
    /* The `extra` form: one packed argument buffer laid out as cuFuncGetParamInfo says. */
    char *buf = NULL;
    if (!params && extra) {
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
    }
    if (!k->fn) return launch_skipped(k, s);
    sim_lock();
    src = sim_stream_for_work(s, &st);
    bool capturing = !src && st->capture;
    sim_unlock();
    if (src) return src;
    if (!sim.async && !capturing) {
        /* Synchronous mode: the kernel runs now, on the caller's own parameters. */
        if (params || !extra) {
            k->fn(params);
        } else {
            void *stack_args[16];
            void **args = k->nparams <= 16 ? stack_args : calloc(k->nparams, sizeof *args);
            if (!args) return CUDA_ERROR_OUT_OF_MEMORY;
            for (unsigned i = 0; i < k->nparams; i++)
                args[i] = buf + k->offsets[i];
            k->fn(args);
            if (args != stack_args) free(args);
        }
        sim_lock();
        if (!sim_stream_get(s, &st)) sim_issue(st, NULL, NULL);
        sim_unlock();
        return CUDA_SUCCESS;
    }
    /* Asynchronous mode: the work keeps its own copy of the parameters (the caller's may be
     * gone when it runs). */
    sim_work *w = calloc(1, sizeof *w);
    if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
    w->kind = SIM_W_KERNEL;
    w->fn = k->fn;
    w->argbytes = k->args_size;
    w->nargs = k->nparams;
    w->argbuf = malloc(k->args_size ? k->args_size : 1);
    w->args = calloc(k->nparams ? k->nparams : 1, sizeof *w->args);
    if (!w->argbuf || !w->args) {
        free(w->argbuf);
        free(w->args);
        free(w);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (unsigned i = 0; i < k->nparams; i++) {
        w->args[i] = w->argbuf + k->offsets[i];
        memcpy(w->args[i], params ? params[i] : buf + k->offsets[i], k->sizes[i]);
    }
    sim_lock();
    src = sim_stream_for_work(s, &st); /* it may have been destroyed meanwhile */
    if (src) {
        sim_unlock();
        free(w->argbuf);
        free(w->args);
        free(w);
        return src;
    }
    if (st->capture)
        src = sim_capture_add(st, w, k->args_size);
    else
        sim_issue(st, w, NULL);
    sim_unlock();
    return src;
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
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shmem, CUstream s, void **params)
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
    sim_stream *st;
    CUresult rc = sim_stream_for_work(s, &st);
    sim_cost(SIM_OP_LAUNCH, 0);
    sim_work *w = rc ? NULL : calloc(1, sizeof *w);
    if (!rc && !w) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc) {
        sim_unlock();
        return rc;
    }
    w->kind = SIM_W_HOSTFN;
    w->hfn = fn;
    w->user = user;
    if (st->capture) {
        rc = sim_capture_add(st, w, 0);
        sim_unlock();
        return rc;
    }
    if (!sim.async) {
        sim_unlock();
        fn(user);
        sim_lock();
        w->kind = SIM_W_NOP;
        rc = sim_stream_get(s, &st);
    }
    if (rc)
        free(w);
    else
        sim_issue(st, w, NULL);
    sim_unlock();
    return rc;
}

