/* snapshot_fuzz_db.c — libFuzzer target: mutated database files through the whole reading
 * path of `gpumem report` and `gpumem leaks` (open + validate, load + sweep, both printers,
 * text and JSON). The property: any file gives either a refusal with a message or a report,
 * never a crash, a sanitizer report, or a hang.
 * Each input is opened in memory (gm_db_open_mem: gm_db_open's checks after its file checks, on
 * the input itself, read-only, or a copy when its header says WAL): no file, journal or WAL
 * per input.
 * Build: clang -fsanitize=fuzzer,address,undefined (see snapshot/module.mk); seeds: real
 * databases written by the recorder (tests/fuzz/corpus/snapshot_db). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "snapshot/analyze/gm_report.h"
#include "snapshot/formats/gm_formats.h"

/* Each input is a new connection, and each connection's page cache starts with one bulk
 * allocation of 20 pages (~170 KB at gpumem's 8 KiB pages): past ASan's largest size class, so
 * an mmap, page faults and an munmap per input, ~12% of the target's page faults for nothing
 * (the image's pages are served by pointer). No bulk: the cache takes its few pages one by one.
 * Allocation only; what SQLite reads and returns is the same. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    sqlite3_config(SQLITE_CONFIG_PAGECACHE, (void *)0, 0, 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    gm_db d;
    gm_model m;
    char err[8192];
    if (gm_db_open_mem("fuzz.db", data, size, &d, err, sizeof err) == 0) {
        if (gm_model_load(&d, &m, 0, err, sizeof err) == 0) {
            uint64_t leaked;
            gm_expand_inlines(&m); /* inline chains read from the file (no libdw: no disk) */
            gm_report(&d, &m, &(gm_opts){0, 5, 0, 1}, devnull);
            gm_report(&d, &m, &(gm_opts){1, 5, 0, 1}, devnull);
            gm_leaks(&d, &m, &(gm_opts){0, 5, 1, 1}, devnull, &leaked);
            gm_leaks(&d, &m, &(gm_opts){1, 5, 0, 1}, devnull, &leaked);
        }
        gm_model_free(&m);
        gm_export_trace(&d, devnull);
        gm_db_close(&d);
    } else if (!err[0]) {
        abort(); /* a refusal must say why */
    }
    return 0;
}
