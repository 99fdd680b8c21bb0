/* snapshot_collide.c — tables that intern or deduplicate by contents keep two contents of one
 * hash apart. The hashes are narrowed on purpose (the test hook GM_TEST_HASH_BITS, u64map.h):
 * every key collides, and only a comparison of the contents can tell them apart.
 *   - bytemap.h (the merge of PyTorch's history: frames, stacks, strings, streams; every
 *     reading-side table built on it), 2-bit hashes;
 *   - the recorder's stack table (record/rec.c, this test's copy built with 1-bit hashes: every
 *     stack has the same key), two call sites recorded;
 *   - advise (analyze/gm_advise.c, this test's copy with 2-bit hashes): its string table (names,
 *     classes; a model, its view and its copy) and its ops (a range path's recurrences are one
 *     op, two paths are two: each op's duration is the median of its own);
 *   - the categories' parameter names (analyze/gm_category.c, viz/viz_category.c), viz's tensor
 *     classes (viz/viz_timeline.c) and its flame graph's frame names (viz/viz_flame.c), each
 *     built again with 2-bit hashes: a name that is no parameter's stays no parameter, each
 *     name its own class, each frame its own name;
 *   - the recorder's writer (record/rec_writer.c, 2-bit keys): a Python frame of a taken key is
 *     one frames row however often it comes again;
 *   - PyTorch's trace entries (preload/torch_trace.c, 2-bit hashes, its Python frames from a
 *     stand-in below): every stack kept, each entry with its own, none lost; and its ring
 *     (torch_trace_ring_table, not a hash's: the file's one unit test) through an entry's two
 *     ways, grown, wrapped and given a second device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <cmocka.h>

#define GM_TEST_HASH_BITS 2
#include "snapshot/analyze/gm_advise.h"
#include "snapshot/analyze/gm_category.h"
#include "snapshot/read/gm.h"
#include "snapshot/record/bytemap.h"
#include "snapshot/record/rec.h"
#include "snapshot/record/rec_internal.h"
#include "tests/unit/snapshot_test.h"
#include "viz/viz.h"

/* 600 strings, 600 frame-like keys and 600 stacks of ids, all of 4 hashes: each its own value */
static void bytemap_keeps_collisions_apart(void **state)
{
    (void)state;
    bytemap m = {0};
    char s[64];
    for (uint64_t i = 0; i < 600; i++) {
        snprintf(s, sizeof s, "name.%llu", (unsigned long long)i);
        assert_null(bytemap_get_str(&m, s));
        assert_int_equal(bytemap_put_str(&m, s, i), 0);
        int64_t ids[3] = {(int64_t)i, 7, -1};
        assert_int_equal(bytemap_put(&m, ids, sizeof ids, 1000 + i), 0);
    }
    assert_int_equal(m.n, 1200);
    for (uint64_t i = 0; i < 600; i++) {
        snprintf(s, sizeof s, "name.%llu", (unsigned long long)i);
        uint64_t *v = bytemap_get_str(&m, s);
        assert_non_null(v);
        assert_int_equal(*v, i);
        int64_t ids[3] = {(int64_t)i, 7, -1};
        v = bytemap_get(&m, ids, sizeof ids);
        assert_non_null(v);
        assert_int_equal(*v, 1000 + i);
    }
    /* a prefix, the empty key and one more byte are other keys */
    assert_null(bytemap_get_str(&m, "name."));
    assert_null(bytemap_get(&m, "", 0));
    assert_null(bytemap_get(&m, "name.1", 7));
    bytemap_free(&m);
}

__attribute__((noinline)) void collide_site_alpha(uint64_t a)
{
    rec_event(REC_ALLOC, 0, 0, a, 256, 256, a);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void collide_site_beta(uint64_t a)
{
    rec_event(REC_ALLOC, 0, 0, a, 512, 512, a);
    __asm__ volatile("" ::: "memory");
}

/* the recorder: two call sites of one key are two stacks; each event keeps its own */
static void recorder_stacks_of_one_hash(void **state)
{
    (void)state;
    char path[512];
    snap_path(path, sizeof path, "collide.db");
    unlink(path);
    rec_options o = {.path = path, .stacks = 16, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    for (uint64_t i = 0; i < 50; i++) {
        collide_site_alpha(0x10000 + i * 1024);
        collide_site_beta(0x90000 + i * 1024);
    }
    rec_test_reset(); /* closes */
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT stack) FROM events"), 2);
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT stack) FROM stacks"), 2);
    /* the sizes say the site: one stack for each size, never shared */
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT stack) FROM events WHERE size = 256"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events a JOIN events b ON a.stack = b.stack "
                                  "WHERE a.size = 256 AND b.size = 512"), 0);
    unlink(path);
}

