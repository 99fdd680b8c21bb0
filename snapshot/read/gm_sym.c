/* gm_sym.c — symbolizing recorded frames after the run, with elfutils libdw (dwfl).
 *
 * The recorder stores each return address as (module path, build-id, offset in the ELF
 * file's own address layout). Here each module is reported to an offline Dwfl session from its
 * path; when its build-id differs from the recorded one (the binary was rebuilt, or this is
 * another machine) the frames stay unsymbolized rather than wrong. libdw's standard debuginfo
 * search (build-id under /usr/lib/debug, .gnu_debuglink) finds split debug info. Lookups use
 * offset - 1: the stored addresses are return addresses, which point after the call and may
 * belong to the next line or even the next function.
 *
 * Inlining. A return address inside code the compiler inlined belongs to several functions at
 * once: the line table gives the innermost source line (say gpt2.c:678 inside gpt2_forward),
 * while the ELF symbol is the outer function (gpt2_step). The DWARF scopes at the address
 * (dwarf_getscopes on the CU, then dwarf_getscopes_die on the innermost scope for the concrete
 * chain) hold one DW_TAG_inlined_subroutine per inlined call, each with the DW_AT_call_file /
 * DW_AT_call_line of the call in its caller. So a frame is stored as the innermost function
 * with the line-table line, plus rows in `inlines`: each enclosing function, nearest first,
 * with the line of the inlined call in it; the last row is the real function (its ELF name).
 * gm_expand_inlines then turns each recorded frame into that chain of logical frames, which
 * is what call sites and "called from" lines are built from.
 *
 * Results stay in memory: readers never change a recording (a recording's bytes are the same
 * before and after any report; its md5 is its identity). Symbolizing is redone on each read:
 * each module's DWARF is opened once and only the recorded addresses are looked up (the demo:
 * ~20 ms). `gpumem sql` shows the results in TEMP tables that shadow `frames` and `inlines`
 * (gm_symbols_temp, in gm_sql_temp.c), so a query sees names without the file being written, and a TEMP table
 * stack_sites with each stack's call site by the commands' rule.
 */
#include "snapshot/read/gm.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *debuginfo_path;
static const Dwfl_Callbacks offline_callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &debuginfo_path,
};

static int build_id_matches(Dwfl_Module *mod, const char *want) {
    if (!want || !*want) return 1; /* nothing recorded to compare with */
    const unsigned char *bits;
    GElf_Addr vaddr;
    int n = dwfl_module_build_id(mod, &bits, &vaddr);
    if (n <= 0) return 0;
    char hex[2 * 64 + 1];
    int k = n > 20 ? 20 : n;
    for (int i = 0; i < k; i++) snprintf(hex + 2 * i, 3, "%02x", bits[i]);
    return strcmp(hex, want) == 0;
}

static int is_function_scope(Dwarf_Die *d) {
    int t = dwarf_tag(d);
    return t == DW_TAG_subprogram || t == DW_TAG_inlined_subroutine;
}

/* Fills f->function (innermost function) and f->inl (enclosing functions with their call
 * lines) from the DWARF scopes at addr; elf_name is the ELF symbol (the out-of-line function).
 * Leaves f->function alone when the address is in no inlined code. */
