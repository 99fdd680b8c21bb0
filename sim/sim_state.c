/* sim_state.c — the virtual GPU's one state struct, its lock, configuration from the
 * environment, the cost model, capacity accounting and fault injection.
 *
 * Configuration is read once, on the first driver call (cuInit, cuGetProcAddress or any sim_*
 * function), never in a constructor: a driver must not do work just because it was loaded.
 * Bad values are reported on stderr with the variable's name and then ignored; a driver never
 * aborts the program it serves.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "sim/sim_internal.h"

sim_state sim = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .cond = PTHREAD_COND_INITIALIZER,
    .memfd = -1,
    .next_id = 1,
    .ndevices = 1,
};

static pthread_once_t config_once = PTHREAD_ONCE_INIT;

void sim_lock(void)
{
    pthread_mutex_lock(&sim.lock);
}
void sim_unlock(void)
{
    pthread_mutex_unlock(&sim.lock);
}

void sim_note(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "gpumem sim: %s\n", buf);
}

double sim_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* SIM_SIZE_RULE, to the letter (alloc_parse_size's grammar; sim/ does not link alloc/): digits,
 * then an optional fraction only where a unit follows, then K/M/G/T (powers of 1024) with an
 * optional i and B, or a lone B. Nothing before the digits (a space, a sign), nothing after the
 * unit, no exponent or hex: strtod read ' 16G' as 16G, '1e3' as 1000 and '0x10G' as 16G.
 * "16G", "512M", "1.5T", "4096" -> bytes (a fraction rounded down to whole bytes). Returns 0 on
 * success, -1 on bad syntax or a size past SIZE_MAX. */
int sim_parse_size(const char *s, size_t *out)
{
    if (!s || !isdigit((unsigned char)*s)) return -1;
    const char *p = s;
    unsigned long long v = 0;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (ULLONG_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    unsigned long long fnum = 0, fden = 1; /* the fraction: fnum / fden */
    bool frac = *p == '.';
    if (frac) {
        p++;
        if (!isdigit((unsigned char)*p)) return -1; /* "1." */
        /* digits past the 18th are below a byte of any unit up to T (2^40 / 10^18) */
        for (; isdigit((unsigned char)*p); p++)
            if (fden <= 100000000000000000ULL) fnum = fnum * 10 + (unsigned)(*p - '0'), fden *= 10;
    }
    unsigned shift = 0;
    switch (toupper((unsigned char)*p)) {
    case 'K':
        shift = 10;
        break;
    case 'M':
        shift = 20;
        break;
    case 'G':
        shift = 30;
        break;
    case 'T':
        shift = 40;
        break;
    default:
        break;
    }
    if (shift) {
        p++;
        if (*p == 'i' || *p == 'I') p++;
    }
    if (*p == 'B' || *p == 'b') p++;
    if (*p || (frac && !shift)) return -1;
    if (v > (SIZE_MAX >> shift) - 1) return -1;
    size_t r = (size_t)v << shift;
    if (fnum) r += (size_t)(((unsigned __int128)fnum << shift) / fden);
    *out = r;
    return 0;
}

/* ---- fault plans ------------------------------------------------------------------------- */

/* Syntax: comma-separated items, each `alloc:N` (fail the Nth device allocation, counting
 * cuMemAlloc*, cuMemAllocAsync/FromPool and cuMemCreate from 1), `map:N` (fail the Nth
 * cuMemMap), or `oom_at:SIZE` (fail any allocation that would take charged memory past SIZE).
 * alloc and map may repeat. Returns 0, or -1 with a reason in err. */
static int parse_faults(const char *spec, sim_fault_plan *plan, char *err, size_t errlen)
{
    memset(plan, 0, sizeof *plan);
    if (!spec) return 0;
    char *copy = strdup(spec);
    if (!copy) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (*item == ' ')
            item++;
        if (!*item) continue;
        char *colon = strchr(item, ':');
        if (!colon) {
            snprintf(err, errlen, "item '%s' has no ':' (expected alloc:N, map:N or oom_at:SIZE)",
                     item);
            rc = -1;
            break;
        }
        *colon = '\0';
        const char *key = item, *val = colon + 1;
        if (!strcmp(key, "alloc") || !strcmp(key, "map")) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(val, &end, 10);
            if (errno || end == val || *end || n == 0 || *val == '-') {
                snprintf(err, errlen, "'%s:%s': N must be a whole number >= 1", key, val);
                rc = -1;
                break;
            }
            bool is_alloc = key[0] == 'a';
            size_t *cnt = is_alloc ? &plan->nalloc : &plan->nmap;
            uint64_t *arr = is_alloc ? plan->alloc_at : plan->map_at;
            if (*cnt >= SIM_MAX_FAULTS) {
                snprintf(err, errlen, "more than %d '%s' items", SIM_MAX_FAULTS, key);
                rc = -1;
                break;
            }
            arr[(*cnt)++] = n;
        } else if (!strcmp(key, "oom_at")) {
            size_t sz;
            if (sim_parse_size(val, &sz) || sz == 0) {
                snprintf(err, errlen,
                         "'oom_at:%s': SIZE must be a size above 0 (" SIM_SIZE_RULE ")", val);
                rc = -1;
                break;
            }
            plan->oom_at = sz;
        } else {
            snprintf(err, errlen, "unknown item '%s' (expected alloc, map or oom_at)", key);
            rc = -1;
            break;
        }
    }
    free(copy);
    return rc;
}