/* A recording of 3 steps, each "step N" > "fwd" > op.0 .. op.7 (op.i lasting at least
 * 4 * i ms, one allocation in each): eight paths of at most four hashes. */
enum { OPS = 8, OP_STEPS = 3, OP_MS = 4 };
static void record_ops(const char *path)
{
    unlink(path);
    rec_options o = {.path = path, .stacks = 0, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    char nm[32];
    for (int st = 1; st <= OP_STEPS; st++) {
        snprintf(nm, sizeof nm, "step %d", st);
        rec_range_push(NULL, nm);
        rec_range_push(NULL, "fwd");
        for (int i = 0; i < OPS; i++) {
            snprintf(nm, sizeof nm, "op.%d", i);
            rec_range_push(NULL, nm);
            uint64_t a = 0x100000 + (uint64_t)(st * OPS + i) * 4096;
            rec_event(REC_ALLOC, 0, 0, a, 4096, 4096, a);
            struct timespec ts = {0, (long)i * OP_MS * 1000000L};
            while (nanosleep(&ts, &ts) != 0) {}
            rec_event(REC_FREE, 0, 0, a, 4096, 4096, a);
            rec_range_pop();
        }
        rec_range_pop();
        rec_range_pop();
    }
    rec_test_reset(); /* closes */
}

/* every op lasts at least its own sleep: the median of another path's recurrences (a shorter
 * one's) is never taken for it */
static void advise_ops_of_one_hash(void **state)
{
    (void)state;
    char path[512], err[256];
    snap_path(path, sizeof path, "collide_ops.db");
    record_ops(path);
    gm_db d;
    assert_int_equal(gm_db_open(path, &d, err, sizeof err), 0);
    adv_model m = {0};
    assert_int_equal(adv_model_load(&d, &m, err, sizeof err), 0);
    assert_int_equal(m.nsteps, OP_STEPS);
    assert_int_equal(m.nops, OPS * OP_STEPS);
    /* sorted by time: op.i of step s is the (s * OPS + i)-th */
    for (size_t k = 0; k < m.nops; k++) {
        uint64_t want = (uint64_t)(k % OPS) * OP_MS * 1000000u;
        if (m.ops[k].dur < want)
            fail_msg("op.%zu of step %zu: %llu ns, it slept %llu (another path's median)", k % OPS, k / OPS + 1,
                     (unsigned long long)m.ops[k].dur, (unsigned long long)want);
    }
    adv_model_free(&m);
    gm_db_close(&d);
    unlink(path);
}

/* 600 names interned (4 hashes): each its own index and its own bytes, in the model, in a view
 * that takes new names (its own table, rebuilt) and in a deep copy */
static void advise_strings_of_one_hash(void **state)
{
    (void)state;
    char path[512], err[256], s[64];
    snap_path(path, sizeof path, "collide_strs.db");
    record_ops(path);
    gm_db d;
    assert_int_equal(gm_db_open(path, &d, err, sizeof err), 0);
    adv_model m = {0};
    assert_int_equal(adv_model_load(&d, &m, err, sizeof err), 0);
    uint32_t id[600];
    for (int i = 0; i < 600; i++) {
        snprintf(s, sizeof s, "h%d.mlp.fc", i);
        id[i] = adv_intern(&m, s);
        assert_true(id[i] != 0);
        assert_string_equal(adv_str(&m, id[i]), s);
        for (int j = 0; j < i; j++)
            assert_true(id[j] != id[i]);
    }
    adv_model v, c;
    adv_model_view(&m, &v);
    uint32_t extra = adv_intern(&v, "lm_head"); /* the view's own table from here */
    assert_string_equal(adv_str(&v, extra), "lm_head");
    assert_int_equal(adv_model_copy(&m, &c), 0);
    for (int i = 0; i < 600; i++) {
        snprintf(s, sizeof s, "h%d.mlp.fc", i);
        assert_int_equal(adv_intern(&m, s), id[i]);
        assert_int_equal(adv_intern(&v, s), id[i]);
        assert_int_equal(adv_intern(&c, s), id[i]);
    }
    assert_int_equal(adv_intern(&v, "lm_head"), extra);
    adv_model_free(&c);
    adv_model_free(&v);
    adv_model_free(&m);
    gm_db_close(&d);
    unlink(path);
}

/* Names of letters only (a class is the name with its digits as '*': these are their own) */
enum { NAMED = 64, WITH_GRAD = 32 };
static void letters_name(int i, char *out, size_t n)
{
    snprintf(out, n, "w%c%c", 'a' + i / 26, 'a' + i % 26);
}

/* NAMED buffers named by letters, the first WITH_GRAD with a gradient "grad.<name>" (their
 * parameters), the others none; then the two call sites (their own frames) */
static void record_named(const char *path)
{
    unlink(path);
    rec_options o = {.path = path, .stacks = 16, .fork_record = 0, .ring = 1 << 14, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    char nm[32], g[40];
    for (int i = 0; i < NAMED; i++) {
        uint64_t a = 0x7f0000000000ull + (uint64_t)i * (1 << 20), ga = a + (1ull << 36);
        rec_event(REC_ALLOC, 0, 0, a, 4096 + (uint64_t)i * 512, 4096, a);
        letters_name(i, nm, sizeof nm);
        rec_name(a, nm);
        if (i < WITH_GRAD) {
            rec_event(REC_ALLOC, 0, 0, ga, 4096 + (uint64_t)i * 512, 4096, ga);
            snprintf(g, sizeof g, "grad.%s", nm);
            rec_name(ga, g);
        } else {
            rec_event(REC_FREE, 0, 0, a, 0, 0, 0); /* short-lived: a temporary, never a parameter */
        }
    }
    for (uint64_t i = 0; i < 8; i++) {
        collide_site_alpha(0x10000000 + i * 1024);
        collide_site_beta(0x90000000 + i * 1024);
    }
    rec_test_reset(); /* closes */
}

/* a name is a parameter's when "grad.<name>" is named, never for another name of its hash;
 * each name its own class */
static void names_of_one_hash(void **state)
{
    (void)state;
    char path[512], err[256], nm[32];
    snap_path(path, sizeof path, "collide_names.db");
    record_named(path);
    gm_db d;
    gm_model m;
    assert_int_equal(gm_db_open(path, &d, err, sizeof err), 0);
    assert_int_equal(gm_model_load(&d, &m, 0, err, sizeof err), 0);
    gm_categories gc;
    viz_categories vc;
    viz_classes cl;
    assert_int_equal(gm_categories_build(&d, &m, &gc, err, sizeof err), 0);
    assert_int_equal(viz_categories_build(&d, &m, &vc), 0);
    assert_int_equal(viz_classes_build(&m, &cl), 0);
    int seen = 0;
    for (size_t i = 0; i < m.nallocs; i++) {
        const char *n = m.allocs[i].name ? gm_str(&m, m.allocs[i].name) : "";
        if (n[0] != 'w') continue;
        int k = -1;
        for (int j = 0; j < NAMED && k < 0; j++) {
            letters_name(j, nm, sizeof nm);
            if (!strcmp(nm, n)) k = j;
        }
        assert_true(k >= 0);
        seen++;
        int param = gc.cat[i] == GM_CAT_PARAM && gc.src[i] == GM_CSRC_NAMES;
        int vparam = vc.cat[i] == VIZ_CAT_PARAM && vc.src[i] == VIZ_SRC_NAME;
        if (param != (k < WITH_GRAD) || vparam != (k < WITH_GRAD))
            fail_msg("%s (%s a gradient): a parameter by name for the report %d, for viz %d", n,
                     k < WITH_GRAD ? "with" : "without", param, vparam);
        assert_true(cl.of[i] < cl.n);
        assert_string_equal(cl.names[cl.of[i]], n);
    }
    assert_int_equal(seen, NAMED);
    viz_classes_free(&cl);
    viz_categories_free(&vc);
    gm_categories_free(&gc);
    gm_model_free(&m);
    gm_db_close(&d);
    unlink(path);
}

/* the flame graph: each frame its own name (the two call sites apart) */
static void flame_names_of_one_hash(void **state)
{
    (void)state;
    char path[512], err[256];
    snap_path(path, sizeof path, "collide_flame.db");
    record_named(path);
    gm_db d;
    gm_model m;
    assert_int_equal(gm_open_model(path, &d, &m, 1), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&buf, &len);
    assert_non_null(o);
    assert_int_equal(viz_write_flame(o, &d, &m, 1), 0);
    fclose(o);
    assert_non_null(strstr(buf, "collide_site_alpha"));
    assert_non_null(strstr(buf, "collide_site_beta"));
    /* no name twice in the list: ["a","b",...] up to its closing bracket */
    const char *p = strstr(buf, "\"names\":[");
    assert_non_null(p);
    p += 9;
    const char *end = strchr(p, ']');
    assert_non_null(end);
    bytemap seen = {0};
    while (p < end) {
        const char *q = p + 1;
        while (q < end && !(*q == '"' && q[-1] != '\\'))
            q++;
        if (bytemap_get(&seen, p, (size_t)(q - p + 1)))
            fail_msg("the flame's name %.*s twice", (int)(q - p + 1), p);
        assert_int_equal(bytemap_put(&seen, p, (size_t)(q - p + 1), 1), 0);
        p = q + 2; /* past the quote and the comma */
    }
    assert_true(seen.n >= 4);
    (void)err;
    bytemap_free(&seen);
    free(buf);
    gm_model_free(&m);
    gm_db_close(&d);
    unlink(path);
}

/* ---- Python frames: a provider stands in for preload/python.c (rec_set_python) ------------- */
enum { PY_OUTER = 8, PY_INNER = 8 };
static uint32_t py_fn[2], py_file;
static uint32_t py_outer_line, py_inner_line;

static int two_frames(rec_pyframe *out, int max)
{
    if (max < 2) return 0;
    out[0] = (rec_pyframe){py_fn[0], py_file, 100 + py_inner_line};
    out[1] = (rec_pyframe){py_fn[1], py_file, 200 + py_outer_line};
    return 2;
}

__attribute__((noinline)) void collide_py_site(uint64_t a)
{
    uint64_t ra = (uint64_t)(uintptr_t)__builtin_return_address(0);
    rec_set_python(two_frames, ra, ra + 1);
    rec_event(REC_ALLOC, 0, 0, a, 256, 256, a);
    __asm__ volatile("" ::: "memory");
}

/* 64 stacks of 16 Python frames, each frame in 8 stacks: 16 rows, one a frame */
static void writer_python_frames_of_one_key(void **state)
{
    (void)state;
    char path[512];
    snap_path(path, sizeof path, "collide_py.db");
    unlink(path);
    rec_options o = {.path = path, .stacks = 16, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    py_fn[0] = rec_string("forward"), py_fn[1] = rec_string("step"), py_file = rec_string("/home/u/train.py");
    for (uint32_t i = 0; i < PY_OUTER; i++)
        for (uint32_t j = 0; j < PY_INNER; j++) {
            py_outer_line = i, py_inner_line = j;
            collide_py_site(0x1000000 + (uint64_t)(i * PY_INNER + j) * 1024);
        }
    rec_set_python(NULL, 0, 0);
    rec_test_reset(); /* closes */
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT stack) FROM events"), PY_OUTER * PY_INNER);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM frames WHERE python = 1"), PY_OUTER + PY_INNER);
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT line) FROM frames WHERE python = 1"), PY_OUTER + PY_INNER);
    unlink(path);
}

