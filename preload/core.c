/*
 * core.c — configuration, lazy initialisation, statistics, fork and exit, the user API.
 *
 * Initialisation is split in two on purpose:
 *   - the constructor does only what must happen before main() and costs nothing: it points
 *     NVTX_INJECTION64_PATH at this library (an NVTX call can come before any CUDA call) and
 *     registers the fork handlers. No CUDA, no SQLite, no allocation of note.
 *   - everything else happens once, at the first CUDA call that reaches gpumem (pthread_once):
 *     the environment is read (GPUMEM_MODE, GPUMEM_LIMIT, GPUMEM_CONF through alloc's parser),
 *     the real driver is loaded, the exit handler is registered.
 *
 * A bad setting never breaks the program: gpumem prints the parser's one-line error and runs
 * in mode off (everything forwarded to the real functions).
 *
 * Exit: gpumem must flush (allocator snapshots, stats, recorder close) while the driver is
 * still alive. atexit handlers run before any library destructor and in reverse order of
 * registration, so gpumem registers its handler twice — at init (covers driver-only programs)
 * and again right after the runtime's own first initialisation (runtime.c calls
 * gm_exit_register_late), so that it runs before the runtime's teardown. The handler runs once.
 *
 * Fork: a child forked after gpumem initialised in the parent runs with gpumem off: the
 * allocator's segments are the parent's device memory (on a real GPU the child cannot use the
 * parent's CUDA state at all; on the virtual GPU the memory would be shared with the parent).
 * A child of a parent that never touched CUDA initialises normally. The recorder has its own
 * fork policy (GPUMEM_FORK); gpumem's own locks are taken around fork so the child never
 * inherits one held.
 */
#include "preload/gm_internal.h"

#include "alloc/alloc.h"
#include "preload/gpumem.h"
#include "snapshot/record/rec_settings.h" /* the settings' one parser, in every build */
#include "snapshot/record/rec_objrange.h" /* header only: in every build */
#ifdef GM_HAVE_REC
#include "snapshot/record/rec.h"
#endif

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

__thread int gm_inside __attribute__((tls_model("initial-exec")));
__thread int gm_in_init __attribute__((tls_model("initial-exec")));
__thread int gm_fail_site __attribute__((tls_model("initial-exec")));
__thread CUresult gm_fail_code __attribute__((tls_model("initial-exec")));
int gm_forked_child;
size_t gm_limit = ALLOC_NO_LIMIT; /* GPUMEM_LIMIT (rec_settings) */
_Atomic int gm_conf_watch; /* GPUMEM_CONF set in replace mode (gm_internal.h) */
alloc_config_t gm_alloc_config;
_Atomic unsigned long long gm_stats[GM_ST_COUNT];
_Atomic unsigned long long gm_drv_calls[GM_DRV_COUNT];

static pthread_once_t core_once = PTHREAD_ONCE_INIT;
static _Atomic int core_done;
static gm_mode_t mode_now = GM_MODE_OFF;
_Atomic int gm_mode_ready = GM_MODE_OFF; /* gm_internal.h */
static _Atomic int rec_was_opened; /* recording was 1 at some point (gm_rec_opened) */

static const char *const stat_names[GM_ST_COUNT] = {
    [GM_ST_RT_MALLOC] = "rt_malloc",
    [GM_ST_RT_FREE] = "rt_free",
    [GM_ST_RT_MALLOC_ASYNC] = "rt_malloc_async",
    [GM_ST_RT_FREE_ASYNC] = "rt_free_async",
    [GM_ST_DRV_ALLOC] = "drv_alloc",
    [GM_ST_DRV_FREE] = "drv_free",
    [GM_ST_DRV_ALLOC_ASYNC] = "drv_alloc_async",
    [GM_ST_DRV_FREE_ASYNC] = "drv_free_async",
    [GM_ST_SERVED] = "served",
    [GM_ST_RELEASED] = "released",
    [GM_ST_PASSTHROUGH] = "passthrough",
    [GM_ST_PASSTHROUGH_FREE] = "passthrough_free",
    [GM_ST_FOREIGN_FREE] = "foreign_free",
    [GM_ST_DOUBLE_FREE] = "double_free",
    [GM_ST_OOM] = "oom",
    [GM_ST_FAILED] = "failed",
    [GM_ST_MEMGETINFO] = "memgetinfo",
    [GM_ST_ADDR_RANGE] = "addr_range",
    [GM_ST_HOST_ALLOC] = "host_alloc",
    [GM_ST_HOST_FREE] = "host_free",
    [GM_ST_HOST_REGISTER] = "host_register",
    [GM_ST_HOST_UNREGISTER] = "host_unregister",
    [GM_ST_HOST_PASSTHROUGH] = "host_passthrough",
    [GM_ST_MANAGED] = "managed",
    [GM_ST_VMM] = "vmm",
    [GM_ST_LAUNCH] = "launch",
    [GM_ST_COPY] = "copy",
    [GM_ST_PROC_HOOKED] = "proc_hooked",
    [GM_ST_STREAMS] = "streams",
    [GM_ST_NVTX_RANGES] = "nvtx_ranges",
    [GM_ST_NVTX_MARKS] = "nvtx_marks",
    [GM_ST_NAMED] = "named",
    [GM_ST_BAD_ACCESS] = "bad_access",
    [GM_ST_PY_AGAIN] = "python_chains_again",
};

void gm_warn(const char *fmt, ...)
{
    char buf[2048]; /* GPUMEM_CONF's message lists every key: ~900 characters */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "gpumem: %s\n", buf);
#ifdef GM_HAVE_REC
    rec_status("msg", buf);
#endif
}

static void exit_handler(void);
static int uses_conf = GM_USES_DEFAULT; /* GPUMEM_USES, in force once recording */

/* ---- settings the run does not use ------------------------------------------------------
 *
 * An allocator setting the way the program runs never reads (GPUMEM_CONF under GPUMEM_MODE=record,
 * PYTORCH_CUDA_ALLOC_CONF once gpumem is PyTorch's allocator, ...) would otherwise be dropped
 * without a word, the user believing it in force. Each is said once, on stderr, with why and what
 * to use instead, and kept in the recording's meta as ignored.NAME (the reason) for gpumem report;
 * one said before the recording opens is written when it does (ignored_meta_flush). */
static const char *const ignored_names[] = {"GPUMEM_CONF", "GPUMEM_LIMIT", "PYTORCH_CUDA_ALLOC_CONF",
                                            "PYTORCH_ALLOC_CONF", "torch.cuda.set_per_process_memory_fraction"};
enum { IGNORED_N = sizeof ignored_names / sizeof ignored_names[0] };
static _Atomic int ignored_said[IGNORED_N];
static char ignored_why[IGNORED_N][512];
static int ignored_written[IGNORED_N];
static pthread_mutex_t ignored_lock = PTHREAD_MUTEX_INITIALIZER;
static int recording;

static void ignored_meta_flush(void)
{
#ifdef GM_HAVE_REC
    pthread_mutex_lock(&ignored_lock);
    for (int i = 0; recording && i < IGNORED_N; i++) {
        if (!ignored_why[i][0] || ignored_written[i])
            continue;
        char key[64];
        snprintf(key, sizeof key, "ignored.%s", ignored_names[i]);
        rec_meta(key, ignored_why[i]);
        ignored_written[i] = 1;
    }
    pthread_mutex_unlock(&ignored_lock);
#endif
}

void gm_setting_ignored(const char *name, const char *why)
{
    gm_setting_ignored_value(name, getenv(name), why);
}

void gm_setting_ignored_value(const char *name, const char *v, const char *why)
{
    int i = 0;
    while (i < IGNORED_N && strcmp(ignored_names[i], name))
        i++;
    if (i == IGNORED_N || !v || !*v || atomic_load_explicit(&ignored_said[i], memory_order_relaxed) ||
        atomic_exchange(&ignored_said[i], 1))
        return;
    pthread_mutex_lock(&ignored_lock);
    snprintf(ignored_why[i], sizeof ignored_why[i], "%s", why);
    pthread_mutex_unlock(&ignored_lock);
    gm_warn("%s=%s %s", name, v, why);
    ignored_meta_flush();
}

