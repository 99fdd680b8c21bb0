/* rec_rows.c — the gm_rows virtual table: the writer's row buffers read in place by SQLite.
 *
 * Why. Binding costs SQLite ~90 instructions per cell (sqlite3_bind_int64: the statement's
 * checks, the mutex calls, the cell's release), and an `events` row has 13 cells. A virtual
 * table's xColumn hands a cell over for a third of that, and the INSERT .. SELECT loop that
 * reads it is as lean as the multi-row VALUES it replaces. With the rowid appends of
 * rec_rows.h, an `events` row costs about half the CPU it did (see tests/bench/rec_bench.c).
 *
 * The table is eponymous and table-valued: `gm_rows(?)` names it with its one hidden argument,
 * a pointer of type "gm_rows" (sqlite3_bind_pointer, so SQL text can never forge one). It has
 * REC_ROWS_MAX_COLS columns c0 .. c12; columns past the buffer's read as NULL.
 */
#include "snapshot/record/rec_rows.h"

#include <stdio.h>
#include <string.h>

#define PTR_TYPE "gm_rows"

typedef struct rows_cursor {
    sqlite3_vtab_cursor base;
    /* the buffer's fields, copied at xFilter so that xColumn reads one struct */
    const int64_t *row; /* the current row's cells */
    int64_t prev_key;   /* column 0 of the row before (rows->prev_key for row 0) */
    int64_t null_value;
    uint32_t null_cols;
    uint32_t check_cols; /* columns that may not read as their cell: null_cols, the append key,
                            and those past the buffer's */
    int cols, append_key, i, n;
} rows_cursor;

static int rows_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **out, char **err)
{
    (void)aux, (void)argc, (void)argv, (void)err;
    int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, "
                                      "c11, c12, src HIDDEN)");
    if (rc != SQLITE_OK) return rc;
    sqlite3_vtab *t = sqlite3_malloc(sizeof *t);
    if (!t) return SQLITE_NOMEM;
    memset(t, 0, sizeof *t);
    *out = t;
    return SQLITE_OK;
}

static int rows_disconnect(sqlite3_vtab *t)
{
    sqlite3_free(t);
    return SQLITE_OK;
}

/* The only plan: src = ? given, passed to xFilter as argv[0]. */
static int rows_best_index(sqlite3_vtab *t, sqlite3_index_info *info)
{
    (void)t;
    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        if (c->iColumn == REC_ROWS_MAX_COLS && c->op == SQLITE_INDEX_CONSTRAINT_EQ && c->usable) {
            info->aConstraintUsage[i].argvIndex = 1;
            info->aConstraintUsage[i].omit = 1;
            info->estimatedCost = 1;
            info->estimatedRows = 128;
            return SQLITE_OK;
        }
    }
    return SQLITE_CONSTRAINT; /* gm_rows without its argument */
}

static int rows_open(sqlite3_vtab *t, sqlite3_vtab_cursor **out)
{
    (void)t;
    rows_cursor *c = sqlite3_malloc(sizeof *c);
    if (!c) return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    *out = &c->base;
    return SQLITE_OK;
}

static int rows_close(sqlite3_vtab_cursor *c)
{
    sqlite3_free(c);
    return SQLITE_OK;
}

static int rows_filter(sqlite3_vtab_cursor *base, int idx, const char *idx_str, int argc,
                       sqlite3_value **argv)
{
    (void)idx, (void)idx_str;
    rows_cursor *c = (rows_cursor *)base;
    const rec_rows *r = argc > 0 ? sqlite3_value_pointer(argv[0], PTR_TYPE) : NULL;
    c->i = 0;
    c->n = r ? r->n : 0;
    if (r) {
        c->row = r->cells;
        c->cols = r->cols;
        c->null_cols = r->null_cols;
        c->null_value = r->null_value;
        c->append_key = r->append_key;
        c->prev_key = r->prev_key;
        c->check_cols = r->null_cols | (r->append_key ? 1u : 0u) |
                        (r->cols < 32 ? ~0u << r->cols : 0u);
    }
    return SQLITE_OK;
}

static int rows_next(sqlite3_vtab_cursor *base)
{
    rows_cursor *c = (rows_cursor *)base;
    c->prev_key = c->row[0];
    c->row += c->cols;
    c->i++;
    return SQLITE_OK;
}

static int rows_eof(sqlite3_vtab_cursor *base)
{
    const rows_cursor *c = (const rows_cursor *)base;
    return c->i >= c->n;
}