/* ---- PyTorch's trace entries: gm_python_frames_now stands in for preload/python.c's --------- */
void gpumem_torch_trace_entry(int action, int device, uint64_t addr, uint64_t size, uint64_t stream,
                              uint64_t pool_a, uint64_t pool_b);
size_t gpumem_torch_trace_copy(void *dst, size_t cap, uint64_t *seen);
size_t gpumem_torch_trace_stacks(void *dst, size_t cap, uint64_t *lost);
int gm_python_frames_now(rec_pyframe *out, int max, uint64_t *tag);

/* preload/uses.c's, which this test does not link: the scrub zeroes the stack below the entry
 * (gm_internal.h says why); nothing in this test reads what it would zero */
void gm_stack_scrub_trace(void);
void gm_stack_scrub_trace(void) {}
/* preload/core.c's too: set while gpumem's exit hook empties PyTorch's caches, never here */
__thread int gm_torch_cache_emptying __attribute__((tls_model("initial-exec")));

enum { TT_STACKS = 40, TT_AGAIN = 3 };
static uint32_t tt_line;
int gm_python_frames_now(rec_pyframe *out, int max, uint64_t *tag)
{
    *tag = 0; /* no chain memo: every entry's frames are looked up */
    if (max < 1) return 0;
    out[0] = (rec_pyframe){7, 9, tt_line};
    return 1;
}

