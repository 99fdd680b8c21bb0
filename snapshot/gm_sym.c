/* gm_sym.c — symbolizing recorded frames after the run, with elfutils libdw (dwfl).
 *
 * The recorder stores each return address as (module path, build-id, offset in the ELF
 * file's own address layout). Here each module is reported to an offline Dwfl session from its
 * path; when its build-id differs from the recorded one (the binary was rebuilt, or this is
 * another machine) the frames stay unsymbolized rather than wrong. libdw's standard debuginfo
 * search (build-id under /usr/lib/debug, .gnu_debuglink) finds split debug info. Lookups use
 * offset - 1: the stored addresses are return addresses, which point after the call and may
 * belong to the next line or even the next function.
 *
 * Results go back into `frames` (function, file, line, symbolized = 1) when the database is
 * closed and writable, so the work is done once per database; otherwise they stay in memory.
 */
#include "snapshot/gm.h"

#include <elfutils/libdwfl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *debuginfo_path;
static const Dwfl_Callbacks offline_callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &debuginfo_path,
};

static int build_id_matches(Dwfl_Module *mod, const char *want) {
    if (!want || !*want) return 1; /* nothing recorded to compare with */
    const unsigned char *bits;
    GElf_Addr vaddr;
    int n = dwfl_module_build_id(mod, &bits, &vaddr);
    if (n <= 0) return 0;
    char hex[2 * 64 + 1];
    int k = n > 20 ? 20 : n;
    for (int i = 0; i < k; i++) snprintf(hex + 2 * i, 3, "%02x", bits[i]);
    return strcmp(hex, want) == 0;
}

size_t gm_symbolize(gm_db *d, gm_model *m) {
    size_t done = 0;
    for (size_t mi = 0; mi < m->nmods; mi++) {
        gm_module *mod = &m->mods[mi];
        int pending = 0;
        for (size_t i = 0; i < m->nframes && !pending; i++)
            pending = m->frames[i].module == mi + 1 && !m->frames[i].symbolized;
        if (!pending || !mod->path || mod->path[0] != '/' || access(mod->path, R_OK) != 0) continue;
        Dwfl *dwfl = dwfl_begin(&offline_callbacks);
        if (!dwfl) continue;
        Dwfl_Module *dm = dwfl_report_offline(dwfl, mod->path, mod->path, -1);
        dwfl_report_end(dwfl, NULL, NULL);
        GElf_Addr bias = 0;
        if (dm && build_id_matches(dm, mod->build_id) && dwfl_module_getelf(dm, &bias)) {
            for (size_t i = 0; i < m->nframes; i++) {
                gm_frame *f = &m->frames[i];
                if (f->module != mi + 1 || f->symbolized) continue;
                GElf_Addr addr = f->offset + bias - (f->offset ? 1 : 0);
                const char *fn = dwfl_module_addrname(dm, addr);
                Dwfl_Line *ln = dwfl_module_getsrc(dm, addr);
                int line = 0;
                const char *file = ln ? dwfl_lineinfo(ln, NULL, &line, NULL, NULL, NULL) : NULL;
                free(f->function), free(f->file);
                f->function = fn ? strdup(fn) : NULL;
                f->file = file ? strdup(file) : NULL;
                f->line = line > 0 ? (uint32_t)line : 0;
                f->symbolized = 1;
                done++;
            }
        }
        dwfl_end(dwfl);
    }
    if (done && d->writable && d->closed) {
        /* write back once, so the next report (or another machine) need not redo it */
        sqlite3_stmt *s;
        if (sqlite3_exec(d->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK &&
            sqlite3_prepare_v2(d->db, "UPDATE frames SET function=?, file=?, line=?, symbolized=1 "
                                      "WHERE id=?", -1, &s, NULL) == SQLITE_OK) {
            for (size_t i = 0; i < m->nframes; i++) {
                gm_frame *f = &m->frames[i];
                if (!f->symbolized || !f->module) continue;
                sqlite3_bind_text(s, 1, f->function, -1, SQLITE_STATIC);
                sqlite3_bind_text(s, 2, f->file, -1, SQLITE_STATIC);
                sqlite3_bind_int64(s, 3, f->line);
                sqlite3_bind_int64(s, 4, f->id);
                sqlite3_step(s);
                sqlite3_reset(s);
            }
            sqlite3_finalize(s);
            sqlite3_exec(d->db, "COMMIT", NULL, NULL, NULL);
        } else {
            sqlite3_exec(d->db, "ROLLBACK", NULL, NULL, NULL);
        }
    }
    return done;
}
