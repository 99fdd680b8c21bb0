/* sim_fatbin.c — kernel parameter layouts read from a program's fat binary (the runtime) or from
 * a module image (the driver's cuModuleLoadData: a cubin or a fat binary, sim_module.c).
 *
 * The virtual GPU skips the device code of nvcc-compiled kernels, but their parameter layout
 * is plain data in the fat binary that __cudaRegisterFatBinary hands over, and the real driver
 * answers cuFuncGetParamInfo from it: gpumem's access tracking reads kernel arguments through
 * that layout, so without it every PyTorch kernel's uses are unknown. Where it lies:
 *
 *   - the registration's wrapper: {int magic 0x466243b1; int version; const void *data; ...};
 *   - data: a fat binary, a 16-byte header (magic 0xba55ed50, u16 version, u16 header size,
 *     u64 size of the entries) followed by entries, each a header (u16 kind: 1 PTX, 2 ELF; u16
 *     version; u32 header size; u64 payload size; ...; u64 uncompressed size at byte 56) and
 *     its payload: an ELF cubin, raw or zstd-compressed (nvcc's -compress-mode; PyTorch's
 *     wheels compress every cubin);
 *   - for a module (the driver's, `all`), also the kernel's resources: the cubin's ".nv.info"
 *     holds EIATTR_REGCOUNT (0x2f) records, u32 symbol index and u32 registers, the symbol
 *     being the one ".text.<kernel>"'s sh_info names; ".nv.shared.<kernel>"'s size is its static
 *     shared memory (what cuobjdump -res-usage prints as REG and SHARED);
 *   - in the cubin, a section ".nv.info.<kernel>" per kernel: records of u8 format, u8
 *     attribute, u16 value or size (format 4: a payload of that many bytes follows). Attribute
 *     0x17 (KPARAM_INFO) gives one parameter: u32 index, u16 ordinal, u16 offset, u32 whose
 *     bits 18-31 are its size in bytes; attribute 0x45, the same with the last word the size
 *     alone (what nvcc writes for kernels whose parameters pass 16 KiB, PyTorch's multi-tensor
 *     kernels); attribute 0x19 (CBANK_PARAM_SIZE) the total, which the parameters must reach.
 *
 * Every architecture's cubin has the same layout (it is the C++ signature's), so the first ELF
 * entry that parses is used. Anything unexpected — an LZ4-compressed entry (older nvcc), a
 * missing ordinal, a parameter past the total — leaves the layout unknown, never guessed: the
 * driver then answers CUDA_ERROR_NOT_SUPPORTED and gpumem counts the launches as unread.
 */
#include "sim/sim_fatbin.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define WRAPPER_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xba55ed50u
#define KIND_ELF 2
#define EIATTR_KPARAM_INFO 0x17
#define EIATTR_KPARAM_INFO_V2 0x45
#define MAX_PARAM_BYTES 32764 /* the most a kernel's parameters may take (CUDA 12.1 and later) */
#define EIATTR_CBANK_PARAM_SIZE 0x19
#define EIATTR_REGCOUNT 0x2f
#define EIFMT_SVAL 4
#define MAX_PARAMS 4096
#define MAX_CUBIN ((size_t)1 << 30)

