/*
 * nvtx_tool.so — a minimal NVTX injection tool, standing in for Nsight Systems or any tool a
 * user already has in NVTX_INJECTION64_PATH. gpumem must chain to it: the tool still receives
 * every range, and gets back its own domain handles. It counts pushes, pops and pushes in a
 * domain it recognises as its own, and prints the counts at exit on stderr.
 */
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define TOOL_MAGIC 0x70017001u
struct tool_domain {
    unsigned magic;
};
static atomic_int pushes, pops, domain_pushes;

static int t_push_a(const char *m) { (void)m; return atomic_fetch_add(&pushes, 1); }
static int t_push_w(const wchar_t *m) { (void)m; return atomic_fetch_add(&pushes, 1); }
static int t_push_ex(const nvtxEventAttributes_t *a) { (void)a; return atomic_fetch_add(&pushes, 1); }
static int t_pop(void) { return atomic_fetch_add(&pops, 1); }
static nvtxDomainHandle_t t_domain_create(const char *name)
{
    (void)name;
    struct tool_domain *d = malloc(sizeof *d);
    d->magic = TOOL_MAGIC;
    return (nvtxDomainHandle_t)(void *)d;
}
static int t_domain_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    (void)a;
    if (d && ((struct tool_domain *)(void *)d)->magic == TOOL_MAGIC)
        atomic_fetch_add(&domain_pushes, 1);
    return atomic_fetch_add(&pushes, 1);
}
static int t_domain_pop(nvtxDomainHandle_t d) { (void)d; return atomic_fetch_add(&pops, 1); }

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
    const NvtxExportTableCallbacks *cb = get(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable core, core2;
    unsigned n, n2;
    if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &n) ||
        !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &n2))
        return 0;
    *core[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)t_push_a;
    *core[NVTX_CBID_CORE_RangePushEx] = (NvtxFunctionPointer)t_push_ex;
    *core[NVTX_CBID_CORE_RangePushW] = (NvtxFunctionPointer)t_push_w;
    *core[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)t_pop;
    *core2[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)t_domain_create;
    *core2[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)t_domain_push;
    *core2[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)t_domain_pop;
    return 1;
}

__attribute__((destructor)) static void report(void)
{
    fprintf(stderr, "nvtx_tool: pushes %d\nnvtx_tool: pops %d\nnvtx_tool: domain pushes %d\n",
            atomic_load(&pushes), atomic_load(&pops), atomic_load(&domain_pushes));
}
