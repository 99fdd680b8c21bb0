/* gm_analyze_pages.c — the sweep's events read straight from the table's B-tree pages.
 *
 * Why. The sweep of gm_analyze.c reads every row of `events` once. Through SQLite each row is a
 * cursor step, ten column fetches and a function call in the virtual machine: on a
 * 10-million-event recording that was half of `gpumem report`'s time. The events table is a
 * plain rowid table of integers, and the leaf pages of its B-tree, read left to right, hold the
 * rows in rowid (seq) order: decoding those records directly is all the sweep needs.
 *
 * Taken only where it reads exactly what SQLite would. The table must be declared exactly as
 * the schema declares it (so the columns and the rowid alias are known), the connection's
 * database must be the file alone (no WAL with frames in it: those pages would be newer than
 * the file's), and every page, cell and record must be what a valid file holds: a table page of
 * the right kind, cells and records inside their page (its usable size: the header's reserved
 * bytes excluded), no overflow page, no payload size in 9 bytes, 13 columns with integer
 * or NULL values only, rowids increasing, no page reached twice, no path deeper than SQLite's
 * cursors go. Anything else and this reader gives up; the caller then reads the events through
 * SQLite as before, from the first row (GM_PAGES_RESTART when rows were already delivered). So a
 * damaged file is reported exactly as it was, and a valid one gives the same rows.
 *
 * One device's reading (gm_db_scope_device: a TEMP view named events shadows the table, keeping
 * device D's rows and those of no device). The pages are the table's, every row is decoded and
 * checked as ever, and a row is handed over only where the view keeps it: its device (NULL read
 * as -1) below 0 or D. Taken only where the connection's temp schema holds exactly that view
 * under the name events (its text the one gm_db_scope_view makes); on a reading that is not
 * scoped, only where nothing there shadows the table. So every command keeps this reader on a
 * recording with several devices (through SQLite, leaks and advise took twice as long on 10 M
 * events of two devices: tests/bench/README.md, "Two devices").
 *
 * Consistency. The pages are read inside one read transaction of the connection, which keeps a
 * rollback-journal writer out of the file; in WAL mode a reader that began with an empty WAL
 * reads the file alone, and no checkpoint can write into it before the transaction ends. SQLite's
 * memory map is off meanwhile, and the pages are read a window at a time, so the report does not
 * keep the whole file mapped (resident) as the map did. A window is the file's own pages mapped
 * (a file of SQLite's unix VFS, opened again by its name and checked to be the one the
 * connection reads: its size and header are the connection's): copying them into a buffer with
 * read(2) was a sixth of the report's time on a 10-million-event recording. (A file cut short by
 * another program while its window is mapped ends the command with SIGBUS, as SQLite's own map,
 * which the other queries read through, would.) Otherwise (an image
 * in memory, another VFS, the window that ends the file, a map refused) the window is copied
 * through the connection's own file handle (sqlite3_file's xRead) into one buffer.
 */
#include "snapshot/read/gm_analyze_pages.h"
#include "snapshot/record/rec.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* the declaration of `events` in schema.sql (whitespace runs compared as one space) */
static const char events_sql[] =
    "CREATE TABLE events (seq INTEGER PRIMARY KEY, t INTEGER, kind INTEGER, flags INTEGER, "
    "device INTEGER, stream INTEGER, thread INTEGER, addr INTEGER, size INTEGER, requested "
    "INTEGER, alloc_id INTEGER, stack INTEGER, range INTEGER)";
enum { NCOLS = 13 };
/* SQLite's limit on a cursor's path (BTCURSOR_MAX_DEPTH): deeper is a damaged file to it */
enum { MAX_DEPTH = 20 };
/* pages copied per read, at most: the leaves of a table written in seq order lie mostly in file
 * order, so one read serves the next leaves too */
enum { WINDOW_BYTES = 1 << 20 };
#define PENDING_BYTE 0x40000000u /* the lock-byte page is never a B-tree page */

static int same_sql(const char *a, const char *b) {
    for (;;) {
        int sa = 0, sb = 0;
        while (*a == ' ' || *a == '\n' || *a == '\t' || *a == '\r') a++, sa = 1;
        while (*b == ' ' || *b == '\n' || *b == '\t' || *b == '\r') b++, sb = 1;
        if (sa != sb || *a != *b) return 0;
        if (!*a) return 1;
        a++, b++;
    }
}

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* SQLite's varint (1-9 bytes, big-endian, 7 bits a byte, the ninth all 8), or NULL when it
 * does not end before `end` */
static inline const uint8_t *varint(const uint8_t *p, const uint8_t *end, uint64_t *v) {
    if (p < end && *p < 0x80) {
        *v = *p;
        return p + 1;
    }
    /* a rowid of up to 2^21: most of a recording's */
    if (end - p >= 3 && p[1] < 0x80) {
        *v = (uint64_t)(p[0] & 0x7f) << 7 | p[1];
        return p + 2;
    }
    if (end - p >= 3 && p[2] < 0x80) {
        *v = (uint64_t)(p[0] & 0x7f) << 14 | (uint64_t)(p[1] & 0x7f) << 7 | p[2];
        return p + 3;
    }
    /* ... and of up to 2^28: the rest of a long recording's (the loop below took 25
     * instructions a row on 10 M events) */
    if (end - p >= 4 && p[3] < 0x80) {
        *v = (uint64_t)(p[0] & 0x7f) << 21 | (uint64_t)(p[1] & 0x7f) << 14 | (uint64_t)(p[2] & 0x7f) << 7 | p[3];
        return p + 4;
    }
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) {
        if (p >= end) return NULL;
        uint8_t b = *p++;
        x = x << 7 | (b & 0x7f);
        if (!(b & 0x80)) {
            *v = x;
            return p;
        }
    }
    if (p >= end) return NULL;
    *v = x << 8 | *p++;
    return p;
}

