/* nvtx_fuzz.c — libFuzzer target: NVTX strings from the program's NVTX calls to the reports.
 *
 * Range, mark, domain, registered-string, thread and region names come from the program, so
 * they are untrusted: any bytes, any length, '/' (the path separator), "step N" with absurd
 * numbers, wide strings with any wchar_t values, message types that do not exist, registered
 * handles never registered, deep nesting, pops without pushes, ranges ended twice or never.
 *
 * Each input is a script of NVTX calls, made through the toolkit's own NVTX3 headers, which
 * reach gpumem's handlers (preload/nvtx.c) the way a program's calls do: gpumem is linked in as
 * a statically injected tool (nvtx_fuzz_tool.c; the NVTX loader's last resort, with
 * NVTX_INJECTION64_PATH unset). A record is an operation byte, an argument byte (which slot,
 * which message type) and a name up to the next 0 byte.
 *
 * Two depths, chosen by a hash of the whole input (so a crash input reproduces alone):
 *   - every input: the NVTX layer alone — message types, wide strings narrowed, domains and
 *     registered strings mapped, the per-thread range paths composed and cut, the memory
 *     extension's region names;
 *   - one input in RECORD_EVERY, in addition: a whole recording, with allocation events in
 *     between, closed and read back (gm_db_open, the model that parses "step N" phases, both
 *     reports, leaks, every export format). Nothing may crash, and a database the recorder
 *     wrote must open.
 * A recording costs ~15 ms of CPU under ASan (a file, a writer thread, SQLite both ways), the
 * NVTX layer microseconds: with every input recorded, a campaign of 10 million inputs was ~2
 * days of a core (tests/fuzz/README.md, "Per-input cost").
 */
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#include "snapshot/analyze/gm_report.h"
#include "snapshot/formats/gm_formats.h"
#include "snapshot/record/rec.h"
#include "snapshot/record/rec_internal.h"
#include "tests/fuzz/nvtx_fuzz.h"

/* one input in RECORD_EVERY (by hash) also goes through a whole recording and its reports */
#ifndef RECORD_EVERY
#define RECORD_EVERY 128
#endif

/* the input's allocations: gpumem_name / nvtxMemRegionsName find the one holding a pointer */
enum { MAX_ALLOCS = 64 };
static struct alloc_rec {
    uint64_t addr, size;
} allocs[MAX_ALLOCS];
static int nallocs;

int nvtx_fuzz_recording;

int nvtx_fuzz_name(const void *ptr, const char *name) {
    if (!ptr || !name) return -1;
    uint64_t p = (uint64_t)(uintptr_t)ptr;
    for (int i = 0; i < nallocs; i++)
        if (p >= allocs[i].addr && p - allocs[i].addr < allocs[i].size) {
            if (nvtx_fuzz_recording) rec_name(allocs[i].addr, name);
            return 0;
        }
    return -1;
}

/* ---- the script -------------------------------------------------------------------------- */

enum { NSLOT = 8, NAME_MAX_BYTES = 4096 };

static uint64_t fnv1a(const uint8_t *d, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 0x100000001b3ull;
    return h;
}

/* the name's bytes as wide characters: bytes below 0x80 as themselves, the others spread
 * over the whole of wchar_t (negative values included) */
static void widen(const char *s, wchar_t *w, size_t cap) {
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++) {
        unsigned char b = (unsigned char)s[i];
        w[i] = b < 0x80 ? (wchar_t)b : (wchar_t)(int32_t)((uint32_t)b << 24 | (uint32_t)b << 9 | b);
    }
    w[i] = 0;
}

typedef struct script {
    nvtxDomainHandle_t dom[NSLOT];
    nvtxStringHandle_t str[NSLOT];
    nvtxRangeId_t id[NSLOT];
    char name[NAME_MAX_BYTES];
    wchar_t wname[NAME_MAX_BYTES];
    uint64_t next_addr;
} script;

/* an event attribute structure whose message is of the kind `v` picks: ASCII, Unicode,
 * registered (a handle of this input, or one never registered), no message, or a type that
 * does not exist */
static const nvtxEventAttributes_t *attr_of(script *s, unsigned v, unsigned k,
                                            nvtxEventAttributes_t *a) {
    memset(a, 0, sizeof *a);
    a->version = NVTX_VERSION;
    a->size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    switch (v % 8) {
    case 0: a->messageType = NVTX_MESSAGE_TYPE_ASCII, a->message.ascii = s->name; break;
    case 1: a->messageType = NVTX_MESSAGE_TYPE_UNICODE, a->message.unicode = s->wname; break;
    case 2: a->messageType = NVTX_MESSAGE_TYPE_REGISTERED, a->message.registered = s->str[k]; break;
    case 3: /* a handle value no one registered: a key that is not in the map */
        a->messageType = NVTX_MESSAGE_TYPE_REGISTERED;
        a->message.registered = (nvtxStringHandle_t)(uintptr_t)(0x1000 + 8 * k);
        break;
    case 4: a->messageType = NVTX_MESSAGE_TYPE_ASCII, a->message.ascii = NULL; break;
    case 5: a->messageType = NVTX_MESSAGE_TYPE_UNICODE, a->message.unicode = NULL; break;
    case 6: a->messageType = NVTX_MESSAGE_UNKNOWN; break;
    case 7: a->messageType = 0x7fff0000 | k, a->message.ascii = s->name; break;
    }
    a->colorType = NVTX_COLOR_ARGB, a->color = 0xff00ff00u;
    return v % 16 == 15 ? NULL : a; /* and no attribute structure at all */
}

