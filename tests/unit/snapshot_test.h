/* snapshot_test.h — helpers shared by the snapshot_* unit tests. */
#ifndef SNAPSHOT_TEST_H
#define SNAPSHOT_TEST_H

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A fresh private directory for the test's files. */
static inline const char *snap_tmpdir(void) {
    static char dir[256];
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/snaptest-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir)) abort();
    }
    return dir;
}

static inline void snap_path(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", snap_tmpdir(), name);
}

/* One integer from a query on the database at path (-1 on error). */
static inline long long snap_q(const char *path, const char *sql) {
    sqlite3 *db;
    long long v = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return -1;
    }
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int64(s, 0);
    else
        fprintf(stderr, "query failed: %s: %s\n", sql, sqlite3_errmsg(db));
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

static inline void snap_q_text(const char *path, const char *sql, char *out, size_t n) {
    sqlite3 *db;
    out[0] = 0;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *s;
        if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW &&
            sqlite3_column_text(s, 0))
            snprintf(out, n, "%s", (const char *)sqlite3_column_text(s, 0));
        sqlite3_finalize(s);
    }
    sqlite3_close(db);
}

#endif
