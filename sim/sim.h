/* sim.h — the virtual GPU's own API (sim-only; not part of CUDA).
 *
 * Exported by build/sim/libcuda.so.1 next to the CUDA driver entry points. Programs either link
 * build/sim/libcuda.so directly or look these names up with dlsym(RTLD_DEFAULT, ...) so that
 * they still run on a real driver (where the names are absent).
 *
 * Everything here is thread-safe. Semantics, environment variables and the cost model are
 * documented in sim/README.md.
 */
#ifndef GPUMEM_SIM_H
#define GPUMEM_SIM_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- host kernels ------------------------------------------------------------------------ */

/* A host kernel receives the caller's real kernelParams array: kernel_params[i] points at
 * parameter i (as with a GPU kernel launched through cuLaunchKernel). */
typedef void (*sim_host_kernel_fn)(void **kernel_params);

/* Registers fn as a kernel named `name` with `nparams` parameters of the given sizes and
 * returns a CUfunction usable with cuLaunchKernel, cuFuncGetParamInfo and cuFuncGetName.
 * The parameter layout uses natural alignment: each parameter is aligned to the largest power
 * of two that divides its size, capped at 8 (so a struct of three floats is 4-aligned).
 * Registering the same name and function again returns the existing CUfunction.
 * Errors: CUDA_ERROR_INVALID_VALUE for a NULL name/fn/out, nparams > 0 with NULL sizes, a zero
 * parameter size, or more than 256 parameters. */
CUresult sim_register_kernel(const char *name, sim_host_kernel_fn fn, unsigned nparams,
                             const size_t *param_sizes, CUfunction *out);

/* ---- kernels with device code only ------------------------------------------------------ */

/* Registers a kernel that has no host body (a program's real device code, which the virtual GPU
 * cannot run) and returns a new CUfunction for it: a distinct handle per call. Its launches are
 * checked like any other (grid, block, shared memory, stream), counted per name, and skipped:
 * they do nothing, so device memory keeps what it held. The runtime calls this for the kernels
 * nvcc-compiled code registers (__cudaRegisterFunction). Errors: CUDA_ERROR_INVALID_VALUE for a
 * NULL name or out; CUDA_ERROR_NOT_FOUND under GPUMEM_SIM_KERNELS=strict (no host body, no
 * kernel: the runtime then reports cudaErrorInvalidDeviceFunction). */
CUresult sim_register_device_kernel(const char *name, CUfunction *out);
/* The same with the kernel's parameter layout (nparams >= 0: sizes[i] and offsets[i] in bytes,
 * what cuFuncGetParamInfo then answers; the launch is still skipped). nparams < 0: unknown,
 * as sim_register_device_kernel, and cuFuncGetParamInfo answers CUDA_ERROR_NOT_SUPPORTED. */
CUresult sim_register_device_kernel_params(const char *name, int nparams, const size_t *sizes,
                                           const size_t *offsets, CUfunction *out);
/* Skipped launches of the kernels named `name` (all of them for NULL). */
uint64_t sim_skipped_launches(const char *name);

/* ---- what is not modelled ---------------------------------------------------------------- */

/* Counts one call of `name`, something the virtual GPU (or a library stand-in) does not model,
 * and names it once on stderr: "gpumem sim: <name> is not implemented by the virtual GPU; it
 * returns <returns>". The counts are in the GPUMEM_SIM_STATS table. */
void sim_unsupported_note(const char *name, const char *returns);
/* Calls counted for `name` (all names for NULL). */
uint64_t sim_unsupported_calls(const char *name);

/* ---- simulated-cost counters ------------------------------------------------------------- */