static void alloc_event(script *s, size_t m) {
    if (nallocs == MAX_ALLOCS) return;
    uint64_t size = 512 + m;
    allocs[nallocs].addr = s->next_addr, allocs[nallocs].size = size;
    if (nvtx_fuzz_recording) rec_event(REC_ALLOC, 0, 0, s->next_addr, size, 500 + m, 0);
    s->next_addr += 4096, nallocs++;
}

static void free_event(void) {
    if (!nallocs) return;
    nallocs--;
    if (nvtx_fuzz_recording) rec_event(REC_FREE, 0, 0, allocs[nallocs].addr, 0, 0, 0);
}

/* nvtxMemRegionsRegister / nvtxMemRegionsName over the input's allocations and some other
 * addresses, element sizes as the program declares them (0: the structure's own) */
static void mem_ext(script *s, unsigned op, unsigned v, unsigned k) {
    static const size_t extra[] = {0, 0, 8, 24};
    uint64_t base = nallocs ? allocs[k % nallocs].addr : 0x10000;
    const void *ptrs[3] = {(const void *)(uintptr_t)base, (const void *)(uintptr_t)(base + 100 + k),
                           (const void *)(uintptr_t)(0xdead0000u + k)};
    size_t count = 1 + v % 3;
    if (op == 0) {
        size_t es = sizeof(nvtxMemVirtualRangeDesc_t) + extra[v / 4 % 4];
        _Alignas(16) unsigned char elems[3 * (sizeof(nvtxMemVirtualRangeDesc_t) + 24)];
        nvtxMemRegionHandle_t out[3];
        memset(elems, 0, sizeof elems);
        for (size_t i = 0; i < count; i++) {
            nvtxMemVirtualRangeDesc_t r = {4096, ptrs[i]};
            memcpy(elems + i * es, &r, sizeof r);
        }
        nvtxMemRegionsRegisterBatch_t b;
        memset(&b, 0, sizeof b);
        b.extCompatID = NVTX_EXT_COMPATID_MEM;
        b.structSize = sizeof b;
        b.regionType = v & 32 ? 0x77 : NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
        b.heap = NVTX_MEM_HEAP_HANDLE_PROCESS_WIDE;
        b.regionCount = count;
        b.regionDescElementSize = extra[v / 4 % 4] ? es : 0;
        b.regionDescElements = elems;
        b.regionHandleElementsOut = v & 64 ? NULL : out;
        nvtxMemRegionsRegister(s->dom[k], &b);
        return;
    }
    size_t es = sizeof(nvtxMemRegionNameDesc_t) + extra[v / 4 % 4];
    _Alignas(16) unsigned char elems[3 * (sizeof(nvtxMemRegionNameDesc_t) + 24)];
    memset(elems, 0, sizeof elems);
    for (size_t i = 0; i < count; i++) {
        nvtxMemRegionNameDesc_t e;
        memset(&e, 0, sizeof e);
        e.regionRefType = (v + i) & 16 ? NVTX_MEM_REGION_REF_TYPE_HANDLE : NVTX_MEM_REGION_REF_TYPE_POINTER;
        if (e.regionRefType == NVTX_MEM_REGION_REF_TYPE_HANDLE)
            e.region.handle = (nvtxMemRegionHandle_t)(uintptr_t)ptrs[(i + k) % 3];
        else
            e.region.pointer = ptrs[(i + k) % 3];
        nvtxEventAttributes_t a;
        const nvtxEventAttributes_t *ap = attr_of(s, v + (unsigned)i, k, &a);
        e.nameType = ap ? (uint32_t)ap->messageType : NVTX_MESSAGE_TYPE_ASCII;
        e.name = ap ? ap->message : (nvtxMessageValue_t){.ascii = s->name};
        memcpy(elems + i * es, &e, sizeof e);
    }
    nvtxMemRegionsNameBatch_t b;
    memset(&b, 0, sizeof b);
    b.extCompatID = NVTX_EXT_COMPATID_MEM;
    b.structSize = sizeof b;
    b.regionCount = v & 128 ? 0 : count;
    b.regionElementSize = extra[v / 4 % 4] ? es : 0;
    b.regionElements = v % 64 == 63 ? NULL : (const nvtxMemRegionNameDesc_t *)elems;
    nvtxMemRegionsName(s->dom[k], &b);
}