void gm_conf_check_caller(const void *caller)
{
    /* the first allocations tell: PyTorch's allocator takes its first segment at its first tensor */
    static _Atomic int looks = 256;
    Dl_info di;
    int torch = dladdr(caller, &di) && di.dli_fname && strstr(di.dli_fname, "libc10_cuda");
    if (!torch && atomic_fetch_sub(&looks, 1) > 1)
        return;
    atomic_store(&gm_conf_watch, 0);
    if (torch)
        gm_setting_ignored("GPUMEM_CONF",
                           "places only the segments PyTorch's own allocator takes with cudaMalloc, not its "
                           "tensors: PyTorch places those itself (PYTORCH_CUDA_ALLOC_CONF configures it); record "
                           "with --allocator gpumem for gpumem's allocator to place them");
}

void gm_settings_program_mem(void)
{
    static _Atomic int said;
    if (atomic_load_explicit(&said, memory_order_relaxed) || atomic_exchange(&said, 1))
        return;
    /* PyTorch's expandable segments map every tensor this way, so GPUMEM_CONF then places none of
     * PyTorch's memory. Another program's own mappings (its VMM, NCCL's buffers) sit beside the
     * cudaMalloc memory gpumem's allocator does place under GPUMEM_CONF: not said there. */
    void *c10 = dlopen("libc10_cuda.so", RTLD_NOW | RTLD_NOLOAD);
    if (!c10)
        return;
    dlclose(c10);
    static const char why[] =
        "does not apply to the memory the program maps itself (cuMemCreate and cuMemMap: PyTorch's "
        "expandable_segments, NCCL; its own memory pools and arrays): gpumem's allocator does not serve it. "
        "For PyTorch, record with --allocator gpumem, or cap it with torch.cuda.set_per_process_memory_fraction";
    gm_setting_ignored("GPUMEM_CONF", why);
    if (gm_limit != ALLOC_NO_LIMIT)
        gm_setting_ignored("GPUMEM_LIMIT", why);
}

/* Every setting through the one parser `gpumem record` also checks them with
 * (rec_settings_read): a value it cannot read turns gpumem off, with one line naming it. */
static int read_config(void)
{
    rec_settings s;
    char err[1024];
    if (rec_settings_read(&s, &gm_alloc_config, err, sizeof err) != 0) {
        gm_warn("%s; gpumem is off", err);
        return GM_MODE_OFF;
    }
    if (s.mode == REC_SET_OFF) {
#ifdef GM_HAVE_REC
        rec_status("msg", "GPUMEM_MODE=off: gpumem is off, nothing is recorded");
#endif
        return GM_MODE_OFF;
    }
    /* a misspelled name is not an error the program should pay for: said, and gpumem runs on */
    if (rec_settings_unknown(err, sizeof err)) gm_warn("%s; it is ignored", err);
    char names[512];
    if (alloc_config_unmodelled(&gm_alloc_config, names, sizeof names))
        gm_warn("GPUMEM_CONF: accepted but not modelled: %s (PyTorch options gpumem does not "
                "act on)",
                names);
    if (s.mode == REC_SET_RECORD) {
        static const char why[] =
            "is ignored: GPUMEM_MODE=record leaves every allocation to the program's own allocator (gpumem "
            "records only); unset GPUMEM_MODE (replace, the default) for gpumem's allocator to use it";
        gm_setting_ignored("GPUMEM_CONF", why);
        if (s.limit != ALLOC_NO_LIMIT)
            gm_setting_ignored("GPUMEM_LIMIT", why);
    }
    atomic_store(&gm_conf_watch, s.mode == REC_SET_REPLACE && getenv("GPUMEM_CONF") && *getenv("GPUMEM_CONF"));
    gm_limit = s.limit;
    uses_conf = s.uses == REC_SET_USES_TIMED ? GM_USES_TIMED
                : s.uses == REC_SET_USES_OFF ? GM_USES_OFF
                                             : GM_USES_ON;
    return s.mode == REC_SET_RECORD ? GM_MODE_RECORD : GM_MODE_REPLACE;
}

/* The configured mode, without loading the driver (NVTX handlers need only this). */
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static gm_mode_t cfg_mode;
static void cfg_init(void) { cfg_mode = read_config(); }
static gm_mode_t config_mode(void)
{
    pthread_once(&cfg_once, cfg_init);
    return cfg_mode;
}

/* ---- gpumem's own code, left out of the recorded stacks (rec_add_own_code) ---------------- */

struct own_object {
    uintptr_t addr, lo, hi;
    int gpumem; /* its file's name begins with libgpumem (the readers' rule: internal_module) */
};
static int own_object_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct own_object *o = arg;
    uintptr_t lo, hi;
    if (!rec_object_range(info, o->addr, &lo, &hi)) return 0;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    const char *b = strrchr(name, '/');
    b = b ? b + 1 : name;
    o->lo = lo, o->hi = hi;
    o->gpumem = strncmp(b, "libgpumem", 9) == 0;
    return 1;
}

/* libgpumem.so's own code: before the recording opens (its first stack) */
static void own_code_register(void)
{
#ifdef GM_HAVE_REC
    struct own_object o = {(uintptr_t)(void *)own_code_register, 0, 0, 0};
    if (dl_iterate_phdr(own_object_cb, &o)) rec_add_own_code(o.lo, o.hi);
#endif
}

void gm_note_caller(const void *ra)
{
#ifdef GM_HAVE_REC
    /* callers already placed: gpumem's own (registered), or others (the last few) */
    static _Atomic uintptr_t other[8];
    static _Atomic unsigned next;
    uintptr_t a = (uintptr_t)ra;
    if (rec_own_code(a)) return;
    for (int i = 0; i < 8; i++)
        if (atomic_load_explicit(&other[i], memory_order_relaxed) == a) return;
    struct own_object o = {a, 0, 0, 0};
    if (dl_iterate_phdr(own_object_cb, &o) && o.gpumem && rec_add_own_code(o.lo, o.hi) == 0) return;
    atomic_store_explicit(&other[atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) & 7], a,
                          memory_order_relaxed);
#else
    (void)ra;
#endif
}

int gm_nvtx_recording(void)
{
#ifdef GM_HAVE_REC
    static _Atomic int state; /* 0 unknown, 1 yes, 2 no */
    int s = atomic_load_explicit(&state, memory_order_acquire);
    if (!s) {
        own_code_register();
        s = config_mode() != GM_MODE_OFF && rec_open(NULL) == 0 ? 1 : 2;
        atomic_store_explicit(&state, s, memory_order_release);
    }
    return s == 1 && !gm_forked_child;
#else
    return 0;
#endif
}

/* The mode the configuration asks for, off when no driver loads (everything then goes to the
 * real functions). Opens nothing: core_init and gm_mode_hooks_on both decide by it. */
static gm_mode_t mode_decided(void)
{
    gm_mode_t mode = config_mode();
    return mode != GM_MODE_OFF && !gm_driver_init() ? GM_MODE_OFF : mode;
}

static void core_init(void)
{
    gm_in_init++;
    gm_mode_t mode = mode_decided();
#ifdef GM_HAVE_REC
    if (mode == GM_MODE_OFF && config_mode() != GM_MODE_OFF)
        rec_status("msg", "no CUDA driver could be loaded (libcuda.so.1): gpumem is off");
#endif
    mode_now = mode;
    const char *y = getenv("GPUMEM_TEST_FREE_YIELD");
    gm_test_yield_on = y && strcmp(y, "1") == 0;
#ifdef GM_HAVE_REC
    if (mode != GM_MODE_OFF) {
        own_code_register();
        recording = rec_open(NULL) == 0; /* fails quietly for GPUMEM_DB=none */
        if (recording) {
            atomic_store(&rec_was_opened, 1);
            rec_meta("mode", mode == GM_MODE_REPLACE ? "replace" : "record");
            char conf[1024];
            alloc_config_format(&gm_alloc_config, conf, sizeof conf);
            rec_meta("config", conf);
            /* GPUMEM_LIMIT overrides GPUMEM_CONF's limit key in the config above: which one the
             * program ran with is what an OOM's advice tells the user to raise */
            if (gm_alloc_config.limit != ALLOC_NO_LIMIT)
                rec_meta("limit_from", gm_limit != ALLOC_NO_LIMIT ? "GPUMEM_LIMIT" : "GPUMEM_CONF");
            rec_meta("uses", gm_uses_name(uses_conf));
            /* this library's PyTorch hooks leave a node that a module shares with the child it
             * returned the output of to the child (torch_hooks.c, hook_node): the readers correct
             * the backward ranges only of recordings without this key (gm_analyze.c) */
            rec_meta("torch_bwd_ranges", "innermost");
            ignored_meta_flush(); /* what read_config said before the recording opened */
            gm_uses_mode = uses_conf; /* access tracking needs a recording to write to */
            gm_uses_start();
            gm_python_start();
        }
    }
#endif
    atexit(exit_handler);
    atomic_store_explicit(&gm_mode_ready, (int)mode, memory_order_release);
    atomic_store(&core_done, 1);
    gm_in_init--;
}

