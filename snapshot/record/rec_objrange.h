/*
 * rec_objrange.h — the address range of a loaded object, read from its program headers.
 *
 * One reader for every walk over dl_iterate_phdr's objects: the writer's module table
 * (rec_writer.c), the recorder's own-code ranges left out of the stacks and the interpreter's
 * range whose native frames the Python frames replace (preload/core.c, preload/python.c).
 */
#ifndef GPUMEM_REC_OBJRANGE_H
#define GPUMEM_REC_OBJRANGE_H

#include <link.h>
#include <stdint.h>

/* [*lo, *hi): what the object's PT_LOAD segments span (lo >= hi: none); 1 when addr lies inside */
static inline int rec_object_range(const struct dl_phdr_info *info, uintptr_t addr, uintptr_t *lo, uintptr_t *hi)
{
    uintptr_t l = UINTPTR_MAX, h = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < l) l = a;
        if (a + ph->p_memsz > h) h = a + ph->p_memsz;
    }
    *lo = l, *hi = h;
    return addr >= l && addr < h;
}

#endif
