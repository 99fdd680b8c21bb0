/* gm_flame.c — `gpumem flamegraph`: folded stacks ("a;b;c 1234" lines, as `gpumem export
 * --format folded` and PyTorch's memory_viz write them) into an SVG flame graph.
 *
 * PyTorch's `python -m torch.cuda._memory_viz segments|memory|compare` pipe their folded stacks
 * into ~/.cache/flamegraph.pl (Brendan Gregg's, which it would download; CDDL-licensed and not
 * in Debian) with `--countname bytes`. gpumem answers to that name: a link
 *   ln -s "$(command -v gpumem)" ~/.cache/flamegraph.pl
 * runs this command (argv[0] named flamegraph.pl), offline. Its own code, not a port.
 *
 * The layout: identical stack prefixes merge into one frame whose width is the sum of its
 * lines' counts; children sit on their parent in name order; the root spans the whole width at
 * the bottom. Each frame is a <g> with a <title> (name, count, share), a <rect> and its name cut
 * to the frame's width. Frames narrower than 0.1 px are left out (their parents keep the
 * bytes). No script: the file opens anywhere. */
#include "snapshot/formats/gm_formats.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fnode {
    char *name;
    uint64_t value;
    struct fnode **kids;
    size_t nkids, ckids;
} fnode;

static fnode *child(fnode *p, const char *name, size_t len)
{
    /* kids are kept sorted by name: a binary search, then an insertion */
    size_t lo = 0, hi = p->nkids;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strncmp(p->kids[mid]->name, name, len);
        if (c == 0) c = p->kids[mid]->name[len] ? 1 : 0;
        if (c == 0) return p->kids[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (p->nkids == p->ckids) {
        size_t nc = p->ckids ? 2 * p->ckids : 4;
        fnode **k = realloc(p->kids, nc * sizeof *k);
        if (!k) return NULL;
        p->kids = k, p->ckids = nc;
    }
    fnode *n = calloc(1, sizeof *n);
    if (!n || !(n->name = strndup(name, len))) {
        free(n);
        return NULL;
    }
    memmove(&p->kids[lo + 1], &p->kids[lo], (p->nkids - lo) * sizeof *p->kids);
    p->kids[lo] = n;
    p->nkids++;
    return n;
}

static void tree_free(fnode *n)
{
    for (size_t i = 0; i < n->nkids; i++) tree_free(n->kids[i]);
    free(n->kids), free(n->name);
    free(n);
}

static unsigned depth_of(const fnode *n)
{
    unsigned d = 0;
    for (size_t i = 0; i < n->nkids; i++) {
        unsigned k = depth_of(n->kids[i]);
        if (k > d) d = k;
    }
    return d + 1;
}

static void xml(FILE *o, const char *s, size_t max)
{
    for (size_t i = 0; s[i] && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '<') fputs("&lt;", o);
        else if (c == '>') fputs("&gt;", o);
        else if (c == '&') fputs("&amp;", o);
        else if (c == '"') fputs("&quot;", o);
        else if (c < 0x20) fputc(' ', o);
        else fputc(c, o);
    }
}

typedef struct flay {
    FILE *o;
    double width, per; /* pixels per count */
    unsigned height;   /* frames */
    const char *unit;
    uint64_t total;
} flay;

