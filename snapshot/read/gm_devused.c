/*
 * gm_devused.c — "where is the rest?": the driver's own figure for device memory, explained.
 *
 * nvidia-smi (and the real cuMemGetInfo) shows everything the driver handed out on a device.
 * gpumem's recording knows part of it: the segments its allocator reserved, and what the
 * program held outside that allocator (its own VMM handles, allocations from its own pools,
 * allocations passed through to the real driver, CUDA arrays). The rest nobody recorded: the
 * CUDA context, library workspaces (cuBLAS, cuDNN, NCCL), memory a pool keeps cached after a
 * free, other processes on the same device.
 *
 * The recorder samples the real cuMemGetInfo (events of kind device_info) at the start, at each
 * new high of the memory gpumem knows of, and at exit. One sweep of the events in order keeps,
 * per device, what was reserved and what was held outside at each point; at each sample the
 * account is
 *
 *     device used = reserved by gpumem + recorded outside gpumem + not recorded
 *
 * with "not recorded" the difference. At the start it is the CUDA context (and whatever other
 * processes hold): the report calls it the context size measured at start. The peak is the
 * sample with the highest device used; the memory held outside gpumem at that point is listed
 * by call site.
 *
 * The program's VMM follows the driver's rule: a physical handle holds its memory from
 * cuMemCreate until it is released and no longer mapped.
 *
 * Memory recorded outside gpumem is counted as the driver charges it, as an H200 (driver 580)
 * showed (tests/diff/gpu-h200/meminfo.out, rt_sizes.out): a cuMemAlloc takes whole 2 MiB
 * pages, and a CUDA memory pool reserves 32 MiB chunks for its allocations (the default pool,
 * which the program's stream-ordered allocations passed through use, and the pools the program
 * chose, each rounded on its own). So that rounding is not mistaken for unrecorded memory.
 */
#include "snapshot/read/gm_devused.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot/record/rec.h"
#include "snapshot/record/u64map.h"

#define DU_MAX_DEV 64

#define DU_PAGE ((uint64_t)2 << 20)   /* what a cuMemAlloc is charged in */
#define DU_CHUNK ((uint64_t)32 << 20) /* what a CUDA memory pool reserves in */

typedef struct du_item { /* an allocation, array or physical handle held outside gpumem */
    uint64_t size;
    uint64_t charge; /* what the driver charges for it (a pooled one: counted with its pool) */
    uint32_t stack;
    uint8_t cat, live, released, pooled;
    int8_t dev;
    uint32_t nmaps; /* VMM handles: live mappings */
} du_item;
typedef struct du_map {
    uint64_t va, size, item;
} du_map;

typedef struct du_state {
    uint64_t reserved, outside[GM_DU_NCAT];
    uint64_t pooled[GM_DU_NCAT]; /* bytes of pool allocations: the pool reserves DU_CHUNK steps */
} du_state;

typedef struct sweep {
    du_item *it;
    size_t nit, capit;
    u64map by_addr, by_array, by_handle;
    du_map *maps;
    size_t nmaps, capmaps;
    du_state st[DU_MAX_DEV];
    /* a bit for every address ever put in by_addr (gm_devused_addr_bit): a free whose bit is
     * clear is not there, without the probe. Most frees are of gpumem's own allocations, which
     * are never put there, and a probe that finds nothing ends after a run of slots of varying
     * length: a mispredicted branch a free. Never cleared, so never wrong. */
    uint64_t addr_seen[GM_DU_ADDR_WORDS];
} sweep;

static inline uint32_t addr_bit(uint64_t addr) { return gm_devused_addr_bit(addr); }

const char *gm_devused_cat_name(int cat)
{
    static const char *const n[GM_DU_NCAT] = {"program_vmm", "pools", "pass_through", "arrays"};
    return cat >= 0 && cat < GM_DU_NCAT ? n[cat] : "?";
}

static int dev_index(int d) { return d >= 0 && d < DU_MAX_DEV ? d : 0; }

static uint64_t round_to(uint64_t v, uint64_t to)
{
    return (v + to - 1) / to * to;
}