/* The rowid expected next, last_seq + 1 (a recording's rowids are consecutive), and its varint:
 * enc is the value of its len bytes read big-endian (be32 of the cell >> shift, shift 32 - 8 *
 * len). A cell whose rowid is that one is read without decoding the varint (a rowid past 2^21,
 * most of a long recording's, is 4 bytes: ~30 instructions a row), and is in order. enc
 * UINT64_MAX: none expected (before the first row; a rowid of 2^28 or more). */
typedef struct rowid_next {
    uint64_t seq, enc;
    uint32_t len, shift;
} rowid_next;

/* the expectation after rowid seq - 1 (next->enc, when it was, that rowid's varint) */
static inline void rowid_expect(rowid_next *next, uint64_t seq, int was) {
    next->seq = seq;
    if (was && (next->enc & 0x7f) != 0x7f) { /* only the last byte changes */
        next->enc++;
        return;
    }
    uint32_t len = seq < 1u << 7 ? 1 : seq < 1u << 14 ? 2 : seq < 1u << 21 ? 3 : seq < 1u << 28 ? 4 : 0;
    uint64_t enc = seq & 0x7f;
    for (uint32_t k = 1; k < len; k++) enc |= (0x80 | (seq >> 7 * k & 0x7f)) << 8 * k;
    next->enc = len ? enc : UINT64_MAX;
    next->len = len, next->shift = 32 - 8 * len;
}

typedef struct reader {
    sqlite3_file *f;
    uint32_t pgsz, usable, npages, lockpage;
    uint64_t file_pages;      /* pages in the file (npages or more) */
    int fd;                   /* the file opened again for its maps, -1 none */
    uint8_t *map;             /* the window's map (munmap(map, map_len)), NULL none */
    size_t map_len;
    uint8_t *buf;             /* the window copied through xRead, when it is not mapped */
    uint8_t *win;             /* pages win_first .. win_first + win_n - 1: in map or buf */
    uint32_t win_first, win_n, win_cap;
    uint32_t win_used;        /* pages of the window reached so far */
    uint8_t *seen;            /* one bit a page: reached already */
    uint8_t *level[MAX_DEPTH]; /* copies of the interior pages on the path */
    gm_event_row *rows;       /* one leaf's rows */
    struct plan *plans;       /* 1 << PLAN_BITS, by header (plan_of) */
    uint64_t nrows;   /* rows delivered (events_complete) */
    int64_t last_seq; /* the last row's; INT64_MIN before the first (a row of that rowid, which
                         no recorder writes, is then out of order: read through SQLite) */
    rowid_next next_rowid; /* the rowid expected next (rowid_expect) */
    int lean;      /* t and stream not decoded (left 0: rows is zeroed), nor a device free's size,
                      requested, stack, device and alloc_id, nor a device allocation's alloc_id
                      (0); but a free's device where the reading is scoped */
    int64_t keep_dev; /* scoped: the rows kept are those of this device or of none (device < 0);
                         -1: every row */
    int delivered; /* rows were handed to the caller */
} reader;

/* Pages pgno .. pgno + n - 1 mapped as the window, with the page after them mapped too (the
 * slack value_of reads past a window's last page). 0, or -1 (read them through xRead). Not
 * MAP_POPULATE: it takes a third of the report's page faults away (a fault every 16 pages of
 * the file) but costs more system time than they did (measured on 10M events: 0.10-0.14 s
 * against 0.06-0.11 s). */
static int map_window(reader *r, uint32_t pgno, uint32_t n) {
    if (r->map) munmap(r->map, r->map_len), r->map = NULL;
    if (r->fd < 0 || (uint64_t)pgno + n > r->file_pages) return -1; /* the window ending the file */
    size_t os_page = (size_t)sysconf(_SC_PAGESIZE);
    off_t off = (off_t)(pgno - 1) * r->pgsz, at = off & ~(off_t)(os_page - 1);
    size_t len = (size_t)(off - at) + (size_t)(n + 1) * r->pgsz;
    void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, r->fd, at);
    if (p == MAP_FAILED) return -1;
    r->map = p, r->map_len = len;
    r->win = r->map + (off - at);
    return 0;
}

/* Page pgno (2..npages, not the lock-byte page, never reached before), or NULL. A page outside
 * the window moves it there, with four times as many pages as the last window served: the whole
 * window while the leaves come in file order (a quarter of its pages or more reached), a few
 * pages where they are scattered or backwards, so no file is read a window per page. */
