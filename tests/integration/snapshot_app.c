/* snapshot_app.c — a small program that drives the recorder through rec.h (linked to librec.a
 * directly, no CUDA), for the snapshot_* integration scripts.
 *
 *   snapshot_app pairs N        N alloc/free pairs in "step i"/"fwd" ranges, plus one planted
 *                               leak in plant_leak(); prints "ALLOCS a FREES f LEAKED bytes"
 *   snapshot_app steady FILE [MAX [US]]  one event every US microseconds (default 100)
 *                               forever (after MAX events, none more: it only stays alive; 0:
 *                               no MAX); FILE (mmap'd) always holds the number of events
 *                               issued, so it survives a SIGKILL
 *   snapshot_app fork           records, forks a child that records too, waits for it
 *   snapshot_app growth STEPS   leaks 1 MiB per "step i" range (growth across steps)
 *   snapshot_app mixed          allocations on two streams, sync and stream-ordered frees, an
 *                               address reused, a free of memory never allocated, a named OOM
 *                               in "step 1/fwd/h12/attn" and a named 256-byte leak in
 *                               "step 2/fwd" (export, OOM naming, leak phases)
 *   snapshot_app uses            access tracking without CUDA: in "step 0/fwd", kernels gemm
 *                               and gelu touch h3.mlp.fc (an interior pointer), softmax touches
 *                               h3.attn.qkv, a copy fills h3.mlp.fc from a pinned host buffer,
 *                               then h3.mlp.fc is freed and a kernel given its stale address
 *                               uses nothing; prints "LAUNCHES n USES u"
 *   snapshot_app many N          3 steps of N/2 allocations each, sizes 512 B-128 KiB and every
 *                               64th 8-16 MiB, each step freeing every 4th allocation still live
 *                               at its end (viz's bands: ~N live, more than the page draws)
 *   snapshot_app empty           a recording with one NVTX range and no allocation
 *   snapshot_app reuse           one address allocated three times under three names, call sites
 *                               and kernels, with allocator snapshots (time-correct joins)
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "snapshot/record/rec.h"

static uint64_t next_addr = 0x7f0000000000ull;
static uint64_t next_id = 1;
static unsigned long n_alloc, n_free;

static __attribute__((noinline)) uint64_t my_alloc(uint64_t size) {
    uint64_t a = next_addr;
    next_addr += (size + 511) & ~511ull;
    rec_event(REC_ALLOC, 0, 0, a, (size + 511) & ~511ull, size, next_id++);
    n_alloc++;
    return a;
}

static __attribute__((noinline)) void my_free(uint64_t a) {
    rec_event(REC_FREE, 0, 0, a, 0, 0, 0);
    n_free++;
}

/* The planted leak: gpumem leaks must name this function and this file. */
__attribute__((noinline)) uint64_t plant_leak(void) {
    uint64_t a = my_alloc(3 << 20);
    rec_name(a, "planted");
    return a;
}

static int pairs(long n) {
    uint64_t leak = plant_leak();
    (void)leak;
    for (long i = 0; i < n; i++) {
        char step[32];
        snprintf(step, sizeof step, "step %ld", i);
        rec_range_push(NULL, step);
        rec_range_push(NULL, "fwd");
        uint64_t a = my_alloc(1000 + (uint64_t)i % 7 * 4096);
        uint64_t b = my_alloc(1 << 20);
        rec_range_pop();
        my_free(a);
        my_free(b);
        rec_range_pop();
    }
    rec_close();
    printf("ALLOCS %lu FREES %lu LEAKED %d\n", n_alloc, n_free, 3 << 20);
    return 0;
}

