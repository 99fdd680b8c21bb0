/* gm_pickle.c — the pickle writer and the non-executing pickle reader (gm_pickle.h). */
#include "snapshot/formats/gm_pickle.h"

#include "snapshot/record/u64map.h"
#include "snapshot/read/utf8.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- writer */

void gpk_begin(FILE *f)
{
    fputc(0x80, f);
    fputc(2, f);
}
void gpk_end(FILE *f)
{
    fputc('.', f);
}
void gpk_none(FILE *f)
{
    fputc('N', f);
}
void gpk_bool(FILE *f, int v)
{
    fputc(v ? 0x88 : 0x89, f);
}

static void put_le(FILE *f, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        fputc((int)((v >> (8 * i)) & 0xff), f);
}

void gpk_int(FILE *f, int64_t v)
{
    if (v >= 0 && v < 256) {
        fputc('K', f);
        fputc((int)v, f);
    } else if (v >= 0 && v < 65536) {
        fputc('M', f);
        put_le(f, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        fputc('J', f);
        put_le(f, (uint64_t)(uint32_t)(int32_t)v, 4);
    } else {
        /* LONG1: little-endian two's complement, as few bytes as keep the sign */
        int n = 8;
        while (n > 1) {
            int64_t top = v >> (8 * (n - 1) - 1);
            if (top != 0 && top != -1) break;
            n--;
        }
        fputc(0x8a, f);
        fputc(n, f);
        put_le(f, (uint64_t)v, n);
    }
}

void gpk_uint(FILE *f, uint64_t v)
{
    if (v <= (uint64_t)INT64_MAX) {
        gpk_int(f, (int64_t)v);
        return;
    }
    fputc(0x8a, f); /* 9 bytes: the 64 bits and a zero sign byte */
    fputc(9, f);
    put_le(f, v, 8);
    fputc(0, f);
}

void gpk_float(FILE *f, double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    fputc('G', f);
    for (int i = 7; i >= 0; i--)
        fputc((int)((b >> (8 * i)) & 0xff), f);
}

void gpk_str(FILE *f, const char *s)
{
    if (!s) {
        gpk_none(f);
        return;
    }
    size_t n = strlen(s);
    fputc('X', f);
    put_le(f, n, 4);
    /* Python decodes BINUNICODE as strict UTF-8: a byte that is not part of well-formed UTF-8
     * becomes '?' (one byte for one: the length written above stays right) */
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int k = gm_utf8_len(p);
        if (k == 0) {
            fputc('?', f);
            p++;
        } else {
            fwrite(p, 1, (size_t)k, f);
            p += k;
        }
    }
}

void gpk_key(FILE *f, const char *k)
{
    gpk_str(f, k);
}
void gpk_memo_put(FILE *f, uint32_t idx)
{
    fputc('r', f);
    put_le(f, idx, 4);
}
void gpk_memo_get(FILE *f, uint32_t idx)
{
    fputc('j', f);
    put_le(f, idx, 4);
}
void gpk_dict_begin(FILE *f)
{
    fputc('}', f);
    fputc('(', f);
}
void gpk_dict_end(FILE *f)
{
    fputc('u', f);
}
void gpk_list_begin(FILE *f)
{
    fputc(']', f);
    fputc('(', f);
}
void gpk_list_end(FILE *f)
{
    fputc('e', f);
}

void gpk_write_val(FILE *f, const gpk_val *v)
{
    static unsigned depth;
    if (!v || depth > 200) { /* deeper than any snapshot: not written */
        gpk_none(f);
        return;
    }
    depth++;
    switch (v->type) {
    case GPK_BOOL: gpk_bool(f, (int)v->i); break;
    case GPK_INT:
        if (v->big == 1)
            gpk_uint(f, v->u);
        else if (v->big)
            gpk_none(f);
        else
            gpk_int(f, v->i);
        break;
    case GPK_FLOAT: gpk_float(f, v->f); break;
    case GPK_STR:
    case GPK_BYTES: gpk_str(f, v->s); break;
    case GPK_LIST:
    case GPK_TUPLE:
    case GPK_SET:
        gpk_list_begin(f);
        for (size_t i = 0; i < v->len; i++) gpk_write_val(f, v->items[i]);
        gpk_list_end(f);
        break;
    case GPK_DICT:
        gpk_dict_begin(f);
        for (size_t i = 0; i < v->len; i++) {
            gpk_write_val(f, v->items[2 * i]);
            gpk_write_val(f, v->items[2 * i + 1]);
        }
        gpk_dict_end(f);
        break;
    default: gpk_none(f); break;
    }
    depth--;
}