static const uint8_t *page_at(reader *r, uint32_t pgno) {
    if (pgno < 2 || pgno > r->npages || pgno == r->lockpage) return NULL;
    if (r->seen[pgno >> 3] & (1u << (pgno & 7))) return NULL;
    r->seen[pgno >> 3] |= (uint8_t)(1u << (pgno & 7));
    if (pgno < r->win_first || pgno - r->win_first >= r->win_n) {
        uint32_t n = r->win_n ? 4 * r->win_used : r->win_cap;
        if (n > r->win_cap) n = r->win_cap;
        if (n > r->npages - pgno + 1) n = r->npages - pgno + 1;
        if (n < 1) n = 1;
        if (map_window(r, pgno, n) != 0) {
            r->win = r->buf;
            if (r->f->pMethods->xRead(r->f, r->win, (int)(n * r->pgsz),
                                      (sqlite3_int64)(pgno - 1) * r->pgsz) != SQLITE_OK) {
                r->win_n = 0;
                return NULL;
            }
        }
        r->win_first = pgno, r->win_n = n, r->win_used = 0;
    }
    r->win_used++;
    return r->win + (size_t)(pgno - r->win_first) * r->pgsz;
}

/* where each column goes in a gm_event_row (-1: not read; seq is the rowid) */
static int64_t *slot(gm_event_row *row, int col) {
    switch (col) {
    case 1: return &row->t;
    case 2: return &row->kind;
    case 3: return &row->flags;
    case 4: return &row->device;
    case 5: return &row->stream;
    case 7: return &row->addr;
    case 8: return &row->size;
    case 9: return &row->requested;
    case 10: return &row->alloc_id;
    case 11: return &row->stack;
    case 12: return &row->range;
    default: return NULL;
    }
}

/* bytes of a value of serial type t (0..127); 0xff: not an integer or NULL (a real, a
 * reserved type, text or blob: nothing the recorder writes) */
static const uint8_t type_size[128] = {
    0, 1, 2, 3, 4, 6, 8, 0xff, 0, 0, 0xff, 0xff, [12 ... 127] = 0xff};

/* The same for a header byte of the recorder's records (a one-byte type, 0..255): the size of
 * an integer or NULL type; every other byte (a real, text, a blob, a reserved type, the first
 * byte of a longer varint) weighs 2^20, more than any page holds, so thirteen of them sum to a
 * record's body size only when each is an integer or NULL. */
#define NOT_INT (1u << 20)
static const uint32_t header_size[256] = {0, 1, 2, 3, 4, 6, 8, NOT_INT, 0, 0, [10 ... 255] = NOT_INT};

/* The body size of a record whose header is the 14 bytes at c, or NOT_INT or more. */
static inline uint32_t header_body(const uint8_t *c) {
    uint32_t body = 0;
    for (int k = 1; k <= NCOLS; k++) body += header_size[c[k]];
    return body;
}

/* A value of serial type t at b (t an integer or NULL type): SQLite's integer, null_value for
 * NULL. Reads 8 bytes at b whatever the size: the window has slack after its last page. */
static inline int64_t value_of(const uint8_t *b, unsigned t, int64_t null_value) {
    if (t - 1 < 6) {
        uint64_t x;
        memcpy(&x, b, 8);
        /* big-endian, sign-extended from its 1..8 bytes */
        return (int64_t)__builtin_bswap64(x) >> (64 - 8 * type_size[t]);
    }
    return t == 0 ? null_value : (int64_t)t - 8; /* 8: 0, 9: 1 */
}

/* How the recorder's records of one header are read, worked out once per header: a recording
 * has a few dozen headers (each column's value in 0, 1, 2, 3, 4 or 6 bytes, or NULL), and rows
 * alternate between them. Each column read (everything but seq and thread) is at off bytes
 * from the body; its value is the 8 bytes there, big-endian, shifted right (sign-extending) to
 * its size. A type without bytes reads the header instead, where its value is in the top bits:
 * NULL and 0 the header's first byte (off -14: 14, sign bit clear) shifted by 63, which is 0;
 * 1 (type 9, 0b00001001) its own type byte shifted by 59, which leaves 0b00001. No mask, no
 * constant to load and OR in (3 of the reader's ~9 instructions a field), but for the device,
 * whose NULL is -1 (device_null, OR'ed in). */
enum { F_T, F_KIND, F_FLAGS, F_DEVICE, F_STREAM, F_ADDR, F_SIZE, F_REQUESTED, F_ALLOC_ID, F_STACK, F_RANGE,
       NFIELDS };
static const uint8_t field_col[NFIELDS] = {1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12};
typedef struct plan {
    uint64_t key[2]; /* the header's 14 bytes: c[0..7], c[6..13] (0, 0: no plan; c[0] is 14) */
    uint32_t body;   /* the body's size */
    int8_t off[NFIELDS];
    uint8_t shift[NFIELDS];
    int64_t device_null; /* -1: the device is NULL (the query's coalesce(device, -1)); else 0 */
} plan;
enum { PLAN_BITS = 6 }; /* plans kept: 64, by a hash of the header */

