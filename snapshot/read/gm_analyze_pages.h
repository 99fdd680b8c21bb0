/* gm_analyze_pages.h — the events table read from its B-tree pages (gm_analyze_pages.c), else
 * the same rows through SQLite, for the sweeps over every event (gm_analyze.c's, frag's) and the
 * model of advise, frag and tune (gm_advise.c). Every caller reads "pages, else SQLite, the same
 * callback". Internal to snapshot/'s readers. */
#ifndef GPUMEM_SNAPSHOT_GM_ANALYZE_PAGES_H
#define GPUMEM_SNAPSHOT_GM_ANALYZE_PAGES_H

#include <stddef.h>
#include <stdint.h>

#include "snapshot/read/gm.h"

/* One events row as the sweep's SQL would have handed it over: each value what
 * sqlite3_value_int64 gives for the cell (NULL: 0), seq the rowid, device -1 for NULL (the
 * query's coalesce(device, -1)). */
typedef struct gm_event_row {
    int64_t seq, kind, flags, addr, size, stack, range, device, requested, alloc_id, stream, t;
} gm_event_row;

/* Rows of one leaf page, in seq order. Returns 0, or nonzero to stop (out of memory). */
typedef int (*gm_event_rows_fn)(void *ctx, const gm_event_row *rows, size_t n);

enum {
    GM_PAGES_DONE = 0,    /* every row delivered, in seq order */
    GM_PAGES_NO = 1,      /* not read this way (no row delivered): read the events through SQLite */
    GM_PAGES_RESTART = 2, /* something unexpected after rows were delivered: start again through SQLite */
    GM_PAGES_STOPPED = 3, /* fn returned nonzero */
    GM_SQL_NOQUERY = 4,   /* gm_events_sql: the query could not be made (no row delivered) */
    GM_SQL_ERROR = 5      /* gm_events_sql: SQLite stopped at an error (a damaged file) after the
                           * rows before it were delivered; sqlite3_errmsg says which */
};

/* Reads every row of `events` in seq order from the table's pages, inside one read transaction
 * of d's connection. Taken only where the rows are exactly what SQLite would return; anything
 * else gives GM_PAGES_NO or GM_PAGES_RESTART (see the file's comment). On a scoped d
 * (gm_db_scope_device) the rows of the TEMP view `events` only: device d->scoped - 1's and those
 * of no device. GPUMEM_SWEEP=sql in the environment: GM_PAGES_NO always (SQLite reads every
 * caller's events, for comparing); GPUMEM_SWEEP=pages: a line on stderr for each GM_PAGES_NO or
 * GM_PAGES_RESTART (for tests that a command's sweeps read the pages). */
int gm_events_pages(gm_db *d, gm_event_rows_fn fn, void *ctx);
/* The same, with the rows' t and stream left 0 where they are decoded from the pages (through
 * SQLite they are read as ever), a device free's (REC_FREE, REC_FREE_ASYNC) size, requested,
 * stack, device and alloc_id 0 too, and a device allocation's (REC_ALLOC, REC_ALLOC_ASYNC)
 * alloc_id: for a sweep that reads none of them (gm_model_load's, the device account's), two of
 * a row's eleven columns fewer to decode, seven of a free's, three of an allocation's. */
int gm_events_pages_lean(gm_db *d, gm_event_rows_fn fn, void *ctx);

/* The same rows through SQLite (one sqlite3_step over the table, each row handed to C by a
 * function in the query's WHERE, a batch at a time): where gm_events_pages answered GM_PAGES_NO,
 * or GM_PAGES_RESTART once the caller has dropped what it made of the rows. GM_PAGES_DONE,
 * GM_PAGES_STOPPED, GM_SQL_NOQUERY or GM_SQL_ERROR. */
int gm_events_sql(gm_db *d, gm_event_rows_fn fn, void *ctx);

#endif