gm_mode_t gm_mode(void)
{
    if (!atomic_load_explicit(&core_done, memory_order_acquire))
        pthread_once(&core_once, core_init);
    return gm_forked_child ? GM_MODE_OFF : mode_now;
}

int gm_mode_hooks_on(void)
{
    if (gm_forked_child)
        return 0;
    if (atomic_load_explicit(&core_done, memory_order_acquire))
        return mode_now != GM_MODE_OFF;
    return mode_decided() != GM_MODE_OFF;
}

gm_mode_t gm_mode_peek(void)
{
    if (!atomic_load_explicit(&core_done, memory_order_acquire))
        return GM_MODE_OFF;
    return gm_forked_child ? GM_MODE_OFF : mode_now;
}


/* ---- recorder bridge -------------------------------------------------------------------- */

#ifdef GM_HAVE_REC
static unsigned rec_kind_of(enum gm_ev ev, size_t requested)
{
    switch (ev) {
    case GM_EV_ALLOC: return REC_ALLOC;
    case GM_EV_FREE: return REC_FREE;
    case GM_EV_ALLOC_ASYNC: return REC_ALLOC_ASYNC;
    case GM_EV_FREE_ASYNC: return REC_FREE_ASYNC;
    case GM_EV_HOST_ALLOC: return REC_HOST_ALLOC;
    case GM_EV_HOST_FREE: return REC_HOST_FREE;
    case GM_EV_FOREIGN_FREE: return REC_FOREIGN_FREE;
    case GM_EV_DOUBLE_FREE: return REC_DOUBLE_FREE;
    case GM_EV_VMM: return requested ? REC_VMM_MAP : REC_VMM_UNMAP;
    case GM_EV_OOM: return REC_OOM;
    case GM_EV_MANAGED: return requested ? REC_MANAGED_ALLOC : REC_MANAGED_FREE;
    case GM_EV_RECORD_STREAM: return REC_RECORD_STREAM;
    }
    return 0;
}
#endif

/* The name gpumem_name_next() gave to the calling thread's next allocation: it names that
 * allocation when it succeeds, and the OOM record when it fails. Consumed either way, also when
 * not recording, so it never sticks to a later allocation. */
static __thread char pending_name[64] __attribute__((tls_model("initial-exec")));
/* Set while this thread empties one of PyTorch's caches for gpumem's hooks at exit
 * (gpumem_host_cache_emptying, gpumem_torch_cache_emptying): its frees are flagged the cache's
 * (REC_F_HOST_CACHE on a pinned one, REC_F_TORCH_CACHE on a device one; the tracker flags the
 * trace entries of PyTorch's allocator it sees meanwhile, torch_trace.c). */
__thread int gm_torch_cache_emptying __attribute__((tls_model("initial-exec")));
__thread unsigned gm_next_alloc_flags __attribute__((tls_model("initial-exec")));

static int is_alloc_event(enum gm_ev ev)
{
    return ev == GM_EV_ALLOC || ev == GM_EV_ALLOC_ASYNC || ev == GM_EV_HOST_ALLOC ||
           ev == GM_EV_MANAGED;
}

void gm_event_id(enum gm_ev ev_flags, int device, CUstream stream, uintptr_t addr, size_t size,
                 size_t requested, uint64_t id)
{
    /* GM_EVF_* (how the allocator served it) ride in the high bits: events.flags */
    unsigned flags = (unsigned)ev_flags & (GM_EVF_CACHE_HIT | GM_EVF_CACHE_MISS | GM_EVF_PENDING |
                                           GM_EVF_CAPTURE);
    enum gm_ev ev = (enum gm_ev)((unsigned)ev_flags & 0xffu);
    int named = pending_name[0] && (ev == GM_EV_OOM || (is_alloc_event(ev) && requested));
    /* pitched / pool: set by the hook for this allocation, consumed here either way */
    unsigned shape = 0;
    if (is_alloc_event(ev) && requested) {
        shape = gm_next_alloc_flags & (GM_EVF_PITCHED | GM_EVF_POOL | GM_EVF_FRAMEWORK |
                                       GM_EVF_GRAPH);
        gm_next_alloc_flags = 0;
    }
    /* before the pointer reaches the program: the launch pre-filter must know its range */
    if ((is_alloc_event(ev) || ev == GM_EV_VMM) && requested)
        gm_uses_note_range(addr, size, ev == GM_EV_HOST_ALLOC);
#ifdef GM_HAVE_REC
    if (!recording) {
        if (named)
            pending_name[0] = 0;
        return;
    }
    if (ev == GM_EV_OOM) {
        rec_oom_info o;
        memset(&o, 0, sizeof o);
        o.device = device;
        o.stream = (uint64_t)(uintptr_t)stream;
        o.requested = requested;
        /* Every OOM recorded here is the driver's refusal of a call gpumem passed through (record
         * mode, a pool's or a graph's memory, ...): gpumem's limit (GPUMEM_LIMIT, GPUMEM_CONF's
         * limit) caps only what gpumem's allocator serves, whose OOMs are gm_rec_oom's, so none
         * bound this one: the device did, as its own figures say (when its context is current) */
        o.limit = REC_NO_LIMIT;
        CUdevice cur = -1;
        size_t free_b = 0, total_b = 0;
        if (gm_real.cuCtxGetDevice && gm_real.cuCtxGetDevice(&cur) == CUDA_SUCCESS && cur == device &&
            gm_real.cuMemGetInfo_v2 &&
            GM_DRV(GM_DRV_MEM_GET_INFO, gm_real.cuMemGetInfo_v2(&free_b, &total_b)) == CUDA_SUCCESS &&
            free_b <= total_b) {
            o.device_free = free_b;
            o.device_total = total_b;
        }
        o.name = named ? pending_name : NULL;
        rec_oom(&o);
        pending_name[0] = 0;
        return;
    }
    _Static_assert(GM_EVF_CACHE_HIT == REC_F_CACHE_HIT && GM_EVF_CACHE_MISS == REC_F_CACHE_MISS,
                   "GM_EVF_* are the recorder's REC_F_* flags");
    _Static_assert(GM_EVF_PITCHED == REC_F_PITCHED && GM_EVF_POOL == REC_F_POOL,
                   "GM_EVF_* are the recorder's REC_F_* flags");
    _Static_assert(GM_EVF_PENDING == REC_F_PENDING, "GM_EVF_* are the recorder's REC_F_* flags");
    _Static_assert(GM_EVF_SYNCED == REC_F_FREE_SYNCED, "GM_EVF_* are the recorder's REC_F_* flags");
    _Static_assert(GM_EVF_GRAPH == REC_F_GRAPH, "GM_EVF_* are the recorder's REC_F_* flags");
    _Static_assert(GM_EVF_CAPTURE == REC_F_PRIVATE_POOL, "GM_EVF_* are the recorder's REC_F_* flags");
    flags |= shape;
    if (__builtin_expect(gm_torch_cache_emptying, 0) &&
        (ev == GM_EV_HOST_FREE || ev == GM_EV_FREE || ev == GM_EV_FREE_ASYNC))
        flags |= REC_F_HOST_CACHE; /* REC_F_TORCH_CACHE on a device free: the same bit */
    rec_event(rec_kind_of(ev, requested) | flags, device, (uint64_t)(uintptr_t)stream, addr, size,
              requested, id);
    gm_devused_event((int)ev, flags, device, size, id);
    if (named) {
        rec_name((uint64_t)addr, pending_name);
        pending_name[0] = 0;
    }
#else
    if (named)
        pending_name[0] = 0;
    (void)ev, (void)device, (void)stream, (void)addr, (void)size, (void)requested, (void)id,
        (void)shape;
#endif
}

void gm_event(enum gm_ev ev, int device, CUstream stream, uintptr_t addr, size_t size,
              size_t requested)
{
    gm_event_id(ev, device, stream, addr, size, requested, 0);
}

static _Atomic int dev_expandable[64];