/* charge: what the driver takes for it; a pool allocation (pooled) counts in its pool's chunks */
static int64_t add_item(sweep *s, uint64_t size, uint64_t charge, int pooled, uint32_t stack,
                        int cat, int dev)
{
    if (s->nit == s->capit) {
        size_t c = s->capit ? s->capit * 2 : 256;
        du_item *n = realloc(s->it, c * sizeof *n);
        if (!n)
            return -1;
        s->it = n, s->capit = c;
    }
    s->it[s->nit] = (du_item){
        size, charge, stack, (uint8_t)cat, 1, 0, (uint8_t)pooled, (int8_t)dev_index(dev), 0};
    du_state *st = &s->st[dev_index(dev)];
    if (pooled)
        st->pooled[cat] += size;
    else
        st->outside[cat] += charge;
    return (int64_t)s->nit++;
}

static void drop_item(sweep *s, uint64_t i)
{
    du_item *t = &s->it[i];
    if (!t->live)
        return;
    t->live = 0;
    uint64_t *o =
        t->pooled ? &s->st[(int)t->dev].pooled[t->cat] : &s->st[(int)t->dev].outside[t->cat];
    uint64_t v = t->pooled ? t->size : t->charge;
    *o -= v < *o ? v : *o;
}

static void point_at(const sweep *s, int dev, gm_du_point *p, uint64_t seq, uint64_t free_b,
                     uint64_t used, uint64_t total)
{
    const du_state *st = &s->st[dev];
    p->have = 1;
    p->seq = seq;
    p->used = used, p->free = free_b, p->total = total;
    p->reserved = st->reserved;
    p->outside_total = 0;
    for (int c = 0; c < GM_DU_NCAT; c++) {
        p->outside[c] = st->outside[c] + round_to(st->pooled[c], DU_CHUNK);
        p->outside_total += p->outside[c];
    }
    p->not_recorded = (int64_t)used - (int64_t)p->reserved - (int64_t)p->outside_total;
}

static int cmp_site(const void *a, const void *b)
{
    const gm_du_site *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    if (x->cat != y->cat)
        return x->cat - y->cat;
    return x->stack < y->stack ? -1 : x->stack > y->stack;
}

/* What is held outside gpumem on dev now, grouped by (what, call site). */
static int sites_now(const sweep *s, int dev, gm_du_device *out)
{
    free(out->sites);
    out->sites = NULL;
    out->nsites = 0;
    size_t cap = 0;
    u64map idx = {0};
    for (size_t i = 0; i < s->nit; i++) {
        const du_item *t = &s->it[i];
        if (!t->live || t->dev != dev)
            continue;
        uint64_t key = (uint64_t)t->cat << 32 | t->stack;
        uint64_t *k = u64map_get(&idx, key);
        if (!k) {
            if (out->nsites == cap) {
                size_t c = cap ? cap * 2 : 16;
                gm_du_site *n = realloc(out->sites, c * sizeof *n);
                if (!n) {
                    u64map_free(&idx);
                    return -1;
                }
                out->sites = n, cap = c;
            }
            out->sites[out->nsites] = (gm_du_site){t->cat, t->stack, 0, 0};
            if (u64map_put(&idx, key, out->nsites) != 0) {
                u64map_free(&idx);
                return -1;
            }
            k = u64map_get(&idx, key);
            out->nsites++;
        }
        out->sites[*k].bytes += t->size;
        out->sites[*k].count++;
    }
    u64map_free(&idx);
    if (out->nsites)
        gm_sort(out->sites, out->nsites, sizeof *out->sites, cmp_site);
    return 0;
}

static gm_du_device *device_entry(gm_devused *u, int dev)
{
    for (size_t i = 0; i < u->ndev; i++)
        if (u->dev[i].device == dev)
            return &u->dev[i];
    gm_du_device *n = realloc(u->dev, (u->ndev + 1) * sizeof *n);
    if (!n)
        return NULL;
    u->dev = n;
    memset(&n[u->ndev], 0, sizeof *n);
    n[u->ndev].device = dev;
    return &u->dev[u->ndev++];
}

void gm_devused_free(gm_devused *u)
{
    for (size_t i = 0; i < u->ndev; i++)
        free(u->dev[i].sites);
    free(u->dev);
    memset(u, 0, sizeof *u);
}

gm_du_sweep *gm_devused_begin(void) { return calloc(1, sizeof(sweep)); }

