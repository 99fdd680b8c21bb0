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
 * mode prohibits them (cuThreadExchangeStreamCaptureMode).
 *
 * Memory nodes, as CUDA's programming guide ("Graph Memory Nodes") and cuda.h describe them:
 * cuMemAllocAsync on a capturing stream (or cuGraphAddMemAllocNode) creates an allocation node
 * and returns the allocation's address, fixed from then on for every instantiation and launch;
 * cuMemFreeAsync on a capturing stream (or cuGraphAddMemFreeNode) creates a free node and must
 * name a graph allocation. The memory exists from the moment a launch reaches the allocation
 * node until a free node, a cuMemFreeAsync reached on its stream or a cuMemFree ends it; an
 * allocation its own graph frees cannot be freed anywhere else, one it does not free outlives
 * the launch and must be freed before the graph is launched again (CUDA_ERROR_INVALID_VALUE),
 * unless the executable graph was instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
 * whose launches free it first. Destroying the graph does not free a live allocation. A graph
 * with memory nodes has at most one executable graph at a time. The device keeps freed graph
 * memory reserved for graphs until cuDeviceGraphMemTrim (cuDeviceGetGraphMemAttribute reads
 * both figures). Child graphs and the rest of the explicit graph-building API are not modelled:
 * they return CUDA_ERROR_NOT_SUPPORTED.
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
    if (g->magic == SIM_MAGIC_EXEC && g->origin && g->origin->nexecs) g->origin->nexecs--;
    if (g->magic == SIM_MAGIC_GRAPH)
        for (size_t i = 0; i < sim.nexecs; i++) {
            sim_graph *x = sim.execs[i];
            if (x->origin == g) x->origin = NULL;
        }
    for (size_t i = 0; i < g->n; i++)
        sim_work_free(g->nodes[i]);
    free(g->nodes);
    free(g);
}

static bool is_mem_node(const sim_work *w)
{
    return w->kind == SIM_W_GALLOC || w->kind == SIM_W_GFREE;
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
    if (is_mem_node(w)) g->nmem++;
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

/* ---- memory nodes ------------------------------------------------------------------------ */

/* Does g allocate r (an allocation node of its own)? */
static bool graph_allocates(const sim_graph *g, const sim_range *r)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i]->kind == SIM_W_GALLOC && g->nodes[i]->user == r) return true;
    return false;
}

/* A new memory node of `kind` for r, holding a reference to it. */
static sim_work *mem_node(int kind, sim_range *r)
{
    sim_work *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->kind = kind;
    w->user = r;
    w->ptr = (CUdeviceptr)r->base;
    w->n = r->size;
    sim_graph_mem_ref(r);
    return w;
}

/* A free node for the allocation at p in g: p must start a graph allocation, freed at most once
 * in g, and an allocation its own graph frees cannot be freed in another one (cuda.h,
 * cuGraphAddMemFreeNode). Returns the node's range in *out. */
static CUresult mem_free_check(sim_graph *g, CUdeviceptr p, sim_range **out)
{
    sim_range *r = sim_range_find((uintptr_t)p);
    if (!r || !r->graph || r->base != (uintptr_t)p) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i]->kind == SIM_W_GFREE && g->nodes[i]->user == r)
            return CUDA_ERROR_INVALID_VALUE;
    bool own = graph_allocates(g, r);
    if (!own && r->g_freed_in_graph) return CUDA_ERROR_INVALID_VALUE;
    *out = r;
    return CUDA_SUCCESS;
}