void gm_rec_segment(int device, int map, uint64_t addr, size_t size, uintptr_t stream)
{
#ifdef GM_HAVE_REC
    if (!recording)
        return;
    int exp = device >= 0 && device < 64 ? atomic_load(&dev_expandable[device]) : 1;
    unsigned k = exp ? (map ? REC_SEG_MAP : REC_SEG_UNMAP) : (map ? REC_DRIVER_ALLOC
                                                                   : REC_DRIVER_FREE);
    /* a segment of a capture's private pool (the allocator's key is the capture's) */
    if (gm_is_capture_key(stream))
        k |= REC_F_PRIVATE_POOL;
    rec_event(k, device, stream, addr, size, 0, 0);
    gm_devused_change(device, map ? (long long)size : -(long long)size);
#else
    (void)device, (void)map, (void)addr, (void)size, (void)stream;
#endif
}

int gm_test_yield_on;

/* A free refused because ptr lies inside a live allocation without being its start (cudaFree
 * (p + 16)): a foreign free (no allocation starts there) flagged interior, addr = the pointer
 * freed, alloc_id = the allocation it points into (0: not known, record mode). The allocation
 * stays live: the driver refuses such a free too. */
void gm_rec_interior_free(int device, CUstream stream, uintptr_t ptr, uint64_t alloc_id)
{
#ifdef GM_HAVE_REC
    if (recording)
        rec_event(REC_FOREIGN_FREE | REC_F_INTERIOR, device, (uint64_t)(uintptr_t)stream, ptr, 0,
                  0, alloc_id);
#else
    (void)device, (void)stream, (void)ptr, (void)alloc_id;
#endif
}

int gm_rec_stack_hold(void)
{
#ifdef GM_HAVE_REC
    return recording ? rec_stack_hold() : 0;
#else
    return 0;
#endif
}

void gm_rec_stack_release(int held)
{
#ifdef GM_HAVE_REC
    rec_stack_release(held);
#else
    (void)held;
#endif
}

/* For program_mem.c and devused.c: kinds the gm_ev bridge does not name. */
int gm_rec_opened(void) { return atomic_load_explicit(&rec_was_opened, memory_order_acquire); }
void gm_event_raw(unsigned rec_kind, int device, uintptr_t stream, uint64_t addr, uint64_t size,
                  uint64_t requested, uint64_t id)
{
#ifdef GM_HAVE_REC
    if (recording)
        rec_event(rec_kind, device, (uint64_t)stream, addr, size, requested, id);
#else
    (void)rec_kind, (void)device, (void)stream, (void)addr, (void)size, (void)requested, (void)id;
#endif
}

void gm_rec_bad_access(int access, CUstream s, uint64_t addr, size_t n,
                       const struct gm_alloc_ref *ref)
{
    gm_stat_add(GM_ST_BAD_ACCESS, 1);
#ifdef GM_HAVE_REC
    unsigned fl = access == GM_BA_MEMSET ? REC_F_BA_MEMSET
                  : access == GM_BA_WRITE ? REC_F_BA_WRITE
                                          : REC_F_BA_READ;
    if (recording)
        rec_event(REC_BAD_ACCESS | fl, ref->device, (uint64_t)(uintptr_t)s, addr, n,
                  ref->base ? ref->size : 0, ref->base ? ref->id : 0);
#else
    (void)access, (void)s, (void)addr, (void)n, (void)ref;
#endif
}

void gm_rec_note_device(int device, int expandable)
{
    if (device >= 0 && device < 64)
        atomic_store(&dev_expandable[device], expandable);
}

void gm_rec_oom(int device, const alloc_oom_info_t *info)
{
#ifdef GM_HAVE_REC
    if (!recording)
        return;
    rec_oom_info o;
    memset(&o, 0, sizeof o);
    o.device = device;
    o.stream = info->stream;
    o.requested = info->requested;
    o.allocated = info->allocated;
    o.reserved = info->reserved;
    o.free_cached = info->free_cached;
    o.largest_free = info->largest_free_block;
    o.device_free = info->device_free;
    o.device_total = info->device_total;
    o.limit = info->limit == ALLOC_NO_LIMIT ? REC_NO_LIMIT : info->limit; /* 0 is 0 bytes */
    o.flags = info->limit_from == ALLOC_LIMIT_FRACTION ? REC_F_OOM_FRACTION
              : info->limit_from == ALLOC_LIMIT_KEY    ? REC_F_OOM_KEY
                                                       : 0;
    o.name = pending_name[0] ? pending_name : NULL;
    rec_oom(&o);
    pending_name[0] = 0;
#else
    (void)device, (void)info;
    pending_name[0] = 0;
#endif
}

#ifdef GM_HAVE_REC
struct snap_buf {
    rec_segment *segs;
    size_t nsegs, capsegs;
    rec_block *blocks;
    size_t nblocks, capblocks;
    int device;
    int failed;
};

static int snap_walk(void *user, const alloc_walk_segment_t *seg, const alloc_walk_block_t *b,
                     size_t nb)
{
    struct snap_buf *s = user;
    if (s->nsegs == s->capsegs) {
        size_t n = s->capsegs ? s->capsegs * 2 : 64;
        rec_segment *p = realloc(s->segs, n * sizeof *p);
        if (!p) {
            s->failed = 1;
            return 1;
        }
        s->segs = p;
        s->capsegs = n;
    }
    if (s->nblocks + nb > s->capblocks) {
        size_t n = s->capblocks ? s->capblocks : 256;
        while (n < s->nblocks + nb)
            n *= 2;
        rec_block *p = realloc(s->blocks, n * sizeof *p);
        if (!p) {
            s->failed = 1;
            return 1;
        }
        s->blocks = p;
        s->capblocks = n;
    }
    rec_segment *rs = &s->segs[s->nsegs];
    rs->device = s->device;
    rs->stream = seg->stream;
    rs->addr = seg->addr;
    rs->size = seg->size;
    rs->mapped = seg->size;
    rs->flags = (seg->expandable ? REC_SEG_F_EXPANDABLE : 0) |
                (seg->small_pool ? REC_SEG_F_SMALL_POOL : 0);
    for (size_t i = 0; i < nb; i++) {
        rec_block *rb = &s->blocks[s->nblocks++];
        rb->segment = (uint32_t)s->nsegs;
        rb->state = b[i].state == ALLOC_BLOCK_LIVE      ? REC_BLOCK_ALLOCATED
                    : b[i].state == ALLOC_BLOCK_PENDING ? REC_BLOCK_PENDING
                                                        : REC_BLOCK_FREE;
        rb->addr = b[i].addr;
        rb->size = b[i].size;
        rb->requested = b[i].requested;
        rb->alloc_id = b[i].alloc_id;
    }
    s->nsegs++;
    return 0;
}
#endif

void gm_rec_snapshot(alloc_t *a, int device, int reason)
{
#ifdef GM_HAVE_REC
    if (!recording)
        return;
    struct snap_buf s;
    memset(&s, 0, sizeof s);
    s.device = device;
    alloc_walk(a, snap_walk, &s);
    if (!s.failed)
        rec_snapshot((enum rec_snap_reason)reason, s.segs, s.nsegs, s.blocks, s.nblocks);
    free(s.segs);
    free(s.blocks);
#else
    (void)a, (void)device, (void)reason;
#endif
}

/* The peak snapshot. A snapshot walks every block, and while memory ramps up each allocation
 * may be a new peak: walking at each one would cost O(n^2) over the ramp. So a new peak only
 * marks the device; the walk happens once, at the first free after it (before the free is
 * applied, so what it sees is the state at the top of the ramp), at an OOM or at exit. */
#ifdef GM_HAVE_REC
static _Atomic long long last_peak[REC_MAX_DEVICES];
static _Atomic int peak_unsaved[REC_MAX_DEVICES];
#endif

void gm_rec_peak_settle(alloc_t *a, int device)
{
#ifdef GM_HAVE_REC
    if (recording && device >= 0 && device < REC_MAX_DEVICES &&
        atomic_load_explicit(&peak_unsaved[device], memory_order_relaxed) &&
        atomic_exchange(&peak_unsaved[device], 0))
        gm_rec_snapshot(a, device, REC_SNAP_PEAK);
#else
    (void)a, (void)device;
#endif
}

/* After a served allocation (its event written under the allocator's lock: heap_malloced): a
 * note when reserved memory reached a new peak. */