/* ---------------------------------------------------------------- reader */

typedef struct rd {
    const unsigned char *p, *end, *start;
    gpk_doc *doc;
    gpk_val **stack;
    size_t sn, scap;
    size_t *marks;
    size_t mn, mcap;
    u64map memo;
    char *err;
    size_t errsz;
} rd;

static int rfail(rd *r, const char *fmt, ...)
{
    int n = snprintf(r->err, r->errsz, "offset %zu: ", (size_t)(r->p - r->start));
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < r->errsz) vsnprintf(r->err + n, r->errsz - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int charge(rd *r, size_t bytes)
{
    if (bytes > r->doc->budget - r->doc->bytes)
        return rfail(
            r,
            "the pickle needs more than %zu MiB of memory: not a memory snapshot, or a hostile one",
            r->doc->budget >> 20);
    r->doc->bytes += bytes;
    return 0;
}

static gpk_val *newval(rd *r, enum gpk_type t)
{
    if (charge(r, sizeof(gpk_val))) return NULL;
    gpk_val *v = calloc(1, sizeof *v);
    if (!v) {
        rfail(r, "out of memory");
        return NULL;
    }
    v->type = t;
    v->next_all = r->doc->all;
    r->doc->all = v;
    return v;
}

static int push(rd *r, gpk_val *v)
{
    if (!v) return -1;
    if (r->sn == r->scap) {
        size_t nc = r->scap ? 2 * r->scap : 64;
        if (charge(r, (nc - r->scap) * sizeof(gpk_val *))) return -1;
        gpk_val **ns = realloc(r->stack, nc * sizeof *ns);
        if (!ns) return rfail(r, "out of memory");
        r->stack = ns, r->scap = nc;
    }
    r->stack[r->sn++] = v;
    return 0;
}

static size_t mark_base(rd *r)
{
    return r->mn ? r->marks[r->mn - 1] : 0;
}

static gpk_val *pop(rd *r)
{
    if (r->sn == mark_base(r) || r->sn == 0) {
        rfail(r, "the pickle pops from an empty stack: it is damaged");
        return NULL;
    }
    return r->stack[--r->sn];
}

static gpk_val *top(rd *r)
{
    if (r->sn == mark_base(r) || r->sn == 0) {
        rfail(r, "the pickle reads an empty stack: it is damaged");
        return NULL;
    }
    return r->stack[r->sn - 1];
}

/* An opcode's fixed operand past the end: the input really stops there. */
static int need(rd *r, size_t n)
{
    if ((size_t)(r->end - r->p) < n)
        return rfail(r, "the pickle ends (at byte %zu) in the middle of an opcode: it is cut short",
                     (size_t)(r->end - r->start));
    return 0;
}

/* Data whose length the pickle states: a length past the end is what was found, and a byte
 * changed in the middle of a file (a length turned into 2 GiB) reads so as well as a file cut
 * short, so the message names the place and not a cause it cannot know. */
static int need_data(rd *r, size_t n)
{
    size_t left = (size_t)(r->end - r->p);
    if (left < n && !left) return need(r, n);
    if (left < n)
        return rfail(r, "a length of %zu bytes here runs past the end of the pickle (%zu bytes left): "
                        "the pickle is damaged at byte %zu (or cut short)",
                     n, left, (size_t)(r->p - r->start));
    return 0;
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int add_items(rd *r, gpk_val *c, size_t n)
{
    size_t per = c->type == GPK_DICT ? 2 : 1;
    if (c->len * per + n * per > c->cap) {
        size_t nc = c->cap ? c->cap : 4;
        while (nc < c->len * per + n * per)
            nc *= 2;
        if (charge(r, (nc - c->cap) * sizeof(gpk_val *))) return -1;
        gpk_val **ni = realloc(c->items, nc * sizeof *ni);
        if (!ni) return rfail(r, "out of memory");
        c->items = ni, c->cap = nc;
    }
    return 0;
}

/* appends the items above the top mark (dict: key/value pairs) to container c, pops them */
static int fill(rd *r, gpk_val *c, size_t from)
{
    size_t n = r->sn - from;
    if (c->type == GPK_DICT && n % 2)
        return rfail(r, "a dict gets a key without a value: the pickle is damaged");
    size_t count = c->type == GPK_DICT ? n / 2 : n;
    if (count == 0) return 0; /* an empty APPENDS / SETITEMS (items may still be NULL) */
    if (add_items(r, c, count)) return -1;
    memcpy(c->items + c->len * (c->type == GPK_DICT ? 2 : 1), r->stack + from,
           n * sizeof(gpk_val *));
    c->len += count;
    r->sn = from;
    return 0;
}

static int pop_mark(rd *r, size_t *from)
{
    if (!r->mn) return rfail(r, "the pickle closes a mark it never opened: it is damaged");
    *from = r->marks[--r->mn];
    return 0;
}

static gpk_val *mkstr(rd *r, enum gpk_type t, size_t n)
{
    if (need_data(r, n)) return NULL;
    if (charge(r, n + 1)) return NULL;
    gpk_val *v = newval(r, t);
    if (!v) return NULL;
    v->s = malloc(n + 1);
    if (!v->s) {
        rfail(r, "out of memory");
        return NULL;
    }
    memcpy(v->s, r->p, n);
    v->s[n] = 0;
    v->len = n;
    r->p += n;
    return v;
}

static gpk_val *mkint(rd *r, const unsigned char *b, size_t n)
{
    gpk_val *v = newval(r, GPK_INT);
    if (!v) return NULL;
    if (n == 0) return v;
    int neg = (b[n - 1] & 0x80) != 0;
    size_t sig = n;
    /* drop redundant sign bytes */
    while (sig > 1 && b[sig - 1] == (neg ? 0xff : 0x00))
        sig--;
    if (sig > 8 || (sig == 8 && !neg && (b[7] & 0x80))) {
        if (!neg && (sig == 8 || (sig == 9 && b[8] == 0))) {
            v->big = 1;
            v->u = le(b, 8);
        } else {
            v->big = 2;
        }
        return v;
    }
    uint64_t x = le(b, (int)sig);
    if (neg && sig < 8) x |= ~0ull << (8 * sig);
    v->i = (int64_t)x;
    return v;
}

static const char *opname(int op)
{
    switch (op) {
    case 'c':
        return "GLOBAL";
    case 0x93:
        return "STACK_GLOBAL";
    case 'R':
        return "REDUCE";
    case 'b':
        return "BUILD";
    case 'i':
        return "INST";
    case 'o':
        return "OBJ";
    case 0x81:
        return "NEWOBJ";
    case 0x92:
        return "NEWOBJ_EX";
    case 'P':
        return "PERSID";
    case 'Q':
        return "BINPERSID";
    case 0x82:
    case 0x83:
    case 0x84:
        return "EXT";
    case 0x96:
        return "BYTEARRAY8";
    case 0x97:
        return "NEXT_BUFFER";
    case 0x98:
        return "READONLY_BUFFER";
    default:
        return NULL;
    }
}

static void printable(char *out, size_t outsz, const unsigned char *s, size_t n)
{
    size_t j = 0;
    for (size_t i = 0; i < n && j + 1 < outsz && i < 60; i++)
        out[j++] = s[i] >= 0x20 && s[i] < 0x7f ? (char)s[i] : '?';
    out[j] = 0;
}

static int run(rd *r)
{
    while (r->p < r->end) {
        int op = *r->p++;
        gpk_val *v, *k, *c;
        size_t from = 0, n;
        uint64_t idx;
        switch (op) {
        case 0x80:
            if (need(r, 1)) return -1;
            if (*r->p > 5)
                return rfail(r, "pickle protocol %d is newer than 5, the newest Python writes",
                             *r->p);
            r->p++;
            break;
        case 0x95:
            if (need(r, 8)) return -1;
            r->p += 8;
            break;
        case '.':
            if (!(v = pop(r))) return -1;
            r->doc->root = v;
            return 0;
        case '(':
            if (r->mn == r->mcap) {
                size_t nc = r->mcap ? 2 * r->mcap : 16;
                if (charge(r, (nc - r->mcap) * sizeof(size_t))) return -1;
                size_t *nm = realloc(r->marks, nc * sizeof *nm);
                if (!nm) return rfail(r, "out of memory");
                r->marks = nm, r->mcap = nc;
            }
            r->marks[r->mn++] = r->sn;
            break;
        case ')':
            if (push(r, newval(r, GPK_TUPLE))) return -1;
            break;
        case ']':
            if (push(r, newval(r, GPK_LIST))) return -1;
            break;
        case '}':
            if (push(r, newval(r, GPK_DICT))) return -1;
            break;
        case 0x8f:
            if (push(r, newval(r, GPK_SET))) return -1;
            break;
        case 'N':
            if (push(r, newval(r, GPK_NONE))) return -1;
            break;
        case 0x88:
        case 0x89:
            if (!(v = newval(r, GPK_BOOL))) return -1;
            v->i = op == 0x88;
            if (push(r, v)) return -1;
            break;
        case 't':
        case 'l':
        case 'd':
        case 0x91:
            if (pop_mark(r, &from)) return -1;
            if (!(c = newval(r, op == 't'   ? GPK_TUPLE
                                : op == 'l' ? GPK_LIST
                                : op == 'd' ? GPK_DICT
                                            : GPK_SET)))
                return -1;
            if (fill(r, c, from) || push(r, c)) return -1;
            break;
        case 0x85:
        case 0x86:
        case 0x87:
            n = (size_t)(op - 0x84);
            if (r->sn < mark_base(r) + n)
                return rfail(r, "TUPLE%zu with fewer than %zu items: the pickle is damaged", n, n);
            if (!(c = newval(r, GPK_TUPLE))) return -1;
            if (fill(r, c, r->sn - n) || push(r, c)) return -1;
            break;
        case 'a':
            if (!(v = pop(r)) || !(c = top(r))) return -1;
            if (c->type != GPK_LIST) return rfail(r, "APPEND to something that is not a list");
            if (add_items(r, c, 1)) return -1;
            c->items[c->len++] = v;
            break;
        case 'e':
        case 'u':
        case 0x90: {
            if (pop_mark(r, &from)) return -1;
            if (from == 0 || from > r->sn)
                return rfail(r, "%s without a container under its mark",
                             op == 'e'   ? "APPENDS"
                             : op == 'u' ? "SETITEMS"
                                         : "ADDITEMS");
            c = r->stack[from - 1];
            enum gpk_type want = op == 'e' ? GPK_LIST : op == 'u' ? GPK_DICT : GPK_SET;
            if (c->type != want)
                return rfail(r, "%s to a value of the wrong type",
                             op == 'e'   ? "APPENDS"
                             : op == 'u' ? "SETITEMS"
                                         : "ADDITEMS");
            if (fill(r, c, from)) return -1;
            break;
        }
        case 's':
            if (!(v = pop(r)) || !(k = pop(r)) || !(c = top(r))) return -1;
            if (c->type != GPK_DICT) return rfail(r, "SETITEM on something that is not a dict");
            if (add_items(r, c, 1)) return -1;
            c->items[2 * c->len] = k, c->items[2 * c->len + 1] = v, c->len++;
            break;
        case 'J':
            if (need(r, 4)) return -1;
            if (!(v = newval(r, GPK_INT))) return -1;
            v->i = (int32_t)(uint32_t)le(r->p, 4);
            r->p += 4;
            if (push(r, v)) return -1;
            break;
        case 'K':
            if (need(r, 1)) return -1;
            if (!(v = newval(r, GPK_INT))) return -1;
            v->i = *r->p++;
            if (push(r, v)) return -1;
            break;
        case 'M':
            if (need(r, 2)) return -1;
            if (!(v = newval(r, GPK_INT))) return -1;
            v->i = (int64_t)le(r->p, 2);
            r->p += 2;
            if (push(r, v)) return -1;
            break;
        case 0x8a:
        case 0x8b:
            if (need(r, op == 0x8a ? 1 : 4)) return -1;
            n = op == 0x8a ? *r->p : (size_t)le(r->p, 4);
            r->p += op == 0x8a ? 1 : 4;
            if (n > 4096) return rfail(r, "an integer of %zu bytes: not a memory snapshot", n);
            if (need_data(r, n)) return -1;
            if (!(v = mkint(r, r->p, n))) return -1;
            r->p += n;
            if (push(r, v)) return -1;
            break;
        case 'G': {
            if (need(r, 8)) return -1;
            uint64_t b = 0;
            for (int i = 0; i < 8; i++)
                b = (b << 8) | r->p[i];
            r->p += 8;
            if (!(v = newval(r, GPK_FLOAT))) return -1;
            memcpy(&v->f, &b, sizeof v->f);
            if (push(r, v)) return -1;
            break;
        }
        case 'X':
        case 'B':
        case 'T':
            if (need(r, 4)) return -1;
            n = (size_t)le(r->p, 4);
            r->p += 4;
            if (push(r, mkstr(r, op == 'X' ? GPK_STR : GPK_BYTES, n))) return -1;
            break;
        case 0x8c:
        case 'C':
        case 'U':
            if (need(r, 1)) return -1;
            n = *r->p++;
            if (push(r, mkstr(r, op == 0x8c ? GPK_STR : GPK_BYTES, n))) return -1;
            break;
        case 0x8d:
        case 0x8e:
            if (need(r, 8)) return -1;
            idx = le(r->p, 8);
            r->p += 8;
            if (idx > (uint64_t)(r->end - r->p))
                return need_data(r, idx > SIZE_MAX ? SIZE_MAX : (size_t)idx);
            if (push(r, mkstr(r, op == 0x8d ? GPK_STR : GPK_BYTES, (size_t)idx))) return -1;
            break;
        case 'q':
        case 'r':
        case 0x94:
            if (op == 0x94)
                idx = r->memo.count;
            else {
                if (need(r, op == 'q' ? 1 : 4)) return -1;
                idx = op == 'q' ? *r->p : le(r->p, 4);
                r->p += op == 'q' ? 1 : 4;
            }
            if (!(v = top(r))) return -1;
            if (charge(r, 32) || u64map_put(&r->memo, idx, (uint64_t)(uintptr_t)v) != 0)
                return rfail(r, "out of memory");
            break;
        case 'h':
        case 'j': {
            if (need(r, op == 'h' ? 1 : 4)) return -1;
            idx = op == 'h' ? *r->p : le(r->p, 4);
            r->p += op == 'h' ? 1 : 4;
            const uint64_t *m = u64map_get(&r->memo, idx);
            if (!m)
                return rfail(
                    r, "the pickle refers to memo entry %llu that was never stored: it is damaged",
                    (unsigned long long)idx);
            if (push(r, (gpk_val *)(uintptr_t)*m)) return -1;
            break;
        }
        case '0':
            if (!pop(r)) return -1;
            break;
        case '1':
            if (pop_mark(r, &from)) return -1;
            r->sn = from;
            break;
        case '2':
            if (!(v = top(r)) || push(r, v)) return -1;
            break;
        case 'c': {
            /* GLOBAL module\nname\n: say what it asked for */
            const unsigned char *nl1 = memchr(r->p, '\n', (size_t)(r->end - r->p));
            const unsigned char *nl2 =
                nl1 ? memchr(nl1 + 1, '\n', (size_t)(r->end - nl1 - 1)) : NULL;
            char a[64] = "?", b[64] = "?";
            if (nl1) printable(a, sizeof a, r->p, (size_t)(nl1 - r->p));
            if (nl2) printable(b, sizeof b, nl1 + 1, (size_t)(nl2 - nl1 - 1));
            r->p--;
            return rfail(r,
                         "GLOBAL '%s.%s' refused: the pickle wants to load code, and a memory "
                         "snapshot holds only plain data (gpumem never runs what a pickle asks)",
                         a, b);
        }
        case 0x93: {
            char a[64] = "?", b[64] = "?";
            if (r->sn >= 2 && r->stack[r->sn - 2]->type == GPK_STR &&
                r->stack[r->sn - 1]->type == GPK_STR) {
                printable(a, sizeof a, (const unsigned char *)r->stack[r->sn - 2]->s,
                          r->stack[r->sn - 2]->len);
                printable(b, sizeof b, (const unsigned char *)r->stack[r->sn - 1]->s,
                          r->stack[r->sn - 1]->len);
            }
            r->p--;
            return rfail(
                r,
                "STACK_GLOBAL '%s.%s' refused: the pickle wants to load code, and a memory "
                "snapshot holds only plain data (gpumem never runs what a pickle asks)",
                a, b);
        }
        default: {
            const char *nm = opname(op);
            r->p--;
            if (nm)
                return rfail(r,
                             "opcode %s refused: the pickle builds objects, and a memory snapshot "
                             "holds only plain data (gpumem never runs what a pickle asks)",
                             nm);
            return rfail(r,
                         "unknown or unsupported pickle opcode 0x%02x: not a pickle of plain data "
                         "(protocols 2 to 5)",
                         op);
        }
        }
    }
    return rfail(r, "the pickle ends (at byte %zu) without its STOP opcode: it is cut short",
                 (size_t)(r->end - r->start));
}

int gpk_parse(const unsigned char *buf, size_t n, size_t budget, gpk_doc *doc, char *err,
              size_t errsz)
{
    memset(doc, 0, sizeof *doc);
    doc->budget = budget ? budget : ((size_t)64 << 20) + 16 * n;
    rd r = {.p = buf, .end = buf + n, .start = buf, .doc = doc, .err = err, .errsz = errsz};
    if (u64map_init(&r.memo, 64) != 0) {
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    int rc = 0;
    if (n == 0)
        rc = rfail(&r, "the file is empty: not a pickle");
    else if (buf[0] != 0x80)
        rc = rfail(&r, "not a pickle of protocol 2 or newer (it does not start with PROTO)");
    else
        rc = run(&r);
    free(r.stack);
    free(r.marks);
    u64map_free(&r.memo);
    return rc;
}

void gpk_free(gpk_doc *doc)
{
    for (gpk_val *v = doc->all, *nx; v; v = nx) {
        nx = v->next_all;
        free(v->s);
        free(v->items);
        free(v);
    }
    memset(doc, 0, sizeof *doc);
}

const gpk_val *gpk_get(const gpk_val *d, const char *key)
{
    if (!d || d->type != GPK_DICT) return NULL;
    for (size_t i = 0; i < d->len; i++) {
        const gpk_val *k = d->items[2 * i];
        if (k->type == GPK_STR && strcmp(k->s, key) == 0) return d->items[2 * i + 1];
    }
    return NULL;
}

int gpk_as_u64(const gpk_val *v, uint64_t *out)
{
    if (!v || (v->type != GPK_INT && v->type != GPK_BOOL)) return -1;
    if (v->big == 1)
        *out = v->u;
    else if (v->big || v->i < 0)
        return -1;
    else
        *out = (uint64_t)v->i;
    return 0;
}

int gpk_as_i64(const gpk_val *v, int64_t *out)
{
    if (!v || (v->type != GPK_INT && v->type != GPK_BOOL) || v->big) return -1;
    *out = v->i;
    return 0;
}

const char *gpk_as_str(const gpk_val *v)
{
    return v && v->type == GPK_STR ? v->s : NULL;
}