static int steady(const char *file, uint64_t max, long interval_us) {
    int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) return 2;
    volatile uint64_t *cnt = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (cnt == MAP_FAILED) return 2;
    for (uint64_t i = 1;; i++) {
        if (max && i > max) {
            pause();
            continue;
        }
        /* alloc_id = issue number, so the script knows which events made it to the file (not
         * the size: the commands replay the allocations, and sizes growing with i would make the
         * run need more than the device holds after a minute: every replay an OOM) */
        rec_event(REC_ALLOC, 0, 0, 0x1000 + i * 512, 512, 512, i);
        *cnt = i;
        struct timespec ts = {interval_us / 1000000, interval_us % 1000000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Many live allocations of varied sizes, with frees among them (each moves the ones above it on
 * viz's bands): more than the page draws one by one. */
static int many(long n) {
    uint64_t *live = calloc((size_t)n * 2, sizeof *live);
    long nlive = 0;
    uint32_t r = 12345;
    if (!live) return 2;
    for (int st = 0; st < 3; st++) {
        char step[32];
        snprintf(step, sizeof step, "step %d", st);
        rec_range_push(NULL, step);
        for (long i = 0; i < n / 2; i++) {
            r = r * 1103515245u + 12345u;
            uint64_t size = i % 64 == 0 ? (8u << 20) + (r >> 8) % (8u << 20) : 512 + (r >> 8) % (128 << 10);
            live[nlive++] = my_alloc(size);
        }
        long kept = 0;
        for (long i = 0; i < nlive; i++) {
            if (i % 4 == 3) my_free(live[i]);
            else live[kept++] = live[i];
        }
        nlive = kept;
        rec_range_pop();
    }
    rec_close();
    printf("LIVE %ld\n", nlive);
    free(live);
    return 0;
}

static int forked(void) {
    for (int i = 0; i < 100; i++) my_free(my_alloc(4096));
    rec_flush();
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 50; i++) my_alloc(8192); /* child: 50 allocations, never freed */
        rec_close();
        _exit(0);
    }
    for (int i = 0; i < 100; i++) my_free(my_alloc(4096));
    int st;
    waitpid(pid, &st, 0);
    rec_close();
    printf("CHILD %d\n", (int)pid);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static __attribute__((noinline)) int growth(long steps) {
    for (long i = 0; i < steps; i++) {
        char step[32];
        snprintf(step, sizeof step, "step %ld", i);
        rec_range_push(NULL, step);
        my_alloc(1 << 20); /* kept: grows by 1 MiB per step */
        my_free(my_alloc(4096));
        rec_range_pop();
    }
    rec_close();
    return 0;
}

static int mixed(void) {
    const uint64_t s1 = 0x10, s2 = 0x20;
    rec_range_push(NULL, "step 1");
    rec_range_push(NULL, "fwd");
    rec_event(REC_ALLOC_ASYNC, 0, s1, 0x1000, 1024, 1000, 1);
    rec_event(REC_ALLOC_ASYNC, 0, s2, 0x2000, 4096, 4000, 2);
    rec_event(REC_ALLOC, 0, 0, 0x3000, 512, 100, 3);
    rec_event(REC_FREE_ASYNC, 0, s1, 0x1000, 0, 0, 1);
    rec_event(REC_FREE, 0, 0, 0x9999000, 0, 0, 0); /* never allocated: not in the trace */
    rec_event(REC_ALLOC_ASYNC, 0, s1, 0x1000, 2048, 2000, 4); /* the address again */
    rec_range_push(NULL, "h12");
    rec_range_push(NULL, "attn");
    rec_oom(&(rec_oom_info){.device = 0, .stream = s1, .requested = 512ull << 20, .allocated = 7000,
                            .reserved = 8192, .name = "h12.attn.scores"});
    rec_range_pop();
    rec_range_pop();
    rec_event(REC_FREE, 0, 0, 0x3000, 0, 0, 3);
    rec_event(REC_FREE_ASYNC, 0, s2, 0x2000, 0, 0, 2);
    rec_event(REC_FREE_ASYNC, 0, s1, 0x1000, 0, 0, 4);
    rec_range_pop();
    rec_range_pop();
    rec_range_push(NULL, "step 2");
    rec_range_push(NULL, "fwd");
    rec_event(REC_ALLOC_ASYNC, 0, s1, 0x4000, 512, 256, 5);
    rec_name(0x4000, "losses");
    rec_range_pop();
    rec_range_pop();
    rec_close();
    return 0;
}

static uint64_t launch(const char *name, unsigned op, uint64_t bytes, const uint64_t *w,
                       const uint8_t *acc, size_t n) {
    rec_launch_info li = {.device = 0, .stream = 0, .func = op == REC_OP_KERNEL ? 0xC0DE : 0,
                          .name = rec_string(name), .op = op, .bytes = bytes, .words = w,
                          .access = acc, .nwords = n};
    return rec_launch(&li);
}

static int uses(void) {
    rec_range_push(NULL, "step 0");
    rec_range_push(NULL, "fwd");
    uint64_t fc = my_alloc(3 << 20), qkv = my_alloc(1 << 20);
    rec_name(fc, "h3.mlp.fc");
    rec_name(qkv, "h3.attn.qkv");
    const uint64_t host = 0x7e0000000000ull;
    rec_event(REC_HOST_ALLOC, -1, 0, host, 1 << 20, 1 << 20, 0);
    rec_name(host, "staging");
    const uint64_t copy[] = {fc, host};
    const uint8_t dir[] = {REC_ACC_WRITE, REC_ACC_READ};
    launch("memcpy HtoD", REC_OP_COPY, 1 << 20, copy, dir, 2);
    const uint64_t g[] = {fc + 4096, qkv, 7}; /* an interior pointer; 7 is no pointer */
    launch("gemm", REC_OP_KERNEL, 0, g, NULL, 3);
    launch("gelu", REC_OP_KERNEL, 0, &fc, NULL, 1);
    launch("softmax", REC_OP_KERNEL, 0, &qkv, NULL, 1);
    rec_range_pop();
    rec_range_pop();
    my_free(fc);
    launch("stale", REC_OP_KERNEL, 0, &fc, NULL, 1); /* freed: no use */
    rec_close();
    printf("LAUNCHES 5 USES 6\n");
    return 0;
}

/* reuse: one address, three allocations, three names, three call sites (each its own noinline
 * function), each used by its own kernel. "first" (step 1) needs the driver and grows reserved:
 * the peak snapshot is taken while it lives; "second" (step 2) is live at a user snapshot, the
 * last one (no exit snapshot: as a killed recording's); "third" (step 3) is never freed. The
 * allocator's ids (1001..1003) are not event seqs, so a reader that confuses them finds nothing. */
#define REUSE_ADDR 0x7f0000200000ull
#define REUSE_SEG 0x7f0000000000ull
static void reuse_snapshot(enum rec_snap_reason why, uint64_t id) {
    rec_segment seg = {.device = 0, .stream = 0, .addr = REUSE_SEG, .size = 4 << 20, .mapped = 4 << 20,
                       .flags = REC_SEG_F_EXPANDABLE};
    rec_block b[3] = {{.segment = 0, .state = REC_BLOCK_FREE, .addr = REUSE_SEG, .size = 2 << 20},
                      {.segment = 0, .state = REC_BLOCK_ALLOCATED, .addr = REUSE_ADDR, .size = 1 << 20,
                       .requested = 1 << 20, .alloc_id = id},
                      {.segment = 0, .state = REC_BLOCK_FREE, .addr = REUSE_ADDR + (1 << 20), .size = 1 << 20}};
    rec_snapshot(why, &seg, 1, b, 3);
}
static __attribute__((noinline)) void reuse_step(int step, const char *name, uint64_t id, unsigned flags) {
    char st[16];
    snprintf(st, sizeof st, "step %d", step);
    rec_range_push(NULL, st);
    rec_range_push(NULL, "fwd");
    rec_event(REC_ALLOC | flags, 0, 0, REUSE_ADDR, 1 << 20, 1 << 20, id);
    rec_name(REUSE_ADDR, name);
    char k[32];
    snprintf(k, sizeof k, "k_%s", name);
    const uint64_t w = REUSE_ADDR + 64;
    launch(k, REC_OP_KERNEL, 0, &w, NULL, 1);
    rec_range_pop();
    rec_range_pop();
}
static __attribute__((noinline)) void alloc_first(void) { reuse_step(1, "first", 1001, REC_F_CACHE_MISS); }
static __attribute__((noinline)) void alloc_second(void) { reuse_step(2, "second", 1002, REC_F_CACHE_HIT); }
static __attribute__((noinline)) void alloc_third(void) { reuse_step(3, "third", 1003, REC_F_CACHE_HIT); }

static int reuse(void) {
    rec_event(REC_SEG_RESERVE, 0, 0, REUSE_SEG, 4 << 20, 0, 0);
    rec_event(REC_SEG_MAP, 0, 0, REUSE_SEG, 4 << 20, 0, 0);
    alloc_first();
    reuse_snapshot(REC_SNAP_PEAK, 1001);
    rec_event(REC_FREE, 0, 0, REUSE_ADDR, 1 << 20, 0, 1001);
    alloc_second();
    reuse_snapshot(REC_SNAP_USER, 1002);
    rec_event(REC_FREE, 0, 0, REUSE_ADDR, 1 << 20, 0, 1002);
    alloc_third();
    rec_close();
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "pairs") == 0) return pairs(atol(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "steady") == 0) return steady(argv[2], argc >= 4 ? strtoull(argv[3], NULL, 10) : 0, argc >= 5 ? atol(argv[4]) : 100);
    if (argc >= 3 && strcmp(argv[1], "many") == 0) return many(atol(argv[2]));
    if (argc >= 2 && strcmp(argv[1], "fork") == 0) return forked();
    if (argc >= 3 && strcmp(argv[1], "growth") == 0) return growth(atol(argv[2]));
    if (argc >= 2 && strcmp(argv[1], "mixed") == 0) return mixed();
    if (argc >= 2 && strcmp(argv[1], "uses") == 0) return uses();
    if (argc >= 2 && strcmp(argv[1], "reuse") == 0) return reuse();
    if (argc >= 2 && strcmp(argv[1], "empty") == 0) { /* a recording without one allocation */
        rec_range_push(NULL, "step 1");
        rec_range_pop();
        rec_close();
        return 0;
    }
    fprintf(stderr, "usage: snapshot_app pairs N | steady FILE [MAX [US]] | many N | fork | growth STEPS | mixed | uses | reuse | empty\n");
    return 2;
}
