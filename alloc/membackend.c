/* membackend.c — the in-memory backend: address space and physical-capacity accounting, no
 * memory behind the addresses. Used by replay (fast, deterministic) and by tests, which can
 * delay event completion (event_delay queries, or manual) to check stream-ordered reuse, and
 * make the n-th physical allocation fail to drive the OOM path.
 *
 * Addresses come from a bump pointer starting at 1 TiB, upwards (or from 64 TiB downwards:
 * top_down); nothing is ever reused, so an address identifies one reservation or segment for
 * the lifetime of the backend.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc/internal.h"

typedef struct mem_event {
    size_t index; /* in m->events */
    bool recorded, complete;
    unsigned left;
} mem_event_t;

struct alloc_mem_backend {
    alloc_backend_t be;
    alloc_mem_opts_t o;
    a_lock_t mu; /* the allocator's futex lock: a replay calls the backend ~1M times */
    uint64_t next_va;
    size_t *handle_size; /* by handle id - 1; 0 = released */
    size_t nhandles, cap_handles;
    uint64_t phys_calls;
    mem_event_t **events;
    size_t nevents, cap_events;
    alloc_mem_counters_t c;
};

#define M(ctx) ((alloc_mem_backend_t *)(ctx))

static uint64_t va_take(alloc_mem_backend_t *m, size_t size, size_t align)
{
    if (align < 512) align = 512;
    if (m->o.top_down) { /* below everything handed out so far */
        uint64_t a = (m->next_va - size) / align * align;
        m->next_va = a;
        return a;
    }
    uint64_t a = (m->next_va + align - 1) / align * align;
    m->next_va = a + size;
    return a;
}

static void phys_add(alloc_mem_backend_t *m, size_t size)
{
    m->c.physical_in_use += size;
    if (m->c.physical_in_use > m->c.physical_peak) m->c.physical_peak = m->c.physical_in_use;
}

static bool phys_fails(alloc_mem_backend_t *m, size_t size)
{
    m->phys_calls++;
    if (m->o.fail_call && m->phys_calls == m->o.fail_call) return true;
    return m->c.physical_in_use + size > m->o.capacity;
}

static int mb_reserve(void *ctx, size_t size, size_t align, uint64_t *addr)
{
    alloc_mem_backend_t *m = M(ctx);
    a_lock(&m->mu);
    m->c.reserve++;
    *addr = va_take(m, size, align);
    a_unlock(&m->mu);
    return ALLOC_BE_OK;
}

static int mb_free_range(void *ctx, uint64_t addr, size_t size)
{
    (void)addr;
    (void)size;
    alloc_mem_backend_t *m = M(ctx);
    a_lock(&m->mu);
    m->c.free_range++;
    a_unlock(&m->mu);
    return ALLOC_BE_OK;
}

static int mb_create(void *ctx, size_t size, uint64_t *handle)
{
    alloc_mem_backend_t *m = M(ctx);
    int rc = ALLOC_BE_OK;
    a_lock(&m->mu);
    m->c.create++;
    m->c.create_bytes += size;
    if (phys_fails(m, size)) {
        rc = ALLOC_BE_OOM;
    } else {
        if (m->nhandles == m->cap_handles) {
            size_t nc = m->cap_handles ? m->cap_handles * 2 : 1024;
            size_t *n = realloc(m->handle_size, nc * sizeof(*n));
            if (!n) {
                a_unlock(&m->mu);
                return ALLOC_BE_ERROR;
            }
            m->handle_size = n;
            m->cap_handles = nc;
        }
        m->handle_size[m->nhandles++] = size;
        *handle = m->nhandles;
        phys_add(m, size);
    }
    a_unlock(&m->mu);
    return rc;
}