/* The trace's ring through each way an entry takes (preload/torch_trace.c): an entry without a
 * stack fills its slot after one test (a device seen, the ring not due to grow), an allocation's
 * or an OOM's goes the whole way; both must leave the ring as one way would. Each row runs in a
 * child of its own with its GPUMEM_TORCH_MAX_ENTRIES (read at the first entry: this test runs
 * before any other makes one). n entries, actions 0-6 and 8 in turn (from 3), the ones at and after
 * dev1_at on device 1 (the first of them action dev1_action); between them entries PyTorch gives
 * that are not kept (actions 7, 9, -1, 10, device -1). Kept: the newest `kept`, oldest first,
 * each with its own fields, the allocations' and OOMs' with a stack, the others' none. */
static const struct tt_ring_row {
    const char *what, *max;
    int n, dev1_at, dev1_action, kept;
} tt_ring_rows[] = {
    {"grown past 4096 and 8192 slots to its cap", "10000", 9000, -1, 0, 9000},
    {"wrapped at its cap: the newest kept", "5000", 12000, -1, 0, 5000},
    {"a second device, first an allocation: its room, the ring grown", "3000", 5500, 2000, 0, 5500},
    {"a second device, first a free: its room, the ring grown", "3000", 5500, 2000, 2, 5500},
    {"a second device, first an OOM, once the first's is full", "3000", 5500, 3000, 8, 5500},
    {"a second device once the first's ring has wrapped: the oldest still first", "3000", 5500, 4000, 0, 4500},
};

