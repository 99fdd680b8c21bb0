/* gm_formats.h — the recording in other tools' formats and back: exports (gm_export.c: the
 * replay trace; gm_export_torch.c: torch; gm_export_fmt.c: chrome, folded, speedscope, csv) and the import of
 * PyTorch memory snapshots (gm_import.c). Every file they write goes through gm_out.h. */
#ifndef GPUMEM_SNAPSHOT_FORMATS_GM_FORMATS_H
#define GPUMEM_SNAPSHOT_FORMATS_GM_FORMATS_H

#include "snapshot/read/gm.h"

/* The replay engine's text trace (alloc/README): "a <birth seq> <requested> <stream id>",
 * "f <birth seq>", "fa <birth seq> <stream id>" for device allocations and their frees, in
 * seq order. Returns 0, or GM_EXIT_BADDB with a message on stderr. */
int gm_export_trace(gm_db *d, FILE *out);
/* The view an export shows (--view): of a PyTorch program recorded on PyTorch's allocator (its
 * memory history merged), PyTorch's (its tensors, names, Python call sites: what report, leaks
 * and diff show) or the device's (every device allocation: PyTorch's cached segments, the
 * libraries' workspaces). AUTO: PyTorch's where its history was merged, else the device's. */
enum { GM_VIEW_AUTO = -1, GM_VIEW_DEVICE = 0, GM_VIEW_TORCH = 1 };
/* `gpumem export --format chrome|folded|speedscope|csv` (gm_export_fmt.c) on a loaded,
 * symbolized model (csv: m may be NULL; it reads the database). what: folded/speedscope -1 both
 * (speedscope) / peak, 0 peak, 1 total. view: GM_VIEW_*. Returns 0, GM_EXIT_BADDB with a
 * message, GM_EXIT_USAGE for an unknown format or GM_VIEW_TORCH of a recording without
 * PyTorch's history (with a message). */
int gm_export_format(gm_db *d, gm_model *m, const char *format, int what, int view, FILE *out);
/* `--format torch` (gm_export_torch.c): PyTorch's memory snapshot with its segments and blocks as
 * they were after event `at` (UINT64_MAX: at the end). 0, or GM_EXIT_BADDB with a message. */
int gm_export_torch(gm_db *d, gm_model *m, FILE *out, uint64_t at);
/* `--at peak|end|oom|SEQ` as the seq gm_export_torch takes (peak: the peak allocated moment, of
 * PyTorch's tensors when its history was merged; oom: the first OOM). 0, or -1 with err. */
int gm_export_at_seq(gm_model *m, const char *at, uint64_t *seq, char *err, size_t errsz);
/* The first frame of a stack the exports show: past gpumem's own and the CUDA libraries'. */
size_t gm_export_first_depth(const gm_model *m, uint32_t stack, size_t len);
/* `gpumem flamegraph` (gm_flame.c): folded stacks on stdin, an SVG flame graph on stdout; also
 * what gpumem does when run as flamegraph.pl (argv[0]). */
int gm_cmd_flamegraph(int argc, char **argv);
/* `gpumem import` (gm_import.c): argv[0] is "import". */
int gm_cmd_import(int argc, char **argv);
/* The pickle buf[0..n) (a PyTorch memory snapshot; source names it in meta) into a new database
 * at dbpath. Returns 0 with the number of events, or -1 with a one-line reason in err. */
int gm_import_pickle(const unsigned char *buf, size_t n, const char *source, const char *dbpath, uint64_t *events,
                     char *err, size_t errsz);

#endif