static int mb_release(void *ctx, uint64_t handle)
{
    alloc_mem_backend_t *m = M(ctx);
    int rc = ALLOC_BE_OK;
    a_lock(&m->mu);
    m->c.release++;
    if (!handle || handle > m->nhandles || !m->handle_size[handle - 1]) {
        rc = ALLOC_BE_ERROR;
    } else {
        m->c.physical_in_use -= m->handle_size[handle - 1];
        m->c.release_bytes += m->handle_size[handle - 1];
        m->handle_size[handle - 1] = 0;
    }
    a_unlock(&m->mu);
    return rc;
}

static int mb_map(void *ctx, uint64_t addr, size_t size, uint64_t handle)
{
    (void)addr;
    alloc_mem_backend_t *m = M(ctx);
    int rc = ALLOC_BE_OK;
    a_lock(&m->mu);
    m->c.map++;
    m->c.map_bytes += size;
    if (!handle || handle > m->nhandles || m->handle_size[handle - 1] != size) rc = ALLOC_BE_ERROR;
    a_unlock(&m->mu);
    return rc;
}

static int mb_set_access(void *ctx, uint64_t addr, size_t size)
{
    (void)addr;
    alloc_mem_backend_t *m = M(ctx);
    a_lock(&m->mu);
    m->c.set_access++;
    m->c.set_access_bytes += size;
    a_unlock(&m->mu);
    return ALLOC_BE_OK;
}

static int mb_unmap(void *ctx, uint64_t addr, size_t size)
{
    (void)addr;
    alloc_mem_backend_t *m = M(ctx);
    a_lock(&m->mu);
    m->c.unmap++;
    m->c.unmap_bytes += size;
    a_unlock(&m->mu);
    return ALLOC_BE_OK;
}

static size_t mb_granularity(void *ctx)
{
    return M(ctx)->o.granularity;
}

static int mb_seg_alloc(void *ctx, size_t size, uint64_t *addr)
{
    alloc_mem_backend_t *m = M(ctx);
    int rc = ALLOC_BE_OK;
    a_lock(&m->mu);
    m->c.seg_alloc++;
    m->c.seg_alloc_bytes += size;
    if (phys_fails(m, size)) {
        rc = ALLOC_BE_OOM;
    } else {
        *addr = va_take(m, size, 2u << 20);
        phys_add(m, size);
    }
    a_unlock(&m->mu);
    return rc;
}

static int mb_seg_free(void *ctx, uint64_t addr, size_t size)
{
    (void)addr;
    alloc_mem_backend_t *m = M(ctx);
    a_lock(&m->mu);
    m->c.seg_free++;
    m->c.seg_free_bytes += size;
    m->c.physical_in_use -= size;
    a_unlock(&m->mu);
    return ALLOC_BE_OK;
}

static int mb_event_create(void *ctx, void **event)
{
    alloc_mem_backend_t *m = M(ctx);
    mem_event_t *e = calloc(1, sizeof(*e));
    if (!e) return ALLOC_BE_ERROR;
    a_lock(&m->mu);
    if (m->nevents == m->cap_events) {
        size_t nc = m->cap_events ? m->cap_events * 2 : 64;
        mem_event_t **n = realloc(m->events, nc * sizeof(*n));
        if (!n) {
            a_unlock(&m->mu);
            free(e);
            return ALLOC_BE_ERROR;
        }
        m->events = n;
        m->cap_events = nc;
    }
    e->index = m->nevents;
    m->events[m->nevents++] = e;
    a_unlock(&m->mu);
    *event = e;
    return ALLOC_BE_OK;
}

static int mb_event_record(void *ctx, void *event, uintptr_t stream)
{
    (void)stream;
    alloc_mem_backend_t *m = M(ctx);
    mem_event_t *e = event;
    a_lock(&m->mu);
    m->c.event_record++;
    e->recorded = true;
    e->complete = false;
    e->left = m->o.event_delay;
    a_unlock(&m->mu);
    return ALLOC_BE_OK;
}