void gm_rec_alloc_peak(int device, int cache_hit, alloc_t *a)
{
#ifdef GM_HAVE_REC
    if (!recording || device < 0 || device >= REC_MAX_DEVICES || cache_hit)
        return; /* a cache hit never grows reserved memory */
    alloc_stats_t st;
    alloc_get_stats(a, &st);
    long long prev = atomic_load(&last_peak[device]);
    if (st.reserved_bytes.peak > prev && st.reserved_bytes.current == st.reserved_bytes.peak &&
        atomic_compare_exchange_strong(&last_peak[device], &prev, st.reserved_bytes.peak))
        atomic_store(&peak_unsaved[device], 1);
#else
    (void)device, (void)cache_hit, (void)a;
#endif
}

/* ---- runtime error mapping -------------------------------------------------------------- */

cudaError_t gm_rt_error(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
    default: return cudaErrorUnknown;
    }
}

/* The synchronization a real cudaFree / cuMemFree (host: cudaFreeHost / cuMemFreeHost) makes
 * before freeing: programs read managed or zero-copy results right after a free, or reuse a
 * pinned buffer an async copy was reading, relying on it. GPUMEM_CONF free_sync:none /
 * free_host_sync:none trade it for speed (alloc/README.md, "Implied synchronizations"). The
 * calling thread gets the runtime's context first if it has none, as the real call would. */
int gm_free_sync(int host)
{
    unsigned v = host ? gm_alloc_config.free_host_sync : gm_alloc_config.free_sync;
    CUdevice d;
    if (v != ALLOC_SYNC_DEVICE || !gm_real.cuCtxSynchronize || !gm_real.cuCtxGetCurrent)
        return GM_SYNC_NONE;
    if (gm_capture_underway())
        return GM_SYNC_SKIPPED_CAPTURE;
    return gm_driver_ensure_context(&d) == CUDA_SUCCESS &&
                   GM_DRV(GM_DRV_CTX_SYNC, gm_real.cuCtxSynchronize()) == CUDA_SUCCESS
               ? GM_SYNC_DONE
               : GM_SYNC_NONE;
}

/* ---- exit ---------------------------------------------------------------------------------- */

static _Atomic int exit_ran;

static void print_stats(void)
{
    const char *e = getenv("GPUMEM_STATS");
    if (!e || !*e || !strcmp(e, "0"))
        return;
    int pid = (int)getpid();
    const char *m = mode_now == GM_MODE_REPLACE ? "replace"
                    : mode_now == GM_MODE_RECORD ? "record"
                                                 : "off";
    fprintf(stderr, "gpumem-stats %d mode %s\n", pid, gm_forked_child ? "off" : m);
    for (int i = 0; i < GM_ST_COUNT; i++)
        fprintf(stderr, "gpumem-stats %d %s %llu\n", pid, stat_names[i],
                (unsigned long long)atomic_load(&gm_stats[i]));
    if (!gm_forked_child)
        gm_heap_print_stats(stderr);
}

#ifdef GM_HAVE_REC
static void write_stats(void)
{
    {
        /* the exit sample first: its cuMemGetInfo is one of the driver calls counted below */
        gm_devused_exit();
        alloc_stats_t st;
        rec_alloc_stats rs;
        memset(&rs, 0, sizeof rs);
        /* the CUDA function behind each backend call of alloc/ (preload/heap.c's backend) */
        static const char *const cuda_name[ALLOC_BE_NCALLS] = {
            [ALLOC_BE_CALL_RESERVE] = "cuMemAddressReserve", [ALLOC_BE_CALL_FREE_RANGE] = "cuMemAddressFree",
            [ALLOC_BE_CALL_CREATE] = "cuMemCreate",          [ALLOC_BE_CALL_RELEASE] = "cuMemRelease",
            [ALLOC_BE_CALL_MAP] = "cuMemMap",                [ALLOC_BE_CALL_SET_ACCESS] = "cuMemSetAccess",
            [ALLOC_BE_CALL_UNMAP] = "cuMemUnmap",            [ALLOC_BE_CALL_SEG_ALLOC] = "cuMemAlloc",
            [ALLOC_BE_CALL_SEG_FREE] = "cuMemFree",          [ALLOC_BE_CALL_EVENT_CREATE] = "cuEventCreate",
            [ALLOC_BE_CALL_EVENT_RECORD] = "cuEventRecord",  [ALLOC_BE_CALL_SYNCHRONIZE] = "cuCtxSynchronize",
        };
        for (int k = 0; k < ALLOC_BE_NCALLS; k++)
            rs.driver_call_names[k] = cuda_name[k];
        /* gpumem's own calls outside the backend: into the backend's entry of the same function,
         * or one entry more */
        static const char *const own_name[GM_DRV_COUNT] = {
            [GM_DRV_CTX_SYNC] = "cuCtxSynchronize",     [GM_DRV_EVENT_RECORD] = "cuEventRecord",
            [GM_DRV_EVENT_QUERY] = "cuEventQuery",       [GM_DRV_EVENT_SYNC] = "cuEventSynchronize",
            [GM_DRV_MEM_GET_INFO] = "cuMemGetInfo",      [GM_DRV_HOST_ALLOC] = "cuMemHostAlloc",
            [GM_DRV_HOST_REGISTER] = "cuMemHostRegister", [GM_DRV_HOST_UNREGISTER] = "cuMemHostUnregister",
        };
        int own_at[GM_DRV_COUNT], nnames = ALLOC_BE_NCALLS;
        for (int j = 0; j < GM_DRV_COUNT; j++) {
            own_at[j] = -1;
            for (int k = 0; k < nnames; k++)
                if (!strcmp(rs.driver_call_names[k], own_name[j])) own_at[j] = k;
            if (own_at[j] < 0) rs.driver_call_names[own_at[j] = nnames++] = own_name[j];
            rs.driver_calls[own_at[j]] += atomic_load(&gm_drv_calls[j]);
        }
        for (int d = 0; d < 64; d++) {
            if (gm_heap_stats(d, &st))
                continue;
            rs.peak_allocated += (uint64_t)st.allocated_bytes.peak;
            rs.peak_reserved += (uint64_t)st.reserved_bytes.peak;
            rs.allocated_now += (uint64_t)st.allocated_bytes.current;
            rs.reserved_now += (uint64_t)st.reserved_bytes.current;
            rs.cache_hits += st.cache_hits;
            rs.cache_misses += st.cache_misses;
            rs.driver_alloc_calls += st.backend_calls[ALLOC_BE_CALL_CREATE] + st.backend_calls[ALLOC_BE_CALL_SEG_ALLOC];
            rs.driver_free_calls += st.backend_calls[ALLOC_BE_CALL_RELEASE] + st.backend_calls[ALLOC_BE_CALL_SEG_FREE];
            rs.driver_map_calls += st.backend_calls[ALLOC_BE_CALL_MAP];
            rs.driver_unmap_calls += st.backend_calls[ALLOC_BE_CALL_UNMAP];
            for (int k = 0; k < ALLOC_BE_NCALLS; k++)
                rs.driver_calls[k] += st.backend_calls[k];
        }
        rs.n_alloc = atomic_load(&gm_stats[GM_ST_SERVED]) + atomic_load(&gm_stats[GM_ST_PASSTHROUGH]);
        rs.n_free = atomic_load(&gm_stats[GM_ST_RELEASED]) +
                    atomic_load(&gm_stats[GM_ST_PASSTHROUGH_FREE]);
        rs.n_oom = atomic_load(&gm_stats[GM_ST_OOM]);
        rs.foreign_frees = atomic_load(&gm_stats[GM_ST_FOREIGN_FREE]);
        rs.double_frees = atomic_load(&gm_stats[GM_ST_DOUBLE_FREE]);
        rec_stats(&rs);
        /* the replay hands out addresses the same way round (ties in best fit and releases
         * are broken by address): "down" on the virtual GPU (mmap), "up" on a GPU */
        int order = gm_heap_address_order();
        if (order)
            rec_meta("alloc.address_order", order < 0 ? "down" : "up");
    }
}
#endif

/* The main exit flush runs before the runtime's teardown (see the top of the file), but a
 * program may still free in an atexit handler it registered before its first CUDA call, which
 * runs later: the recording is committed here and stays open; the last word is final_handler,
 * registered by the constructor and therefore run after every handler the program registered. */
static void final_handler(void)
{
#ifdef GM_HAVE_REC
    if (atomic_load(&exit_ran) && recording && !gm_forked_child) {
        gm_inside_enter();
        write_stats(); /* again: frees made since the main flush count */
        rec_close();
        gm_inside_leave();
    }
#endif
}