/* One events row (dev -1 for a NULL device). 0, or -1 (out of memory). */
static inline __attribute__((always_inline)) int du_row(gm_du_sweep *sw, gm_devused *u, uint64_t seq,
                                                        unsigned kind, unsigned flags, int dev, uint64_t addr,
                                                        uint64_t size, uint64_t requested, uint64_t id,
                                                        uint32_t stack)
{
    sweep *s = (sweep *)sw;
    int rc = 0;
    du_state *st = &s->st[dev_index(dev)];
    uint64_t v;
    int64_t ni;
    if (addr == U64MAP_EMPTY && kind != REC_DEVICE_INFO)
        return 0; /* never a real address or handle: a damaged row */
    switch (kind) {
    case REC_ALLOC:
    case REC_ALLOC_ASYNC:
        if (rec_is_served(kind, flags))
            break; /* served by gpumem: inside its segments */
        if (u64map_del(&s->by_addr, addr, &v))
            drop_item(s, v); /* handed out again without a free */
        /* from a pool: the program's own (REC_F_POOL), or the default pool a stream-ordered
         * allocation passed through comes from; else a cuMemAlloc, in whole pages */
        ni = add_item(s, size, round_to(size, DU_PAGE),
                      (flags & REC_F_POOL) || kind == REC_ALLOC_ASYNC, stack,
                      (flags & REC_F_POOL) ? GM_DU_POOL : GM_DU_PASS, dev);
        if (ni < 0 || u64map_put(&s->by_addr, addr, (uint64_t)ni) != 0)
            rc = -1;
        s->addr_seen[addr_bit(addr) >> 6] |= 1ull << (addr_bit(addr) & 63);
        break;
    case REC_FREE:
    case REC_FREE_ASYNC:
        if (u64map_del(&s->by_addr, addr, &v))
            drop_item(s, v);
        break;
    case REC_ARRAY_ALLOC:
        ni = add_item(s, size, size, 0, stack, GM_DU_ARRAY, dev);
        if (ni < 0 || u64map_put(&s->by_array, addr, (uint64_t)ni) != 0)
            rc = -1;
        break;
    case REC_ARRAY_FREE:
        if (u64map_del(&s->by_array, addr, &v))
            drop_item(s, v);
        break;
    case REC_VMM_CREATE:
        if (u64map_del(&s->by_handle, addr, &v))
            drop_item(s, v); /* a handle value reused: the old one is gone */
        ni = add_item(s, size, size, 0, stack, GM_DU_VMM, dev);
        if (ni < 0 || u64map_put(&s->by_handle, addr, (uint64_t)ni) != 0)
            rc = -1;
        break;
    case REC_VMM_RELEASE: {
        uint64_t *h = u64map_get(&s->by_handle, addr);
        if (!h)
            break;
        s->it[*h].released = 1;
        if (!s->it[*h].nmaps) {
            drop_item(s, *h);
            u64map_del(&s->by_handle, addr, NULL);
        }
        break;
    }
    case REC_VMM_MAP: {
        uint64_t *h = requested ? u64map_get(&s->by_handle, id) : NULL;
        if (!h)
            break; /* recorded before 1.3 (no handle), or a handle created unseen */
        if (s->nmaps == s->capmaps) {
            size_t c = s->capmaps ? s->capmaps * 2 : 64;
            du_map *n = realloc(s->maps, c * sizeof *n);
            if (!n) {
                rc = -1;
                break;
            }
            s->maps = n, s->capmaps = c;
        }
        s->it[*h].nmaps++;
        s->maps[s->nmaps++] = (du_map){addr, size, *h};
        break;
    }
    case REC_VMM_UNMAP:
        for (size_t i = 0; i < s->nmaps;) {
            du_map *mp = &s->maps[i];
            if (mp->va >= addr && mp->va - addr < size) {
                du_item *t = &s->it[mp->item];
                if (t->nmaps && --t->nmaps == 0 && t->released && t->live)
                    drop_item(s, mp->item);
                *mp = s->maps[--s->nmaps];
            } else {
                i++;
            }
        }
        break;
    case REC_SEG_MAP:
    case REC_DRIVER_ALLOC:
        st->reserved += size;
        break;
    case REC_SEG_UNMAP:
    case REC_DRIVER_FREE:
        st->reserved -= size < st->reserved ? size : st->reserved;
        break;
    case REC_DEVICE_INFO: {
        gm_du_device *e = device_entry(u, dev_index(dev));
        if (!e) {
            rc = -1;
            break;
        }
        int di = dev_index(dev);
        /* addr = free, size = used, requested = total */
        if (id == REC_DEVINFO_START && !e->start.have)
            point_at(s, di, &e->start, seq, addr, size, requested);
        else if (id == REC_DEVINFO_PEAK && (!e->peak.have || size > e->peak.used)) {
            point_at(s, di, &e->peak, seq, addr, size, requested);
            if (sites_now(s, di, e) != 0)
                rc = -1;
        } else if (id == REC_DEVINFO_EXIT)
            point_at(s, di, &e->exit, seq, addr, size, requested);
        break;
    }
    default:
        break;
    }
    return rc;
}

