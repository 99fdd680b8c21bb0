/* utf8.h — well-formed UTF-8, as strict decoders (Python's, JSON parsers) want it. Names in a
 * recording are the program's bytes; the writers of text formats (JSON: gm_json_str, pickle:
 * gpk_str) keep what is UTF-8 and replace the rest. */
#ifndef GM_UTF8_H
#define GM_UTF8_H

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong form, no surrogate,
 * nothing above U+10FFFF), 0 when the bytes there are not one. Reads no byte past a NUL. */
static inline int gm_utf8_len(const unsigned char *p) {
    if (p[0] < 0x80) return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) return (p[1] & 0xc0) == 0x80 ? 2 : 0;
    if (p[0] >= 0xe0 && p[0] <= 0xef) {
        unsigned lo = p[0] == 0xe0 ? 0xa0 : 0x80, hi = p[0] == 0xed ? 0x9f : 0xbf;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xc0) == 0x80 ? 3 : 0;
    }
    if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        unsigned lo = p[0] == 0xf0 ? 0x90 : 0x80, hi = p[0] == 0xf4 ? 0x8f : 0xbf;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xc0) == 0x80 && (p[3] & 0xc0) == 0x80 ? 4 : 0;
    }
    return 0;
}

#endif