/* ---- cost model -------------------------------------------------------------------------- */

/* Simulated cost of one call: fixed µs + µs per MiB of its size argument. The figures and their
 * sources are in sim/README.md ("Cost model"). */
#define US_PER_MIB_AT_GBPS(g) (1048576.0 / ((g)*1e3))
typedef struct cost_entry {
    const char *name;
    double fixed_us, per_mib_us;
} cost_entry;
static const cost_entry default_costs[SIM_OP_COUNT] = {
    [SIM_OP_MEM_ALLOC] = {"cuMemAlloc", 20.0, 0.5},
    [SIM_OP_MEM_FREE] = {"cuMemFree", 25.0, 0.25}, /* includes the implied device sync */
    [SIM_OP_MEM_ALLOC_ASYNC] = {"cuMemAllocAsync", 1.5, 0.0},
    [SIM_OP_MEM_FREE_ASYNC] = {"cuMemFreeAsync", 1.5, 0.0},
    [SIM_OP_MEM_ALLOC_MANAGED] = {"cuMemAllocManaged", 20.0, 0.0},
    [SIM_OP_ADDRESS_RESERVE] = {"cuMemAddressReserve", 10.0, 0.0},
    [SIM_OP_ADDRESS_FREE] = {"cuMemAddressFree", 10.0, 0.0},
    [SIM_OP_MEM_CREATE] = {"cuMemCreate", 20.0, 1.0},
    [SIM_OP_MEM_RELEASE] = {"cuMemRelease", 10.0, 0.5},
    [SIM_OP_MEM_MAP] = {"cuMemMap", 10.0, 0.1},
    [SIM_OP_MEM_UNMAP] = {"cuMemUnmap", 15.0, 0.5},
    [SIM_OP_MEM_SET_ACCESS] = {"cuMemSetAccess", 20.0, 0.5},
    [SIM_OP_HOST_ALLOC] = {"cuMemHostAlloc", 300.0, 120.0},
    [SIM_OP_HOST_FREE] = {"cuMemFreeHost", 100.0, 30.0},
    [SIM_OP_HOST_REGISTER] = {"cuMemHostRegister", 50.0, 120.0},
    [SIM_OP_HOST_UNREGISTER] = {"cuMemHostUnregister", 20.0, 30.0},
    [SIM_OP_MEMCPY_HTOD] = {"cuMemcpyHtoD", 8.0, US_PER_MIB_AT_GBPS(25)},
    [SIM_OP_MEMCPY_DTOH] = {"cuMemcpyDtoH", 8.0, US_PER_MIB_AT_GBPS(25)},
    [SIM_OP_MEMCPY_DTOD] = {"cuMemcpyDtoD", 5.0, US_PER_MIB_AT_GBPS(700)},
    [SIM_OP_MEMCPY_HTOH] = {"cuMemcpyHtoH", 5.0, US_PER_MIB_AT_GBPS(10)},
    [SIM_OP_MEMSET] = {"cuMemset", 4.0, US_PER_MIB_AT_GBPS(1300)},
    [SIM_OP_LAUNCH] = {"cuLaunchKernel", 5.0, 0.0},
    [SIM_OP_EVENT_RECORD] = {"cuEventRecord", 2.0, 0.0},
    [SIM_OP_EVENT_QUERY] = {"cuEventQuery", 1.0, 0.0},
    [SIM_OP_EVENT_SYNC] = {"cuEventSynchronize", 5.0, 0.0},
    [SIM_OP_STREAM_SYNC] = {"cuStreamSynchronize", 5.0, 0.0},
    [SIM_OP_CTX_SYNC] = {"cuCtxSynchronize", 10.0, 0.0},
    [SIM_OP_MEM_GET_INFO] = {"cuMemGetInfo", 2.0, 0.0},
};