static uint16_t rd16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static uint32_t rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* One kernel's layout from its .nv.info section; 0, or -1 when it is not a complete one. */
static int parse_info(const unsigned char *p, size_t n, sim_fatbin_kernel *k)
{
    uint32_t off[MAX_PARAMS], sz[MAX_PARAMS];
    uint8_t seen[MAX_PARAMS] = {0};
    unsigned count = 0, maxord = 0;
    long total = -1;
    for (size_t i = 0; i + 4 <= n;) {
        unsigned fmt = p[i], attr = p[i + 1];
        size_t len = fmt == EIFMT_SVAL ? rd16(p + i + 2) : 0;
        if (i + 4 + len > n) return -1;
        const unsigned char *v = p + i + 4;
        if (attr == EIATTR_KPARAM_INFO || attr == EIATTR_KPARAM_INFO_V2) {
            if (fmt != EIFMT_SVAL || len < 12) return -1;
            unsigned ord = rd16(v + 4);
            /* the first form keeps the size in the top 14 bits of its last word, beside flags;
             * the second (parameters past 16 KiB: PyTorch's multi-tensor kernels) the size alone */
            uint32_t o = rd16(v + 6),
                     s = attr == EIATTR_KPARAM_INFO ? (rd32(v + 8) >> 18) & 0x3fff : rd32(v + 8);
            if (s > MAX_PARAM_BYTES) return -1;
            if (ord >= MAX_PARAMS || seen[ord] || !s) return -1;
            seen[ord] = 1, off[ord] = o, sz[ord] = s, count++;
            if (ord + 1 > maxord) maxord = ord + 1;
        } else if (attr == EIATTR_CBANK_PARAM_SIZE) {
            total = fmt == EIFMT_SVAL ? -1 : (long)rd16(p + i + 2);
        }
        i += 4 + len;
    }
    if (count != maxord) return -1; /* an ordinal missing */
    long ends = 0;
    for (unsigned i = 0; i < count; i++) {
        if (total >= 0 && (long)off[i] + (long)sz[i] > total) return -1;
        if ((long)off[i] + (long)sz[i] > ends) ends = (long)off[i] + (long)sz[i];
    }
    /* parameters that do not reach the bank's size (bar its alignment, at most 16) are not all
     * described: a record of a form this reader does not know; no layout rather than a short one */
    if (total > 0 && (count == 0 || ends + 16 <= total)) return -1;
    k->nparams = count;
    k->offsets = count ? malloc(count * sizeof *k->offsets) : NULL;
    k->sizes = count ? malloc(count * sizeof *k->sizes) : NULL;
    if (count && (!k->offsets || !k->sizes)) {
        free(k->offsets), free(k->sizes);
        return -1;
    }
    for (unsigned i = 0; i < count; i++)
        k->offsets[i] = off[i], k->sizes[i] = sz[i];
    return 0;
}

static void table_free(sim_fatbin_kernel *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].name), free(v[i].offsets), free(v[i].sizes);
    free(v);
}

/* Section `name` of the cubin (its header), or NULL. */
static const unsigned char *section_named(const unsigned char *sh, unsigned shnum,
                                          unsigned shentsize, const char *names, uint64_t strsz,
                                          const char *name)
{
    for (unsigned i = 0; i < shnum; i++) {
        const unsigned char *s = sh + (size_t)i * shentsize;
        uint32_t nm = rd32(s);
        if (nm < strsz && memchr(names + nm, 0, strsz - nm) && !strcmp(names + nm, name)) return s;
    }
    return NULL;
}

/* k's registers and static shared memory (module images only: a search per kernel, which the
 * runtime's fat binaries of thousands of kernels would not afford and do not need). */
static void kernel_resources(const unsigned char *e, size_t n, const unsigned char *sh,
                             unsigned shnum, unsigned shentsize, const char *names, uint64_t strsz,
                             sim_fatbin_kernel *k)
{
    k->regs = -1;
    char name[4096];
    snprintf(name, sizeof name, ".nv.shared.%s", k->name);
    const unsigned char *s = section_named(sh, shnum, shentsize, names, strsz, name);
    if (s) k->static_smem = (size_t)rd64(s + 0x20);
    snprintf(name, sizeof name, ".text.%s", k->name);
    const unsigned char *text = section_named(sh, shnum, shentsize, names, strsz, name);
    const unsigned char *info = section_named(sh, shnum, shentsize, names, strsz, ".nv.info");
    if (!text || !info) return;
    uint32_t sym = rd32(text + 0x2c); /* sh_info: the kernel's symbol */
    uint64_t off = rd64(info + 0x18), size = rd64(info + 0x20);
    if (off > n || size > n - off) return;
    const unsigned char *p = e + off;
    for (size_t i = 0; i + 4 <= size;) {
        unsigned fmt = p[i], attr = p[i + 1];
        size_t len = fmt == EIFMT_SVAL ? rd16(p + i + 2) : 0;
        if (i + 4 + len > size) return;
        if (attr == EIATTR_REGCOUNT && fmt == EIFMT_SVAL && len >= 8 && rd32(p + i + 4) == sym)
            k->regs =
                rd32(p + i + 8) <= 255 ? (int)rd32(p + i + 8) : -1; /* a thread has at most 255 */
        i += 4 + len;
    }
}

