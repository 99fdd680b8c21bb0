/* gm_demangle.c — kernel names as a person reads them.
 *
 * The recorder stores a kernel's name the way the driver gives it: the Itanium C++ ABI
 * mangling ("_Z6matmulPfPKfS1_ii"). The reading side turns it back into
 * "matmul(float*, float const*, float const*, int, int)" with libiberty's demangler — the one
 * binutils' c++filt uses — never by hand: templates, substitutions and lambdas are a grammar,
 * not a string edit. Only names that start with "_Z" are handed to it: plain C kernels and the
 * recorder's own operation names ("memcpy HtoD", "memset") would otherwise be read as types
 * ("i" is "int"). A name the demangler rejects is shown as recorded.
 *
 * A report names the same few kernels thousands of times, so the demangled form is kept per
 * strings id (gm_demangler).
 */
#include "snapshot/read/gm.h"

#include <libiberty/demangle.h>
#include <stdlib.h>
#include <string.h>

char *gm_demangle(const char *name) {
    if (!name) return NULL;
    if (strncmp(name, "_Z", 2) == 0) {
        char *d = cplus_demangle(name, DMGL_PARAMS | DMGL_ANSI);
        if (d) return d;
    }
    return strdup(name);
}

const char *gm_demangle_id(gm_demangler *dm, const gm_model *m, uint64_t id) {
    uint64_t *v = id ? u64map_get(&dm->names, id) : NULL;
    if (v) return (const char *)(uintptr_t)*v;
    const char *s = id ? gm_str(m, id) : NULL;
    if (!s) return "?";
    char *d = gm_demangle(s);
    if (!d) return s;
    if (u64map_put(&dm->names, id, (uint64_t)(uintptr_t)d) != 0) {
        free(d);
        return s;
    }
    return d;
}

void gm_demangler_free(gm_demangler *dm) {
    for (uint64_t i = 0; dm->names.keys && i <= dm->names.mask; i++)
        if (dm->names.keys[i] != U64MAP_EMPTY) free((void *)(uintptr_t)dm->names.vals[i]);
    u64map_free(&dm->names);
}