static void inline_chain(Dwfl_Module *dm, GElf_Addr addr, const char *elf_name, gm_frame *f) {
    Dwarf_Addr dbias = 0;
    Dwarf_Die *cu = dwfl_module_addrdie(dm, addr, &dbias);
    if (!cu) return;
    Dwarf_Die *scopes = NULL;
    int n = dwarf_getscopes(cu, addr - dbias, &scopes);
    if (n <= 0) {
        free(scopes);
        return;
    }
    /* the innermost scope again, through its concrete parents (dwarf_getscopes continues into
     * the abstract definition of the innermost inline, not into where it was inlined) */
    Dwarf_Die inner = scopes[0];
    free(scopes);
    scopes = NULL;
    n = dwarf_getscopes_die(&inner, &scopes);
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
    if (n <= 0 || dwarf_getsrcfiles(cu, &files, &nfiles) != 0) {
        free(scopes);
        return;
    }
    int first = -1;
    for (int i = 0; i < n && first < 0; i++)
        if (is_function_scope(&scopes[i])) first = i;
    if (first < 0 || dwarf_tag(&scopes[first]) != DW_TAG_inlined_subroutine) {
        free(scopes);
        return;
    }
    const char *inner_name = dwarf_diename(&scopes[first]);
    free(f->function);
    f->function = strdup(inner_name ? inner_name : "(inlined)");
    for (int i = first; i < n && f->ninl < 64; i++) {
        if (dwarf_tag(&scopes[i]) != DW_TAG_inlined_subroutine) continue;
        int j = i + 1;
        while (j < n && !is_function_scope(&scopes[j])) j++;
        const char *caller = NULL;
        if (j < n) caller = dwarf_tag(&scopes[j]) == DW_TAG_subprogram && elf_name ? elf_name
                                                                                 : dwarf_diename(&scopes[j]);
        Dwarf_Attribute at;
        Dwarf_Word file_idx = 0, line = 0;
        const char *file = NULL;
        if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &at), &file_idx) == 0 && file_idx < nfiles)
            file = dwarf_filesrc(files, file_idx, NULL, NULL);
        if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &at), &line) != 0) line = 0;
        gm_inline *nl = realloc(f->inl, (f->ninl + 1) * sizeof *nl);
        if (!nl) break;
        f->inl = nl;
        nl[f->ninl++] = (gm_inline){strdup(caller ? caller : "(unknown)"), file ? strdup(file) : NULL,
                                    line < UINT32_MAX ? (uint32_t)line : 0};
    }
    free(scopes);
}

int gm_expand_inlines(gm_model *m) {
    if (m->inlines_expanded) return 0;
    size_t extra = 0;
    for (size_t i = 0; i < m->nframes; i++) extra += m->frames[i].ninl;
    if (!extra) return 0;
    /* one logical frame per (recorded frame, inline depth), shared by every stack using it */
    size_t base = m->nframes;
    gm_frame *nf = realloc(m->frames, (m->nframes + extra) * sizeof *nf);
    if (!nf) return -1;
    m->frames = nf;
    uint32_t *first_syn = calloc(base ? base : 1, sizeof *first_syn);
    size_t total = 0;
    for (size_t i = 0; i < m->nstack_frames; i++) {
        uint32_t f = m->stack_frames[i];
        total += 1 + (f < base ? m->frames[f].ninl : 0);
    }
    uint32_t *sf = malloc((total ? total : 1) * sizeof *sf);
    if (!first_syn || !sf) {
        free(first_syn), free(sf);
        return -1;
    }
    for (size_t i = 0; i < base; i++) {
        gm_frame *f = &m->frames[i];
        if (!f->ninl) continue;
        first_syn[i] = (uint32_t)m->nframes;
        for (uint32_t k = 0; k < f->ninl; k++) {
            gm_frame *s = &m->frames[m->nframes++];
            memset(s, 0, sizeof *s);
            s->id = f->id;
            s->offset = f->offset;
            s->module = f->module;
            s->symbolized = 1;
            s->line = f->inl[k].line;
            s->function = f->inl[k].function ? strdup(f->inl[k].function) : NULL;
            s->file = f->inl[k].file ? strdup(f->inl[k].file) : NULL;
            s->inl_depth = k + 1;
        }
    }
    size_t o = 0;
    for (size_t st = 0; st < m->nstacks; st++) {
        uint64_t off = m->stack_off[2 * st], len = m->stack_off[2 * st + 1], start = o;
        for (uint64_t k = 0; k < len; k++) {
            uint32_t f = m->stack_frames[off + k];
            sf[o++] = f;
            if (f < base)
                for (uint32_t j = 0; j < m->frames[f].ninl; j++) sf[o++] = first_syn[f] + j;
        }
        m->stack_off[2 * st] = start;
        m->stack_off[2 * st + 1] = o - start;
    }
    free(m->stack_frames);
    m->stack_frames = sf;
    m->nstack_frames = o;
    free(first_syn);
    m->inlines_expanded = 1;
    return 0;
}

/* A module's function symbols sorted by address, looked up by binary search.
 * dwfl_module_addrname scans the whole symbol table on every call: fine for the trainer, but
 * PyTorch's libtorch_cpu.so and libtorch_cuda.so hold hundreds of thousands of symbols, and a
 * recording of a small torch script has a few hundred frames in them (5 s per report before,
 * 90% of it in that scan). The table is built once per module (one pass, one sort) and answers
 * as libdwfl does: of the sized symbols containing the address, the one starting closest below
 * it; at one start, global before weak before local. Anything else (an address in no sized
 * symbol) is left to dwfl_module_addrname. GPUMEM_SYM_VERIFY=1 asks libdwfl too for every
 * frame and counts on stderr the answers that differ (tests/integration/sym_table.sh). */
