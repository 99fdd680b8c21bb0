/* gm_sql_temp.c — what `gpumem sql` shows beside the file's own tables: TEMP tables, in the
 * connection's temp schema only, that give a query the names gm_sym.c found for native frames
 * (frames, inlines and the stack_frames view over them, shadowing the file's) and each stack's
 * call site by the commands' rule (stack_sites). Nothing here is written to the file. It sits
 * above both the symbolizer (gm_sym.c) and the model's stack rules (gm_analyze.c), which is why
 * it is a file of its own: either of them holding it would make the two depend on each other.
 */
#include "snapshot/read/gm.h"

#include <stdlib.h>
#include <string.h>

/* TEMP table stack_sites: each stack's call site as the commands name it (gm_stack_site: the
 * first frame that is the program's own, past gpumem, the CUDA libraries and CUDA's header
 * wrappers; in a Python program its innermost frame of user code). A query joining stack_frames
 * at a fixed depth gets the CUDA runtime's frame or a header wrapper's, and in a recording made
 * before the recorder left gpumem's own frames out (rec_add_own_code) gpumem's (depth 0-4, as many
 * as the path the call took gave): this is the one rule in SQL. `depth` is
 * the recorded frame holding the site (stack_frames.depth); a site inlined into that frame is
 * named by its own function and line; C++ names are demangled, as the reports print them;
 * `site` is the site with its caller as the reports print it (gm_site_desc). Needs the symbols, so it exists only here, never in the
 * file. SQLITE_OK or an error code. */
static int stack_sites_temp(sqlite3 *db, const gm_model *m) {
    int rc = sqlite3_exec(db, "CREATE TEMP TABLE stack_sites (stack INTEGER PRIMARY KEY, depth INTEGER, "
                              "function TEXT, file TEXT, line INTEGER, module TEXT, python INTEGER, site TEXT)",
                          NULL, NULL, NULL);
    sqlite3_stmt *q = NULL, *ins = NULL;
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "SELECT DISTINCT stack FROM main.stacks", -1, &q, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "INSERT INTO temp.stack_sites VALUES (?,?,?,?,?,?,?,?)", -1, &ins, NULL);
    while (rc == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW) {
        uint32_t stack = (uint32_t)sqlite3_column_int64(q, 0);
        long fi = gm_stack_site(m, stack);
        if (fi < 0) continue;
        const gm_frame *f = &m->frames[fi];
        /* the recorded depth: logical frames of gm_expand_inlines follow their recorded frame */
        size_t len, depth = 0;
        gm_stack_frame(m, stack, 0, &len);
        for (size_t d = 0, rec = 0; d < len; d++) {
            long g = gm_stack_frame(m, stack, d, NULL);
            if (g >= 0 && m->frames[g].inl_depth == 0 && d > 0) rec++;
            if (g == fi) {
                depth = rec;
                break;
            }
        }
        const char *mod = f->module && f->module <= m->nmods ? m->mods[f->module - 1].path : NULL;
        sqlite3_bind_int64(ins, 1, stack);
        sqlite3_bind_int64(ins, 2, (sqlite3_int64)depth);
        char *readable = gm_readable_function(f->function); /* as the reports print it */
        sqlite3_bind_text(ins, 3, readable ? readable : f->function, -1, SQLITE_TRANSIENT);
        free(readable);
        sqlite3_bind_text(ins, 4, f->file, -1, SQLITE_STATIC);
        if (f->function || f->file) sqlite3_bind_int64(ins, 5, f->line);
        else sqlite3_bind_null(ins, 5);
        sqlite3_bind_text(ins, 6, mod, -1, SQLITE_STATIC);
        sqlite3_bind_int(ins, 7, f->python);
        /* the site with its caller, the very string report prints: a wrapper (t_alloc_on) is
         * every allocation's site in some programs, and only its caller tells them apart */
        char site[1024];
        gm_site_desc(m, stack, site, sizeof site);
        sqlite3_bind_text(ins, 8, site, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(ins) != SQLITE_DONE) rc = SQLITE_ERROR;
        sqlite3_reset(ins);
        sqlite3_clear_bindings(ins);
    }
    sqlite3_finalize(q);
    sqlite3_finalize(ins);
    return rc;
}