static int tt_ring_action(const struct tt_ring_row *r, int i)
{
    static const int cycle[8] = {0, 1, 2, 3, 4, 5, 6, 8};
    /* +3: the entries at 3000, 4096 and 8192 (a cap reached, a ring full) are ones without a stack */
    return i == r->dev1_at ? r->dev1_action : cycle[(i + 3) % 8];
}

/* 0, or what differs (said on stderr) */
static int tt_ring_row_run(const struct tt_ring_row *r)
{
    setenv("GPUMEM_TORCH_MAX_ENTRIES", r->max, 1);
    for (int i = 0; i < r->n; i++) {
        int dev = r->dev1_at >= 0 && i >= r->dev1_at;
        if (i % 5 == 0) { /* not kept, not counted */
            static const int drop[5][2] = {{7, 0}, {9, 0}, {-1, 0}, {10, 0}, {0, -1}};
            gpumem_torch_trace_entry(drop[i / 5 % 5][0], drop[i / 5 % 5][1], 1, 1, 1, 1, 1);
        }
        gpumem_torch_trace_entry(tt_ring_action(r, i), dev, 0x10000ull + (uint64_t)i * 512, (uint64_t)i + 1,
                                 (uint64_t)i * 3, (uint64_t)i, (uint64_t)i + 7);
    }
    uint64_t seen = 0;
    size_t bytes = gpumem_torch_trace_copy(NULL, 0, &seen), n = bytes / 72;
    if (seen != (uint64_t)r->n || n != (size_t)r->kept) {
        fprintf(stderr, "%s: seen %llu kept %zu, want %d and %d\n", r->what, (unsigned long long)seen, n, r->n, r->kept);
        return 1;
    }
    unsigned char *ents = malloc(bytes);
    if (!ents) return 1;
    gpumem_torch_trace_copy(ents, bytes, &seen);
    for (size_t k = 0; k < n; k++) {
        int i = r->n - r->kept + (int)k;
        uint64_t w[8];
        int32_t action, device;
        uint32_t stack;
        memcpy(w, ents + k * 72, sizeof w); /* addr, size, seq, t_ns, stream, pool[2], then ints */
        memcpy(&action, ents + k * 72 + 56, 4);
        memcpy(&device, ents + k * 72 + 60, 4);
        memcpy(&stack, ents + k * 72 + 64, 4);
        int a = tt_ring_action(r, i), has_stack = a == 0 || a == 8;
        if (w[0] != 0x10000ull + (uint64_t)i * 512 || w[1] != (uint64_t)i + 1 || w[4] != (uint64_t)i * 3 ||
            w[5] != (uint64_t)i || w[6] != (uint64_t)i + 7 || action != a ||
            device != (r->dev1_at >= 0 && i >= r->dev1_at) || (stack != 0) != has_stack) {
            fprintf(stderr, "%s: entry %zu (the %d-th given) is addr %#llx action %d device %d stack %u\n", r->what,
                    k, i, (unsigned long long)w[0], action, device, stack);
            free(ents);
            return 1;
        }
    }
    free(ents);
    return 0;
}