typedef struct sym_ent {
    GElf_Addr start, end;
    const char *name; /* in the module's ELF string table: valid until dwfl_end */
    int rank;         /* 0 global, 1 weak, 2 local */
} sym_ent;

static int cmp_sym(const void *a, const void *b) {
    const sym_ent *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static sym_ent *sym_table(Dwfl_Module *dm, size_t *n) {
    *n = 0;
    int total = dwfl_module_getsymtab(dm);
    if (total <= 0) return NULL;
    sym_ent *t = malloc((size_t)total * sizeof *t);
    if (!t) return NULL;
    for (int i = 1; i < total; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        GElf_Word shndx;
        const char *name = dwfl_module_getsym_info(dm, i, &sym, &addr, &shndx, NULL, NULL);
        int type = GELF_ST_TYPE(sym.st_info), bind = GELF_ST_BIND(sym.st_info);
        if (!name || !*name || sym.st_size == 0 || shndx == SHN_UNDEF) continue;
        if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE) continue;
        t[(*n)++] = (sym_ent){addr, addr + sym.st_size, name,
                              bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2};
    }
    gm_sort(t, *n, sizeof *t, cmp_sym);
    return t;
}

/* the name of the symbol containing addr, NULL when none does within the nearest 64 starts */
static const char *sym_find(const sym_ent *t, size_t n, GElf_Addr addr) {
    size_t lo = 0, hi = n;
    while (lo < hi) { /* the first start above addr */
        size_t mid = (lo + hi) / 2;
        if (t[mid].start <= addr) lo = mid + 1;
        else hi = mid;
    }
    for (size_t k = 0; k < 64 && lo > k; k++) {
        const sym_ent *e = &t[lo - 1 - k];
        if (addr >= e->end) continue;
        /* the best-ranked symbol at that start (sorted by rank within a start) */
        while (e > t && e[-1].start == e->start) {
            if (addr < e[-1].end || e[-1].rank <= e->rank) e--;
            else break;
        }
        return e->name;
    }
    return NULL;
}

/* One module's symbolizing session: its Dwfl, the module in it (NULL: not readable, or another
 * build than the recorded one) and its symbol table. */
typedef struct sym_module {
    Dwfl *dwfl;
    Dwfl_Module *dm;
    GElf_Addr bias;
    sym_ent *syms;
    size_t nsyms;
} sym_module;

static void module_open(const gm_module *mod, sym_module *sm) {
    memset(sm, 0, sizeof *sm);
    if (!mod->path || mod->path[0] != '/' || access(mod->path, R_OK) != 0) return;
    sm->dwfl = dwfl_begin(&offline_callbacks);
    if (!sm->dwfl) return;
    Dwfl_Module *dm = dwfl_report_offline(sm->dwfl, mod->path, mod->path, -1);
    dwfl_report_end(sm->dwfl, NULL, NULL);
    if (!dm || !build_id_matches(dm, mod->build_id) || !dwfl_module_getelf(dm, &sm->bias)) return;
    sm->dm = dm;
    sm->syms = sym_table(dm, &sm->nsyms);
}

static void module_close(sym_module *sm) {
    free(sm->syms);
    if (sm->dwfl) dwfl_end(sm->dwfl);
    memset(sm, 0, sizeof *sm);
}

/* GPUMEM_SYM_VERIFY=1: every name the table gives is asked of libdwfl too, the answers that
 * differ counted */
typedef struct sym_verify {
    int on;
    size_t checked, differ;
} sym_verify;