/* The table in use: the base (the defaults, with the profile's measured costs over them), or
 * what GPUMEM_SIM_COSTS / sim_costs_set changed over the base. Guarded by the sim's lock
 * (sim_cost runs under it). */
static cost_entry cost_table[SIM_OP_COUNT];
static bool cost_table_ready;
static cost_entry base_costs[SIM_OP_COUNT];
static bool base_costs_ready; /* set once by the configuration (before any call is costed) */

static const cost_entry *costs_base(void)
{
    return base_costs_ready ? base_costs : default_costs;
}

static void costs_init_locked(void)
{
    if (cost_table_ready) return;
    memcpy(cost_table, costs_base(), sizeof cost_table);
    cost_table_ready = true;
}

const char *sim_op_name(int op)
{
    return op >= 0 && op < SIM_OP_COUNT ? default_costs[op].name : "?";
}

/* Syntax: comma-separated `call=FIXED` or `call=FIXED+PER_MIB` (microseconds; call as named by
 * sim_op_name, e.g. cuMemMap=12+0.2). Applied on top of `table`. Returns 0, or -1 with a reason. */
static int parse_costs(const char *spec, cost_entry *table, char *err, size_t errlen)
{
    char *copy = strdup(spec ? spec : "");
    if (!copy) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item && !rc; item = strtok_r(NULL, ",", &save)) {
        while (*item == ' ')
            item++;
        if (!*item) continue;
        char *eq = strchr(item, '=');
        if (!eq) {
            snprintf(err, errlen,
                     "item '%s' has no '=' (expected CALL=FIXED or CALL=FIXED+PER_MIB)", item);
            rc = -1;
            break;
        }
        *eq = '\0';
        int op = -1;
        for (int i = 0; i < SIM_OP_COUNT; i++)
            if (!strcmp(default_costs[i].name, item)) op = i;
        if (op < 0) {
            snprintf(err, errlen,
                     "unknown call '%s' (names as in the GPUMEM_SIM_STATS table, e.g. "
                     "cuMemAlloc, cuMemMap)",
                     item);
            rc = -1;
            break;
        }
        char *end;
        errno = 0;
        double fixed = strtod(eq + 1, &end), per = table[op].per_mib_us;
        if (errno || end == eq + 1 || !isfinite(fixed) || fixed < 0)
            rc = -1;
        else if (*end == '+') {
            char *p2 = end + 1;
            per = strtod(p2, &end);
            if (errno || end == p2 || !isfinite(per) || per < 0) rc = -1;
        }
        if (!rc && *end) rc = -1;
        if (rc) {
            snprintf(err, errlen,
                     "'%s=%s': expected FIXED or FIXED+PER_MIB, non-negative microseconds", item,
                     eq + 1);
            break;
        }
        table[op].fixed_us = fixed;
        table[op].per_mib_us = per;
    }
    free(copy);
    return rc;
}

