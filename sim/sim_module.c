/* sim_module.c — modules: device code loaded through the driver (cuModuleLoad*).
 *
 * Triton (and so torch.compile's inductor) compiles its kernels to cubins at run time and loads
 * them with cuModuleLoadData, finds each with cuModuleGetFunction and launches it with
 * cuLaunchKernel(Ex). The virtual GPU cannot run that device code, but it can do what the
 * driver does with the image short of running it: find the kernels it holds and their
 * parameter layouts (sim_fatbin.c reads the ELF's .nv.info sections, as for the runtime's fat
 * binaries). Each kernel becomes a function with no host body, exactly as a registered nvcc
 * kernel (sim_func.c): launches are checked, counted under the kernel's name and skipped, and
 * cuFuncGetParamInfo answers from the layout so gpumem reads the launch's pointer arguments.
 *
 * One function per (module, name): cuModuleGetFunction of the same name returns the same handle,
 * another module's kernel of that name is another handle. cuModuleUnload retires the module's
 * functions: they stay in the kernel set (their launches keep counting in GPUMEM_SIM_STATS and
 * a handle is never handed out twice) but are no longer valid (CUDA_ERROR_INVALID_HANDLE).
 *
 * Images read: an ELF cubin, or a fat binary holding one (raw or zstd-compressed). A PTX image
 * needs the JIT compiler, which the virtual GPU does not have: CUDA_ERROR_NOT_SUPPORTED, noted.
 * Anything else is CUDA_ERROR_INVALID_IMAGE, as on a GPU. The cubin's architecture is not
 * checked against the device profile (a GPU says CUDA_ERROR_NO_BINARY_FOR_GPU). A function's
 * registers and static shared memory are its cubin's (sim_fatbin.c): cuFuncGetAttribute and
 * occupancy answer with them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_fatbin.h"
#include "sim/sim_internal.h"

#define SIM_MAGIC_MODULE 0x4d4f4455u
#define FATBIN_MAGIC 0xba55ed50u
#define WRAPPER_MAGIC 0x466243b1u
#define MAX_IMAGE ((size_t)1 << 30)

struct CUmod_st {
    uint32_t magic;
    sim_fatbin_kernel *kernels; /* what the image holds, in its order */
    size_t nkernels;
    sim_kernel **funcs; /* funcs[i]: kernels[i]'s function, made at its first lookup */
};

/* Modules live in the sim's pointer sets like streams and events, under the sim's lock. */
static void **modules;
static size_t nmodules, capmodules;

static bool module_valid(CUmodule m)
{
    return m && sim_pset_has(modules, nmodules, m) && m->magic == SIM_MAGIC_MODULE;
}

/* The same under the sim's lock: INVALID_HANDLE unless m is a loaded module. */
static CUresult module_check(CUmodule m)
{
    sim_lock();
    bool valid = module_valid(m);
    sim_unlock();
    return valid ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static uint32_t rd32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The bytes the image at `image` takes, judged by its kind; 0: a kind the sim does not read. */
static size_t image_size(const void *image, bool *ptx)
{
    const unsigned char *p = image;
    *ptx = false;
    if (!memcmp(p, "\177ELF", 4)) return sim_elf_extent(p);
    if (rd32(p) == FATBIN_MAGIC) {
        uint16_t hsz;
        uint64_t total;
        memcpy(&hsz, p + 6, sizeof hsz);
        memcpy(&total, p + 8, sizeof total);
        return total > MAX_IMAGE ? 0 : hsz + (size_t)total;
    }
    /* PTX is text: its directives (".version", ".target", comments) come first */
    size_t n = strnlen((const char *)p, MAX_IMAGE);
    *ptx =
        n < MAX_IMAGE && (strstr((const char *)p, ".version") || strstr((const char *)p, ".entry"));
    return 0;
}

static void module_free(CUmodule m)
{
    sim_fatbin_layouts_free(m->kernels, m->nkernels);
    free(m->funcs);
    free(m);
}

static CUresult load(CUmodule *out, const void *image, size_t len)
{
    if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
    int dev; /* a module needs a current context, as on a GPU (the sim has one per device) */
    CUresult rc = sim_current_dev(&dev);
    if (rc) return rc;
    bool ptx = false;
    if (!len) len = image_size(image, &ptx);
    if (ptx) return sim_unsupported("cuModuleLoadData of PTX (no JIT compiler)");
    CUmodule m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    m->magic = SIM_MAGIC_MODULE;
    if (!len || sim_image_kernels(image, len, &m->kernels, &m->nkernels)) {
        free(m);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    m->funcs = calloc(m->nkernels ? m->nkernels : 1, sizeof *m->funcs);
    sim_lock();
    bool ok = m->funcs && sim_pset_add(&modules, &nmodules, &capmodules, m);
    sim_unlock();
    if (!ok) {
        module_free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = m;
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    SIM_CHECK_INIT();
    return load(module, image, 0);
}

/* The JIT options only steer compiling PTX, which is refused: they are accepted and the log
 * buffers, when asked for, say nothing. */
CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int n, CUjit_option *opts,
                            void **vals)
{
    SIM_CHECK_INIT();
    if (n && (!opts || !vals)) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++)
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES ||
            opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            vals[i] = (void *)(uintptr_t)0;
    return load(module, image, 0);
}

CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    SIM_CHECK_INIT();
    if (!fatCubin) return CUDA_ERROR_INVALID_VALUE;
    /* the wrapper nvcc emits around a fat binary is accepted too, as by the real driver */
    if (rd32(fatCubin) == WRAPPER_MAGIC)
        memcpy(&fatCubin, (const char *)fatCubin + 8, sizeof fatCubin);
    if (!fatCubin || rd32(fatCubin) != FATBIN_MAGIC) return CUDA_ERROR_INVALID_IMAGE;
    return load(module, fatCubin, 0);
}

CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    SIM_CHECK_INIT();
    if (!module || !fname) return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(fname, "rb");
    if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    CUresult rc = CUDA_SUCCESS;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *b = cap <= MAX_IMAGE ? realloc(buf, cap) : NULL;
            if (!b) {
                rc = cap > MAX_IMAGE ? CUDA_ERROR_INVALID_IMAGE : CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            buf = b;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    if (!rc && ferror(f)) rc = CUDA_ERROR_FILE_NOT_FOUND;
    fclose(f);
    if (!rc) {
        buf[len] = 0; /* a PTX file is text with no terminator of its own */
        bool ptx = false;
        if (len < 4)
            rc = CUDA_ERROR_INVALID_IMAGE;
        else if (memcmp(buf, "\177ELF", 4) && rd32(buf) != FATBIN_MAGIC &&
                 (image_size(buf, &ptx), ptx))
            rc = sim_unsupported("cuModuleLoad of PTX (no JIT compiler)");
        else
            rc = load(module, buf, len);
    }
    free(buf); /* the module keeps what it read, never the image */
    return rc;
}

CUresult cuModuleUnload(CUmodule hmod)
{
    SIM_CHECK_INIT();
    sim_lock();
    if (!module_valid(hmod)) {
        sim_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    sim_pset_del(modules, &nmodules, hmod);
    hmod->magic = 0;
    for (size_t i = 0; i < hmod->nkernels; i++)
        if (hmod->funcs[i]) hmod->funcs[i]->unloaded = true;
    sim_unlock();
    module_free(hmod);
    return CUDA_SUCCESS;
}

static long kernel_index(CUmodule m, const char *name)
{
    for (size_t i = 0; i < m->nkernels; i++)
        if (!strcmp(m->kernels[i].name, name)) return (long)i;
    return -1;
}

/* kernels[i]'s function, made the first time (lock not held: registering takes it) */
static CUresult function_of(CUmodule m, size_t i, CUfunction *out)
{
    sim_lock();
    sim_kernel *k = m->funcs[i];
    sim_unlock();
    if (!k) {
        const sim_fatbin_kernel *d = &m->kernels[i];
        CUfunction f;
        CUresult rc = sim_register_device_kernel_params(d->name, d->unknown ? -1 : (int)d->nparams,
                                                        d->sizes, d->offsets, &f);
        if (rc) return rc;
        sim_lock();
        sim_kernel *made = (sim_kernel *)(void *)f;
        if (d->regs > 0) made->num_regs = d->regs;
        made->static_smem = d->static_smem < (size_t)INT32_MAX ? (int)d->static_smem : INT32_MAX;
        if (!m->funcs[i]) {
            m->funcs[i] = made;
        } else { /* another thread made it first: its handle is the one */
            ((sim_kernel *)(void *)f)->unloaded = true;
        }
        k = m->funcs[i];
        sim_unlock();
    }
    *out = (CUfunction)(void *)k;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    SIM_CHECK_INIT();
    if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = module_check(hmod);
    if (rc) return rc;
    long i = kernel_index(hmod, name);
    if (i < 0) return CUDA_ERROR_NOT_FOUND;
    return function_of(hmod, (size_t)i, hfunc);
}

CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
{
    SIM_CHECK_INIT();
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = module_check(mod);
    if (rc) return rc;
    *count = (unsigned)mod->nkernels;
    return CUDA_SUCCESS;
}

CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int n, CUmodule mod)
{
    SIM_CHECK_INIT();
    if (!functions) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = module_check(mod);
    if (rc) return rc;
    if (n < mod->nkernels) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < mod->nkernels; i++) {
        rc = function_of(mod, i, &functions[i]);
        if (rc) return rc;
    }
    return CUDA_SUCCESS;
}
