/* nvtx_fuzz.c — libFuzzer target: NVTX strings through the recorder and back out of the reader.
 *
 * Range and mark names come from the program, so they are untrusted text: any bytes, any length,
 * '/' (the path separator), "step N" with absurd numbers, deep nesting, pops without pushes,
 * start/end ranges ended twice or never. Each input is a script of such calls (first byte of a
 * record: the call; the rest up to the next 0 byte: the name), recorded into a fresh database
 * with allocation events in between, then read back: gm_db_open, the model (which parses the
 * "step N" phases), report, leaks and uses. Nothing may crash, and a database the recorder wrote
 * must always open.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "snapshot/gm.h"
#include "snapshot/rec.h"
#include "snapshot/rec_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[512];
    static FILE *devnull;
    if (!path[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/gpumem-nvtx-fuzz-%ld.db", t && *t ? t : "/tmp", (long)getpid());
        devnull = fopen("/dev/null", "w");
    }
    unlink(path);
    rec_options o = {.path = path, .stacks = 0, .fork_record = 0, .ring = 1024, .quiet = 1};
    if (rec_open(&o) != 0) abort(); /* a fresh path in a writable directory always opens */
    uint64_t ids[8] = {0}, addr = 0x10000;
    size_t i = 0;
    while (i < size) {
        uint8_t op = data[i++];
        const char *name = (const char *)data + i;
        size_t n = strnlen(name, size - i);
        char buf[4096];
        size_t m = n < sizeof buf - 1 ? n : sizeof buf - 1;
        memcpy(buf, name, m);
        buf[m] = 0;
        i += n + 1;
        switch (op % 8) {
        case 0: rec_range_push(op & 8 ? buf : NULL, buf); break;
        case 1: rec_range_pop(); break;
        case 2: rec_mark(NULL, buf); break;
        case 3: ids[op / 8 % 8] = rec_range_start(NULL, buf); break;
        case 4: rec_range_end(ids[op / 8 % 8]); break;
        case 5: rec_event(REC_ALLOC, 0, 0, addr, 512 + m, 500 + m, 0), rec_name(addr, buf), addr += 4096; break;
        case 6: if (addr > 0x10000) addr -= 4096, rec_event(REC_FREE, 0, 0, addr, 0, 0, 0); break;
        case 7: rec_thread_name((uint64_t)getpid(), buf); break;
        }
    }
    rec_test_reset(); /* closes the database and forgets the recorder's state for the next input */
    gm_db d;
    gm_model m;
    char err[8192];
    if (gm_db_open(path, &d, err, sizeof err) != 0) abort(); /* the recorder's own file must read */
    if (gm_model_load(&d, &m, 0, err, sizeof err) == 0) {
        uint64_t leaked;
        gm_report(&d, &m, &(gm_opts){0, 5, 0}, devnull);
        gm_report(&d, &m, &(gm_opts){1, 5, 0}, devnull);
        gm_leaks(&d, &m, &(gm_opts){0, 5, 1}, devnull, &leaked);
    }
    gm_model_free(&m);
    gm_db_close(&d);
    return 0;
}