/* TEMP tables frames and inlines (and the stack_frames view over them), copies of the file's
 * with the symbolized names in: unqualified names in a query resolve to TEMP objects first, so
 * `gpumem sql` queries read names the file never stored. Nothing is written to the file (only
 * the connection's own temp schema, with query_only lifted while it is built). 0 or -1. */
int gm_symbols_temp(gm_db *d, const gm_model *m) {
    sqlite3 *db = d->db;
    int rc = sqlite3_exec(db, "PRAGMA query_only=0", NULL, NULL, NULL);
    char *view = NULL;
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "SELECT sql FROM main.sqlite_master WHERE type = 'view' AND name = 'stack_frames'", -1,
                           &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(s, 0);
        const char *v = t ? strstr(t, "VIEW") : NULL;
        if (v) view = sqlite3_mprintf("CREATE TEMP %s", v);
    }
    sqlite3_finalize(s);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "BEGIN; CREATE TEMP TABLE frames AS SELECT * FROM main.frames; "
                              "CREATE TEMP TABLE inlines (frame INTEGER, depth INTEGER, function TEXT, file TEXT, "
                              "line INTEGER, PRIMARY KEY (frame, depth)) WITHOUT ROWID;",
                          NULL, NULL, NULL);
    if (rc == SQLITE_OK && gm_table_exists(d, "inlines"))
        sqlite3_exec(db, "INSERT OR REPLACE INTO temp.inlines SELECT * FROM main.inlines", NULL, NULL, NULL);
    sqlite3_stmt *uf = NULL, *ui = NULL;
    if (rc == SQLITE_OK &&
        sqlite3_prepare_v2(db, "UPDATE temp.frames SET function=?, file=?, line=?, symbolized=1 WHERE id=?", -1, &uf,
                           NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO temp.inlines VALUES (?,?,?,?,?)", -1, &ui, NULL) == SQLITE_OK) {
        for (size_t i = 0; i < m->nframes; i++) {
            const gm_frame *f = &m->frames[i];
            if (!f->symbolized || !f->module || f->inl_depth) continue;
            for (uint32_t k = 0; k < f->ninl; k++) {
                sqlite3_bind_int64(ui, 1, f->id);
                sqlite3_bind_int64(ui, 2, k + 1);
                sqlite3_bind_text(ui, 3, f->inl[k].function, -1, SQLITE_STATIC);
                sqlite3_bind_text(ui, 4, f->inl[k].file, -1, SQLITE_STATIC);
                sqlite3_bind_int64(ui, 5, f->inl[k].line);
                sqlite3_step(ui);
                sqlite3_reset(ui);
            }
            sqlite3_bind_text(uf, 1, f->function, -1, SQLITE_STATIC);
            sqlite3_bind_text(uf, 2, f->file, -1, SQLITE_STATIC);
            sqlite3_bind_int64(uf, 3, f->line);
            sqlite3_bind_int64(uf, 4, f->id);
            sqlite3_step(uf);
            sqlite3_reset(uf);
        }
    } else {
        rc = SQLITE_ERROR;
    }
    sqlite3_finalize(uf);
    sqlite3_finalize(ui);
    if (rc == SQLITE_OK && view) rc = sqlite3_exec(db, view, NULL, NULL, NULL);
    sqlite3_free(view);
    if (rc == SQLITE_OK) rc = stack_sites_temp(db, m);
    sqlite3_exec(db, rc == SQLITE_OK ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
    sqlite3_exec(db, "PRAGMA query_only=1", NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : -1;
}
