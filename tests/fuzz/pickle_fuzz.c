/* pickle_fuzz.c — libFuzzer target: any bytes through `gpumem import`'s whole path (the pickle
 * reader of gm_pickle.c, then the snapshot's conversion into a database, in memory). The
 * property: any input gives either a refusal with a one-line message or a database, never a
 * crash, a sanitizer report, a leak or a hang; and the reader alone, with a tiny memory budget,
 * refuses rather than exceed it.
 * Build: clang -fsanitize=fuzzer,address,undefined (see snapshot/module.mk); corpus:
 * tests/fuzz/corpus/pickle (snapshots as PyTorch pickles them, hostile and damaged pickles). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot/analyze/gm_report.h"
#include "snapshot/formats/gm_formats.h"
#include "snapshot/formats/gm_pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[8192];
    uint64_t events = 0;
    err[0] = 0;
    if (gm_import_pickle(data, size, "fuzz", ":memory:", &events, err, sizeof err) != 0) {
        if (!err[0] || strchr(err, '\n')) abort(); /* a refusal always says why, on one line */
    }
    gpk_doc doc;
    if (gpk_parse(data, size, 4096, &doc, err, sizeof err) == 0 && doc.bytes > 4096) abort();
    gpk_free(&doc);
    return 0;
}