/* Every kernel of one ELF cubin; 0, or -1 when it is not an ELF we can read. With `all`, a
 * kernel whose layout is not complete is listed too, marked `unknown` (a module's functions are
 * every kernel it has, layout or not); without, it is left out. */
static int parse_elf(const unsigned char *e, size_t n, int all, sim_fatbin_kernel **out,
                     size_t *nout)
{
    static const char prefix[] = ".nv.info.";
    if (n < 64 || memcmp(e, "\177ELF", 4) || e[4] != 2 /* 64-bit */) return -1;
    uint64_t shoff = rd64(e + 0x28);
    unsigned shentsize = rd16(e + 0x3a), shnum = rd16(e + 0x3c), shstrndx = rd16(e + 0x3e);
    if (shentsize < 64 || shstrndx >= shnum || shoff > n || (uint64_t)shnum * shentsize > n - shoff)
        return -1;
    const unsigned char *sh = e + shoff, *strsh = sh + (size_t)shstrndx * shentsize;
    uint64_t stroff = rd64(strsh + 0x18), strsz = rd64(strsh + 0x20);
    if (stroff > n || strsz > n - stroff) return -1;
    const char *names = (const char *)e + stroff;
    sim_fatbin_kernel *v = NULL;
    size_t nv = 0;
    for (unsigned i = 0; i < shnum; i++) {
        const unsigned char *s = sh + (size_t)i * shentsize;
        uint32_t nm = rd32(s);
        if (nm >= strsz || !memchr(names + nm, 0, strsz - nm)) continue;
        const char *name = names + nm;
        if (strncmp(name, prefix, sizeof prefix - 1) || !name[sizeof prefix - 1]) continue;
        uint64_t off = rd64(s + 0x18), size = rd64(s + 0x20);
        if (off > n || size > n - off) continue;
        sim_fatbin_kernel k = {0};
        if (parse_info(e + off, size, &k)) {
            if (!all) continue;
            k = (sim_fatbin_kernel){.unknown = 1};
        }
        k.name = strdup(name + sizeof prefix - 1);
        if (all && k.name) kernel_resources(e, n, sh, shnum, shentsize, names, strsz, &k);
        sim_fatbin_kernel *nvv = k.name ? realloc(v, (nv + 1) * sizeof *v) : NULL;
        if (!nvv) {
            free(k.name), free(k.offsets), free(k.sizes);
            table_free(v, nv);
            return -1;
        }
        v = nvv;
        v[nv++] = k;
    }
    *out = v, *nout = nv;
    return 0;
}

int sim_fatbin_layouts(const void *wrapper, sim_fatbin_kernel **out, size_t *nout)
{
    *out = NULL, *nout = 0;
    if (!wrapper) return -1;
    const unsigned char *w = wrapper;
    if (rd32(w) != WRAPPER_MAGIC) return -1;
    const unsigned char *fb = NULL;
    memcpy(&fb, w + 8, sizeof fb);
    if (!fb || rd32(fb) != FATBIN_MAGIC) return -1;
    /* the fat binary's extent is its header's word */
    uint64_t total = rd64(fb + 8), hsz = rd16(fb + 6);
    if (total > MAX_CUBIN * 64) return -1;
    return sim_fatbin_parse(fb, hsz + total, out, nout);
}

static int parse_fatbin(const void *data, size_t len, int all, sim_fatbin_kernel **out,
                        size_t *nout);

