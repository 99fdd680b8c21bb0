/* rec_rows.h — buffered integer rows handed to SQLite in one statement, without binding.
 *
 * The writer inserts its rows as `INSERT INTO t SELECT c0, c1, .. FROM gm_rows(?)`, the
 * parameter bound with sqlite3_bind_pointer to a rec_rows. gm_rows is an eponymous virtual
 * table of this connection (nothing of it is written into the database file): it reads the
 * cells straight from the writer's buffer, which costs a third of binding each cell as a
 * parameter. Internal to snapshot/ (the writer).
 */
#ifndef GPUMEM_SNAPSHOT_REC_ROWS_H
#define GPUMEM_SNAPSHOT_REC_ROWS_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#define REC_ROWS_MAX_COLS 13

typedef struct rec_rows {
    const int64_t *cells; /* n rows of cols cells, row-major */
    int n, cols;
    uint32_t null_cols; /* bit c: a cell of column c equal to null_value reads as NULL */
    int64_t null_value;
    /* Rowid appends. With append_key set, column 0 reads as NULL where it is one more than
     * the key before it (prev_key for row 0): SQLite then takes the table's last rowid + 1,
     * which is the same value, by its append path instead of a search of the whole b-tree
     * per row. Only for a table whose rows all come through here in increasing order of
     * column 0, so that its last rowid is prev_key. */
    int append_key;
    int64_t prev_key;
    /* Columns given once per statement. Bit c: column c reads the same in every row (the
     * same cell; for the append key, NULL in every row), and the statement (rec_rows_sql
     * with this mask) reads parameter ?c+2 there instead of the cell. A cell costs SQLite an
     * opcode and a call into xColumn per row, a parameter a register copy. */
    uint32_t const_cols;
} rec_rows;

/* Registers gm_rows on db (once per connection). 0 or an SQLite error code. */
int rec_rows_register(sqlite3 *db);

/* The columns among candidates that read the same in every row (all of them when there is
 * no row): the same cell, or for column 0 of an append_key buffer, NULL. */
uint32_t rec_rows_same(const rec_rows *rows, uint32_t candidates);

/* "INSERT OR FAIL INTO <table> SELECT c0, ?3, c2 .. FROM gm_rows(?1)": cols columns, ?c+2 for
 * each column c of const_cols. 0, or -1 when out is too small.
 * OR FAIL: the rows never break a constraint, and without ABORT's undo SQLite keeps no
 * statement journal (a copy of each page the statement changes, and a check per row). An
 * error midway is the writer's failure either way: it rolls back the whole transaction. */
int rec_rows_sql(char *out, size_t n, const char *table, int cols, uint32_t const_cols);

/* Runs st (a prepared `... FROM gm_rows(?1)`, built for rows->const_cols) over rows: binds,
 * steps, resets. SQLITE_DONE when every row went in. */
int rec_rows_insert(sqlite3_stmt *st, rec_rows *rows);

#endif