static void exit_handler(void)
{
    if (atomic_exchange(&exit_ran, 1))
        return;
    gm_inside_enter();
    if (!gm_forked_child && mode_now == GM_MODE_REPLACE)
        gm_heap_exit();
#ifdef GM_HAVE_REC
    if (recording && !gm_forked_child) {
        write_stats();
        rec_flush();
    }
#endif
    gm_nvtx_dump();
    print_stats();
    gm_inside_leave();
}

void gm_exit_register_late(void)
{
    static _Atomic int done;
    if (!atomic_exchange(&done, 1))
        atexit(exit_handler);
}

/* A program that only uses NVTX never reaches core_init: its first NVTX call registers the
 * handler (for the GPUMEM_DEBUG_RANGES dump and the recorder). */
void gm_exit_register_nvtx(void)
{
    static _Atomic int done;
    if (!atomic_exchange(&done, 1))
        atexit(exit_handler);
}

/* ---- a program that kills itself ------------------------------------------------------------ */

/* SIGINT, SIGTERM, SIGHUP or another of the ending signals (rec_signal_ends: those whose
 * default action ends the process) sent by the program to itself while the signal's action is the default and
 * this thread does not block it: the process is about to die without its exit handlers, as if
 * the recorder's own handler had been in place (snapshot/record/rec.c, on_terminating_signal),
 * so the recording is closed the same way first (state 'interrupted', every lifetime written).
 * Python does this at the end of a run stopped by Ctrl-C: its own SIGINT handler raised
 * KeyboardInterrupt, and after finalizing it sets SIGINT back to the default and kill()s
 * itself. kill(), killpg() and raise() are the three ways in; each then does what it does
 * without gpumem (the next definition of the symbol: libc's, or a sanitizer's). Only
 * async-signal-safe calls: a program's signal handler may be the caller. */
#ifdef GM_HAVE_REC
static int dies_of(int sig)
{
    if (!rec_signal_ends(sig) || !rec_signals_handled())
        return 0;
    struct sigaction cur;
    sigset_t blocked;
    return sigaction(sig, NULL, &cur) == 0 && cur.sa_handler == SIG_DFL && !(cur.sa_flags & SA_SIGINFO) &&
           pthread_sigmask(SIG_BLOCK, NULL, &blocked) == 0 && !sigismember(&blocked, sig);
}
#endif

typedef int (*gm_kill_fn)(pid_t, int);
typedef int (*gm_raise_fn)(int);
static gm_kill_fn next_kill, next_killpg;
static gm_raise_fn next_raise;

GM_EXPORT int kill(pid_t pid, int sig)
{
#ifdef GM_HAVE_REC
    if ((pid == getpid() || pid == 0 || pid == -getpgrp()) && dies_of(sig))
        rec_close_ending(sig);
#endif
    return next_kill ? next_kill(pid, sig) : (int)syscall(SYS_kill, pid, sig);
}

GM_EXPORT int killpg(pid_t pgrp, int sig)
{
#ifdef GM_HAVE_REC
    if ((pgrp == 0 || pgrp == getpgrp()) && dies_of(sig))
        rec_close_ending(sig);
#endif
    return next_killpg ? next_killpg(pgrp, sig) : (int)syscall(SYS_kill, -pgrp, sig);
}

GM_EXPORT int raise(int sig)
{
#ifdef GM_HAVE_REC
    if (dies_of(sig))
        rec_close_ending(sig);
#endif
    return next_raise ? next_raise(sig) : (int)syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), sig);
}

/* _exit() and _Exit() end the process at once, without its exit handlers (a SIGTERM handler that
 * saves a checkpoint and leaves, Python's os._exit, a multiprocessing child): the recording is
 * closed first, state 'closed', as at a normal exit less what the exit handlers would have
 * added (the allocator's last statistics). exit() itself reaches _exit inside libc, after the
 * handlers, which closed the recording already. */
typedef void (*gm_exit_fn)(int);
static gm_exit_fn next_exit, next_Exit;

GM_EXPORT void _exit(int status)
{
#ifdef GM_HAVE_REC
    rec_close_ending(0);
#endif
    if (next_exit)
        next_exit(status);
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

GM_EXPORT void _Exit(int status)
{
#ifdef GM_HAVE_REC
    rec_close_ending(0);
#endif
    if (next_Exit)
        next_Exit(status);
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

/* exec replaces the program: the recording's file stays (the next image, recording again, goes
 * beside it: snapshot/record/rec.c, part_of_this_run), and everything recorded so far is
 * committed first, with state 'exec' and the program run (rec_exec_begin; at most ~100 ms would
 * be lost otherwise). The variadic execl family reaches execve inside libc, so it is wrapped
 * too. If the exec fails, the state is 'recording' again and recording goes on. A vfork
 * child's exec (Python's subprocess) changes nothing: rec_exec_begin acts only in the
 * recording's own process. */
typedef int (*gm_execve_fn)(const char *, char *const[], char *const[]);
typedef int (*gm_execv_fn)(const char *, char *const[]);
typedef int (*gm_fexecve_fn)(int, char *const[], char *const[]);
static gm_execve_fn next_execve, next_execvpe;
static gm_execv_fn next_execv, next_execvp;
static gm_fexecve_fn next_fexecve;

static void before_exec(const char *what)
{
#ifdef GM_HAVE_REC
    rec_exec_begin(what);
#else
    (void)what;
#endif
}

/* the exec returned: it failed, and this image goes on recording */
static int exec_failed(int rc)
{
#ifdef GM_HAVE_REC
    int e = errno;
    rec_exec_failed();
    errno = e;
#endif
    return rc;
}

static int no_next(void)
{
    errno = ENOSYS;
    return -1;
}

GM_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    before_exec(path);
    return exec_failed(next_execve ? next_execve(path, argv, envp) : (int)syscall(SYS_execve, path, argv, envp));
}

GM_EXPORT int execv(const char *path, char *const argv[])
{
    before_exec(path);
    return exec_failed(next_execv ? next_execv(path, argv) : no_next());
}

GM_EXPORT int execvp(const char *file, char *const argv[])
{
    before_exec(file);
    return exec_failed(next_execvp ? next_execvp(file, argv) : no_next());
}

GM_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    before_exec(file);
    return exec_failed(next_execvpe ? next_execvpe(file, argv, envp) : no_next());
}

GM_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    before_exec("(fexecve)");
    return exec_failed(next_fexecve ? next_fexecve(fd, argv, envp) : no_next());
}

/* execl, execlp and execle: their list (it ends with NULL; execle's environment follows it) as
 * an argv, then execv, execvp or execve (which commit the recording first). Only returns on a
 * failed exec, so the argv on the stack outlives every use. */
enum { EXECL_PATH, EXECL_SEARCH, EXECL_ENV };

static int execl_list(int kind, const char *path, const char *first, va_list ap)
{
    size_t n = 0; /* the arguments after first (none when first is the list's NULL) */
    if (first) {
        va_list count;
        va_copy(count, ap);
        while (va_arg(count, const char *))
            n++;
        va_end(count);
    }
    char *argv[n + 2];
    argv[0] = (char *)first;
    for (size_t i = 1; first && i <= n + 1; i++) /* the NULL too */
        argv[i] = va_arg(ap, char *);
    if (kind == EXECL_ENV)
        return execve(path, argv, va_arg(ap, char *const *));
    return kind == EXECL_SEARCH ? execvp(path, argv) : execv(path, argv);
}

GM_EXPORT int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    int rc = execl_list(EXECL_PATH, path, arg, ap);
    va_end(ap);
    return rc;
}

GM_EXPORT int execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    int rc = execl_list(EXECL_SEARCH, file, arg, ap);
    va_end(ap);
    return rc;
}

GM_EXPORT int execle(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    int rc = execl_list(EXECL_ENV, path, arg, ap);
    va_end(ap);
    return rc;
}

/* ---- fork ---------------------------------------------------------------------------------- */

static void fork_prepare(void)
{
    gm_nvtx_fork_prepare();
    gm_pt_fork_prepare();
    gm_pinned_fork_prepare();
    gm_torch_trace_fork_prepare(); /* last: its holders take no other lock */
}
static void fork_parent(void)
{
    gm_torch_trace_fork_parent();
    gm_pinned_fork_parent();
    gm_pt_fork_parent();
    gm_nvtx_fork_parent();
}
static void fork_child(void)
{
    gm_pinned_fork_child();
    gm_pt_fork_child();
    gm_pm_fork_child();
    gm_nvtx_fork_child();
    gm_torch_trace_fork_child();
    if (atomic_load(&core_done) && mode_now != GM_MODE_OFF) {
        gm_forked_child = 1;
        atomic_store_explicit(&gm_mode_ready, GM_MODE_OFF, memory_order_relaxed);
    }
    /* the child's GPUMEM_STATS describe the child */
    for (int i = 0; i < GM_ST_COUNT; i++)
        atomic_store(&gm_stats[i], 0);
#ifdef GM_HAVE_REC
    /* the recorder decides for itself whether the child records (GPUMEM_FORK) */
#endif
}

