/* sim_graph.c — minimal stream capture and graph launch.
 *
 * cuStreamBeginCapture puts a stream in capture mode: the kernels, copies, memsets and host
 * functions issued to it are not executed but appended to a graph, in issue order. Event records
 * inside the capture mark points of that graph; another stream that waits on such an event joins
 * the capture (a fork), and the origin stream waiting on an event recorded on a joined stream
 * after its last work joins it back. cuStreamEndCapture on the origin returns the graph
 * (CUDA_ERROR_STREAM_CAPTURE_UNJOINED if a joined stream's work was never waited for by the
 * origin). A graph's nodes are kept in capture order, which respects every dependency of the
 * capture, so cuGraphLaunch issues them on the launch stream in that order (a serialized but
 * correct schedule). Instantiation copies the nodes (kernel parameters included).
 *
 * The calls the CUDA programming guide lists as invalid during capture fail the way the driver
 * fails them, and invalidate the capture: synchronizing or querying a capturing stream
 * (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), querying or synchronizing an event recorded inside a
 * capture (CUDA_ERROR_CAPTURED_EVENT), using the legacy stream while a blocking stream of its
 * device captures (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), synchronizing the context, waiting on
 * uncaptured work without CU_EVENT_WAIT_EXTERNAL (CUDA_ERROR_STREAM_CAPTURE_ISOLATION), merging
 * two captures (CUDA_ERROR_STREAM_CAPTURE_MERGE), and the "potentially unsafe" calls
 * (cuMemAlloc, cuMemFree, host and managed allocations) when the thread's capture interaction
 * mode prohibits them (cuThreadExchangeStreamCaptureMode). Memory nodes (cuMemAllocAsync /
 * cuMemFreeAsync on a capturing stream), child graphs and the explicit graph-building API are not
 * modelled: they return CUDA_ERROR_NOT_SUPPORTED.
 */
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

#define SIM_MAGIC_GRAPH 0x47524150u
#define SIM_MAGIC_EXEC 0x47455845u

static __thread int tls_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static sim_graph *graph_new(void)
{
    sim_graph *g = calloc(1, sizeof *g);
    if (g) g->magic = SIM_MAGIC_GRAPH;
    return g;
}

static void graph_free(sim_graph *g)
{
    for (size_t i = 0; i < g->n; i++)
        sim_work_free(g->nodes[i]);
    free(g->nodes);
    free(g);
}

static bool graph_append(sim_graph *g, sim_work *w)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        sim_work **v = realloc(g->nodes, cap * sizeof *v);
        if (!v) return false;
        g->nodes = v;
        g->cap = cap;
    }
    g->nodes[g->n++] = w;
    return true;
}