/* One counter per kind of driver call. Each call adds its simulated cost (see README). */
typedef enum sim_op {
    SIM_OP_MEM_ALLOC,         /* cuMemAlloc_v2 (cudaMalloc) */
    SIM_OP_MEM_FREE,          /* cuMemFree_v2 (cudaFree), includes the implied device sync */
    SIM_OP_MEM_ALLOC_ASYNC,   /* cuMemAllocAsync / cuMemAllocFromPoolAsync */
    SIM_OP_MEM_FREE_ASYNC,    /* cuMemFreeAsync */
    SIM_OP_MEM_ALLOC_MANAGED, /* cuMemAllocManaged */
    SIM_OP_ADDRESS_RESERVE,   /* cuMemAddressReserve */
    SIM_OP_ADDRESS_FREE,      /* cuMemAddressFree */
    SIM_OP_MEM_CREATE,        /* cuMemCreate */
    SIM_OP_MEM_RELEASE,       /* cuMemRelease */
    SIM_OP_MEM_MAP,           /* cuMemMap */
    SIM_OP_MEM_UNMAP,         /* cuMemUnmap */
    SIM_OP_MEM_SET_ACCESS,    /* cuMemSetAccess */
    SIM_OP_HOST_ALLOC,        /* cuMemHostAlloc / cuMemAllocHost_v2 */
    SIM_OP_HOST_FREE,         /* cuMemFreeHost */
    SIM_OP_HOST_REGISTER,     /* cuMemHostRegister_v2 */
    SIM_OP_HOST_UNREGISTER,   /* cuMemHostUnregister */
    SIM_OP_MEMCPY_HTOD,       /* host -> device copies (sync and async) */
    SIM_OP_MEMCPY_DTOH,       /* device -> host */
    SIM_OP_MEMCPY_DTOD,       /* device -> device */
    SIM_OP_MEMCPY_HTOH,       /* host -> host through cuMemcpy */
    SIM_OP_MEMSET,            /* cuMemsetD8/16/32 (sync and async) */
    SIM_OP_LAUNCH,            /* cuLaunchKernel, cuLaunchHostFunc */
    SIM_OP_EVENT_RECORD,      /* cuEventRecord */
    SIM_OP_EVENT_QUERY,       /* cuEventQuery */
    SIM_OP_EVENT_SYNC,        /* cuEventSynchronize */
    SIM_OP_STREAM_SYNC,       /* cuStreamSynchronize */
    SIM_OP_CTX_SYNC,          /* cuCtxSynchronize */
    SIM_OP_MEM_GET_INFO,      /* cuMemGetInfo_v2 */
    SIM_OP_COUNT
} sim_op;

typedef struct sim_op_stats {
    uint64_t calls; /* calls made (successful or not) */
    uint64_t bytes; /* bytes the calls asked for (size argument), where meaningful */
    double us;      /* simulated microseconds */
} sim_op_stats;

typedef struct sim_stats {
    sim_op_stats op[SIM_OP_COUNT];
    double total_us;          /* sum of op[].us */
    size_t capacity;          /* device 0's memory in bytes (GPUMEM_SIM_MEMORY) */
    size_t used;              /* device 0's bytes charged now (cuMemAlloc + cuMemCreate) */
    size_t peak;              /* highest `used` since start or the last sim_stats_reset */
    uint64_t faults_injected; /* failures injected through GPUMEM_SIM_FAULTS / sim_faults_set */
} sim_stats;

/* Copies the counters. Never fails for a non-NULL out. */
void sim_stats_get(sim_stats *out);
/* Zeroes the call counters and restarts the peak at the current usage. */
void sim_stats_reset(void);
/* "cuMemAlloc", "cuMemMap", ... for an op; "?" when out of range. */
const char *sim_op_name(int op);
/* Writes the table that GPUMEM_SIM_STATS=1 prints at exit to f (a FILE *; void * keeps
 * <stdio.h> out of this header). */
void sim_stats_print(void *f);

/* ---- configuration at run time (tests) --------------------------------------------------- */

/* Events complete only after `n` queries (cuEventQuery / cuStreamQuery report NOT_READY until
 * then); synchronizing on the event, its stream or the context completes them at once.
 * Applies to events recorded after the call. Same as GPUMEM_SIM_EVENT_DELAY=n. */