__attribute__((constructor)) static void gm_constructor(void)
{
    /* resolved here, not in a signal handler that may call them */
    next_kill = (gm_kill_fn)gm_next_symbol("kill");
    next_killpg = (gm_kill_fn)gm_next_symbol("killpg");
    next_raise = (gm_raise_fn)gm_next_symbol("raise");
    next_exit = (gm_exit_fn)gm_next_symbol("_exit");
    next_Exit = (gm_exit_fn)gm_next_symbol("_Exit");
    next_execve = (gm_execve_fn)gm_next_symbol("execve");
    next_execvpe = (gm_execve_fn)gm_next_symbol("execvpe");
    next_execv = (gm_execv_fn)gm_next_symbol("execv");
    next_execvp = (gm_execv_fn)gm_next_symbol("execvp");
    next_fexecve = (gm_fexecve_fn)gm_next_symbol("fexecve");
    gm_nvtx_constructor();
#ifdef GM_HAVE_REC
    rec_note_start(); /* meta.cwd: where the program started, not where its first CUDA call was */
#endif
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(final_handler);
}

/* ---- user API ------------------------------------------------------------------------------ */

int gm_name_internal(const void *ptr, const char *name);
static __attribute__((noinline)) int name_entry(const void *ptr, const char *name)
{
    return gm_name_internal(ptr, name);
}
/* The name's frames keep the address too: scrubbed like an allocation's (gm_internal.h). */
GM_EXPORT int gpumem_name(const void *ptr, const char *name)
{
    return GM_SCRUBBED(mem, name_entry(ptr, name));
}

int gm_name_internal(const void *ptr, const char *name)
{
    if (!ptr || !name)
        return -1;
    if (gm_mode() == GM_MODE_OFF)
        return -1;
    uintptr_t start;
    if (gm_heap_name((CUdeviceptr)(uintptr_t)ptr, &start) != 0)
        return -1;
    gm_stat_add(GM_ST_NAMED, 1);
#ifdef GM_HAVE_REC
    if (recording)
        rec_name((uint64_t)start, name); /* the recorder pairs names with allocations by start */
#endif
    return 0;
}

GM_EXPORT int gpumem_name_next(const char *name)
{
    if (!name)
        return -1;
    snprintf(pending_name, sizeof pending_name, "%s", name);
    return gm_mode() == GM_MODE_OFF ? -1 : 0;
}

static __attribute__((noinline)) int record_stream_entry(const void *ptr, struct CUstream_st *stream)
{
    if (!ptr || gm_mode() == GM_MODE_OFF)
        return -1;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
    if (gm_mode() != GM_MODE_REPLACE) {
        /* record mode: nothing to fence (the real allocator frees), but the fact is recorded for
         * replay when gpumem knows the allocation */
        uintptr_t base;
        size_t sz;
        int dev;
        if (!gm_pt_lookup(p, &base, &sz, &dev))
            return -1;
        gm_event(GM_EV_RECORD_STREAM, dev, (CUstream)gm_stream_key(stream), p, 0, 0);
        return 0;
    }
    int dev = gm_heap_record_stream(p, stream);
    if (dev < 0)
        return -1;
    gm_event(GM_EV_RECORD_STREAM, dev, (CUstream)gm_stream_key(stream), p, 0, 0);
    return 0;
}

GM_EXPORT int gpumem_record_stream(const void *ptr, struct CUstream_st *stream)
{
    GM_NOTE_CALLER();
    return GM_SCRUBBED(mem, record_stream_entry(ptr, stream));
}

static void *torch_malloc(ssize_t size, int device, void *stream)
{
    if (size < 0)
        return NULL;
    /* PyTorch's allocator is replaced: its configuration (read by that allocator only) is not used */
    static _Atomic int torch_conf_checked;
    if (!atomic_load_explicit(&torch_conf_checked, memory_order_relaxed) && !atomic_exchange(&torch_conf_checked, 1)) {
        static const char why[] =
            "is ignored: gpumem's allocator serves PyTorch's tensors (CUDAPluggableAllocator: gpumem record "
            "--allocator gpumem, gpumem.use_as_allocator), so PyTorch's own allocator and its settings are not "
            "used; give the keys as GPUMEM_CONF (the same syntax), or keep PyTorch's allocator (no --allocator gpumem)";
        gm_setting_ignored("PYTORCH_CUDA_ALLOC_CONF", why);
        gm_setting_ignored("PYTORCH_ALLOC_CONF", why);
    }
    gm_mode_t m = gm_mode();
    CUdeviceptr p = 0;
    if (m == GM_MODE_OFF) {
        if (!gm_driver_init() || gm_real.cuMemAlloc_v2((CUdeviceptr *)&p, (size_t)size))
            return NULL;
        return (void *)(uintptr_t)p;
    }
    CUdevice dev;
    if (gm_driver_ensure_context(&dev) != CUDA_SUCCESS)
        return NULL;
    gm_stat_add(GM_ST_RT_MALLOC_ASYNC, 1);
    /* the framework's own allocations: a replay under PyTorch's presets caches only these
     * (the others, cuBLAS workspaces, NCCL buffers, become `ax` lines: gm_export.c) */
    gm_next_alloc_flags = GM_EVF_FRAMEWORK;
    if (m == GM_MODE_REPLACE) {
        CUresult r = gm_heap_alloc(&p, (size_t)size, device, (CUstream)stream, GM_ALLOC_ASYNC);
        gm_next_alloc_flags = 0;
        return r ? NULL : (void *)(uintptr_t)p;
    }
    CUresult r = gm_real.cuMemAlloc_v2(&p, (size_t)size);
    if (r != CUDA_SUCCESS) {
        gm_next_alloc_flags = 0;
        if (r == CUDA_ERROR_OUT_OF_MEMORY) { /* the driver refused it, as record mode's cudaMalloc */
            gm_stat_add(GM_ST_OOM, 1);
            gm_event(GM_EV_OOM, device, (CUstream)stream, 0, 0, (size_t)size);
        }
        return NULL;
    }
    gm_stat_add(GM_ST_PASSTHROUGH, 1);
    gm_pt_add(p, (size_t)size, GM_PT_DEVICE, device);
    gm_event(GM_EV_ALLOC, device, (CUstream)stream, p, (size_t)size, (size_t)size);
    gm_next_alloc_flags = 0;
    return (void *)(uintptr_t)p;
}

/* The calling thread's last refused gpumem_torch_malloc, for the words of PyTorch's
 * OutOfMemoryError (gpumem_torch_oom_message): a pluggable allocator cannot raise it itself, the
 * shim that calls it does (preload/torch_alloc.cpp), on the thread that asked. */
static _Thread_local struct {
    ssize_t size;
    int device;
    int have_info; /* info is gpumem's allocator's, for this request */
    alloc_oom_info_t info;
} torch_refused;

static __attribute__((noinline)) void *torch_malloc_entry(ssize_t size, int device, void *stream)
{
    void *p = torch_malloc(size, device, stream);
    if (!p && size > 0) {
        torch_refused.size = size;
        torch_refused.device = device;
        torch_refused.have_info = gm_mode() == GM_MODE_REPLACE && gm_heap_last_oom(device, &torch_refused.info) == 0 &&
                                  torch_refused.info.requested == (size_t)size;
    }
    return p;
}

GM_EXPORT void *gpumem_torch_malloc(ssize_t size, int device, void *stream)
{
    GM_NOTE_CALLER();
    return GM_SCRUBBED(mem, torch_malloc_entry(size, device, stream));
}

/* PyTorch's way of writing a size (format_size: B, KiB, MiB, GiB with two decimals) */
static const char *torch_size(char *b, size_t cap, uint64_t v)
{
    static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)v;
    int u = 0;
    while (x >= 1024.0 && u < 4)
        x /= 1024.0, u++;
    if (u == 0)
        snprintf(b, cap, "%llu bytes", (unsigned long long)v);
    else
        snprintf(b, cap, "%.2f %s", x, unit[u]);
    return b;
}

