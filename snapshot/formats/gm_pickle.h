/* gm_pickle.h — Python pickles of plain data, written and read without Python.
 *
 * The writer emits protocol 2 (readable by every Python 3 and by PyTorch's memory_viz): dicts,
 * lists, str, int (any size up to 64 bits unsigned), float, bool and None, streamed to a FILE.
 *
 * The reader accepts the opcodes Python's pickle emits at protocols 2 to 5 for plain data:
 * dict, list, tuple, set, frozenset, str, bytes, int, float, bool, None, the memo, frames. It
 * never executes anything: GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, PERSID, EXT
 * and out-of-band buffers are refused with an error naming the opcode (and, for a global, the
 * name it asked for). Its memory is bounded by a byte budget. */
#ifndef GPUMEM_SNAPSHOT_GM_PICKLE_H
#define GPUMEM_SNAPSHOT_GM_PICKLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- writer */
void gpk_begin(FILE *f); /* PROTO 2 */
void gpk_end(FILE *f);   /* STOP */
void gpk_none(FILE *f);
void gpk_bool(FILE *f, int v);
void gpk_int(FILE *f, int64_t v);
void gpk_uint(FILE *f, uint64_t v);
void gpk_float(FILE *f, double v);
void gpk_str(FILE *f, const char *s); /* NULL writes None */
void gpk_dict_begin(FILE *f);         /* then key, value, ..., gpk_dict_end */
void gpk_dict_end(FILE *f);
void gpk_list_begin(FILE *f); /* then items, gpk_list_end */
void gpk_list_end(FILE *f);
/* the memo: gpk_memo_put stores the value just written under idx (LONG_BINPUT), gpk_memo_get
 * writes a reference to it (LONG_BINGET): a value written once and referred to many times */
void gpk_memo_put(FILE *f, uint32_t idx);
void gpk_memo_get(FILE *f, uint32_t idx);
/* a key of a dict followed by its value: gpk_key(f, "size"); gpk_uint(f, 512); */
void gpk_key(FILE *f, const char *k);
/* a value read by the reader, written back (tuples and sets as lists, bytes as str, an int
 * beyond 64 bits and anything nested past 200 levels as None) */
typedef struct gpk_val gpk_val;
void gpk_write_val(FILE *f, const gpk_val *v);

/* ---- reader */
enum gpk_type {
    GPK_NONE,
    GPK_BOOL,
    GPK_INT,
    GPK_FLOAT,
    GPK_STR,
    GPK_BYTES,
    GPK_LIST,
    GPK_TUPLE,
    GPK_DICT,
    GPK_SET,
    GPK_MARK
};
struct gpk_val {
    enum gpk_type type;
    int big;    /* GPK_INT: does not fit int64 (u holds it when it fits uint64; big = 2 beyond) */
    int64_t i;  /* GPK_INT, GPK_BOOL */
    uint64_t u; /* GPK_INT when big == 1 */
    double f;   /* GPK_FLOAT */
    char *s;    /* GPK_STR, GPK_BYTES (NUL-terminated; len bytes) */
    size_t len; /* GPK_STR/BYTES: bytes; LIST/TUPLE/SET: items; DICT: pairs */
    size_t cap;
    gpk_val **items;   /* LIST/TUPLE/SET: len items; DICT: 2*len (key, value) */
    gpk_val *next_all; /* every value of a document, for freeing */
};
typedef struct gpk_doc {
    gpk_val *root;
    gpk_val *all;
    size_t bytes, budget;
} gpk_doc;

/* Parses buf[0..n). budget: the most bytes of memory the values may take (0: 64 MiB + 16 x n).
 * Returns 0, or -1 with a one-line reason in err ("offset 12: GLOBAL 'os system' refused: ...").
 * Free the document with gpk_free either way. */
int gpk_parse(const unsigned char *buf, size_t n, size_t budget, gpk_doc *doc, char *err,
              size_t errsz);
void gpk_free(gpk_doc *doc);
/* dict lookup by str key; NULL when absent or d is not a dict */
const gpk_val *gpk_get(const gpk_val *d, const char *key);
/* int value of v (an int or bool) into *out; returns 0, -1 when not an int that fits */
int gpk_as_u64(const gpk_val *v, uint64_t *out);
int gpk_as_i64(const gpk_val *v, int64_t *out);
/* a str's text, or NULL */
const char *gpk_as_str(const gpk_val *v);

#endif
