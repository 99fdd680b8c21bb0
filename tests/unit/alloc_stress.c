/* alloc_stress.c — thread safety: 4 threads with 2 streams each allocate and free (cudaFree and
 * cudaFreeAsync, same and other stream) while a fifth thread runs alloc_check, alloc_walk and
 * the stats continuously. Properties: every operation succeeds, blocks handed to different
 * threads never overlap (checked through an ownership table), the invariant checker never sees
 * a broken state, and at the end everything is given back. Run under ThreadSanitizer by
 * `make test SAN=thread`. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "alloc/alloc.h"

#define NTHREADS 4
#define OPS 20000
#define MAXLIVE 128

static alloc_t *g_a;
static atomic_int g_stop;
static atomic_int g_fail;
static char g_msg[512];
static pthread_mutex_t g_msg_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
    uint64_t p;
    size_t size;
    uintptr_t stream;
} blk;

static void failf(const char *fmt, ...)
{
    pthread_mutex_lock(&g_msg_mu);
    if (!atomic_exchange(&g_fail, 1)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g_msg, sizeof(g_msg), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&g_msg_mu);
}

/* Every live block of every thread, under one test mutex (outside the allocator's calls): a new
 * block overlapping any live one — whoever holds it — is a failure. */
static blk g_live[NTHREADS * MAXLIVE];
static int g_owner[NTHREADS * MAXLIVE];
static int g_nlive;
static pthread_mutex_t g_live_mu = PTHREAD_MUTEX_INITIALIZER;

static void claim(const blk *b, int t, bool take)
{
    pthread_mutex_lock(&g_live_mu);
    if (take) {
        for (int i = 0; i < g_nlive; i++)
            if (b->p < g_live[i].p + g_live[i].size && g_live[i].p < b->p + b->size)
                failf("block %#llx+%zu handed to thread %d overlaps %#llx+%zu of thread %d",
                      (unsigned long long)b->p, b->size, t, (unsigned long long)g_live[i].p,
                      g_live[i].size, g_owner[i]);
        g_live[g_nlive] = *b;
        g_owner[g_nlive++] = t;
    } else {
        for (int i = 0; i < g_nlive; i++)
            if (g_live[i].p == b->p) {
                g_live[i] = g_live[--g_nlive];
                g_owner[i] = g_owner[g_nlive];
                break;
            }
    }
    pthread_mutex_unlock(&g_live_mu);
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    uint64_t r = 0x1234567ull * (uint64_t)(t + 1);
    blk live[MAXLIVE];
    int n = 0;
    for (int op = 0; op < OPS && !atomic_load(&g_fail); op++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        unsigned k = (unsigned)(r >> 33) % 100;
        uintptr_t stream = (uintptr_t)(t * 2 + 1 + ((r >> 20) & 1));
        if (k < 55 && n < MAXLIVE) {
            size_t size = (size_t)1 << ((r >> 40) % 23);
            size += (r >> 7) % size;
            uint64_t p;
            int rc = alloc_malloc(g_a, size, stream, &p);
            if (rc) {
                failf("thread %d: malloc(%zu): %s", t, size, alloc_strerror(rc));
                break;
            }
            uint64_t base;
            size_t bs;
            if (alloc_block_info(g_a, p, &base, &bs) || base != p || bs < size) {
                failf("thread %d: block_info of a fresh block is wrong", t);
                break;
            }
            live[n] = (blk){p, bs, stream};
            claim(&live[n], t, true);
            n++;
        } else if (k < 95 && n) {
            int i = (int)((r >> 11) % (uint64_t)n);
            blk b = live[i];
            live[i] = live[--n];
            claim(&b, t, false);
            int rc = (k & 1) ? alloc_free(g_a, b.p)
                             : alloc_free_async(g_a, b.p, (r >> 13) & 1 ? b.stream : stream);
            if (rc) {
                failf("thread %d: free: %s", t, alloc_strerror(rc));
                break;
            }
        } else if (k < 96) {
            alloc_empty_cache(g_a);
        } else {
            alloc_stats_t st;
            alloc_get_stats(g_a, &st);
            if (st.allocated_bytes.current < 0) failf("negative allocated bytes");
        }
    }
    for (int i = 0; i < n; i++) {
        claim(&live[i], t, false);
        alloc_free(g_a, live[i].p);
    }
    return NULL;
}

static int walk_cb(void *user, const alloc_walk_segment_t *s, const alloc_walk_block_t *b, size_t n)
{
    size_t *total = user;
    uint64_t at = s->addr;
    for (size_t i = 0; i < n; i++) {
        if (b[i].addr != at) return 1;
        at += b[i].size;
    }
    *total += s->size;
    return 0;
}

static void *checker(void *arg)
{
    (void)arg;
    char err[256];
    while (!atomic_load(&g_stop)) {
        if (alloc_check(g_a, err, sizeof(err)) != ALLOC_OK) {
            failf("alloc_check during the run: %s", err);
            break;
        }
        size_t total = 0;
        if (alloc_walk(g_a, walk_cb, &total)) {
            failf("walk: blocks do not tile a segment");
            break;
        }
        size_t fr, tot;
        alloc_mem_info(g_a, &fr, &tot);
        usleep(200); /* let the workers contend with each other, not only with the checker */
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    alloc_mem_opts_t mo = {.capacity = (size_t)64 << 30, .track_events = true, .event_delay = 1};
    alloc_mem_backend_t *m = alloc_mem_backend_create(&mo);
    assert_non_null(m);
    for (int mode = 0; mode < 2; mode++) {
        alloc_config_t cfg;
        alloc_config_preset(&cfg, mode ? "pytorch" : "gpumem");
        assert_int_equal(alloc_create(alloc_mem_backend(m), &cfg, &g_a), ALLOC_OK);
        atomic_store(&g_stop, 0);
        pthread_t th[NTHREADS], ck;
        pthread_create(&ck, NULL, checker, NULL);
        for (int i = 0; i < NTHREADS; i++)
            pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
        for (int i = 0; i < NTHREADS; i++)
            pthread_join(th[i], NULL);
        atomic_store(&g_stop, 1);
        pthread_join(ck, NULL);
        if (atomic_load(&g_fail)) fail_msg("%s", g_msg);
        char err[256];
        assert_int_equal(alloc_empty_cache(g_a), ALLOC_OK);
        if (alloc_check(g_a, err, sizeof(err))) fail_msg("final check: %s", err);
        alloc_stats_t st;
        alloc_get_stats(g_a, &st);
        assert_int_equal(st.allocated_bytes.current, 0);
        assert_int_equal(st.reserved_bytes.current, 0);
        assert_true(st.num_mallocs > NTHREADS * OPS / 4);
        assert_int_equal(st.num_mallocs, st.num_frees);
        alloc_destroy(g_a);
    }
    alloc_mem_backend_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_threads)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