CUresult sim_capture_mem_alloc(sim_stream *st, size_t size, CUdeviceptr *out)
{
    if (st->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    sim_range *r = sim_graph_mem_new(st->dev, size);
    sim_work *w = r ? mem_node(SIM_W_GALLOC, r) : NULL;
    if (!w) {
        if (r) sim_graph_mem_unref(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = sim_capture_add(st, w, 0);
    if (!rc) *out = (CUdeviceptr)r->base;
    return rc;
}

CUresult sim_capture_mem_free(sim_stream *st, CUdeviceptr p)
{
    if (st->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    sim_range *r;
    CUresult rc = mem_free_check(st->capture->graph, p, &r);
    if (rc) return rc;
    sim_work *w = mem_node(SIM_W_GFREE, r);
    if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
    bool own = graph_allocates(st->capture->graph, r);
    rc = sim_capture_add(st, w, 0);
    if (!rc && own) r->g_freed_in_graph = true;
    return rc;
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

/* Flags: CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH (what PyTorch passes) and
 * CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY (accepted: nodes run in capture order whatever
 * their priority) are modelled; CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD belongs to
 * cuGraphInstantiateWithParams (CUDA_ERROR_INVALID_VALUE here, as in cuda.h); device launch is
 * not supported. */
CUresult cuGraphInstantiateWithFlags(CUgraphExec *pexec, CUgraph graph, unsigned long long flags)
{
    SIM_CHECK_INIT();
    if (!pexec) return CUDA_ERROR_INVALID_VALUE;
    const unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                     CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH)
        return sim_unsupported("cuGraphInstantiateWithFlags (device launch)");
    if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    sim_graph *x = NULL, *g = (sim_graph *)(void *)graph;
    if (!sim_pset_has(sim.graphs, sim.ngraphs, graph))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (g->nmem && g->nexecs)
        rc = CUDA_ERROR_NOT_SUPPORTED; /* "at most one executable graph ... at a time": 801 on an
                                          H200 (tests/diff/gpu-h200/graph_mem.out) */
    else if (!(x = graph_new()))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else {
        x->magic = SIM_MAGIC_EXEC;
        x->flags = flags;
        for (size_t i = 0; i < g->n && !rc; i++) {
            sim_work *w = sim_work_clone(g->nodes[i], 0);
            if (!w || !graph_append(x, w)) {
                if (w) sim_work_free(w);
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
        if (!rc && !sim_pset_add(&sim.execs, &sim.nexecs, &sim.capexecs, x))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (rc) {
            graph_free(x);
        } else {
            x->origin = g;
            g->nexecs++;
            *pexec = (CUgraphExec)(void *)x;
        }
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

/* The graph memory a launch of x needs at its peak (allocations and frees in node order),
 * beyond what is live already, and what its auto-free releases first. */
static size_t launch_mem_need(const sim_graph *x, int dev, bool auto_free, size_t *released)
{
    size_t cur = 0, peak = 0;
    *released = 0;
    for (size_t i = 0; i < x->n; i++) {
        sim_range *r = x->nodes[i]->user;
        if (!is_mem_node(x->nodes[i]) || r->dev != dev) continue;
        if (x->nodes[i]->kind == SIM_W_GALLOC) {
            if (r->g_live && auto_free) *released += r->charged;
            cur += r->charged;
            if (cur > peak) peak = cur;
        } else if (graph_allocates(x, r)) {
            cur -= r->charged < cur ? r->charged : cur;
        }
    }
    return peak;
}

/* Issues the graph's nodes on s, in capture order (each launch uses fresh copies, so kernel
 * parameters are those captured). An allocation a previous launch made and nobody freed makes
 * the launch fail with CUDA_ERROR_INVALID_VALUE, unless the graph was instantiated with
 * AUTO_FREE_ON_LAUNCH: then it is freed on s first, as cuMemFreeAsync would. */
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
    bool auto_free = x && (x->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    if (x && x->nmem) {
        for (size_t i = 0; i < x->n && !rc; i++) {
            sim_work *w = x->nodes[i];
            if (w->kind == SIM_W_GALLOC && ((sim_range *)w->user)->g_outstanding && !auto_free)
                rc = CUDA_ERROR_INVALID_VALUE; /* unfreed from a previous launch */
        }
        for (int d = 0; d < sim.ndevices && !rc; d++) {
            size_t released, need = launch_mem_need(x, d, auto_free, &released);
            if (need > sim_graph_mem_avail(d) + released) rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
        for (size_t i = 0; i < x->n && !rc && auto_free; i++) {
            sim_work *w = x->nodes[i];
            sim_range *r = w->user;
            if (w->kind != SIM_W_GALLOC || !r->g_outstanding) continue;
            sim_work *f = sim_work_clone(w, 0);
            if (!f) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            f->kind = SIM_W_GFREE;
            r->g_outstanding = false;
            sim_submit(st, f);
        }
    }
    for (size_t i = 0; x && i < x->n && !rc; i++) {
        sim_work *w = sim_work_clone(x->nodes[i], 0);
        if (!w) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        if (is_mem_node(w)) {
            sim_range *r = w->user;
            /* the API-level state: what this launch leaves allocated, or frees */
            if (w->kind == SIM_W_GALLOC)
                r->g_outstanding = !r->g_freed_in_graph;
            else
                r->g_outstanding = false;
        } else {
            sim_cost(w->kind == SIM_W_KERNEL || w->kind == SIM_W_HOSTFN ? SIM_OP_LAUNCH
                     : w->kind == SIM_W_MEMSET                          ? SIM_OP_MEMSET
                                                                        : SIM_OP_MEMCPY_DTOD,
                     w->kind == SIM_W_KERNEL || w->kind == SIM_W_HOSTFN ? 0 : w->n);
        }
        sim_submit(st, w);
        /* A launch may not destroy the executable graph it runs, but keep the check honest. */
        if (!sim_pset_has(sim.execs, sim.nexecs, exec)) break;
    }
    sim_unlock();
    return rc;
}

/* ---- the explicit graph API: empty graphs and memory nodes ---------------------------------- */

CUresult cuGraphCreate(CUgraph *pgraph, unsigned int flags)
{
    SIM_CHECK_INIT();
    if (!pgraph || flags) return CUDA_ERROR_INVALID_VALUE;
    sim_graph *g = graph_new();
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    sim_lock();
    bool ok = sim_pset_add(&sim.graphs, &sim.ngraphs, &sim.capgraphs, g);
    sim_unlock();
    if (!ok) {
        free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pgraph = (CUgraph)(void *)g;
    return CUDA_SUCCESS;
}

/* The dependencies must be nodes of g, without duplicates. Nodes are kept in the order they are
 * added, which respects every dependency (a dependency exists before its dependents). */
static CUresult deps_check(const sim_graph *g, const CUgraphNode *deps, size_t ndeps)
{
    if (ndeps && !deps) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ndeps; i++) {
        bool found = false;
        for (size_t k = 0; k < g->n && !found; k++)
            found = (CUgraphNode)(void *)g->nodes[k] == deps[i];
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; j < i; j++)
            if (deps[j] == deps[i]) return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuGraphAddMemAllocNode(CUgraphNode *pnode, CUgraph graph, const CUgraphNode *deps,
                                size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *params)
{
    SIM_CHECK_INIT();
    if (!pnode || !params || params->bytesize == 0 ||
        params->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        params->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_graph *g = (sim_graph *)(void *)graph;
    int dev = params->poolProps.location.id;
    CUresult rc = sim_pset_has(sim.graphs, sim.ngraphs, graph) ? deps_check(g, deps, ndeps)
                                                               : CUDA_ERROR_INVALID_VALUE;
    if (!rc && (dev < 0 || dev >= sim.ndevices)) rc = CUDA_ERROR_INVALID_DEVICE;
    sim_range *r = NULL;
    sim_work *w = NULL;
    if (!rc) {
        r = sim_graph_mem_new(dev, params->bytesize);
        w = r ? mem_node(SIM_W_GALLOC, r) : NULL;
        if (!w || !graph_append(g, w)) {
            if (w) sim_work_free(w);
            else if (r) sim_graph_mem_unref(r);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (!rc) {
        params->dptr = (CUdeviceptr)r->base;
        *pnode = (CUgraphNode)(void *)w;
    }
    sim_unlock();
    return rc;
}

CUresult cuGraphAddMemFreeNode(CUgraphNode *pnode, CUgraph graph, const CUgraphNode *deps,
                               size_t ndeps, CUdeviceptr dptr)
{
    SIM_CHECK_INIT();
    if (!pnode) return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_graph *g = (sim_graph *)(void *)graph;
    CUresult rc = sim_pset_has(sim.graphs, sim.ngraphs, graph) ? deps_check(g, deps, ndeps)
                                                               : CUDA_ERROR_INVALID_VALUE;
    sim_range *r = NULL;
    if (!rc) rc = mem_free_check(g, dptr, &r);
    sim_work *w = NULL;
    if (!rc) {
        bool own = graph_allocates(g, r);
        w = mem_node(SIM_W_GFREE, r);
        if (!w || !graph_append(g, w)) {
            if (w) sim_work_free(w);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (own) {
            r->g_freed_in_graph = true;
        }
    }
    if (!rc) *pnode = (CUgraphNode)(void *)w;
    sim_unlock();
    return rc;
}

/* The generic entry point, for the node types the virtual GPU's graphs build node by node: a
 * memory allocation node (its address returned in params->alloc.dptr, as the driver does) and a
 * memory free node; edge data is refused (the default edges only). Other types: not supported. */
CUresult cuGraphAddNode_v2(CUgraphNode *pnode, CUgraph graph, const CUgraphNode *deps,
                           const CUgraphEdgeData *edges, size_t ndeps, CUgraphNodeParams *params)
{
    SIM_CHECK_INIT();
    if (!params || edges) return CUDA_ERROR_INVALID_VALUE;
    if (params->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
        return cuGraphAddMemFreeNode(pnode, graph, deps, ndeps, params->free.dptr);
    if (params->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        return sim_unsupported("cuGraphAddNode_v2 of a node type other than a memory allocation or free");
    CUDA_MEM_ALLOC_NODE_PARAMS a = {.poolProps = params->alloc.poolProps,
                                    .accessDescs = params->alloc.accessDescs,
                                    .accessDescCount = params->alloc.accessDescCount,
                                    .bytesize = params->alloc.bytesize};
    CUresult rc = cuGraphAddMemAllocNode(pnode, graph, deps, ndeps, &a);
    if (rc == CUDA_SUCCESS) params->alloc.dptr = a.dptr;
    return rc;
}

/* ---- graph memory of a device ------------------------------------------------------------- */

CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    SIM_CHECK_INIT();
    if (dev < 0 || dev >= sim.ndevices) return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    sim_graph_mem_trim(dev);
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    SIM_CHECK_INIT();
    if (dev < 0 || dev >= sim.ndevices) return CUDA_ERROR_INVALID_DEVICE;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    sim_device *d = &sim.dev[dev];
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = d->graph_used; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = d->graph_high; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = d->graph_reserved; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = d->graph_reserved_high; break;
    default: rc = CUDA_ERROR_INVALID_VALUE; break;
    }
    sim_unlock();
    return rc;
}

/* Only the high-water marks can be set, and only to 0: they restart from the current figure. */
CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    SIM_CHECK_INIT();
    if (dev < 0 || dev >= sim.ndevices) return CUDA_ERROR_INVALID_DEVICE;
    if (!value || *(cuuint64_t *)value != 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    sim_device *d = &sim.dev[dev];
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
        d->graph_high = d->graph_used;
    else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
        d->graph_reserved_high = d->graph_reserved;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}
