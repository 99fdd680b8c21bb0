/* snapshot_fuzz_db.c — libFuzzer target: mutated database files through the whole reading
 * path of `gpumem report` and `gpumem leaks` (open + validate, load + sweep, both printers,
 * text and JSON). The property: any file gives either a refusal with a message or a report,
 * never a crash, a sanitizer report, or a hang.
 * Build: clang -fsanitize=fuzzer,address,undefined (see snapshot/module.mk); seeds: a real
 * database written by the recorder (tests/fuzz/snapshot_fuzz.sh makes one). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "snapshot/gm.h"

static void remove_side_files(const char *p) {
    char s[600];
    snprintf(s, sizeof s, "%s-wal", p);
    unlink(s);
    snprintf(s, sizeof s, "%s-shm", p);
    unlink(s);
    snprintf(s, sizeof s, "%s-journal", p);
    unlink(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[512];
    static FILE *devnull;
    if (!path[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/gpumem-fuzz-%ld.db", t && *t ? t : "/tmp", (long)getpid());
        devnull = fopen("/dev/null", "w");
    }
    remove_side_files(path);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    gm_db d;
    gm_model m;
    char err[8192];
    if (gm_db_open(path, &d, err, sizeof err) == 0) {
        if (gm_model_load(&d, &m, 0, err, sizeof err) == 0) {
            uint64_t leaked;
            gm_expand_inlines(&m); /* inline chains read from the file (no libdw: no disk) */
            gm_report(&d, &m, &(gm_opts){0, 5, 0}, devnull);
            gm_report(&d, &m, &(gm_opts){1, 5, 0}, devnull);
            gm_leaks(&d, &m, &(gm_opts){0, 5, 1}, devnull, &leaked);
            gm_leaks(&d, &m, &(gm_opts){1, 5, 0}, devnull, &leaked);
        }
        gm_model_free(&m);
        gm_export_trace(&d, devnull);
        gm_db_close(&d);
    } else if (!err[0]) {
        abort(); /* a refusal must say why */
    }
    unlink(path);
    remove_side_files(path);
    return 0;
}