static void run_script(script *s, const uint8_t *data, size_t size) {
    size_t i = 0;
    while (i < size) {
        unsigned op = data[i++];
        unsigned arg = i < size ? data[i++] : 0;
        const char *name = (const char *)data + i;
        size_t n = strnlen(name, size - i);
        size_t m = n < NAME_MAX_BYTES - 1 ? n : NAME_MAX_BYTES - 1;
        memcpy(s->name, name, m);
        s->name[m] = 0;
        i += n + 1;
        widen(s->name, s->wname, NAME_MAX_BYTES);
        unsigned k = arg % NSLOT, v = arg / NSLOT;
        nvtxEventAttributes_t a;
        switch (op % 26) {
        case 0: nvtxRangePushA(s->name); break;
        case 1: nvtxRangePushW(s->wname); break;
        case 2: nvtxRangePushEx(attr_of(s, v, k, &a)); break;
        case 3: nvtxRangePop(); break;
        case 4: nvtxMarkA(s->name); break;
        case 5: nvtxMarkW(s->wname); break;
        case 6: nvtxMarkEx(attr_of(s, v, k, &a)); break;
        case 7: s->id[k] = nvtxRangeStartA(s->name); break;
        case 8: s->id[k] = nvtxRangeStartW(s->wname); break;
        case 9: s->id[k] = nvtxRangeStartEx(attr_of(s, v, k, &a)); break;
        case 10: nvtxRangeEnd(v & 1 ? (nvtxRangeId_t)arg << 40 : s->id[k]); break;
        case 11: s->dom[k] = nvtxDomainCreateA(s->name); break;
        case 12: s->dom[k] = nvtxDomainCreateW(s->wname); break;
        case 13: s->str[k] = nvtxDomainRegisterStringA(s->dom[v % NSLOT], s->name); break;
        case 14: s->str[k] = nvtxDomainRegisterStringW(s->dom[v % NSLOT], s->wname); break;
        case 15: nvtxDomainRangePushEx(s->dom[k], attr_of(s, v, k, &a)); break;
        case 16: nvtxDomainRangePop(s->dom[k]); break;
        case 17: nvtxDomainMarkEx(s->dom[k], attr_of(s, v, k, &a)); break;
        case 18: s->id[k] = nvtxDomainRangeStartEx(s->dom[k], attr_of(s, v, k, &a)); break;
        case 19: nvtxDomainRangeEnd(s->dom[k], s->id[v % NSLOT]); break;
        case 20: nvtxNameOsThreadA((uint32_t)getpid() + v, s->name); break;
        case 21: nvtxNameOsThreadW((uint32_t)getpid() + v, s->wname); break;
        case 22: alloc_event(s, m); break;
        case 23: free_event(); break;
        case 24: mem_ext(s, v & 1, arg, k); break;
        case 25:
            /* a domain destroyed: its handle stays a key (events may still name it) */
            nvtxDomainDestroy(s->dom[k]);
            if (v & 1) s->dom[k] = NULL;
            break;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[512];
    static FILE *devnull;
    static script s;
    if (!path[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/gpumem-nvtx-fuzz-%ld.db", t && *t ? t : "/tmp", (long)getpid());
        devnull = fopen("/dev/null", "w");
        /* the NVTX loader must find no library: the static injection is the one */
        unsetenv("NVTX_INJECTION64_PATH");
        unsetenv("GPUMEM_DEBUG_RANGES"); /* a test aid that keeps every call: not under test */
    }
    memset(&s, 0, sizeof s);
    s.next_addr = 0x10000;
    nallocs = 0;
    int record = fnv1a(data, size) % RECORD_EVERY == 0;
    nvtx_fuzz_recording = record;
    if (record) {
        unlink(path);
        rec_options o = {.path = path, .stacks = 0, .fork_record = 0, .ring = 1024, .quiet = 1};
        if (rec_open(&o) != 0) abort(); /* a fresh path in a writable directory always opens */
    }
    run_script(&s, data, size);
    if (record) {
        rec_test_reset(); /* closes the database (open ranges stay open in it) */
        nvtx_fuzz_recording = 0;
    }
    /* the thread's stack back to empty through the API (pops past the bottom are refused) */
    while (nvtxRangePop() >= 0) {
    }
    gm_nvtx_test_reset();
    if (!record) return 0;
    gm_db d;
    gm_model m;
    char err[8192];
    if (gm_db_open(path, &d, err, sizeof err) != 0) abort(); /* the recorder's own file must read */
    if (gm_model_load(&d, &m, 0, err, sizeof err) == 0) {
        uint64_t leaked;
        gm_report(&d, &m, &(gm_opts){0, 5, 0, 1}, devnull);
        gm_report(&d, &m, &(gm_opts){1, 5, 0, 1}, devnull);
        gm_leaks(&d, &m, &(gm_opts){0, 5, 1, 1}, devnull, &leaked);
        /* the exports carry the names out in other syntaxes (JSON, pickle, folded stacks, CSV) */
        static const char *const formats[] = {"torch", "chrome", "folded", "speedscope", "csv"};
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
            gm_export_format(&d, &m, formats[i], i == 3 ? -1 : 0, GM_VIEW_AUTO, devnull);
    }
    gm_model_free(&m);
    gm_db_close(&d);
    return 0;
}
