/* sim_rt_kernels.c — the runtime's table of the kernels nvcc-compiled code registers.
 *
 * At load time, every fat binary of a program or library built by nvcc registers its kernels:
 * __cudaRegisterFunction(module, host_stub, device_name, ...). A launch names the kernel by its
 * host stub's address (cudaLaunchKernel(stub, ...), __cudaGetKernel(&k, stub)), so the table
 * maps a stub address to its device name and, once the kernel is first used, to the driver's
 * CUfunction for it (sim_register_device_kernel: a kernel with device code only, which the
 * virtual GPU skips and counts). PyTorch registers tens of thousands of kernels and launches a
 * few hundred of them, so registering is a hash insert and the driver hears only of the kernels
 * that are used.
 *
 * The fat binary is kept too: a kernel's parameter layout is read from it at the kernel's first
 * use (sim_fatbin.c), once per module, and given to the driver with the function, as the real
 * driver gives it to cuFuncGetParamInfo.
 *
 * Names are not copied: they are string literals of the registering library, which unregisters
 * its module (__cudaUnregisterFatBinary) before it is unloaded; unregistering removes the
 * module's entries. One mutex guards the table.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_rt_kernels.h"

struct rt_module {
    rt_kernel *kernels;    /* this module's entries, through next_in_module */
    const void *fatbin;    /* what __cudaRegisterFatBinary received (the registrant's data) */
    int layouts_read;      /* 0 not yet, 1 read (layouts may still be none) */
    sim_fatbin_kernel *layouts; /* sorted by name */
    size_t nlayouts;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static rt_kernel **buckets;
static size_t nbuckets, nentries;

static size_t bucket_of(const void *stub, size_t n)
{
    uint64_t x = (uint64_t)(uintptr_t)stub;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)(x & (n - 1));
}

/* Doubles the bucket array when the table is fuller than one entry per bucket (lock held). */
static void grow(void)
{
    size_t n = nbuckets ? nbuckets * 2 : 4096;
    rt_kernel **b = calloc(n, sizeof *b);
    if (!b) return; /* keep the longer chains */
    for (size_t i = 0; i < nbuckets; i++)
        for (rt_kernel *e = buckets[i], *next; e; e = next) {
            next = e->next_in_bucket;
            size_t j = bucket_of(e->stub, n);
            e->next_in_bucket = b[j];
            b[j] = e;
        }
    free(buckets);
    buckets = b;
    nbuckets = n;
}

rt_module *rt_module_new(const void *fatbin)
{
    rt_module *m = calloc(1, sizeof(rt_module));
    if (m) m->fatbin = fatbin;
    return m;
}

static int cmp_layout(const void *a, const void *b)
{
    return strcmp(((const sim_fatbin_kernel *)a)->name, ((const sim_fatbin_kernel *)b)->name);
}

const sim_fatbin_kernel *rt_kernel_layout(rt_kernel *e)
{
    rt_module *m = e->module;
    pthread_mutex_lock(&lock);
    if (!m->layouts_read) {
        /* once per module, at its first kernel's first use: a library registers many fat
         * binaries and uses few */
        m->layouts_read = 1;
        if (sim_fatbin_layouts(m->fatbin, &m->layouts, &m->nlayouts) == 0 && m->nlayouts)
            qsort(m->layouts, m->nlayouts, sizeof *m->layouts, cmp_layout);
    }
    sim_fatbin_kernel key = {.name = (char *)e->name};
    const sim_fatbin_kernel *k =
        m->nlayouts ? bsearch(&key, m->layouts, m->nlayouts, sizeof *m->layouts, cmp_layout) : NULL;
    pthread_mutex_unlock(&lock);
    return k;
}

void rt_kernel_add(rt_module *m, const void *stub, const char *name)
{
    if (!m || !stub || !name) return;
    rt_kernel *e = calloc(1, sizeof *e);
    if (!e) return; /* the kernel stays unknown: its launches report an invalid function */
    e->stub = stub;
    e->name = name;
    e->module = m;
    pthread_mutex_lock(&lock);
    if (nentries >= nbuckets) grow();
    if (!nbuckets) {
        pthread_mutex_unlock(&lock);
        free(e);
        return;
    }
    size_t i = bucket_of(stub, nbuckets);
    e->next_in_bucket = buckets[i];
    buckets[i] = e;
    e->next_in_module = m->kernels;
    m->kernels = e;
    nentries++;
    pthread_mutex_unlock(&lock);
}

rt_kernel *rt_kernel_find(const void *stub)
{
    rt_kernel *e = NULL;
    pthread_mutex_lock(&lock);
    if (nbuckets)
        for (e = buckets[bucket_of(stub, nbuckets)]; e && e->stub != stub; e = e->next_in_bucket)
            ;
    pthread_mutex_unlock(&lock);
    return e;
}

void rt_module_free(rt_module *m)
{
    if (!m) return;
    pthread_mutex_lock(&lock);
    for (rt_kernel *e = m->kernels; e; e = e->next_in_module) {
        rt_kernel **p = &buckets[bucket_of(e->stub, nbuckets)];
        while (*p && *p != e)
            p = &(*p)->next_in_bucket;
        if (*p) *p = e->next_in_bucket;
        nentries--;
    }
    pthread_mutex_unlock(&lock);
    for (rt_kernel *e = m->kernels, *next; e; e = next) {
        next = e->next_in_module;
        free(e);
    }
    sim_fatbin_layouts_free(m->layouts, m->nlayouts);
    free(m);
}