/* The setting that set the limit o met, as a person changes it: the limit in bytes is
 * GPUMEM_LIMIT's where that was set (it overrides the limit key), else GPUMEM_CONF's limit key;
 * NULL where there was no limit. */
static const char *oom_limit_knob(const alloc_oom_info_t *o)
{
    switch (o->limit_from) {
    case ALLOC_LIMIT_BYTES: return gm_limit != ALLOC_NO_LIMIT ? "GPUMEM_LIMIT" : "the limit key of GPUMEM_CONF";
    case ALLOC_LIMIT_KEY: return "the per_process_memory_fraction key of GPUMEM_CONF";
    case ALLOC_LIMIT_FRACTION:
        return "the per-process memory fraction (torch.cuda.set_per_process_memory_fraction)";
    case ALLOC_LIMIT_NONE: break;
    }
    return NULL;
}

GM_EXPORT size_t gpumem_torch_oom_message(char *buf, size_t cap)
{
    char req[32], al[32], res[32], fr[32], lg[32], lim[32], tot[32], dfree[32];
    const alloc_oom_info_t *o = &torch_refused.info;
    torch_size(req, sizeof req, (uint64_t)(torch_refused.size > 0 ? torch_refused.size : 0));
    int n;
    if (!torch_refused.have_info)
        n = snprintf(buf, cap,
                     "CUDA out of memory. Tried to allocate %s on device %d: gpumem_torch_malloc (gpumem as PyTorch's "
                     "CUDAPluggableAllocator) got no memory from the driver (gpumem's allocator does not place "
                     "memory in this mode, GPUMEM_MODE=%s). Free tensors, or make the batch smaller.",
                     req, torch_refused.device, gm_mode() == GM_MODE_OFF ? "off" : "record");
    else {
        /* the bound: the limit where it left no more room than the device (report's rule) */
        const char *knob = oom_limit_knob(o);
        int limit_bound = knob && o->limit <= o->reserved + o->device_free;
        char what[200];
        if (limit_bound)
            snprintf(what, sizeof what, "raise %s: the limit it sets was the bound", knob);
        else
            snprintf(what, sizeof what, "run on a device with more memory: the device was the bound%s",
                     knob ? ", not the limit" : "");
        n = snprintf(buf, cap,
                     "CUDA out of memory. Tried to allocate %s on device %d. gpumem's allocator (PyTorch's "
                     "CUDAPluggableAllocator) had %s allocated and %s reserved, %s of it free in its cache (the "
                     "largest free block %s); its limit is %s; the device has %s in all, of which %s is free. "
                     "The recording holds this OOM (`gpumem report` says what was live). Free tensors, make the "
                     "batch smaller, or %s.",
                     req, torch_refused.device, torch_size(al, sizeof al, o->allocated),
                     torch_size(res, sizeof res, o->reserved), torch_size(fr, sizeof fr, o->free_cached),
                     torch_size(lg, sizeof lg, o->largest_free_block),
                     o->limit == ALLOC_NO_LIMIT ? "none" : torch_size(lim, sizeof lim, o->limit),
                     torch_size(tot, sizeof tot, o->device_total), torch_size(dfree, sizeof dfree, o->device_free),
                     what);
    }
    return n < 0 ? 0 : (size_t)n;
}

/* PyTorch's set_per_process_memory_fraction, as the pluggable allocator hands it on
 * (CUDAPluggableAllocator::set_memory_fraction_fn, from preload/torch_alloc.cpp): gpumem's
 * allocator of that device is capped at fraction x the device's total (or GPUMEM_LIMIT where
 * lower), as PyTorch's own allocator is, and the call recorded (event 37); an OOM under it is
 * recorded with that limit, flagged the fraction's. In mode record the driver serves each tensor:
 * nothing to cap, said once. */
GM_EXPORT void gpumem_torch_memory_fraction(double fraction, int device)
{
    GM_NOTE_CALLER();
    if (gm_mode() == GM_MODE_REPLACE && !gm_forked_child && gm_driver_init() &&
        gm_heap_memory_fraction(device, fraction) == 0)
        return;
    if (gm_mode() == GM_MODE_OFF)
        return;
    char v[64];
    snprintf(v, sizeof v, "%g (device %d)", fraction, device);
    gm_setting_ignored_value("torch.cuda.set_per_process_memory_fraction", v,
                             gm_mode() == GM_MODE_REPLACE
                                 ? "is ignored: gpumem's allocator of that device could not be made; cap it "
                                   "with GPUMEM_LIMIT (bytes) or GPUMEM_CONF=limit:BYTES"
                                 : "is ignored: GPUMEM_MODE=record: the driver serves each tensor, gpumem's "
                                   "allocator caps nothing; run in mode replace (the default) for the fraction "
                                   "to cap gpumem's allocator");
}

GM_EXPORT void gpumem_host_cache_emptying(int on)
{
    GM_NOTE_CALLER();
    gm_torch_cache_emptying = on != 0;
#ifdef GM_HAVE_REC
    /* the hooks ran: a reader told pinned blocks alive at exit are not the cache's (none was freed
     * here) can say so, where without it it can only say it does not know */
    if (on && recording)
        rec_meta("torch_host_cache", "emptied");
#endif
}

GM_EXPORT void gpumem_torch_cache_emptying(int on)
{
    GM_NOTE_CALLER();
    gm_torch_cache_emptying = on != 0;
}

GM_EXPORT void gpumem_empty_cache(void)
{
    GM_NOTE_CALLER();
    /* replace mode only: elsewhere gpumem caches nothing (the program's allocator does) */
    if (gm_mode() == GM_MODE_REPLACE && !gm_forked_child)
        gm_heap_empty_cache();
}

/* PyTorch's memory statistics (libgpumem_torch.so's getDeviceStats and resets, or the gpumem
 * Python module's ctypes reads without it): gpumem's allocator's figures, kept by heap.c. Only
 * where that allocator serves the tensors: in modes record and off the driver does, and there
 * are no figures to give (PyTorch's error stays, in gpumem's words). */
GM_EXPORT int gpumem_torch_stats(int device, gpumem_torch_stats_t *out, size_t size)
{
    GM_NOTE_CALLER();
    gpumem_torch_stats_t st;
    if (!out || gm_mode() != GM_MODE_REPLACE || gm_forked_child || gm_heap_torch_stats(device, &st) != 0)
        return -1;
    memcpy(out, &st, size < sizeof st ? size : sizeof st);
    return 0;
}

GM_EXPORT double gpumem_torch_get_memory_fraction(int device)
{
    GM_NOTE_CALLER();
    /* modes record and off: gpumem caps nothing (the fraction is said ignored) */
    return gm_mode() == GM_MODE_REPLACE && !gm_forked_child ? gm_heap_memory_fraction_get(device) : 1.0;
}

GM_EXPORT void gpumem_torch_reset_peak_stats(int device)
{
    GM_NOTE_CALLER();
    if (gm_mode() == GM_MODE_REPLACE && !gm_forked_child)
        gm_heap_torch_reset_peaks(device);
}

GM_EXPORT void gpumem_torch_reset_accumulated_stats(int device)
{
    GM_NOTE_CALLER();
    if (gm_mode() == GM_MODE_REPLACE && !gm_forked_child)
        gm_heap_torch_reset_accumulated(device);
}

static __attribute__((noinline)) void torch_free_entry(void *ptr, ssize_t size, int device,
                                                     void *stream)
{
    (void)size;
    if (!ptr)
        return;
    gm_mode_t m = gm_mode();
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
    CUresult res;
    gm_stat_add(GM_ST_RT_FREE_ASYNC, 1);
    if (m == GM_MODE_REPLACE && gm_heap_torch_free(p, (CUstream)stream, &res))
        return;
    size_t sz;
    enum gm_pt_kind k;
    int dev;
    if (gm_pt_remove(p, &sz, &k, &dev)) {
        gm_stat_add(GM_ST_PASSTHROUGH_FREE, 1);
        gm_event(GM_EV_FREE, dev, (CUstream)stream, p, sz, 0);
    } else if (m != GM_MODE_OFF) {
        gm_pt_bad_free(p, device, (CUstream)stream);
    }
    if (gm_driver_init())
        gm_real.cuMemFree_v2(p); /* after its event: see rt_record_free */
}

GM_EXPORT void gpumem_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    GM_NOTE_CALLER();
    GM_SCRUBBED_VOID(mem, torch_free_entry(ptr, size, device, stream));
}
