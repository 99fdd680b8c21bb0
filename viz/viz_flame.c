/* viz_flame.c — the page's icicles: bytes live at the peak by stack, and bytes allocated in total
 * by stack. The stacks come from snapshot/'s folded export (gm_export_format "folded", the lines
 * `gpumem export --format folded` prints: "root;...;leaf bytes"), read back into a tree here, so
 * that the page, flamegraph.pl and speedscope draw the same numbers: the root of the peak icicle
 * is the report's peak allocated. Nodes under 1/VIZ_FLAME_MIN of the root (well under a pixel)
 * are left out; their bytes stay in their parent's width.
 *
 * Start-up: every stack of a C program begins with the C library's way into main (_start,
 * __libc_start_main, __libc_start_call_main), four rows above the program's own frames in every
 * icicle. A node is start-up code when, on every stack through it, it lies outward of the
 * program's entry: the outermost Python frame when the stack has Python frames (the
 * interpreter's way in), else `main`; a stack with neither but a thread's start (start_thread,
 * clone, clone3) has the frames up to the thread start as its start-up. The page folds the
 * start-up nodes into one "(start-up)" bar and shows them with a switch. Entries are known from
 * the model's frames (a Python frame; a native one named main), looked up by the name the folded
 * line gives them. */
#include <stdlib.h>
#include <string.h>

#include "snapshot/record/bytemap.h"
#include "viz/viz.h"

#define VIZ_FLAME_MIN 5000

typedef struct fnode {
    uint32_t parent, name;
    uint64_t value;
    uint8_t startup; /* 0 no, 1 yes, 2 not seen yet */
} fnode;

enum { NAME_PLAIN, NAME_ENTRY, NAME_THREAD }; /* what a frame's name says of start-up */

typedef struct flame {
    fnode *nodes;
    size_t n, cap;
    char **names;
    uint8_t *kind; /* per name: NAME_* */
    size_t nnames, names_cap;
    bytemap name_idx;                  /* a frame's name, by its bytes -> its index */
    u64map child_idx;                  /* parent << 32 | name -> the node */
    bytemap entry_names, thread_names; /* the names entries and thread starts have */
    uint32_t *line;                    /* the current line's name indices */
    size_t line_cap;
} flame;

static long name_of(flame *f, const char *s, size_t n)
{
    uint64_t *hit = bytemap_get(&f->name_idx, s, n);
    if (hit) return (long)*hit;
    if (f->nnames == f->names_cap) {
        size_t nc = f->names_cap ? f->names_cap * 2 : 256;
        char **nn = realloc(f->names, nc * sizeof *nn);
        if (nn) f->names = nn;
        uint8_t *nk = nn ? realloc(f->kind, nc) : NULL;
        if (!nk) return -1;
        f->kind = nk, f->names_cap = nc;
    }
    char *c = strndup(s, n);
    if (!c || bytemap_put(&f->name_idx, s, n, f->nnames)) {
        free(c);
        return -1;
    }
    f->names[f->nnames] = c;
    f->kind[f->nnames] = bytemap_get(&f->entry_names, s, n)    ? NAME_ENTRY
                         : bytemap_get(&f->thread_names, s, n) ? NAME_THREAD
                                                               : NAME_PLAIN;
    return (long)f->nnames++;
}

static long child_of(flame *f, uint32_t parent, uint32_t name)
{
    /* the pair itself, not a hash of it: two pairs are never one node. Both are indices below
     * UINT32_MAX (a node's, a name's), so the key is never u64map's empty one. */
    uint64_t key = (uint64_t)parent << 32 | name;
    uint64_t *hit = u64map_get(&f->child_idx, key);
    if (hit) return (long)*hit;
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 1024;
        fnode *nn = realloc(f->nodes, nc * sizeof *nn);
        if (!nn) return -1;
        f->nodes = nn, f->cap = nc;
    }
    if (u64map_put(&f->child_idx, key, f->n)) return -1;
    f->nodes[f->n] = (fnode){parent, name, 0, 2};
    return (long)f->n++;
}