/* The rows converted as the sweep's SQL converts its values (gm_analyze.c's sweep_fn): a row's
 * call here, not one per row, for the sweep's millions of events. */
int gm_devused_rows(gm_du_sweep *sw, gm_devused *u, const gm_event_row *r, size_t n)
{
    sweep *s = (sweep *)sw;
    for (size_t i = 0; i < n; i++, r++) {
        /* most rows first, as du_row takes them, without its switch (an indirect jump that
         * rows of alternating kinds mispredict): gpumem's own allocations, which it passes
         * over, and frees */
        unsigned kind = (unsigned)(int)r->kind, flags = (unsigned)(int)r->flags;
        if (rec_is_served(kind, flags))
            continue;
        if (kind == REC_FREE || kind == REC_FREE_ASYNC) {
            uint64_t v, addr = (uint64_t)r->addr;
            uint32_t b = addr_bit(addr);
            if ((s->addr_seen[b >> 6] >> (b & 63) & 1) && addr != U64MAP_EMPTY && u64map_del(&s->by_addr, addr, &v))
                drop_item(s, v);
            continue;
        }
        if (du_row(sw, u, (uint64_t)r->seq, (unsigned)(int)r->kind, (unsigned)(int)r->flags, (int)r->device,
                   (uint64_t)r->addr, (uint64_t)r->size, (uint64_t)r->requested, (uint64_t)r->alloc_id,
                   (uint32_t)r->stack) != 0)
            return -1;
    }
    return 0;
}

const uint64_t *gm_devused_addr_filter(const gm_du_sweep *sw) { return ((const sweep *)sw)->addr_seen; }

void gm_devused_end(gm_du_sweep *sw)
{
    sweep *s = (sweep *)sw;
    if (!s)
        return;
    u64map_free(&s->by_addr);
    u64map_free(&s->by_array);
    u64map_free(&s->by_handle);
    free(s->it);
    free(s->maps);
    free(s);
}

int gm_devused_compute(gm_db *d, gm_devused *u, char *err, size_t errsz)
{
    memset(u, 0, sizeof *u);
    if (d->schema_major == 1 && d->schema_minor < 3)
        return 0; /* recorded before the samples existed */
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT seq, kind, flags, device, addr, size, requested, alloc_id, "
                           "stack FROM events WHERE kind IN (1,2,3,4,11,12,14,15,18,19,22,23,24,"
                           "27,28) ORDER BY seq",
                           -1, &q, NULL) != SQLITE_OK) {
        snprintf(err, errsz, "%s: cannot read events: %s", d->path, sqlite3_errmsg(d->db));
        return -1;
    }
    gm_du_sweep *s = gm_devused_begin();
    if (!s) {
        sqlite3_finalize(q);
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    int rc = 0;
    while (rc == 0 && sqlite3_step(q) == SQLITE_ROW)
        rc = du_row(s, u, (uint64_t)sqlite3_column_int64(q, 0),
                    (unsigned)sqlite3_column_int(q, 1), (unsigned)sqlite3_column_int(q, 2),
                    sqlite3_column_type(q, 3) == SQLITE_NULL ? -1 : sqlite3_column_int(q, 3),
                    (uint64_t)sqlite3_column_int64(q, 4), (uint64_t)sqlite3_column_int64(q, 5),
                    (uint64_t)sqlite3_column_int64(q, 6), (uint64_t)sqlite3_column_int64(q, 7),
                    (uint32_t)sqlite3_column_int64(q, 8));
    sqlite3_finalize(q);
    gm_devused_end(s);
    if (rc) {
        gm_devused_free(u);
        snprintf(err, errsz, "%s: out of memory reading the device account", d->path);
    }
    return rc;
}
