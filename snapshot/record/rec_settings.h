/* rec_settings.h — the one parser of gpumem's GPUMEM_* settings (rec_settings.c), linked by
 * libgpumem.so and by `gpumem record`. */
#ifndef GPUMEM_REC_SETTINGS_H
#define GPUMEM_REC_SETTINGS_H

#include "alloc/alloc.h"
#include "snapshot/record/rec.h"

#include <stddef.h>

enum { REC_SET_OFF = 0, REC_SET_RECORD = 1, REC_SET_REPLACE = 2 };       /* GPUMEM_MODE */
enum { REC_SET_USES_OFF = 0, REC_SET_USES_ON = 1, REC_SET_USES_TIMED = 2 }; /* GPUMEM_USES */

typedef struct rec_settings {
    int mode;                 /* REC_SET_*: REC_SET_OFF only when GPUMEM_MODE=off says so */
    int uses;                 /* REC_SET_USES_* */
    /* GPUMEM_LIMIT in bytes (0: a cap of 0 bytes, as the limit key reads it); ALLOC_NO_LIMIT
     * when unset or none */
    size_t limit;
    int limit_set;            /* GPUMEM_LIMIT was set (none too): it overrides GPUMEM_CONF's key */
    size_t torch_max_entries; /* GPUMEM_TORCH_MAX_ENTRIES */
} rec_settings;

/* Reads every setting of the environment: GPUMEM_MODE, GPUMEM_PYTHON, GPUMEM_USES,
 * GPUMEM_CONF (into conf, from alloc's defaults, with GPUMEM_LIMIT), GPUMEM_LIMIT,
 * GPUMEM_TORCH_MAX_ENTRIES and the recorder's (rec_check_env). Returns 0, or -1 with err naming
 * the first setting that cannot be read, its value and what is accepted (one line, no
 * "gpumem:" prefix). With GPUMEM_MODE=off nothing else is read (0, mode REC_SET_OFF). */
int rec_settings_read(rec_settings *s, alloc_config_t *conf, char *err, size_t errsz);

/* A whole number setting: dflt when unset or empty; dflt and *bad = 1 (err set, the first time)
 * when it is not digits only, or not in [lo, hi]. bad and err may be NULL. */
long rec_env_num(const char *name, long dflt, long lo, long hi, int *bad, char *err, size_t errsz);

/* The first GPUMEM_* variable of the environment that gpumem does not know (a misspelled
 * GPUMEM_LIMIT would otherwise be ignored without a word): 1 with msg "unknown setting NAME (did
 * you mean KNOWN?)" (one line, no "gpumem:" prefix), else 0. */
int rec_settings_unknown(char *msg, size_t msgsz);

/* Edits (insert, delete, change, adjacent swap) from a to b; 99 for names over 47 characters. */
int rec_edit_distance(const char *a, const char *b);

#endif
