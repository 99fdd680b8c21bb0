/* gm_fmt.c — how every printer of the reading side writes numbers and strings: bytes in binary
 * units, durations, JSON strings (well-formed UTF-8 kept, anything else U+FFFD). The lowest
 * layer of the printers, so that an analysis printing its own section never calls back into
 * the report that prints it (gm.h, "Formatting"). */
#include "snapshot/read/gm.h"
#include "snapshot/read/utf8.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>

void gm_fmt_bytes(uint64_t v, char *out, size_t outsz) {
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (v < 1024) {
        snprintf(out, outsz, "%" PRIu64 " B", v);
        return;
    }
    double x = (double)v;
    int i = 0;
    while (x >= 1024 && i < 5) x /= 1024, i++;
    snprintf(out, outsz, "%.2f %s", x, u[i]);
}

void gm_fmt_bytes_rounded(uint64_t v, int up, char *out, size_t outsz) {
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (v < 1024) {
        snprintf(out, outsz, "%" PRIu64 " B", v);
        return;
    }
    int i = 0;
    while (i < 5 && v >> (10 * (i + 1))) i++;
    /* hundredths of the unit, in integers: a double's rounding could land either side */
    uint64_t unit = (uint64_t)1 << (10 * i), whole = v / unit, rest = v % unit;
    uint64_t h = whole * 100 + (rest * 100 + (up ? unit - 1 : 0)) / unit;
    snprintf(out, outsz, "%" PRIu64 ".%02" PRIu64 " %s", h / 100, h % 100, u[i]);
}

void gm_fmt_ns(uint64_t ns, char *out, size_t outsz) {
    if (ns < 1000) snprintf(out, outsz, "%" PRIu64 " ns", ns);
    else if (ns < 1000000) snprintf(out, outsz, "%.1f us", (double)ns / 1e3);
    else if (ns < 1000000000) snprintf(out, outsz, "%.2f ms", (double)ns / 1e6);
    else snprintf(out, outsz, "%.3f s", (double)ns / 1e9);
}

/* Names are the program's bytes: UTF-8 stays as it is (a JSON string is UTF-8 text), control
 * characters are escaped, and a byte that is not part of well-formed UTF-8 becomes U+FFFD (so
 * the output is always valid JSON, and "é" is not turned into "Ã©"). */
void gm_json_str(FILE *out, const char *s) {
    if (!s) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = gm_utf8_len(p);
        if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f) fprintf(out, "\\u%04x", *p);
        else if (n == 0) fputs("\\ufffd", out);
        else fwrite(p, 1, (size_t)n, out);
        p += n ? n : 1;
    }
    fputc('"', out);
}


size_t gm_step_rows(size_t n, int (*same)(const void *ctx, size_t i, size_t j), const void *ctx, gm_step_row *rows) {
    size_t nruns = 0;
    for (size_t i = 0; i < n; i++)
        nruns += i == 0 || !same(ctx, i - 1, i);
    size_t keep = GM_STEP_ROWS_MAX / 2, out = 0, r = 0;
    for (size_t i = 0; i < n; r++) {
        size_t j = i + 1;
        while (j < n && same(ctx, i, j))
            j++;
        if (nruns <= GM_STEP_ROWS_MAX || r < keep || r >= nruns - keep)
            rows[out++] = (gm_step_row){i, j - 1, nruns > GM_STEP_ROWS_MAX && r == nruns - keep};
        i = j;
    }
    return out;
}

void gm_fmt_step_label(int64_t first, int64_t last, char *out, size_t outsz) {
    if (first != last) snprintf(out, outsz, "%" PRId64 "-%" PRId64, first, last);
    else snprintf(out, outsz, "%" PRId64, first);
}
