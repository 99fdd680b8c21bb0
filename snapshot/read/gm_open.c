/* gm_open.c — how a command opens its database: gm_db_open, gm_model_load, gm_symbolize, with
 * the one-line error and exit code every command gives (gm.h, gm_open_model). */
#include "snapshot/read/gm.h"

int gm_open_model(const char *path, gm_db *d, gm_model *m, int symbolize) {
    char err[8192];
    if (gm_db_open(path, d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        return GM_EXIT_BADDB;
    }
    if (gm_model_load(d, m, 1, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        gm_model_free(m);
        gm_db_close(d);
        return GM_EXIT_BADDB;
    }
    if (symbolize) gm_symbolize(d, m);
    return 0;
}