void sim_set_event_delay(unsigned n);
/* Timed delayed completion: an event recorded after the call completes once the simulated
 * driver clock (sim_clock_us: the sum of every call's simulated cost, never reset) has advanced
 * `us` past its record; each query costs simulated time, so polling terminates. Synchronizing
 * completes it at once and charges the remaining time as waiting. 0 turns it off. Same as
 * GPUMEM_SIM_EVENT_DELAY=<us>us. Combines with sim_set_event_delay (both must be satisfied). */
void sim_set_event_delay_us(double us);
/* The simulated driver clock in µs (monotonic; sim_stats_reset does not reset it). */
double sim_clock_us(void);
/* Replaces the fault-injection plan (syntax of GPUMEM_SIM_FAULTS, see README) and restarts the
 * counters it refers to. NULL or "" clears it. Returns CUDA_ERROR_INVALID_VALUE (and keeps the
 * previous plan) for bad syntax, with the reason on stderr. */
CUresult sim_faults_set(const char *spec);
/* Changes the cost model: comma-separated `call=FIXED` or `call=FIXED+PER_MIB` (simulated µs per
 * call and per MiB of its size; call as named by sim_op_name, e.g. "cuMemMap=12+0.2"), applied
 * on top of the current table; NULL or "" restores the defaults. Same syntax as
 * GPUMEM_SIM_COSTS. CUDA_ERROR_INVALID_VALUE (costs unchanged) for bad syntax. */
CUresult sim_costs_set(const char *spec);
/* The cost of one op in use now. CUDA_ERROR_INVALID_VALUE for an op out of range. */
CUresult sim_cost_get(int op, double *fixed_us, double *per_mib_us);
/* Sets every device's capacity; CUDA_ERROR_INVALID_VALUE if below what is in use now plus the
 * context size (sim_set_context_bytes). */
CUresult sim_set_capacity(size_t bytes);
/* 1 when GPUMEM_SIM_BACKING=virtual (device memory has addresses but no storage: copies,
 * memsets into it are skipped and touching it faults), else 0. */
int sim_backing_is_virtual(void);

/* ---- devices and execution ---------------------------------------------------------------- */

/* The exact accounting of one virtual device: cuMemGetInfo's free is
 * capacity - context_bytes - allocated (never below 0). */
typedef struct sim_device_accounting {
    size_t capacity;                 /* GPUMEM_SIM_MEMORY */
    size_t context_bytes;            /* charged now for the primary context (0 while inactive) */
    size_t context_bytes_configured; /* GPUMEM_SIM_CONTEXT_BYTES */
    size_t allocated;                /* cuMemAlloc* (512 B rounded) + cuMemCreate bytes */
    size_t peak;                     /* highest `allocated` since start / sim_stats_reset */
    size_t free;                     /* what cuMemGetInfo reports as free */
} sim_device_accounting;
/* Sets the device memory every primary context takes while active (all devices), as
 * GPUMEM_SIM_CONTEXT_BYTES; CUDA_ERROR_INVALID_VALUE if it does not fit beside what is in use. */
CUresult sim_set_context_bytes(size_t bytes);
/* CUDA_ERROR_INVALID_DEVICE for an ordinal out of range, INVALID_VALUE for a NULL out. */
CUresult sim_device_info(int dev, sim_device_accounting *out);
/* GPUMEM_SIM_DEVICES (1 by default). */
int sim_device_count(void);
/* 1 when GPUMEM_SIM_ASYNC=1: each stream's work is queued and run by its own worker thread. */
int sim_async_enabled(void);

/* ---- registered host memory (cuMemHostRegister) ------------------------------------------ */

/* Number of ranges registered with cuMemHostRegister_v2 and not yet unregistered. */
size_t sim_host_registered_count(void);
/* 1 if p lies in a registered range (its base and size through the optional outputs), else 0. */
int sim_host_registered_find(const void *p, void **base, size_t *size);

/* ---- pending work ------------------------------------------------------------------------ */

/* Number of recorded events that have not completed yet (delayed-completion mode). */
size_t sim_events_pending(void);

#ifdef __cplusplus
}
#endif
#endif /* GPUMEM_SIM_H */