CUresult sim_costs_set(const char *spec)
{
    sim_ensure_config();
    char err[256];
    sim_lock();
    costs_init_locked();
    cost_entry table[SIM_OP_COUNT];
    memcpy(table, spec && *spec ? cost_table : costs_base(), sizeof table);
    int rc = parse_costs(spec, table, err, sizeof err);
    if (!rc) memcpy(cost_table, table, sizeof table);
    sim_unlock();
    if (rc) {
        sim_note("sim_costs_set('%s'): %s; the costs are unchanged", spec, err);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult sim_cost_get(int op, double *fixed_us, double *per_mib_us)
{
    if (op < 0 || op >= SIM_OP_COUNT) return CUDA_ERROR_INVALID_VALUE;
    sim_ensure_config();
    sim_lock();
    costs_init_locked();
    if (fixed_us) *fixed_us = cost_table[op].fixed_us;
    if (per_mib_us) *per_mib_us = cost_table[op].per_mib_us;
    sim_unlock();
    return CUDA_SUCCESS;
}

void sim_cost(sim_op op, size_t bytes)
{
    costs_init_locked();
    double us = cost_table[op].fixed_us + cost_table[op].per_mib_us * ((double)bytes / 1048576.0);
    sim.stats.op[op].calls++;
    sim.stats.op[op].bytes += bytes;
    sim.stats.op[op].us += us;
    sim.stats.total_us += us;
    sim.clock_us += us;
}

void sim_cost_wait(sim_op op, double us)
{
    if (us <= 0) return;
    sim.stats.op[op].us += us;
    sim.stats.total_us += us;
    sim.clock_us += us;
}

/* ---- fork ---------------------------------------------------------------------------------- */

/* The lock is held across fork so the child never inherits it mid-update. The child gets a
 * fresh memfd for the handles it creates: with the inherited one, parent and child would hand out
 * the same file offsets and their new memory would alias. Handles from before the fork keep the
 * parent's file (their mappings are MAP_SHARED anyway) and are never punched by the child. */
static void atfork_prepare(void)
{
    sim_lock();
}
static void atfork_parent(void)
{
    sim_unlock();
}
static void atfork_child(void)
{
    /* The stream workers do not exist in the child: the next work issued starts new ones, which
     * pick up whatever was queued. */
    pthread_cond_init(&sim.cond, NULL);
    for (size_t i = 0; i < sim.nallstreams; i++) {
        sim_stream *st = sim.allstreams[i];
        st->has_worker = false;
        st->stop = false;
    }
    if (sim.memfd >= 0) {
        for (size_t i = 0; i < sim.nhandle_buckets; i++)
            for (sim_handle *h = sim.handle_buckets[i]; h; h = h->hnext)
                h->inherited = true;
        int fd = memfd_create("gpumem-sim-device", MFD_CLOEXEC);
        if (fd >= 0) {
            sim.memfd = fd; /* the parent's descriptor stays open: the inherited handles use it */
            sim.next_file_off = 0;
        } else {
            sim_note("memfd_create failed in a forked child (%s); new device memory is unbacked",
                     strerror(errno));
            sim.memfd = -1;
            sim.virtual_backing = true;
        }
    }
    sim_unlock();
}

/* ---- configuration from the environment ----------------------------------------------- */

static void read_config(void)
{
    const char *v;
    sim.profile = sim_profile_find(NULL);
    if ((v = getenv("GPUMEM_SIM_PROFILE")) && *v) {
        const sim_profile *p = sim_profile_find(v);
        if (p)
            sim.profile = p;
        else
            sim_note("GPUMEM_SIM_PROFILE='%s' is not a known profile (%s); using the default", v,
                     sim_profile_keys());
    }
    size_t capacity = sim.profile->memory;
    if ((v = getenv("GPUMEM_SIM_MEMORY")) && *v) {
        size_t sz;
        if (sim_parse_size(v, &sz) || sz < SIM_GRANULARITY)
            sim_note("GPUMEM_SIM_MEMORY='%s' is not a size of at least 2M, e.g. 16G or 80G "
                     "(" SIM_SIZE_RULE "); using the profile's %zu bytes",
                     v, capacity);
        else
            capacity = sz;
    }
    if ((v = getenv("GPUMEM_SIM_KERNELS")) && *v) {
        if (!strcmp(v, "strict"))
            sim.kernels_strict = true;
        else if (strcmp(v, "skip"))
            sim_note("GPUMEM_SIM_KERNELS='%s' is not 'skip' (kernels with no host body are "
                     "skipped and counted) or 'strict' (they are errors); using skip",
                     v);
    }
    sim.ndevices = 1;
    if ((v = getenv("GPUMEM_SIM_DEVICES")) && *v) {
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (errno || end == v || *end || n < 1 || n > SIM_MAX_DEVICES)
            sim_note("GPUMEM_SIM_DEVICES='%s' is not a number of devices from 1 to %d; using 1", v,
                     SIM_MAX_DEVICES);
        else
            sim.ndevices = (int)n;
    }
    /* The default context size is a figure measured on real drivers (README); devices too small
     * to hold it comfortably (test-sized ones) get none unless the variable asks. */
    size_t ctx_bytes = capacity >= SIM_CONTEXT_MIN_CAPACITY ? SIM_DEFAULT_CONTEXT_BYTES : 0;
    if ((v = getenv("GPUMEM_SIM_CONTEXT_BYTES")) && *v) {
        size_t sz;
        if (sim_parse_size(v, &sz) || sz >= capacity)
            sim_note(
                "GPUMEM_SIM_CONTEXT_BYTES='%s' is not a size below the device memory, e.g. 0 or "
                "300M (" SIM_SIZE_RULE "); using %zu bytes",
                v, ctx_bytes);
        else
            ctx_bytes = sz;
    }
    for (int d = 0; d < sim.ndevices; d++) {
        sim_device *dv = &sim.dev[d];
        dv->capacity = capacity;
        dv->ctx_bytes = ctx_bytes;
        dv->primary.magic = SIM_MAGIC_CTX;
        dv->primary.id = (uint64_t)d + 1;
        dv->primary.dev = d;
        dv->pool.magic = 0x504f4f4cu;
        dv->pool.dev = d;
        dv->current_pool = &dv->pool;
    }
    if ((v = getenv("GPUMEM_SIM_ASYNC")) && *v) {
        if (!strcmp(v, "1"))
            sim.async = true;
        else if (strcmp(v, "0"))
            sim_note("GPUMEM_SIM_ASYNC='%s' is not 1 (streams run on worker threads) or 0; "
                     "using 0",
                     v);
    }
    if ((v = getenv("GPUMEM_SIM_BACKING")) && *v) {
        if (!strcmp(v, "virtual"))
            sim.virtual_backing = true;
        else if (strcmp(v, "memory") && strcmp(v, "real"))
            sim_note("GPUMEM_SIM_BACKING='%s' is not 'virtual' or 'memory'; using memory", v);
    }
    if ((v = getenv("GPUMEM_SIM_EVENT_DELAY")) && *v) {
        /* N: queries; Nus / Nms: simulated time after the record */
        char *end;
        errno = 0;
        double n = strtod(v, &end);
        double scale = 0;
        if (!strcmp(end, ""))
            scale = 0;
        else if (!strcmp(end, "us"))
            scale = 1;
        else if (!strcmp(end, "ms"))
            scale = 1000;
        else
            scale = -1;
        if (errno || end == v || !isfinite(n) || n < 0 || scale < 0 || n > 1e9 ||
            (scale == 0 && n != (double)(unsigned)n))
            sim_note(
                "GPUMEM_SIM_EVENT_DELAY='%s' is not a number of queries (e.g. 3) or a simulated "
                "time (e.g. 500us, 2ms); ignored",
                v);
        else if (scale == 0)
            sim.event_delay = (unsigned)n;
        else
            sim.event_delay_us = n * scale;
    }
    if ((v = getenv("GPUMEM_SIM_FAULTS")) && *v) {
        char err[256];
        sim_fault_plan plan;
        if (parse_faults(v, &plan, err, sizeof err))
            sim_note("GPUMEM_SIM_FAULTS='%s': %s; the variable is ignored "
                     "(syntax: alloc:N,map:N,oom_at:SIZE)",
                     v, err);
        else
            sim.faults = plan;
    }
    memcpy(base_costs, default_costs, sizeof base_costs);
    if (sim.profile->costs) {
        char err[256];
        if (parse_costs(sim.profile->costs, base_costs, err, sizeof err)) { /* a bad table here */
            sim_note("profile %s: its costs: %s; the default costs are used", sim.profile->key,
                     err);
            memcpy(base_costs, default_costs, sizeof base_costs);
        }
    }
    base_costs_ready = true;
    if ((v = getenv("GPUMEM_SIM_COSTS")) && *v) {
        char err[256];
        cost_entry table[SIM_OP_COUNT];
        memcpy(table, base_costs, sizeof table);
        if (parse_costs(v, table, err, sizeof err))
            sim_note("GPUMEM_SIM_COSTS='%s': %s; the %s costs are used", v, err,
                     sim.profile->costs ? "profile's" : "default");
        else {
            memcpy(cost_table, table, sizeof table);
            cost_table_ready = true;
        }
    }
    sim.stats.capacity = sim.dev[0].capacity;
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    if (!sim.virtual_backing) {
        sim.memfd = memfd_create("gpumem-sim-device", MFD_CLOEXEC);
        if (sim.memfd < 0) {
            sim_note("memfd_create failed (%s); device memory is unbacked (as with "
                     "GPUMEM_SIM_BACKING=virtual)",
                     strerror(errno));
            sim.virtual_backing = true;
        }
    }
}

void sim_ensure_config(void)
{
    pthread_once(&config_once, read_config);
}

/* ---- capacity and faults ----------------------------------------------------------------- */

size_t sim_dev_free(int dev)
{
    sim_device *d = &sim.dev[dev];
    size_t taken = d->used + (d->primary.refs > 0 ? d->ctx_bytes : 0);
    return taken < d->capacity ? d->capacity - taken : 0;
}

CUresult sim_charge(int dev, size_t bytes, bool is_alloc)
{
    sim_device *d = &sim.dev[dev];
    if (is_alloc) {
        uint64_t n = ++sim.n_allocs;
        for (size_t i = 0; i < sim.faults.nalloc; i++)
            if (sim.faults.alloc_at[i] == n) {
                sim.faults_injected++;
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
    }
    if (sim.faults.oom_at && d->used + bytes > sim.faults.oom_at) {
        sim.faults_injected++;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (bytes > sim_dev_free(dev)) return CUDA_ERROR_OUT_OF_MEMORY;
    d->used += bytes;
    if (d->used > d->peak) d->peak = d->used;
    return CUDA_SUCCESS;
}

void sim_uncharge(int dev, size_t bytes)
{
    sim_device *d = &sim.dev[dev];
    d->used -= bytes < d->used ? bytes : d->used;
}

bool sim_fault_map(void)
{
    uint64_t n = ++sim.n_maps;
    for (size_t i = 0; i < sim.faults.nmap; i++)
        if (sim.faults.map_at[i] == n) {
            sim.faults_injected++;
            return true;
        }
    return false;
}

/* ---- not implemented --------------------------------------------------------------------- */

/* One call of something the virtual GPU does not model: counted by name (GPUMEM_SIM_STATS), and
 * named on stderr the first time. The runtime and the library stand-ins report theirs here too,
 * so one table holds them all. */
void sim_unsupported_note(const char *name, const char *returns)
{
    if (!name) return;
    sim_ensure_config();
    sim_lock();
    size_t i = 0;
    while (i < sim.nnoted && strcmp(sim.noted[i], name))
        i++;
    bool first = i == sim.nnoted;
    if (first) {
        if (sim.nnoted == sim.capnoted) {
            size_t cap = sim.capnoted ? sim.capnoted * 2 : 16;
            char **v = realloc(sim.noted, cap * sizeof *v);
            if (v) sim.noted = v;
            uint64_t *c = realloc(sim.noted_calls, cap * sizeof *c);
            if (c) sim.noted_calls = c;
            if (v && c) sim.capnoted = cap;
        }
        char *copy = sim.nnoted < sim.capnoted ? strdup(name) : NULL;
        if (copy) {
            sim.noted[sim.nnoted] = copy;
            sim.noted_calls[sim.nnoted++] = 0;
        }
    }
    if (i < sim.nnoted) sim.noted_calls[i]++;
    sim_unlock();
    if (first)
        sim_note("%s is not implemented by the virtual GPU; it returns %s", name,
                 returns ? returns : "an error");
}

uint64_t sim_unsupported_calls(const char *name)
{
    sim_ensure_config();
    uint64_t n = 0;
    sim_lock();
    for (size_t i = 0; i < sim.nnoted; i++)
        if (!name || !strcmp(sim.noted[i], name)) n += sim.noted_calls[i];
    sim_unlock();
    return n;
}

CUresult sim_unsupported(const char *name)
{
    sim_unsupported_note(name, "CUDA_ERROR_NOT_SUPPORTED");
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- sorted pointer sets ----------------------------------------------------------------- */

static size_t set_lower(void *const *v, size_t n, const void *p)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)v[mid] < (uintptr_t)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool sim_pset_add(void ***v, size_t *n, size_t *cap, void *p)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        void **nv = realloc(*v, nc * sizeof *nv);
        if (!nv) return false;
        *v = nv;
        *cap = nc;
    }
    size_t i = set_lower(*v, *n, p);
    memmove(*v + i + 1, *v + i, (*n - i) * sizeof **v);
    (*v)[i] = p;
    (*n)++;
    return true;
}

bool sim_pset_has(void *const *v, size_t n, const void *p)
{
    size_t i = set_lower(v, n, p);
    return i < n && v[i] == p;
}

void sim_pset_del(void **v, size_t *n, const void *p)
{
    size_t i = set_lower(v, *n, p);
    if (i < *n && v[i] == p) {
        memmove(v + i, v + i + 1, (*n - i - 1) * sizeof *v);
        (*n)--;
    }
}

/* ---- sim.h: stats and run-time configuration ---------------------------------------------- */

void sim_stats_get(sim_stats *out)
{
    if (!out) return;
    sim_ensure_config();
    sim_lock();
    *out = sim.stats;
    out->capacity = sim.dev[0].capacity;
    out->used = sim.dev[0].used;
    out->peak = sim.dev[0].peak;
    out->faults_injected = sim.faults_injected;
    sim_unlock();
}

void sim_stats_reset(void)
{
    sim_ensure_config();
    sim_lock();
    memset(&sim.stats, 0, sizeof sim.stats);
    for (int d = 0; d < sim.ndevices; d++)
        sim.dev[d].peak = sim.dev[d].used;
    sim_unlock();
}

void sim_stats_print(void *fp)
{
    FILE *f = fp ? fp : stderr;
    sim_stats s;
    sim_stats_get(&s);
    fprintf(f,
            "gpumem sim: simulated driver time %.1f us (capacity %zu bytes, peak %zu, in use %zu,"
            " %llu faults injected)\n",
            s.total_us, s.capacity, s.peak, s.used, (unsigned long long)s.faults_injected);
    fprintf(f, "gpumem sim: %-22s %10s %16s %14s\n", "call", "count", "bytes", "sim_us");
    for (int i = 0; i < SIM_OP_COUNT; i++) {
        if (!s.op[i].calls) continue;
        fprintf(f, "gpumem sim: %-22s %10llu %16llu %14.1f\n", sim_op_name(i),
                (unsigned long long)s.op[i].calls, (unsigned long long)s.op[i].bytes, s.op[i].us);
    }
    sim_kernels_print(f);
    sim_lock();
    for (size_t i = 0; i < sim.nnoted; i++)
        fprintf(f, "gpumem sim: not modelled: %s, %llu call%s\n", sim.noted[i],
                (unsigned long long)sim.noted_calls[i], sim.noted_calls[i] == 1 ? "" : "s");
    sim_unlock();
}

void sim_set_event_delay(unsigned n)
{
    sim_ensure_config();
    sim_lock();
    sim.event_delay = n;
    sim_unlock();
}

void sim_set_event_delay_us(double us)
{
    sim_ensure_config();
    sim_lock();
    sim.event_delay_us = isfinite(us) && us > 0 ? us : 0;
    sim_unlock();
}

double sim_clock_us(void)
{
    sim_ensure_config();
    sim_lock();
    double t = sim.clock_us;
    sim_unlock();
    return t;
}

CUresult sim_faults_set(const char *spec)
{
    sim_ensure_config();
    sim_fault_plan plan;
    char err[256];
    if (parse_faults(spec, &plan, err, sizeof err)) {
        sim_note("sim_faults_set('%s'): %s; the plan is unchanged", spec, err);
        return CUDA_ERROR_INVALID_VALUE;
    }
    sim_lock();
    sim.faults = plan;
    sim.n_allocs = 0;
    sim.n_maps = 0;
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult sim_set_capacity(size_t bytes)
{
    sim_ensure_config();
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    for (int d = 0; d < sim.ndevices; d++)
        if (bytes < SIM_GRANULARITY || bytes < sim.dev[d].used + sim.dev[d].ctx_bytes)
            rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        for (int d = 0; d < sim.ndevices; d++)
            sim.dev[d].capacity = bytes;
        sim.stats.capacity = bytes;
    }
    sim_unlock();
    return rc;
}

CUresult sim_set_context_bytes(size_t bytes)
{
    sim_ensure_config();
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    for (int d = 0; d < sim.ndevices; d++)
        if (bytes > sim.dev[d].capacity - sim.dev[d].used) rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        for (int d = 0; d < sim.ndevices; d++)
            sim.dev[d].ctx_bytes = bytes;
    sim_unlock();
    return rc;
}

CUresult sim_device_info(int dev, sim_device_accounting *out)
{
    sim_ensure_config();
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= sim.ndevices) return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    sim_device *d = &sim.dev[dev];
    out->capacity = d->capacity;
    out->context_bytes = d->primary.refs > 0 ? d->ctx_bytes : 0;
    out->context_bytes_configured = d->ctx_bytes;
    out->allocated = d->used;
    out->peak = d->peak;
    out->free = sim_dev_free(dev);
    sim_unlock();
    return CUDA_SUCCESS;
}

int sim_device_count(void)
{
    sim_ensure_config();
    return sim.ndevices;
}

int sim_async_enabled(void)
{
    sim_ensure_config();
    return sim.async ? 1 : 0;
}

int sim_backing_is_virtual(void)
{
    sim_ensure_config();
    return sim.virtual_backing ? 1 : 0;
}

/* GPUMEM_SIM_STATS=1: the table goes to stderr when the program exits (or the library is
 * unloaded), after everything else the program printed. */
__attribute__((destructor)) static void sim_print_stats_at_exit(void)
{
    const char *v = getenv("GPUMEM_SIM_STATS");
    if (!v || !*v || !strcmp(v, "0")) return;
    /* Another thread may still be inside the driver while the process exits: never wait for the
     * lock here (a hang at exit is worse than a slightly stale counter). */
    bool locked = false;
    for (int i = 0; i < 100 && !locked; i++) {
        locked = pthread_mutex_trylock(&sim.lock) == 0;
        if (!locked) usleep(1000);
    }
    if (locked)
        sim_unlock();
    else {
        fprintf(stderr, "gpumem sim: the driver is still busy at exit; counters not printed\n");
        return;
    }
    sim_stats_print(stderr);
}
