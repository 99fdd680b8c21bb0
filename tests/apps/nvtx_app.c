/*
 * nvtx_app — plain C using the CUDA toolkit's NVTX3 headers (header-only), no gpumem header,
 * no CUDA. Two threads, each named with nvtxNameOsThreadA, open nested ranges (plain, with
 * event attributes, and in a domain with a registered string) and marks. The main thread then
 * opens two wide-string ranges: "pas ✓é" (UTF-8 for a tool) and one holding a surrogate and a
 * value past U+10FFFF, which are no characters ("x??y").
 *
 * For every push and pop it prints the line a receiving tool should see:
 *     expect push|pop <thread name> <depth> <domain or -> <path outer/inner>
 * tests/integration/preload_nvtx.sh compares these with what gpumem received
 * (GPUMEM_DEBUG_RANGES). Without a tool attached the program behaves the same.
 */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <wchar.h>

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static nvtxDomainHandle_t domain;
static nvtxStringHandle_t bwd;

struct tstate {
    char name[32];
    char path[512];
    size_t len[16];
    int depth;
};

static void expect_push(struct tstate *t, const char *dom, const char *name)
{
    t->len[t->depth] = strlen(t->path);
    if (t->depth)
        strcat(t->path, "/");
    strcat(t->path, name);
    t->depth++;
    pthread_mutex_lock(&out_lock);
    printf("expect push %s %d %s %s\n", t->name, t->depth, dom, t->path);
    pthread_mutex_unlock(&out_lock);
}

static void expect_pop(struct tstate *t, const char *dom)
{
    pthread_mutex_lock(&out_lock);
    printf("expect pop %s %d %s %s\n", t->name, t->depth, dom, t->path);
    pthread_mutex_unlock(&out_lock);
    t->depth--;
    t->path[t->len[t->depth]] = 0;
}

static void *worker(void *arg)
{
    struct tstate t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "worker%d", (int)(long)arg);
    nvtxNameOsThreadA((uint32_t)syscall(SYS_gettid), t.name);
    for (int step = 0; step < 3; step++) {
        char s[32];
        snprintf(s, sizeof s, "step%d", step);
        nvtxRangePushA(s);
        expect_push(&t, "-", s);

        nvtxEventAttributes_t a;
        memset(&a, 0, sizeof a);
        a.version = NVTX_VERSION;
        a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
        a.messageType = NVTX_MESSAGE_TYPE_ASCII;
        a.message.ascii = "fwd";
        nvtxRangePushEx(&a);
        expect_push(&t, "-", "fwd");
        for (int l = 0; l < 2; l++) {
            char ln[32];
            snprintf(ln, sizeof ln, "layer%d", l);
            nvtxRangePushA(ln);
            expect_push(&t, "-", ln);
            nvtxMarkA("tick");
            nvtxRangePop();
            expect_pop(&t, "-");
        }
        nvtxRangePop();
        expect_pop(&t, "-");

        nvtxEventAttributes_t b;
        memset(&b, 0, sizeof b);
        b.version = NVTX_VERSION;
        b.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
        b.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
        b.message.registered = bwd;
        nvtxDomainRangePushEx(domain, &b);
        expect_push(&t, "train", "bwd");
        nvtxDomainRangePop(domain);
        expect_pop(&t, "train");

        nvtxRangePop();
        expect_pop(&t, "-");
    }
    return NULL;
}

int main(void)
{
    domain = nvtxDomainCreateA("train");
    bwd = nvtxDomainRegisterStringA(domain, "bwd");
    /* a start/end range spanning the workers (not nested: it may end on any thread) */
    nvtxRangeId_t run = nvtxRangeStartA("run");
    pthread_t th[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, worker, (void *)i);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    nvtxRangeEnd(run);
    static const wchar_t wide[] = {L'p', L'a', L's', L' ', 0x2713, 0xe9, 0};
    static const wchar_t bad[] = {L'x', 0xd800, 0x110000, L'y', 0};
    struct tstate t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "main");
    nvtxRangePushW(wide);
    expect_push(&t, "-", "pas \u2713\u00e9");
    nvtxRangePop();
    expect_pop(&t, "-");
    nvtxRangePushW(bad);
    expect_push(&t, "-", "x??y");
    nvtxRangePop();
    expect_pop(&t, "-");
    nvtxDomainDestroy(domain);
    printf("nvtx_app: done\n");
    return 0;
}