/* The hot path: one call per cell (13 per `events` row). A cell that is to read as NULL gets
 * no result call at all: "If the xColumn method implementation calls none of the functions
 * above, then the value of the column defaults to an SQL NULL" (SQLite, The Virtual Table
 * Mechanism, xColumn), which saves a call into SQLite per NULL cell. */
static int rows_column(sqlite3_vtab_cursor *base, sqlite3_context *ctx, int col)
{
    const rows_cursor *c = (const rows_cursor *)base;
    if (!((c->check_cols >> col) & 1)) { /* most cells: one test */
        sqlite3_result_int64(ctx, c->row[col]);
        return SQLITE_OK;
    }
    if ((unsigned)col >= (unsigned)c->cols) return SQLITE_OK;
    int64_t v = c->row[col];
    if (((c->null_cols >> col) & 1) && v == c->null_value) return SQLITE_OK;
    if (col == 0 && c->append_key && v - 1 == c->prev_key)
        return SQLITE_OK; /* the table's last rowid + 1: see rec_rows.h */
    sqlite3_result_int64(ctx, v);
    return SQLITE_OK;
}

static int rows_rowid(sqlite3_vtab_cursor *base, sqlite3_int64 *out)
{
    *out = ((const rows_cursor *)base)->i;
    return SQLITE_OK;
}

static sqlite3_module rows_module = {
    .iVersion = 0,
    .xCreate = NULL, /* eponymous only: never in the database's schema */
    .xConnect = rows_connect,
    .xBestIndex = rows_best_index,
    .xDisconnect = rows_disconnect,
    .xDestroy = NULL,
    .xOpen = rows_open,
    .xClose = rows_close,
    .xFilter = rows_filter,
    .xNext = rows_next,
    .xEof = rows_eof,
    .xColumn = rows_column,
    .xRowid = rows_rowid,
};

int rec_rows_register(sqlite3 *db)
{
    return sqlite3_create_module(db, "gm_rows", &rows_module, NULL);
}

uint32_t rec_rows_same(const rec_rows *rows, uint32_t candidates)
{
    uint32_t same = 0;
    const size_t stride = (size_t)rows->cols, n = rows->n > 0 ? (size_t)rows->n : 0;
    for (uint32_t m = candidates; m; m &= m - 1) {
        int c = __builtin_ctz(m);
        const int64_t *cell = rows->cells + c;
        if (c == 0 && rows->append_key) {
            /* NULL in every row: each key one more than the one before. The keys increase (see
             * append_key), so the first and the last tell. */
            if (n == 0 || (cell[0] - 1 == rows->prev_key &&
                           cell[(n - 1) * stride] - cell[0] == (int64_t)(n - 1)))
                same |= 1u;
            continue;
        }
        const int64_t *p = cell, *end = cell + n * stride;
        while (p < end && *p == *cell) p += stride;
        if (p >= end) same |= 1u << c;
    }
    return same;
}

int rec_rows_sql(char *out, size_t n, const char *table, int cols, uint32_t const_cols)
{
    size_t o = (size_t)snprintf(out, n, "INSERT OR FAIL INTO %s SELECT ", table);
    for (int c = 0; c < cols && o < n; c++)
        o += (size_t)snprintf(out + o, n - o, (const_cols >> c) & 1 ? "%s?%d" : "%sc%d",
                              c ? ", " : "", (const_cols >> c) & 1 ? c + 2 : c);
    if (o < n) o += (size_t)snprintf(out + o, n - o, " FROM gm_rows(?1)");
    return o < n ? 0 : -1;
}

int rec_rows_insert(sqlite3_stmt *st, rec_rows *rows)
{
    if (!st) return SQLITE_MISUSE; /* a statement that could not be prepared (the writer failed) */
    int rc = sqlite3_bind_pointer(st, 1, rows, PTR_TYPE, NULL);
    /* the constant columns from row 0; one that reads as NULL stays unbound (NULL) */
    for (uint32_t m = rows->const_cols; m && rc == SQLITE_OK; m &= m - 1) {
        int c = __builtin_ctz(m);
        int64_t v = rows->cells[c];
        if (!(((rows->null_cols >> c) & 1) && v == rows->null_value) && !(c == 0 && rows->append_key))
            rc = sqlite3_bind_int64(st, c + 2, v);
    }
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st); /* no pointer into the writer's buffer outlives the call */
    if (rc == SQLITE_DONE && rows->append_key && rows->n > 0)
        rows->prev_key = rows->cells[(size_t)(rows->n - 1) * (size_t)rows->cols];
    return rc;
}