static void draw(const flay *l, const fnode *n, double x, unsigned depth)
{
    double w = (double)n->value * l->per;
    if (w < 0.1) return;
    double y = 40.0 + (double)(l->height - 1 - depth) * 16.0;
    /* a warm colour from the name, so that a frame keeps its colour between graphs */
    unsigned h = 2166136261u;
    for (const char *p = n->name; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    fputs("<g><title>", l->o);
    xml(l->o, n->name, SIZE_MAX);
    fprintf(l->o, " (%llu %s, %.2f%%)</title><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"15\" "
                  "fill=\"rgb(%u,%u,%u)\" rx=\"2\"/>",
            (unsigned long long)n->value, l->unit, 100.0 * (double)n->value / (double)l->total, x, y,
            w, 200 + h % 55, (h >> 8) % 180, (h >> 16) % 55);
    size_t fit = w > 12 ? (size_t)((w - 6) / 7) : 0; /* ~7 px a character at 12 px */
    if (fit >= 3) {
        fprintf(l->o, "<text x=\"%.1f\" y=\"%.1f\">", x + 3, y + 11.5);
        size_t len = strlen(n->name);
        xml(l->o, n->name, len <= fit ? len : fit - 2);
        if (len > fit) fputs("..", l->o);
        fputs("</text>", l->o);
    }
    fputs("</g>\n", l->o);
    double cx = x;
    for (size_t i = 0; i < n->nkids; i++) {
        draw(l, n->kids[i], cx, depth + 1);
        cx += (double)n->kids[i]->value * l->per;
    }
}

static const char *const usage_flame =
    "usage: gpumem flamegraph [--countname UNIT] [--title TEXT] [--width PIXELS] < FOLDED > SVG\n"
    "\n"
    "Draws folded stacks ('frame;frame;frame count' lines: gpumem export --format folded,\n"
    "PyTorch's memory_viz) as an SVG flame graph, the root at the bottom. PyTorch's\n"
    "`python -m torch.cuda._memory_viz segments|memory` run ~/.cache/flamegraph.pl; linked\n"
    "there, gpumem answers to that name, offline:\n"
    "  ln -s \"$(command -v gpumem)\" ~/.cache/flamegraph.pl\n"
    "  --countname UNIT  what the counts are (default: bytes)\n"
    "  --title TEXT      the graph's title (default: Flame Graph)\n"
    "  --width PIXELS    the image's width (default 1200)\n"
    "Other flamegraph.pl options are accepted and ignored.\n"
    "Exit code: 0; 2 usage, or no stack counts in the input (as flamegraph.pl).\n";

int gm_cmd_flamegraph(int argc, char **argv)
{
    const char *unit = "bytes", *title = "Flame Graph";
    double width = 1200;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_flame, stdout);
            return 0;
        }
        if (!strcmp(a, "--countname") || !strcmp(a, "--title") || !strcmp(a, "--width")) {
            const char *v = gm_opt_value(argc, argv, &i);
            if (!v)
                return fprintf(stderr, "gpumem flamegraph: %s needs a value\n\n%s", a, usage_flame),
                       GM_EXIT_USAGE;
            if (a[2] == 'c') unit = v;
            else if (a[2] == 't') title = v;
            else if (gm_arg_real(v, 100, 100000, &width) != 0)
                return fprintf(stderr, "gpumem flamegraph: --width takes 100 to 100000 pixels, got '%s'\n", v),
                       GM_EXIT_USAGE;
        } else if (a[0] == '-' && a[1] == '-' && i + 1 < argc && argv[i + 1][0] != '-' && strchr(a, '=') == NULL &&
                   (!strcmp(a, "--colors") || !strcmp(a, "--nametype") || !strcmp(a, "--subtitle") ||
                    !strcmp(a, "--height") || !strcmp(a, "--minwidth") || !strcmp(a, "--fonttype") ||
                    !strcmp(a, "--fontsize") || !strcmp(a, "--bgcolors"))) {
            i++; /* flamegraph.pl's options with a value: accepted, ignored */
        } else if (a[0] != '-') {
            return fprintf(stderr, "gpumem flamegraph: reads standard input; '%s' is extra\n\n%s", a, usage_flame),
                   GM_EXIT_USAGE;
        }
    }
    fnode *root = calloc(1, sizeof *root);
    if (!root || !(root->name = strdup("all"))) {
        free(root);
        fprintf(stderr, "gpumem flamegraph: out of memory\n");
        return GM_EXIT_BADDB;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    unsigned long long lineno = 0;
    while (rc == 0 && (n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        char *sp = strrchr(line, ' ');
        if (!sp || sp == line) continue;
        const char *count = sp + 1;
        uint64_t v;
        /* a count that strtoull would bend (a '-' wraps to 2^64-10, 30 digits saturate) or a
         * total past 2^64-1 (the root smaller than its children) is refused, never drawn */
        const char *num = count + (count[0] == '-');
        int digits = *num && strspn(num, "0123456789") == strlen(num);
        if (digits && (num != count || gm_arg_uint(count, 0, UINT64_MAX, &v) != 0)) {
            fprintf(stderr, "gpumem flamegraph: line %llu: the count '%s' is not a whole number from 0 to %llu; "
                            "fix or remove that line\n", lineno, count, (unsigned long long)UINT64_MAX);
            tree_free(root);
            free(line);
            return GM_EXIT_USAGE;
        }
        if (!digits || !v) continue; /* not "stack count" */
        if (root->value + v < root->value) {
            tree_free(root);
            free(line);
            fprintf(stderr, "gpumem flamegraph: line %llu: the counts add up past %llu (2^64-1), which no "
                            "total holds; split the input\n", lineno, (unsigned long long)UINT64_MAX);
            return GM_EXIT_USAGE;
        }
        *sp = 0;
        root->value += v;
        fnode *p = root;
        for (const char *s = line; p;) {
            const char *e = strchr(s, ';');
            size_t len = e ? (size_t)(e - s) : strlen(s);
            if (!(p = child(p, s, len))) {
                rc = -1;
                break;
            }
            p->value += v;
            if (!e) break;
            s = e + 1;
        }
    }
    free(line);
    if (rc != 0) {
        tree_free(root);
        fprintf(stderr, "gpumem flamegraph: out of memory\n");
        return GM_EXIT_BADDB;
    }
    if (!root->value) {
        tree_free(root);
        fprintf(stderr, "gpumem flamegraph: ERROR: No stack counts found\n");
        return GM_EXIT_USAGE;
    }
    flay l = {stdout, width - 20, (width - 20) / (double)root->value, depth_of(root), unit, root->value};
    double h = 40.0 + l.height * 16.0 + 30.0;
    printf("<?xml version=\"1.0\" standalone=\"no\"?>\n"
           "<svg version=\"1.1\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
           "xmlns=\"http://www.w3.org/2000/svg\">\n"
           "<!-- gpumem flamegraph (gpumem's own; flamegraph.pl's input, not its code) -->\n"
           "<style>text { font-family: Verdana, sans-serif; font-size: 12px; fill: #000; }</style>\n"
           "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#f8f8f8\"/>\n"
           "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" style=\"font-size:17px\">",
           width, h, width, h, width / 2);
    xml(stdout, title, SIZE_MAX);
    printf("</text>\n");
    fputs("<g transform=\"translate(10,0)\">\n", stdout);
    draw(&l, root, 0, 0);
    fputs("</g>\n", stdout);
    printf("<text x=\"10\" y=\"%.0f\">total %llu %s</text>\n</svg>\n", h - 10,
           (unsigned long long)root->value, unit);
    tree_free(root);
    return 0; /* the dispatcher checks that standard output was written (gpumem.c) */
}
