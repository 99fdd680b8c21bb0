/* gm_devused.h — "device used (what nvidia-smi shows)": the driver's own figure, split into
 * what gpumem reserved, what it recorded outside its allocator and what nobody recorded
 * (analysis in gm_devused.c; printed by gpumem report, text and --json). */
#ifndef GPUMEM_SNAPSHOT_GM_DEVUSED_H
#define GPUMEM_SNAPSHOT_GM_DEVUSED_H

#include <stdint.h>
#include <stdio.h>

#include "snapshot/read/gm.h"
#include "snapshot/read/gm_analyze_pages.h"

/* What is held outside gpumem's allocator, by what it is. */
enum { GM_DU_VMM, GM_DU_POOL, GM_DU_PASS, GM_DU_ARRAY, GM_DU_NCAT };

/* One cuMemGetInfo sample and the account at that point of the event order. */
typedef struct gm_du_point {
    int have;
    uint64_t seq;
    uint64_t used, free, total;  /* the driver's figures */
    uint64_t reserved;           /* gpumem's segments */
    uint64_t outside[GM_DU_NCAT];
    uint64_t outside_total;
    int64_t not_recorded;        /* used - reserved - outside (negative only if the driver's
                                    figure moved between the event and the sample) */
} gm_du_point;

/* Memory outside gpumem at the peak, by what and call site. */
typedef struct gm_du_site {
    int cat;
    uint32_t stack;
    uint64_t bytes, count;
} gm_du_site;

typedef struct gm_du_device {
    int device;
    gm_du_point start, peak, exit;
    gm_du_site *sites; /* at the peak, largest first */
    size_t nsites;
} gm_du_device;

typedef struct gm_devused {
    gm_du_device *dev;
    size_t ndev;
} gm_devused;

/* Sweeps the events once. 0 (ndev 0 when the recording has no samples: older than schema 1.3,
 * or no context was current), or -1 with err set. */
int gm_devused_compute(gm_db *d, gm_devused *out, char *err, size_t errsz);
void gm_devused_free(gm_devused *u);
/* The same sweep driven from outside, the events rows handed over in seq order, any number at
 * a time (gm_model_load runs it inside its own sweep, a row at a time, so `gpumem report` reads
 * the events once): begin (NULL: out of memory), rows (device -1 for a NULL device; -1 when out
 * of memory: stop, free u), end. */
typedef struct gm_du_sweep gm_du_sweep;
gm_du_sweep *gm_devused_begin(void);
int gm_devused_rows(gm_du_sweep *s, gm_devused *u, const gm_event_row *rows, size_t n);
void gm_devused_end(gm_du_sweep *s);
/* Rows that change nothing in the account, which a sweep may leave out (gm_model_load's hands it
 * the others one at a time): a device allocation gpumem served (REC_ALLOC or REC_ALLOC_ASYNC
 * with REC_F_CACHE_HIT or REC_F_CACHE_MISS: inside its segments), and a device free (REC_FREE,
 * REC_FREE_ASYNC) whose address's bit (gm_devused_addr_bit) is clear in the filter: no
 * allocation outside gpumem was ever handed over at an address of that bit. The filter lives as
 * long as s. */
enum { GM_DU_ADDR_WORDS = 1024 };
static inline uint32_t gm_devused_addr_bit(uint64_t addr) { return (uint32_t)((addr * 0x9e3779b97f4a7c15ull) >> 48); }
const uint64_t *gm_devused_addr_filter(const gm_du_sweep *s); /* GM_DU_ADDR_WORDS words */
const char *gm_devused_cat_name(int cat); /* "program_vmm", "pools", "pass_through", "arrays" */

#endif