static inline uint64_t load64(const uint8_t *p) {
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

/* The plan of the 14-byte header at c (k0, k1 its bytes as plan_of loads them) made into *p, or
 * NULL when a type is not an integer or NULL (the record is read the general way). Out of line:
 * a recording has a few dozen headers, and the loop over rows keeps its registers. */
static __attribute__((noinline)) const plan *plan_make(plan *p, const uint8_t *c, uint64_t k0, uint64_t k1) {
    uint32_t body = header_body(c);
    if (body >= NOT_INT) return NULL;
    uint32_t at[NCOLS + 1] = {0};
    for (int col = 0; col < NCOLS; col++) at[col + 1] = at[col] + header_size[c[col + 1]];
    for (int f = 0; f < NFIELDS; f++) {
        unsigned col = field_col[f], t = c[col + 1];
        if (t - 1 < 6) { /* at[col] <= 12 * 8 */
            p->off[f] = (int8_t)at[col], p->shift[f] = (uint8_t)(64 - 8 * type_size[t]);
        } else if (t == 9) {
            p->off[f] = (int8_t)((int)col + 1 - 14), p->shift[f] = 59;
        } else {
            p->off[f] = -14, p->shift[f] = 63;
        }
    }
    p->device_null = c[field_col[F_DEVICE] + 1] == 0 ? -1 : 0;
    p->body = body;
    p->key[0] = k0, p->key[1] = k1;
    return p;
}

/* The plan of the 14-byte header at c (c[0] is 14), or NULL (plan_make). */
static inline __attribute__((always_inline)) const plan *plan_of(plan *plans, const uint8_t *c) {
    uint64_t k0 = load64(c), k1 = load64(c + 6);
    plan *p = &plans[((k0 ^ k1 >> 16) * 0x9e3779b97f4a7c15ull) >> (64 - PLAN_BITS)];
    if (p->key[0] == k0 && p->key[1] == k1) return p;
    return plan_make(p, c, k0, k1);
}

/* field f of the record whose body is at b (its header 14 bytes before it), by plan p; the
 * device's with device(). */
static inline int64_t field(const plan *p, const uint8_t *b, int f) {
    return (int64_t)__builtin_bswap64(load64(b + p->off[f])) >> p->shift[f];
}
static inline int64_t device(const plan *p, const uint8_t *b) { return field(p, b, F_DEVICE) | p->device_null; }

/* One record the general way: any varint sizes. 0, or -1 (give up). */
static int record_slow(const uint8_t *c, uint64_t np, gm_event_row *row) {
    const uint8_t *rend = c + np, *h;
    uint64_t hs;
    if (!(h = varint(c, rend, &hs)) || hs > np || hs < (uint64_t)(h - c)) return -1;
    const uint8_t *hend = c + hs, *body = hend;
    for (int col = 0; col < NCOLS; col++) {
        uint64_t t;
        if (!(h = varint(h, hend, &t))) return -1;
        if (t > 127 || type_size[t] == 0xff || type_size[t] > (uint64_t)(rend - body)) return -1;
        int64_t *v = slot(row, col);
        if (v) *v = value_of(body, (unsigned)t, col == 4 ? -1 : 0);
        body += type_size[t];
    }
    /* exactly the 13 columns, the record ending where its payload does */
    return h == hend && body == rend ? 0 : -1;
}

/* A device free (REC_FREE, REC_FREE_ASYNC): what the model's sweep reads of it (gm_analyze.c's
 * sweep_rows, gm_devused_rows) is its seq, kind, flags, addr and range; of a device allocation
 * (REC_ALLOC, REC_ALLOC_ASYNC) everything but its alloc_id (t and stream of no row). */
static inline int device_free(int64_t kind) { return kind == REC_FREE || kind == REC_FREE_ASYNC; }
static inline int device_alloc(int64_t kind) { return kind == REC_ALLOC || kind == REC_ALLOC_ASYNC; }

/* The rows of a table leaf page into r->rows. Returns their count, or -1 (give up). lean: t
 * and stream not decoded, nor a device free's size, requested, stack, device and alloc_id, nor
 * a device allocation's alloc_id (a constant: one copy of the loop each). scoped: only the rows
 * of device r->keep_dev or of none kept (every cell still decoded and checked: the checks are the
 * table's, whichever rows are handed over; a constant too). next: the page after
 * this one where the window holds it (else NULL), asked into the cache a line a row: the next
 * leaf is mostly the next page, and its lines are then fetched while this one is decoded and
 * swept (the first read of each line of a page was the reader's largest cost, a stall on
 * memory; all of a page's lines asked for at once stalled on the few the core can have in
 * flight). From its end down: a leaf written in rowid order has its first cells last. */
static inline __attribute__((always_inline)) long leaf_rows_as(reader *r, const uint8_t *p, uint32_t ncell,
                                                                const uint8_t *next, int lean, int scoped) {
    const uint8_t *end = p + r->usable;
    uint32_t first = 8 + 2 * ncell;
    uint32_t nlines = next ? r->pgsz / 64 : 0;
    for (uint32_t i = ncell; i < nlines; i++) __builtin_prefetch(next + (size_t)(nlines - 1 - i) * 64);
    const uint8_t *pf = next ? next + (size_t)nlines * 64 : NULL; /* above the next line asked for */
    rowid_next nr = r->next_rowid;
    /* the cell pointers and the rows walked by pointer: no index to keep */
    gm_event_row *row = r->rows;
    for (const uint8_t *cp = p + 8, *cend = cp + 2 * (size_t)ncell; cp < cend; cp += 2, row++) {
        if (pf != next) pf -= 64, __builtin_prefetch(pf);
        uint32_t ptr = be16(cp);
        if (ptr < first || ptr >= r->usable) return -1;
        const uint8_t *c = p + ptr, *cell = c;
        uint64_t np, rowid;
        /* a payload size in 9 bytes: SQLite reads its ninth byte 7 bits too (btreeParseCellPtr),
         * where a varint's ninth byte is 8 bits, so the size can differ from varint()'s; no
         * writer makes one (a size fits in 4 bytes) */
        if (!(c = varint(c, end, &np)) || c - cell == 9) return -1;
        int expected = end - c >= 4 && (uint64_t)be32(c) >> nr.shift == nr.enc;
        if (expected) {
            rowid = nr.seq, c += nr.len;
        } else if (!(c = varint(c, end, &rowid)) || (int64_t)rowid <= r->last_seq) {
            return -1; /* not one, or out of order */
        }
        /* larger than a leaf keeps on its page: the rest is on overflow pages */
        if (np > r->usable - 35 || np > (uint64_t)(end - c)) return -1;
        row->seq = (int64_t)rowid;
        /* the recorder's records: a 14-byte header, 13 one-byte integer or NULL types, the
         * values one after another (each value's type is the header's byte k + 1) */
        const plan *pl = np >= 14 && c[0] == 14 ? plan_of(r->plans, c) : NULL;
        if (pl && pl->body == np - 14 && lean) {
            const uint8_t *b = c + 14;
            int64_t kind = field(pl, b, F_KIND);
            row->kind = kind, row->flags = field(pl, b, F_FLAGS);
            row->addr = field(pl, b, F_ADDR), row->range = field(pl, b, F_RANGE);
            if (device_free(kind)) { /* half of a recording's rows: 5 of 9 fields not decoded */
                row->size = row->requested = row->alloc_id = row->stack = 0;
                row->device = scoped ? device(pl, b) : 0; /* which rows are kept */
            } else {
                row->device = device(pl, b);
                row->size = field(pl, b, F_SIZE), row->requested = field(pl, b, F_REQUESTED);
                row->stack = field(pl, b, F_STACK);
                row->alloc_id = device_alloc(kind) ? 0 : field(pl, b, F_ALLOC_ID); /* the other half */
            }
        } else if (pl && pl->body == np - 14) {
            const uint8_t *b = c + 14;
            row->t = field(pl, b, F_T), row->kind = field(pl, b, F_KIND), row->flags = field(pl, b, F_FLAGS);
            row->device = device(pl, b), row->stream = field(pl, b, F_STREAM);
            row->addr = field(pl, b, F_ADDR), row->size = field(pl, b, F_SIZE);
            row->requested = field(pl, b, F_REQUESTED), row->alloc_id = field(pl, b, F_ALLOC_ID);
            row->stack = field(pl, b, F_STACK), row->range = field(pl, b, F_RANGE);
        } else if (record_slow(c, np, row) != 0) {
            return -1;
        } else if (lean) {
            row->t = row->stream = 0;
            if (device_free(row->kind)) {
                row->size = row->requested = row->alloc_id = row->stack = 0;
                if (!scoped) row->device = 0;
            }
            if (device_alloc(row->kind)) row->alloc_id = 0;
        }
        r->last_seq = (int64_t)rowid;
        rowid_expect(&nr, rowid + 1, expected);
        /* one device's reading: a row the view leaves out is overwritten by the next */
        if (scoped) row -= row->device >= 0 && row->device != r->keep_dev;
    }
    r->next_rowid = nr;
    return (long)(row - r->rows);
}

static long leaf_rows(reader *r, const uint8_t *p, uint32_t ncell, const uint8_t *next) {
    if (r->keep_dev >= 0)
        return r->lean ? leaf_rows_as(r, p, ncell, next, 1, 1) : leaf_rows_as(r, p, ncell, next, 0, 1);
    return r->lean ? leaf_rows_as(r, p, ncell, next, 1, 0) : leaf_rows_as(r, p, ncell, next, 0, 0);
}

/* A B-tree page's kind and cell count, checked as SQLite checks them when it enters a page. */
static int page_kind(const reader *r, const uint8_t *p, int root, uint32_t *ncell) {
    if (p[0] != 0x05 && p[0] != 0x0d) return -1;
    *ncell = be16(p + 3);
    if (*ncell > (r->pgsz - 8) / 6) return -1;
    if (!root && *ncell < 1) return -1;
    if (root && p[0] == 0x05 && *ncell < 1) return -1;
    if ((p[0] == 0x05 ? 12u : 8u) + 2 * *ncell > r->usable) return -1;
    return p[0];
}

/* The tree under root, leaves left to right. GM_PAGES_DONE, _STOPPED, or -1 (give up). */
static int walk(reader *r, uint32_t root, gm_event_rows_fn fn, void *ctx) {
    uint32_t ncell[MAX_DEPTH], next[MAX_DEPTH];
    int depth = 0;
    uint32_t pgno = root;
    for (;;) {
        const uint8_t *p = page_at(r, pgno);
        uint32_t n;
        int kind = p ? page_kind(r, p, pgno == root, &n) : -1;
        if (kind < 0) return -1;
        if (kind == 0x0d) {
            long k = leaf_rows(r, p, n, pgno - r->win_first + 1 < r->win_n ? p + r->pgsz : NULL);
            if (k < 0) return -1;
            if (k) {
                r->delivered = 1;
                r->nrows += (uint64_t)k;
                if (fn(ctx, r->rows, (size_t)k) != 0) return GM_PAGES_STOPPED;
            }
        } else {
            if (depth == MAX_DEPTH - 1) return -1;
            if (!r->level[depth] && !(r->level[depth] = malloc(r->pgsz))) return -1;
            memcpy(r->level[depth], p, r->pgsz);
            ncell[depth] = n, next[depth] = 0;
            depth++;
        }
        /* the next child: cell i's left child for i < ncell, then the right child */
        for (;;) {
            if (depth == 0) return GM_PAGES_DONE;
            const uint8_t *q = r->level[depth - 1];
            uint32_t i = next[depth - 1]++;
            if (i < ncell[depth - 1]) {
                uint32_t ptr = be16(q + 12 + 2 * i);
                if (ptr < 12 + 2 * ncell[depth - 1] || ptr + 4 > r->usable) return -1;
                pgno = be32(q + ptr);
                break;
            }
            if (i == ncell[depth - 1]) {
                pgno = be32(q + 8);
                break;
            }
            depth--;
        }
    }
}

/* The events table's root page when the table is declared as schema.sql declares it; 0 else. */
static uint32_t events_root(gm_db *d) {
    sqlite3_stmt *s;
    uint32_t root = 0;
    if (sqlite3_prepare_v2(d->db, "SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' "
                                  "AND name = 'events'", -1, &s, NULL) != SQLITE_OK)
        return 0;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) == SQLITE_INTEGER) {
        const char *sql = (const char *)sqlite3_column_text(s, 1);
        int64_t rp = sqlite3_column_int64(s, 0);
        if (sql && same_sql(sql, events_sql) && rp > 1 && rp <= UINT32_MAX) root = (uint32_t)rp;
        /* a second row named events: not a file the recorder wrote */
        if (sqlite3_step(s) != SQLITE_DONE) root = 0;
    }
    sqlite3_finalize(s);
    return root;
}