static void torch_trace_ring_table(void **state)
{
    (void)state;
    uint64_t seen = 1;
    gpumem_torch_trace_copy(NULL, 0, &seen);
    assert_int_equal(seen, 0); /* the first test to make entries: each row's setting is read */
    int failed = 0;
    for (size_t k = 0; k < sizeof tt_ring_rows / sizeof *tt_ring_rows; k++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) _exit(tt_ring_row_run(&tt_ring_rows[k]));
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "torch_trace_ring_table: row '%s' failed\n", tt_ring_rows[k].what);
            failed++;
        }
    }
    assert_int_equal(failed, 0);
}

/* 40 one-frame stacks (4 hashes), each allocating 3 times: 40 stacks kept, an entry's stack is
 * its own line's */
static void torch_trace_stacks_of_one_hash(void **state)
{
    (void)state;
    char path[512];
    snap_path(path, sizeof path, "collide_tt.db");
    unlink(path);
    rec_options o = {.path = path, .stacks = 0, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&o), 0); /* the entries' clock and seq are a recording's */
    for (int r = 0; r < TT_AGAIN; r++)
        for (uint32_t i = 0; i < TT_STACKS; i++) {
            tt_line = 1000 + i;
            gpumem_torch_trace_entry(0, 0, 0x7f0000000000ull + i * 4096, 512 + i, 0, 0, 0);
        }
    uint64_t seen, lost = 1;
    size_t n = gpumem_torch_trace_copy(NULL, 0, &seen) / 72; /* tt_entry: 72 bytes */
    assert_int_equal(n, TT_STACKS * TT_AGAIN);
    unsigned char *ents = malloc(n * 72);
    assert_non_null(ents);
    gpumem_torch_trace_copy(ents, n * 72, &seen);
    size_t sz = gpumem_torch_trace_stacks(NULL, 0, &lost);
    assert_int_equal(lost, 0);
    assert_int_equal(sz, TT_STACKS * (4 + 12)); /* each: its count, one frame of three uint32 */
    unsigned char *st = malloc(sz);
    assert_non_null(st);
    gpumem_torch_trace_stacks(st, sz, &lost);
    for (size_t k = 0; k < n; k++) {
        uint32_t stack, line;
        memcpy(&stack, ents + k * 72 + 64, sizeof stack); /* tt_entry.stack: after 8 words */
        assert_true(stack >= 1 && stack <= TT_STACKS);
        memcpy(&line, st + (stack - 1) * 16 + 4 + 8, sizeof line);
        assert_int_equal(line, 1000 + k % TT_STACKS);
    }
    free(st);
    free(ents);
    rec_test_reset(); /* closes */
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(torch_trace_ring_table), /* first: no entry made before it */
        cmocka_unit_test(bytemap_keeps_collisions_apart),
        cmocka_unit_test(recorder_stacks_of_one_hash),
        cmocka_unit_test(advise_ops_of_one_hash),
        cmocka_unit_test(advise_strings_of_one_hash),
        cmocka_unit_test(names_of_one_hash),
        cmocka_unit_test(flame_names_of_one_hash),
        cmocka_unit_test(writer_python_frames_of_one_key),
        cmocka_unit_test(torch_trace_stacks_of_one_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