CUresult sim_capture_add(sim_stream *st, sim_work *w, size_t argbytes)
{
    (void)argbytes;
    sim_capture *c = st->capture;
    if (c->invalidated) {
        sim_work_free(w);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    w->next = NULL;
    if (!graph_append(c->graph, w)) {
        sim_work_free(w);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    st->cap_nodes++;
    return CUDA_SUCCESS;
}

void sim_capture_invalidate(sim_capture *c)
{
    c->invalidated = true;
}

bool sim_capture_prohibits_unsafe(void)
{
    if (!sim.ncaptures || tls_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return false;
    pthread_t self = pthread_self();
    bool prohibited = false;
    for (size_t i = 0; i < sim.ncaptures; i++) {
        sim_capture *c = sim.captures[i];
        bool mine = pthread_equal(c->thread, self);
        bool hit = (mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
                   (!mine && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                    tls_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
        if (hit) {
            sim_capture_invalidate(c);
            prohibited = true;
        }
    }
    return prohibited;
}

bool sim_capture_on_device(int dev, bool blocking_only, bool invalidate)
{
    bool found = false;
    for (size_t i = 0; i < sim.ncaptures; i++) {
        sim_capture *c = sim.captures[i];
        for (size_t j = 0; j < c->nstreams; j++) {
            sim_stream *st = c->streams[j];
            if (st->dev != dev || (blocking_only && (st->flags & CU_STREAM_NON_BLOCKING))) continue;
            found = true;
            if (invalidate) sim_capture_invalidate(c);
            break;
        }
    }
    return found;
}

/* Ends c: every stream leaves capture mode; returns the graph (NULL for an invalid capture). */
static sim_graph *capture_end(sim_capture *c, CUresult *rc)
{
    *rc = CUDA_SUCCESS;
    for (size_t j = 0; j < c->nstreams; j++) {
        sim_stream *st = c->streams[j];
        if (st != c->origin && st->cap_nodes > st->cap_joined && !c->invalidated) {
            c->invalidated = true;
            *rc = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
        }
        st->capture = NULL;
    }
    for (size_t i = 0; i < sim.nevents; i++) {
        sim_event *e = sim.events[i];
        if (e->capture == c) {
            e->capture = NULL;
            e->cap_stream = NULL;
        }
    }
    sim_pset_del(sim.captures, &sim.ncaptures, c);
    sim_graph *g = c->graph;
    if (c->invalidated) {
        if (!*rc) *rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        graph_free(g);
        g = NULL;
    }
    free(c->streams);
    free(c);
    return g;
}

/* ---- capture ----------------------------------------------------------------------------- */

CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    SIM_CHECK_INIT();
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_get(s, &st);
    /* "Capture may not be initiated if stream is CU_STREAM_LEGACY", nor on a stream already
     * capturing. */
    if (!rc && (st->legacy || st->capture)) rc = CUDA_ERROR_INVALID_VALUE;
    sim_capture *c = NULL;
    if (!rc) {
        c = calloc(1, sizeof *c);
        if (c) c->graph = graph_new();
        if (!c || !c->graph ||
            !sim_pset_add((void ***)&c->streams, &c->nstreams, &c->capstreams, st) ||
            !sim_pset_add(&sim.captures, &sim.ncaptures, &sim.capcaptures, c)) {
            if (c && c->graph) graph_free(c->graph);
            if (c) free(c->streams);
            free(c);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (!rc) {
        c->id = sim.next_id++;
        c->mode = mode;
        c->thread = pthread_self();
        c->origin = st;
        st->capture = c;
        st->cap_nodes = st->cap_joined = 0;
    }
    sim_unlock();
    return rc;
}

CUresult cuStreamEndCapture(CUstream s, CUgraph *pgraph)
{
    SIM_CHECK_INIT();
    if (!pgraph) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_get(s, &st);
    sim_capture *c = rc ? NULL : st->capture;
    if (!rc && (!c || c->origin != st))
        rc = CUDA_ERROR_ILLEGAL_STATE; /* not capturing, or not where the capture began */
    else if (!rc && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
             !pthread_equal(c->thread, pthread_self()))
        rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    if (!rc) {
        sim_graph *g = capture_end(c, &rc);
        if (g && !sim_pset_add(&sim.graphs, &sim.ngraphs, &sim.capgraphs, g)) {
            graph_free(g);
            g = NULL;
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
        *pgraph = (CUgraph)(void *)g;
    }
    sim_unlock();
    return rc;
}

CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                   CUgraph *graph, const CUgraphNode **deps,
                                   const CUgraphEdgeData **edges, size_t *ndeps)
{
    SIM_CHECK_INIT();
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_stream_get(s, &st);
    if (!rc) {
        sim_capture *c = st->capture;
        *status = !c               ? CU_STREAM_CAPTURE_STATUS_NONE
                  : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                   : CU_STREAM_CAPTURE_STATUS_ACTIVE;
        bool active = c && !c->invalidated;
        if (id && c) *id = c->id;
        if (graph) *graph = active ? (CUgraph)(void *)c->graph : NULL;
        /* Nodes are serialized in capture order: the last one is the dependency set of the
         * next captured work. */
        size_t n = active && c->graph->n ? 1 : 0;
        if (deps) *deps = n ? (const CUgraphNode *)&c->graph->nodes[c->graph->n - 1] : NULL;
        if (edges) *edges = NULL;
        if (ndeps) *ndeps = n;
    }
    sim_unlock();
    return rc;
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    SIM_CHECK_INIT();
    if (!mode ||
        (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
         *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = (CUstreamCaptureMode)tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* ---- graphs ------------------------------------------------------------------------------ */

CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *n)
{
    SIM_CHECK_INIT();
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    if (!sim_pset_has(sim.graphs, sim.ngraphs, graph))
        rc = CUDA_ERROR_INVALID_VALUE;
    else {
        sim_graph *g = (sim_graph *)(void *)graph;
        if (nodes) {
            size_t k = *n < g->n ? *n : g->n;
            for (size_t i = 0; i < k; i++)
                nodes[i] = (CUgraphNode)(void *)g->nodes[i];
            for (size_t i = k; i < *n; i++)
                nodes[i] = NULL;
        }
        *n = g->n;
    }
    sim_unlock();
    return rc;
}

CUresult cuGraphDestroy(CUgraph graph)
{
    SIM_CHECK_INIT();
    sim_lock();
    bool ok = sim_pset_has(sim.graphs, sim.ngraphs, graph);
    if (ok) {
        sim_pset_del(sim.graphs, &sim.ngraphs, graph);
        graph_free((sim_graph *)(void *)graph);
    }
    sim_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *pexec, CUgraph graph, unsigned long long flags)
{
    SIM_CHECK_INIT();
    if (!pexec) return CUDA_ERROR_INVALID_VALUE;
    if (flags) return sim_unsupported("cuGraphInstantiateWithFlags (non-zero flags)");
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    sim_graph *x = NULL;
    if (!sim_pset_has(sim.graphs, sim.ngraphs, graph))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!(x = graph_new()))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else {
        x->magic = SIM_MAGIC_EXEC;
        sim_graph *g = (sim_graph *)(void *)graph;
        for (size_t i = 0; i < g->n && !rc; i++) {
            sim_work *w = sim_work_clone(g->nodes[i], 0);
            if (!w || !graph_append(x, w)) {
                if (w) sim_work_free(w);
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
        if (!rc && !sim_pset_add(&sim.execs, &sim.nexecs, &sim.capexecs, x))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (rc)
            graph_free(x);
        else
            *pexec = (CUgraphExec)(void *)x;
    }
    sim_unlock();
    return rc;
}

CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    SIM_CHECK_INIT();
    sim_lock();
    bool ok = sim_pset_has(sim.execs, sim.nexecs, exec);
    if (ok) {
        sim_pset_del(sim.execs, &sim.nexecs, exec);
        graph_free((sim_graph *)(void *)exec);
    }
    sim_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Issues the graph's nodes on s, in capture order (each launch uses fresh copies, so kernel
 * parameters are those captured). */
CUresult cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    SIM_CHECK_INIT();
    sim_lock();
    sim_stream *st;
    CUresult rc = sim_pset_has(sim.execs, sim.nexecs, exec) ? sim_stream_for_work(s, &st)
                                                            : CUDA_ERROR_INVALID_VALUE;
    if (!rc && st->capture) {
        sim_unlock();
        return sim_unsupported("cuGraphLaunch into a capturing stream (child graphs)");
    }
    sim_graph *x = rc ? NULL : (sim_graph *)(void *)exec;
    for (size_t i = 0; x && i < x->n && !rc; i++) {
        sim_work *w = sim_work_clone(x->nodes[i], 0);
        if (!w) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        sim_cost(w->kind == SIM_W_KERNEL || w->kind == SIM_W_HOSTFN ? SIM_OP_LAUNCH
                 : w->kind == SIM_W_MEMSET                          ? SIM_OP_MEMSET
                                                                    : SIM_OP_MEMCPY_DTOD,
                 w->kind == SIM_W_KERNEL || w->kind == SIM_W_HOSTFN ? 0 : w->n);
        sim_submit(st, w);
        /* A launch may not destroy the executable graph it runs, but keep the check honest. */
        if (!sim_pset_has(sim.execs, sim.nexecs, exec)) break;
    }
    sim_unlock();
    return rc;
}