/* One folded line: frames separated by ';' (outermost first), then a space and the bytes. */
static int add_line(flame *f, const char *line, size_t len)
{
    const char *sp = memrchr(line, ' ', len);
    if (!sp) return 0;
    uint64_t bytes = strtoull(sp + 1, NULL, 10);
    f->nodes[0].value += bytes;
    size_t nf = 0;
    for (const char *p = line; p < sp;) {
        const char *e = memchr(p, ';', (size_t)(sp - p));
        if (!e) e = sp;
        long nm = name_of(f, p, (size_t)(e - p));
        if (nm < 0) return -1;
        if (nf == f->line_cap) {
            size_t nc = f->line_cap ? f->line_cap * 2 : 64;
            uint32_t *nl = realloc(f->line, nc * sizeof *nl);
            if (!nl) return -1;
            f->line = nl, f->line_cap = nc;
        }
        f->line[nf++] = (uint32_t)nm;
        p = e + 1;
    }
    /* the frames before the entry (or up to a thread's start) are start-up */
    size_t nstart = 0, k = 0;
    while (k < nf && f->kind[f->line[k]] != NAME_ENTRY)
        k++;
    if (k < nf)
        nstart = k;
    else
        for (k = 0; k < nf; k++)
            if (f->kind[f->line[k]] == NAME_THREAD) nstart = k + 1;
    uint32_t at = 0;
    for (k = 0; k < nf; k++) {
        long ch = child_of(f, at, f->line[k]);
        if (ch < 0) return -1;
        at = (uint32_t)ch;
        f->nodes[at].value += bytes;
        uint8_t st = k < nstart;
        f->nodes[at].startup = f->nodes[at].startup == 2 ? st : f->nodes[at].startup & st;
    }
    return 0;
}

/* The names entries and thread starts have in a folded line (as gm_export_format writes them). */
static int mark_names(flame *f, const gm_model *m)
{
    for (size_t i = 0; i < m->nframes; i++) {
        const gm_frame *fr = &m->frames[i];
        const char *fn = fr->function;
        int entry = fr->python || (fn && !strcmp(fn, "main"));
        int thread = !fr->python && fn &&
                     (!strcmp(fn, "start_thread") || !strcmp(fn, "clone") ||
                      !strcmp(fn, "clone3") || !strcmp(fn, "__clone") || !strcmp(fn, "__clone3"));
        if (!entry && !thread) continue;
        char name[1024];
        gm_frame_desc(m, (long)i, name, sizeof name);
        for (char *p = name; *p; p++)
            if (*p == ';' || *p == '\n' || *p == '\r') *p = ',';
        if (bytemap_put_str(entry ? &f->entry_names : &f->thread_names, name, 1))
            return -1;
    }
    return 0;
}

static void flame_free(flame *f)
{
    for (size_t i = 0; i < f->nnames; i++)
        free(f->names[i]);
    free(f->names), free(f->nodes), free(f->kind), free(f->line);
    bytemap_free(&f->name_idx), u64map_free(&f->child_idx);
    bytemap_free(&f->entry_names), bytemap_free(&f->thread_names);
}

int viz_write_flame(FILE *o, gm_db *d, gm_model *m, int what)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *ms = open_memstream(&buf, &len);
    if (!ms) return -1;
    /* the device's view, as the rest of the page (its timeline, segments and summary) */
    int erc = gm_export_format(d, m, "folded", what, GM_VIEW_DEVICE, ms);
    fclose(ms);
    flame f = {0};
    int rc = -1;
    uint32_t *keep = NULL;
    if (erc != 0) goto out;
    f.nodes = malloc(1024 * sizeof *f.nodes);
    if (!f.nodes) goto out;
    f.cap = 1024;
    f.nodes[f.n++] = (fnode){UINT32_MAX, 0, 0, 0};
    if (mark_names(&f, m)) goto out;
    if (name_of(&f, what ? "all allocations" : "live at the peak", what ? 15 : 16) < 0) goto out;
    for (char *p = buf; p && p < buf + len;) {
        char *e = memchr(p, '\n', (size_t)(buf + len - p));
        size_t n = e ? (size_t)(e - p) : (size_t)(buf + len - p);
        if (add_line(&f, p, n)) goto out;
        p = e ? e + 1 : NULL;
    }
    /* nodes were made parent first: a node is kept when it and its parent are */
    keep = malloc(sizeof *keep * f.n);
    if (!keep) goto out;
    uint64_t min = f.nodes[0].value / VIZ_FLAME_MIN;
    size_t nk = 0;
    fprintf(o, "{\"names\":[");
    for (size_t i = 0; i < f.nnames; i++) {
        if (i) fputc(',', o);
        viz_json_str(o, f.names[i]);
    }
    fputs("],\"nodes\":[", o); /* [parent (-1: the root), name, bytes, start-up], parents first */
    for (size_t i = 0; i < f.n; i++) {
        const fnode *x = &f.nodes[i];
        keep[i] = UINT32_MAX;
        if (i && (keep[x->parent] == UINT32_MAX || x->value < min || !x->value)) continue;
        keep[i] = (uint32_t)nk;
        fprintf(o, "%s[%ld,%u,%llu,%d]", nk ? "," : "", i ? (long)keep[x->parent] : -1L, x->name,
                (unsigned long long)x->value, x->startup == 1);
        nk++;
    }
    fputs("]}", o);
    rc = 0;
out:
    free(keep);
    free(buf);
    flame_free(&f);
    return rc;
}
