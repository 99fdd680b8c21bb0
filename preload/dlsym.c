/*
 * dlsym.c — the exported dlsym.
 *
 * Why gpumem exports dlsym at all: a CUDA runtime linked statically into a program (nvcc's
 * default), cuBLAS, NCCL and PyTorch all find the driver with dlopen("libcuda.so.1") + dlsym,
 * then ask cuGetProcAddress for everything else. Plain symbol interposition sees none of that.
 * gpumem answers dlsym for the driver's cuGetProcAddress(_v2) with its own wrapper, and for the
 * hooked cuMem* names with its hooks; every other lookup is forwarded untouched.
 *
 * Forwarding must be exact. glibc's dlsym finds the *caller* from its return address, which
 * decides what RTLD_NEXT means (ASan, TSan and other preloads rely on it). A C wrapper calling
 * the real dlsym would make libgpumem.so the caller and RTLD_NEXT would skip the wrong
 * objects. So on x86-64 the exported symbol is a small trampoline: it asks gm_dlsym_decide()
 * whether to answer itself and, if not, *jumps* (not calls) to the real dlsym with the original
 * arguments and return address. Other architectures get a C wrapper that is exact for every
 * handle but RTLD_NEXT (documented in preload/README.md).
 *
 * The decision never takes a lock and never calls anything that could call dlsym before the
 * real one is known: it resolves the real dlsym with dlvsym (GLIBC_2.34, then GLIBC_2.2.5),
 * compares the name against a short list, and only for a hooked driver name loads the driver.
 */
#include "preload/gm_internal.h"

#include <dlfcn.h>
#include <string.h>

typedef void *(*gm_dlsym_fn)(void *, const char *);
GM_HIDDEN gm_dlsym_fn gm_real_dlsym;

static gm_dlsym_fn resolve_real_dlsym(void)
{
    gm_dlsym_fn f = __atomic_load_n(&gm_real_dlsym, __ATOMIC_ACQUIRE);
    if (f)
        return f;
    f = (gm_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!f)
        f = (gm_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    __atomic_store_n(&gm_real_dlsym, f, __ATOMIC_RELEASE);
    return f;
}

void *gm_real_dlsym_fn(void *handle, const char *name)
{
    gm_dlsym_fn f = resolve_real_dlsym();
    return f ? f(handle, name) : NULL;
}

void *gm_next_symbol(const char *name)
{
    /* Called from inside libgpumem.so, so RTLD_NEXT means "after gpumem": the real runtime. */
    return gm_real_dlsym_fn(RTLD_NEXT, name);
}

/* Returns the pointer to hand back, or NULL to forward the call to the real dlsym. */
GM_HIDDEN void *gm_dlsym_decide(void *handle, const char *name);
void *gm_dlsym_decide(void *handle, const char *name)
{
    resolve_real_dlsym();
    /* Lookups made while gpumem initialises (the driver loading, its cuGetProcAddress calling
     * dlsym) pass through: no recursion into gpumem's own init. */
    if (gm_in_init || !name || name[0] != 'c' || name[1] != 'u')
        return NULL;
    if (!gm_driver_name_hooked(name))
        return NULL;
    void *real = NULL;
    if (handle != RTLD_NEXT) {
        real = gm_real_dlsym_fn(handle, name);
        if (!real)
            return NULL; /* the object asked does not define it: the real answer is NULL */
    }
    if (!strncmp(name, "cuGetProcAddress", 16)) {
        void *w = gm_driver_getproc_wrapper(name);
        if (w)
            gm_stat_add(GM_ST_PROC_HOOKED, 1);
        return w;
    }
    if (!gm_driver_init())
        return NULL;
    if (!real)
        real = gm_real_dlsym_fn(RTLD_DEFAULT, name);
    void *hook = real ? gm_driver_hook_for(real) : NULL;
    if (hook)
        gm_stat_add(GM_ST_PROC_HOOKED, 1);
    return hook;
}

#if defined(__x86_64__)
/* dlsym(handle, name): keep rdi/rsi, pass the return address as a third argument (unused by
 * the decision but it keeps the frame honest), call the decision, and either return its answer
 * or tail-jump to the real dlsym so glibc sees the original caller. */
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "  .cfi_startproc\n"
        "  pushq %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  subq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  call gm_dlsym_decide\n"
        "  addq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  testq %rax, %rax\n"
        "  jz 1f\n"
        "  ret\n"
        "1:\n"
        "  jmp *gm_real_dlsym(%rip)\n"
        "  .cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#else
GM_EXPORT void *dlsym(void *handle, const char *name)
{
    void *hook = gm_dlsym_decide(handle, name);
    return hook ? hook : gm_real_dlsym_fn(handle, name);
}
#endif