static void frame_symbolize(const sym_module *sm, const char *path, gm_frame *f, sym_verify *v) {
    Dwfl_Module *dm = sm->dm;
    GElf_Addr addr = f->offset + sm->bias - (f->offset ? 1 : 0);
    const char *fn = sm->syms ? sym_find(sm->syms, sm->nsyms, addr) : NULL;
    if (!fn) fn = dwfl_module_addrname(dm, addr);
    else if (v && v->on) {
        const char *want = dwfl_module_addrname(dm, addr);
        v->checked++;
        if (!want || strcmp(want, fn) != 0) {
            v->differ++;
            fprintf(stderr, "gpumem: symbol table: %s+0x%llx: %s, libdwfl says %s\n", path,
                    (unsigned long long)f->offset, fn, want ? want : "(none)");
        }
    }
    Dwfl_Line *ln = dwfl_module_getsrc(dm, addr);
    int line = 0;
    const char *file = ln ? dwfl_lineinfo(ln, NULL, &line, NULL, NULL, NULL) : NULL;
    free(f->function), free(f->file);
    for (uint32_t k = 0; k < f->ninl; k++) free(f->inl[k].function), free(f->inl[k].file);
    free(f->inl);
    f->inl = NULL, f->ninl = 0;
    f->function = fn ? strdup(fn) : NULL;
    f->file = file ? strdup(file) : NULL;
    f->line = line > 0 ? (uint32_t)line : 0;
    f->symbolized = 1;
    inline_chain(dm, addr, fn, f);
}

static int sym_verify_asked(void) {
    const char *ve = getenv("GPUMEM_SYM_VERIFY");
    return ve && strcmp(ve, "1") == 0;
}

size_t gm_symbolize(gm_db *d, gm_model *m) {
    (void)d; /* the recording is not written: results stay in m */
    size_t done = 0;
    sym_verify v = {sym_verify_asked(), 0, 0};
    for (size_t mi = 0; mi < m->nmods; mi++) {
        gm_module *mod = &m->mods[mi];
        int pending = 0;
        for (size_t i = 0; i < m->nframes && !pending; i++)
            pending = m->frames[i].module == mi + 1 && !m->frames[i].symbolized;
        if (!pending) continue;
        sym_module sm;
        module_open(mod, &sm);
        for (size_t i = 0; sm.dm && i < m->nframes; i++) {
            gm_frame *f = &m->frames[i];
            if (f->module != mi + 1 || f->symbolized) continue;
            frame_symbolize(&sm, mod->path, f, &v);
            done++;
        }
        module_close(&sm);
    }
    if (v.on) fprintf(stderr, "gpumem: symbol table: %zu frames checked against libdwfl, %zu differ\n", v.checked, v.differ);
    gm_expand_inlines(m);
    return done;
}

/* gm_symbolize_sites' state: each module's session, opened at the first frame asked of it and
 * kept until gm_model_free */
struct gm_sym_lazy {
    sym_module *mods;
    uint8_t *opened; /* by module index */
};

int gm_symbolize_sites(gm_db *d, gm_model *m) {
    /* the verification counts every frame (tests/integration/sym_table.sh); stacks already
     * expanded, or inline chains read from the file, are what gm_symbolize deals with */
    int eager = sym_verify_asked() || m->inlines_expanded;
    for (size_t i = 0; i < m->nframes && !eager; i++) eager = m->frames[i].ninl != 0;
    struct gm_sym_lazy *z = eager ? NULL : calloc(1, sizeof *z);
    if (z) {
        z->mods = calloc(m->nmods ? m->nmods : 1, sizeof *z->mods);
        z->opened = calloc(m->nmods ? m->nmods : 1, 1);
    }
    if (!z || !z->mods || !z->opened) {
        if (z) free(z->mods), free(z->opened), free(z);
        gm_symbolize(d, m);
        return 0;
    }
    m->sym_lazy = z;
    return 1;
}

void gm_sym_frame(const gm_model *m, long fi) {
    struct gm_sym_lazy *z = m->sym_lazy;
    if (!z || fi < 0 || (size_t)fi >= m->nframes) return;
    gm_frame *f = &m->frames[fi]; /* a cache of the model's: its names filled in once */
    if (f->symbolized || !f->module || f->module > m->nmods) return;
    size_t mi = f->module - 1;
    if (!z->opened[mi]) {
        module_open(&m->mods[mi], &z->mods[mi]);
        z->opened[mi] = 1;
    }
    if (z->mods[mi].dm) frame_symbolize(&z->mods[mi], m->mods[mi].path, f, NULL);
}

void gm_sym_lazy_free(gm_model *m) {
    struct gm_sym_lazy *z = m->sym_lazy;
    if (!z) return;
    for (size_t mi = 0; mi < m->nmods; mi++) module_close(&z->mods[mi]);
    free(z->mods), free(z->opened), free(z);
    m->sym_lazy = NULL;
}