/* Whether what the name `events` reads is what this reader reads: on a scoped reading, the temp
 * schema's view that gm_db_scope_device made (exactly one object of that name there, with that
 * text), whose rows are the table's of device d->scoped - 1 or of none; otherwise nothing there
 * (a TEMP object named events would shadow the table). */
static int events_name_ours(gm_db *d) {
    char want[256] = "CREATE ";
    if (d->scoped && gm_db_scope_view(want + 7, sizeof want - 7, "events", d->scoped - 1) != 0) return 0;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, "SELECT type, sql FROM sqlite_temp_master WHERE name = 'events' COLLATE NOCASE",
                           -1, &s, NULL) != SQLITE_OK)
        return 0;
    int n = 0, same = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(s, 0), *sql = (const char *)sqlite3_column_text(s, 1);
        n++;
        same = type && sql && strcmp(type, "view") == 0 && strcmp(sql, want) == 0;
    }
    sqlite3_finalize(s);
    return d->scoped ? n == 1 && same : n == 0;
}

/* 1 when the connection's database may have pages in a WAL (a -wal file with anything in it) */
static int wal_in_use(gm_db *d) {
    const char *name = sqlite3_db_filename(d->db, "main");
    if (!name || !name[0]) return 0; /* in memory: no WAL */
    const char *wal = sqlite3_filename_wal(name);
    struct stat st;
    return wal && stat(wal, &st) == 0 && st.st_size > 0;
}