static int mb_event_query(void *ctx, void *event)
{
    alloc_mem_backend_t *m = M(ctx);
    mem_event_t *e = event;
    int rc = ALLOC_BE_OK;
    a_lock(&m->mu);
    m->c.event_query++;
    if (e->recorded && !e->complete) {
        if (m->o.event_delay == ALLOC_MEM_EVENT_MANUAL) {
            rc = ALLOC_BE_NOT_READY;
        } else if (e->left == 0) {
            e->complete = true;
        } else {
            e->left--;
            rc = ALLOC_BE_NOT_READY;
        }
    }
    a_unlock(&m->mu);
    return rc;
}

static int mb_event_destroy(void *ctx, void *event)
{
    alloc_mem_backend_t *m = M(ctx);
    mem_event_t *e = event;
    a_lock(&m->mu);
    m->events[e->index] = m->events[--m->nevents];
    m->events[e->index]->index = e->index;
    a_unlock(&m->mu);
    free(e);
    return ALLOC_BE_OK;
}

static void complete_all(alloc_mem_backend_t *m)
{
    for (size_t i = 0; i < m->nevents; i++)
        if (m->events[i]->recorded) m->events[i]->complete = true;
}

static int mb_synchronize(void *ctx)
{
    alloc_mem_backend_t *m = M(ctx);
    a_lock(&m->mu);
    m->c.synchronize++;
    complete_all(m);
    a_unlock(&m->mu);
    return ALLOC_BE_OK;
}

static int mb_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes)
{
    alloc_mem_backend_t *m = M(ctx);
    a_lock(&m->mu);
    *total_bytes = m->o.capacity;
    *free_bytes = m->o.capacity > m->c.physical_in_use ? m->o.capacity - m->c.physical_in_use : 0;
    a_unlock(&m->mu);
    return ALLOC_BE_OK;
}

alloc_mem_backend_t *alloc_mem_backend_create(const alloc_mem_opts_t *opts)
{
    alloc_mem_backend_t *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    if (opts) m->o = *opts;
    if (!m->o.capacity) m->o.capacity = (size_t)80 << 30;
    if (!m->o.granularity) m->o.granularity = (size_t)2 << 20;
    m->mu.off = m->o.one_thread;
    /* upwards from 1 TiB; downwards from 64 TiB (room for 63 TiB of ranges either way) */
    m->next_va = m->o.top_down ? (uint64_t)64 << 40 : (uint64_t)1 << 40;
    alloc_backend_t *b = &m->be;
    b->ctx = m;
    if (!m->o.no_vmm) {
        b->reserve = mb_reserve;
        b->free_range = mb_free_range;
        b->create = mb_create;
        b->release = mb_release;
        b->map = mb_map;
        b->set_access = mb_set_access;
        b->unmap = mb_unmap;
        b->granularity = mb_granularity;
    }
    b->seg_alloc = mb_seg_alloc;
    b->seg_free = mb_seg_free;
    if (m->o.track_events) {
        b->event_create = mb_event_create;
        b->event_record = mb_event_record;
        b->event_query = mb_event_query;
        b->event_destroy = mb_event_destroy;
    }
    b->synchronize = mb_synchronize;
    b->mem_info = mb_mem_info;
    return m;
}

void alloc_mem_backend_destroy(alloc_mem_backend_t *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->nevents; i++)
        free(m->events[i]);
    free(m->events);
    free(m->handle_size);
    free(m);
}

const alloc_backend_t *alloc_mem_backend(alloc_mem_backend_t *m)
{
    return &m->be;
}

void alloc_mem_backend_complete_events(alloc_mem_backend_t *m)
{
    a_lock(&m->mu);
    complete_all(m);
    a_unlock(&m->mu);
}

size_t alloc_mem_backend_pending_events(alloc_mem_backend_t *m)
{
    size_t n = 0;
    a_lock(&m->mu);
    for (size_t i = 0; i < m->nevents; i++)
        n += m->events[i]->recorded && !m->events[i]->complete;
    a_unlock(&m->mu);
    return n;
}

void alloc_mem_backend_counters(alloc_mem_backend_t *m, alloc_mem_counters_t *out)
{
    a_lock(&m->mu);
    *out = m->c;
    a_unlock(&m->mu);
}