int sim_fatbin_parse(const void *data, size_t len, sim_fatbin_kernel **out, size_t *nout)
{
    return parse_fatbin(data, len, 0, out, nout);
}

/* The extent of an ELF image from its headers (cuModuleLoadData is given no size): the end of
 * the section header table or of the furthest section with contents. 0: not a 64-bit ELF. */
size_t sim_elf_extent(const void *data)
{
    const unsigned char *e = data;
    if (!e || memcmp(e, "\177ELF", 4) || e[4] != 2) return 0;
    uint64_t shoff = rd64(e + 0x28);
    unsigned shentsize = rd16(e + 0x3a), shnum = rd16(e + 0x3c);
    if (shentsize < 64 || shoff > MAX_CUBIN || (uint64_t)shnum * shentsize > MAX_CUBIN) return 0;
    uint64_t end = shoff + (uint64_t)shnum * shentsize;
    for (unsigned i = 0; i < shnum; i++) {
        const unsigned char *s = e + shoff + (size_t)i * shentsize;
        uint64_t off = rd64(s + 0x18), size = rd64(s + 0x20);
        if (rd32(s + 4) == 8 /* SHT_NOBITS */ || off > MAX_CUBIN || size > MAX_CUBIN) continue;
        if (off + size > end) end = off + size;
    }
    return end > MAX_CUBIN ? 0 : (size_t)end;
}

int sim_image_kernels(const void *data, size_t len, sim_fatbin_kernel **out, size_t *nout)
{
    *out = NULL, *nout = 0;
    if (len >= 4 && !memcmp(data, "\177ELF", 4)) return parse_elf(data, len, 1, out, nout);
    return parse_fatbin(data, len, 1, out, nout);
}

static int parse_fatbin(const void *data, size_t len, int all, sim_fatbin_kernel **out,
                        size_t *nout)
{
    *out = NULL, *nout = 0;
    const unsigned char *fb = data;
    if (!fb || len < 16 || rd32(fb) != FATBIN_MAGIC) return -1;
    size_t hsz = rd16(fb + 6);
    uint64_t total = rd64(fb + 8);
    if (hsz < 16 || hsz > len || total > len - hsz) return -1;
    const unsigned char *p = fb + hsz, *end = p + total;
    while (end - p >= 64) {
        unsigned kind = rd16(p);
        uint32_t ehsz = rd32(p + 4);
        uint64_t psz = rd64(p + 8), full = rd64(p + 56);
        if (ehsz < 64 || ehsz > (uint64_t)(end - p) || psz > (uint64_t)(end - p) - ehsz) return -1;
        const unsigned char *pay = p + ehsz;
        p += ehsz + psz;
        if (kind != KIND_ELF || psz < 4) continue;
        int rc = -1;
        if (!memcmp(pay, "\177ELF", 4)) {
            rc = parse_elf(pay, psz, all, out, nout);
        } else if (rd32(pay) == ZSTD_MAGICNUMBER) {
            unsigned long long n = ZSTD_getFrameContentSize(pay, psz);
            if (n == ZSTD_CONTENTSIZE_UNKNOWN || n == ZSTD_CONTENTSIZE_ERROR) n = full;
            if (!n || n > MAX_CUBIN) continue;
            unsigned char *elf = malloc(n);
            if (!elf) return -1;
            /* the payload is padded to 8 bytes past the frame: decompress the frame alone */
            size_t fsz = ZSTD_findFrameCompressedSize(pay, psz);
            size_t got = ZSTD_isError(fsz) ? fsz : ZSTD_decompress(elf, n, pay, fsz);
            if (!ZSTD_isError(got)) rc = parse_elf(elf, got, all, out, nout);
            free(elf);
        }
        if (rc == 0) return 0; /* the first cubin that reads: every architecture's is the same */
    }
    return -1;
}

void sim_fatbin_layouts_free(sim_fatbin_kernel *v, size_t n)
{
    table_free(v, n);
}