/* The connection's file opened again by its name, for maps of its pages: only a file of the unix
 * VFS, and only when what the name opens is the file the connection reads (the same size, the
 * same header: page size, page count, change counter). The fd, or -1 (read through xRead). */
static int open_again(gm_db *d, const uint8_t *header, sqlite3_int64 size) {
    sqlite3_vfs *vfs = NULL;
    const char *name = sqlite3_db_filename(d->db, "main");
    if (!name || !name[0] || sqlite3_file_control(d->db, "main", SQLITE_FCNTL_VFS_POINTER, &vfs) != SQLITE_OK ||
        !vfs || !vfs->zName || strncmp(vfs->zName, "unix", 4))
        return -1;
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    uint8_t h[100];
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != size || pread(fd, h, sizeof h, 0) != sizeof h ||
        memcmp(h, header, sizeof h)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The file's page size, usable size and page count from its header (as SQLite reads them), and
 * the file opened again for maps where it can be (r->fd). */
static int read_header(gm_db *d, reader *r) {
    uint8_t h[100];
    sqlite3_int64 fsz;
    if (r->f->pMethods->xFileSize(r->f, &fsz) != SQLITE_OK || fsz < 100 ||
        r->f->pMethods->xRead(r->f, h, 100, 0) != SQLITE_OK)
        return -1;
    uint32_t ps = be16(h + 16);
    if (ps == 1) ps = 65536;
    if (ps < 512 || ps > 65536 || (ps & (ps - 1))) return -1;
    r->pgsz = ps;
    r->usable = ps - h[20];
    if (r->usable < 480) return -1;
    uint64_t file_pages = (uint64_t)fsz / ps;
    r->file_pages = file_pages;
    uint32_t n = be32(h + 28);
    /* the header's count holds when the change counter matches its version-valid-for */
    uint64_t pages = n && be32(h + 24) == be32(h + 92) ? n : file_pages;
    if (pages > file_pages || pages > UINT32_MAX - 1) return -1;
    r->npages = (uint32_t)pages;
    r->lockpage = PENDING_BYTE / ps + 1;
    r->fd = open_again(d, h, fsz);
    return 0;
}

/* A sweep read every row it could: a closed recording's rows must be as many as the recorder
 * wrote (meta.events, written as it closed; the merge of PyTorch's history counts its rows
 * again). Fewer or more: pages of the table were overwritten (a zeroed cell loses its rows, or
 * SQLite reads garbage as rows), which SQLite does not notice on a plain scan. */
static void events_complete(gm_db *d, uint64_t nrows) {
    if (d->scoped) return; /* one device's rows: the count was checked on the whole (gm_db_scope_one) */
    int64_t want = d->closed ? gm_meta_int(d, "events", -1) : -1;
    if (want >= 0 && (uint64_t)want != nrows)
        gm_db_damaged(d, "its events table holds %" PRIu64 " events where the recorder wrote %" PRId64, nrows,
                      want);
}

static int events_pages(gm_db *d, int lean, gm_event_rows_fn fn, void *ctx) {
    if (!sqlite3_get_autocommit(d->db)) return GM_PAGES_NO; /* someone else's transaction */
    /* the map off: its pages would be copied from, and stay resident */
    int64_t mmap_was = -1;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, "PRAGMA mmap_size", -1, &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW) mmap_was = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    if (mmap_was > 0) sqlite3_exec(d->db, "PRAGMA mmap_size=0", NULL, NULL, NULL);
    int rc = GM_PAGES_NO;
    /* one device's reading: the rows its view keeps */
    reader r = {.fd = -1, .lean = lean, .keep_dev = d->scoped ? d->scoped - 1 : -1, .last_seq = INT64_MIN,
                .next_rowid = {.enc = UINT64_MAX}};
    uint32_t root;
    if (sqlite3_exec(d->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) goto out;
    /* reading the schema starts the read transaction: the file is held from here on */
    if ((root = events_root(d)) == 0 || !events_name_ours(d) || wal_in_use(d) ||
        sqlite3_file_control(d->db, "main", SQLITE_FCNTL_FILE_POINTER, &r.f) != SQLITE_OK || !r.f ||
        !r.f->pMethods || read_header(d, &r) != 0)
        goto end;
    r.win_cap = WINDOW_BYTES / r.pgsz ? WINDOW_BYTES / r.pgsz : 1;
    /* never more than the file: a small recording's window is a few pages, not a megabyte
     * (under ASan a large block is an mmap and munmap per report; page_at never reads past
     * npages either) */
    if (r.win_cap > r.npages) r.win_cap = r.npages ? r.npages : 1;
    r.buf = calloc((size_t)r.win_cap * r.pgsz + 8, 1); /* + 8: value_of's slack */
    r.seen = calloc((size_t)r.npages / 8 + 1, 1);
    r.rows = calloc((r.pgsz - 8) / 6 + 1, sizeof *r.rows);
    r.plans = calloc((size_t)1 << PLAN_BITS, sizeof *r.plans);
    if (!r.buf || !r.seen || !r.rows || !r.plans) goto end;
    int w = walk(&r, root, fn, ctx);
    rc = w >= 0 ? w : r.delivered ? GM_PAGES_RESTART : GM_PAGES_NO;
    if (rc == GM_PAGES_DONE) events_complete(d, r.nrows);
end:
    sqlite3_exec(d->db, "COMMIT", NULL, NULL, NULL);
out:
    if (r.map) munmap(r.map, r.map_len);
    if (r.fd >= 0) close(r.fd);
    free(r.buf), free(r.seen), free(r.rows), free(r.plans);
    for (int i = 0; i < MAX_DEPTH; i++) free(r.level[i]);
    if (mmap_was > 0) {
        char q[64];
        snprintf(q, sizeof q, "PRAGMA mmap_size=%lld", (long long)mmap_was);
        sqlite3_exec(d->db, q, NULL, NULL, NULL);
    }
    return rc;
}

/* GPUMEM_SWEEP=sql: SQLite only, the reference of this reader (tests compare the two, for every
 * caller; a person can too). GPUMEM_SWEEP=pages: this reader as ever, and a line on stderr each
 * time it is not taken (tests check that a command's sweeps all read the pages). */
static int events_pages_or_say(gm_db *d, int lean, gm_event_rows_fn fn, void *ctx) {
    const char *how = getenv("GPUMEM_SWEEP");
    if (how && strcmp(how, "sql") == 0) return GM_PAGES_NO;
    int rc = events_pages(d, lean, fn, ctx);
    if (how && strcmp(how, "pages") == 0 && (rc == GM_PAGES_NO || rc == GM_PAGES_RESTART))
        fprintf(stderr, "gpumem: GPUMEM_SWEEP=pages: %s: the page reader was not taken%s; its events are read "
                        "through SQLite\n", d->path, d->scoped ? " (one device's reading)" : "");
    return rc;
}

int gm_events_pages(gm_db *d, gm_event_rows_fn fn, void *ctx) { return events_pages_or_say(d, 0, fn, ctx); }
int gm_events_pages_lean(gm_db *d, gm_event_rows_fn fn, void *ctx) { return events_pages_or_say(d, 1, fn, ctx); }

/* ---------------------------------------------------------------- the same rows through SQLite */

/* rows handed to fn at once: a leaf page's worth, as the pages hand them */
enum { SQL_BATCH = 256 };

typedef struct sql_rows {
    gm_event_rows_fn fn;
    void *ctx;
    size_t n;
    int stopped;
    uint64_t nrows;      /* rows delivered */
    int64_t last_seq;    /* the last delivered row's seq (valid when nrows) */
    uint64_t backwards;  /* rows whose seq did not follow the last one's: not delivered */
    int64_t first_back;  /* the first such row's seq, and the seq it came after */
    int64_t back_after;
    gm_event_row rows[SQL_BATCH];
} sql_rows;

/* gm_event_row(seq, kind, ...): SQLite calls it for each row of the scan, in seq order (the
 * WHERE of the query, always false: no row is ever returned), each value as the pages decode
 * it (sqlite3_value_int64; NULL 0, the device's NULL -1 by the query's coalesce). */
static void sql_row_fn(sqlite3_context *c, int argc, sqlite3_value **v) {
    sql_rows *b = sqlite3_user_data(c);
    if (argc != 12) {
        sqlite3_result_error(c, "gm_event_row: 12 values", -1);
        return;
    }
    /* a table scan hands rowids in increasing order; one that does not is a damaged page (a
     * cell's rowid overwritten): the sweep's order is wrong from there, so the row is left out
     * and the recording said damaged */
    int64_t seq = sqlite3_value_int64(v[0]);
    if (b->nrows && seq <= b->last_seq) {
        if (!b->backwards++) b->first_back = seq, b->back_after = b->last_seq;
        sqlite3_result_int(c, 0);
        return;
    }
    b->nrows++, b->last_seq = seq;
    gm_event_row *r = &b->rows[b->n];
    r->seq = seq, r->kind = sqlite3_value_int64(v[1]);
    r->flags = sqlite3_value_int64(v[2]), r->addr = sqlite3_value_int64(v[3]);
    r->size = sqlite3_value_int64(v[4]), r->stack = sqlite3_value_int64(v[5]);
    r->range = sqlite3_value_int64(v[6]), r->device = sqlite3_value_int64(v[7]);
    r->requested = sqlite3_value_int64(v[8]), r->alloc_id = sqlite3_value_int64(v[9]);
    r->stream = sqlite3_value_int64(v[10]), r->t = sqlite3_value_int64(v[11]);
    if (++b->n == SQL_BATCH) {
        b->n = 0;
        if (b->fn(b->ctx, b->rows, SQL_BATCH) != 0) {
            b->stopped = 1;
            sqlite3_result_error(c, "gm_event_row: stopped", -1);
            return;
        }
    }
    sqlite3_result_int(c, 0);
}

int gm_events_sql(gm_db *d, gm_event_rows_fn fn, void *ctx) {
    sql_rows *b = malloc(sizeof *b);
    if (!b) return GM_PAGES_STOPPED;
    *b = (sql_rows){.fn = fn, .ctx = ctx};
    sqlite3_stmt *s;
    if (sqlite3_create_function(d->db, "gm_event_row", 12, SQLITE_UTF8 | SQLITE_DIRECTONLY, b, sql_row_fn, NULL,
                                NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(d->db, "SELECT seq FROM events WHERE gm_event_row(seq, kind, flags, addr, size, stack, "
                                  "range, coalesce(device, -1), requested, alloc_id, stream, t) ORDER BY seq",
                           -1, &s, NULL) != SQLITE_OK) {
        free(b);
        return GM_SQL_NOQUERY;
    }
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {} /* never a row: see sql_row_fn */
    sqlite3_finalize(s);
    /* SQLite's reason, kept before the next call (create_function) resets it */
    if (rc != SQLITE_DONE && !b->stopped && b->nrows)
        gm_db_damaged(d, "SQLite stopped reading its events after event %" PRId64 " (%s)", b->last_seq,
                      sqlite3_errmsg(d->db));
    else if (rc != SQLITE_DONE && !b->stopped)
        gm_db_damaged(d, "SQLite cannot read its events (%s)", sqlite3_errmsg(d->db));
    sqlite3_create_function(d->db, "gm_event_row", 12, SQLITE_UTF8, NULL, NULL, NULL, NULL);
    if (b->backwards)
        gm_db_damaged(d, "its events go back in order (event %" PRId64 " after %" PRId64 "; %" PRIu64
                      " row%s out of order left out)", b->first_back, b->back_after, b->backwards,
                      b->backwards == 1 ? "" : "s");
    else if (rc == SQLITE_DONE && !b->stopped)
        events_complete(d, b->nrows);
    /* the rows read before the end, or before the error (a damaged tail), still go to fn */
    int out = b->stopped ? GM_PAGES_STOPPED : rc == SQLITE_DONE ? GM_PAGES_DONE : GM_SQL_ERROR;
    if (!b->stopped && b->n && fn(ctx, b->rows, b->n) != 0) out = GM_PAGES_STOPPED;
    free(b);
    return out;
}

static int no_rows(void *ctx, const gm_event_row *rows, size_t n) {
    (void)ctx, (void)rows, (void)n;
    return 0;
}

void gm_events_check(gm_db *d) {
    int pr = gm_events_pages_lean(d, no_rows, NULL);
    if (pr == GM_PAGES_NO || pr == GM_PAGES_RESTART) gm_events_sql(d, no_rows, NULL);
}
