/* gpumem.c — the gpumem command: record, report, leaks, sql, export, uses.
 *
 * The command analyses and never records (the recording happens in libgpumem.so inside the
 * program); `record` only sets up the environment, runs the program and reads the result.
 * Exit codes (also in `gpumem --help` and snapshot/README.md): 0 ok; 1 leaks found with
 * --fail-on-leak; 2 usage error; 3 the database cannot be read, or standard output cannot be
 * written; 4 libgpumem.so not found;
 * `record` passes the program's own exit code through (128+N when killed by signal N, 127 when
 * the program cannot be started).
 */
#include "snapshot/analyze/gm_report.h"
#include "snapshot/formats/gm_formats.h"
#include "snapshot/torch_record.h"
#include "snapshot/formats/gm_out.h"
#include "snapshot/read/gm_sig.h"
#include "snapshot/record/rec_internal.h" /* the version and schema the recorder writes */
#include "snapshot/analyze/gm_advise.h"
#include "snapshot/analyze/gm_frag.h"
#include "snapshot/analyze/gm_tune.h"
#include "snapshot/record/rec.h"
#include "snapshot/record/rec_settings.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const usage_main =
    "usage: gpumem COMMAND [ARGS]\n"
    "\n"
    "Where GPU memory goes, from a recording of every allocation.\n"
    "\n"
    "commands:\n"
    "  record [-o FILE] [--force] -- CMD ARGS...\n"
    "                                    run CMD with gpumem loaded, record to FILE, print a summary\n"
    "  report DB [--json] [--top N] [--frames user|all]\n"
    "                                    summary, peak attribution, OOM forensics\n"
    "  report A.db B.db ... | DIR [--json] [--top N] [--frames user|all]\n"
    "                                    several ranks merged: peaks side by side, imbalance, the\n"
    "                                    rank that sets the peak and why, timeline by step, leaks\n"
    "  leaks DB [--json] [--top N] [--fail-on-leak] [--frames user|all]\n"
    "                                    what was still allocated at exit, and growth per step\n"
    "  frag DB [--json] [--top N] [--check]\n"
    "                                    reserved but not allocated: over time, at the peak and at\n"
    "                                    each OOM, its causes, and the settings that give it back\n"
    "  tune DB [--objective reserved|time] [--limit SIZE] [--json] [--check]\n"
    "                                    the allocator's presets and keys replayed on the trace,\n"
    "                                    ranked; the GPUMEM_CONF (and PyTorch) line to use\n"
    "  advise DB [--budget SIZE] [--ranks N [--zero 1|2]] [--json] [--check] ...\n"
    "                                    predicted peaks under recompute, offload, accumulation,\n"
    "                                    set-to-none, bf16, ZeRO across N ranks (replayed),\n"
    "                                    checked by re-running\n"
    "  uses DB --name PATTERN | --id N   one tensor's life: born, every kernel that used it, died\n"
    "  viz DB -o FILE.html [--with frag,advise,tune]\n"
    "                                    a self-contained page (opens offline): memory over time\n"
    "                                    stacked by phase or tensor class, what was live at any\n"
    "                                    point, icicles, segment maps, leaks, OOMs, the analyses\n"
    "  viz A.db B.db ... | DIR -o FILE.html\n"
    "                                    one lane per rank on one scale, the peak rank in full\n"
    "  diff A.db B.db [--json] [--fail-if-peak-grows PCT]\n"
    "                                    two recordings side by side, with deltas\n"
    "  export --format F DB [-o FILE]    the recording as trace (gpumem-replay), torch (PyTorch's\n"
    "                                    memory_viz pickle), chrome, folded, speedscope or csv\n"
    "  import SNAPSHOT.pickle -o DB      a PyTorch memory snapshot into a gpumem database\n"
    "  flamegraph < FOLDED > SVG         folded stacks drawn as a flame graph (answers as\n"
    "                                    flamegraph.pl for PyTorch's memory_viz, offline)\n"
    "  sql DB [-c QUERY]                 the sqlite3 shell on DB, or run one query (SQL, or\n"
    "                                    a dot-command of the shell: -c '.tables')\n"
    "\n"
    "An option that takes a value is given once: twice with two values (--top 3 --top 5) is a\n"
    "usage error in every command, never the last one silently taken; the same value twice, or\n"
    "a flag twice (--json --json), is accepted.\n"
    "A program on several devices: report, leaks, frag, tune, advise, viz, export and diff give\n"
    "the busiest device's figures (named; a PyTorch program's: the busiest of its tensors'\n"
    "devices, with the busiest named where it is another); --device N gives device N's (exit 2,\n"
    "naming the devices used, for one the program held no memory on).\n"
    "\n"
    "`gpumem COMMAND --help` (or `gpumem help COMMAND`) tells more. The database schema is documented in\n"
    "snapshot/README.md; its SQL is installed as share/gpumem/schema.sql.\n"
    "\n"
    "exit codes (each command's --help lists its own):\n"
    "  0 ok\n"
    "  1 a gate or a search says no: leaks --fail-on-leak (leaks found); uses (no allocation\n"
    "    matches); diff --fail-if-peak-grows (the peak grew); advise --budget (cannot be met);\n"
    "    tune (no configuration avoids an OOM under the limit); frag --check, tune --check and\n"
    "    advise --check (the re-run failed, or the plan measured over the budget)\n"
    "  2 usage error, in every command (record: before CMD runs, a GPUMEM_* setting or FILE\n"
    "    refused)\n"
    "  3 report, leaks, frag, tune, advise, uses, diff, viz, export, sql: the database cannot be\n"
    "    read (missing, damaged, not gpumem's, newer schema), or the output cannot be written (a\n"
    "    full disk); it lost events or pages of it are damaged and the analysis can be wrong for\n"
    "    it (report, leaks, frag, tune, advise: --lossy-ok analyses what can be read); it cannot\n"
    "    judge: leaks --fail-on-leak (events lost, or the program did not run to its end), diff\n"
    "    --fail-if-peak-grows (a side whose program did not run to its end); import: the snapshot\n"
    "    cannot be read or DB written; record: FILE could not be written once CMD ran; advise: a\n"
    "    run that hit an OOM before any step completed (without --oom-step); sql: a failed query\n"
    "  4 record: libgpumem.so not found\n"
    "  record: otherwise the exit code of CMD (128+N if it was killed by signal N, 127 if it\n"
    "    could not run)\n";

static const char *const usage_record =
    "usage: gpumem record [-o FILE] [--force] [-q] [PYTORCH OPTIONS] -- CMD ARGS...\n"
    "\n"
    "Runs CMD with libgpumem.so preloaded (found next to gpumem or in ../lib/gpumem) and the\n"
    "recording written to FILE (default $GPUMEM_DB where set, else gpumem-<pid>.db; %p = pid,\n"
    "%r = rank; a relative FILE is from the directory record runs in, wherever the program\n"
    "goes before its first CUDA call), then prints a short summary: the figures gpumem report leads with (for a\n"
    "PyTorch program, PyTorch's max_memory_allocated / max_memory_reserved first, then the\n"
    "device's). An allocator setting the run does not use (GPUMEM_CONF, GPUMEM_LIMIT,\n"
    "PYTORCH_CUDA_ALLOC_CONF) is said on stderr and in the report. When no GPU driver is\n"
    "usable (no /dev/nvidiactl, or libcuda.so.1 does not load) the virtual GPU (sim/ next to\n"
    "gpumem, ../lib/gpumem/sim or ../lib/gpumem) is put first in LD_LIBRARY_PATH, and gpumem\n"
    "says so.\n"
    "  -o FILE   the database to write; an earlier run's gpumem database there is replaced,\n"
    "            any other file is left alone (exit 2 before CMD runs). Each process of this\n"
    "            run that records (a launcher script's steps) keeps its own file: the first\n"
    "            FILE, the next beside it (run.db: run-<pid>.db), all listed at the end;\n"
    "            a file the recorder said it wrote that is gone at the end exits 3\n"
    "  --force   replace FILE even when it is not a gpumem database (never through a symlink)\n"
    "  -q        no summary\n"
    "A Python program is recorded tensor by tensor when it imports torch, without an edit\n"
    "(gpumem's sitecustomize is put first on PYTHONPATH; README.md, \"PyTorch programs\"),\n"
    "whether it is CMD or runs under it (a launcher script's step, torchrun's workers: each\n"
    "process's trace goes into its own database; python -I, -E and -S keep the sitecustomize\n"
    "out, and record says so):\n"
    "  --allocator torch   PyTorch's own caching allocator stays in place (default); its trace\n"
    "                      (every tensor, with Python stacks, taken by gpumem's tracker) is\n"
    "                      dumped at exit and at an OOM and merged into FILE: `gpumem report`\n"
    "                      then shows PyTorch's view beside the device's\n"
    "  --allocator gpumem  PyTorch's allocator is libgpumem.so (CUDAPluggableAllocator):\n"
    "                      every tensor is served and recorded by gpumem; a request it\n"
    "                      refuses raises torch.OutOfMemoryError with its figures;\n"
    "                      set_per_process_memory_fraction caps gpumem's allocator\n"
    "                      (replacing a per_process_memory_fraction key, as PyTorch),\n"
    "                      Tensor.record_stream and torch._C._cuda_emptyCache reach it\n"
    "  --no-torch-history  no trace of PyTorch's allocator (only its segments are seen)\n"
    "  --no-torch-hooks    no module / optimizer hooks: no \"step N/fwd/<module>\" phases, no\n"
    "                      names for parameters, gradients and optimizer state\n"
    "  --torch-ops         also log every aten op's input and output tensors (a\n"
    "                      TorchDispatchMode; slower), merged as the tables torch_ops and\n"
    "                      torch_op_args: what `gpumem advise` needs to predict torch.autocast\n"
    "                      (either allocator; GPUMEM_TORCH_OPS=1 does the same)\n"
    "  --allocator gpumem and --torch-ops do nothing in a run where no process imports torch\n"
    "  (a C program): record says so in a note after the run (its exit code stays CMD's)\n"
    "Environment passed through: GPUMEM_STACKS (frames per stack, default 16, 0 = off),\n"
    "GPUMEM_MODE, GPUMEM_CONF, GPUMEM_FORK (record|off), GPUMEM_RING, GPUMEM_USES (access\n"
    "tracking: 1 records every kernel, copy and memset that uses an allocation; timed adds\n"
    "device times; see gpumem uses). Each GPUMEM_* setting is checked before CMD runs, by the\n"
    "parser libgpumem.so reads it with: one it cannot read is refused (exit 2), with its message;\n"
    "so is a GPUMEM_* name gpumem does not know (a typo: the setting it likely meant is named;\n"
    "libgpumem.so alone says it once and runs on).\n"
    "A signal that ends CMD by default (SIGINT, SIGTERM, SIGHUP: a closed terminal, SIGQUIT, ...)\n"
    "closes the recording first, complete (GPUMEM_SIGNALS=0: not); record itself stays through\n"
    "SIGINT, SIGQUIT, SIGHUP and SIGTERM to summarise. One sent to record alone (kill PID,\n"
    "Popen.terminate(), a supervisor) is passed on to CMD, and record exits as CMD then does;\n"
    "one from the terminal (Ctrl-C, Ctrl-\\, a hangup) reached CMD already and is not sent twice.\n"
    "Exit code: CMD's own (128+N if killed by signal N; 127 if CMD could not be run); 2 before\n"
    "CMD runs when a setting cannot be read or FILE cannot be written (missing directory,\n"
    "symlink, not a gpumem database, not writable by you); 3 when FILE could not be written\n"
    "once CMD ran (a full disk at its start: the file is removed; one that fills during the\n"
    "run: what was kept stays, read by report --lossy-ok; CMD's own status is said);\n"
    "4 libgpumem.so not found.\n";

static const char *const usage_report =
    "usage: gpumem report DB [--json] [--top N] [--frames user|all] [--device N] [--lossy-ok]\n"
    "\n"
    "Summary (peaks requested, allocated and reserved, each placed by tensor, phase and call\n"
    "site; utilization, allocation counts, cache hit rate, driver calls, OOMs, dropped events,\n"
    "recording overhead), what was live at the peak by NVTX phase, by call site and by tensor\n"
    "name (top N, default 10), what of it sat idle (time since its last use and until its next,\n"
    "by tensor name and call site, from access tracking: on by default, off in a recording made\n"
    "with GPUMEM_USES=0), and OOM forensics: the\n"
    "binding constraint, the shortfall and what to change.\n"
    "A program on several devices: the peaks and the tables are the busiest device's (named;\n"
    "--device N for another's; a PyTorch program's, also with --allocator gpumem: the busiest\n"
    "of its tensors' devices, the busiest named where it is another), each device's peaks\n"
    "listed, and an OOM's tables its\n"
    "own device's; never a sum of devices.\n"
    "Reads databases still being written or left by a killed process (it says so).\n"
    "  --json    one JSON object instead of text\n"
    "  --top N   rows per table (default 10)\n"
    "  --frames user|all  call sites of Python programs: user (default) names the innermost\n"
    "            frame of your code and its caller, skipping Python's own library, torch and\n"
    "            gpumem; all takes every recorded frame, native ones included\n"
    "  --lossy-ok  report a recording that lost events (dropped by a full ring in\n"
    "            GPUMEM_RING_FULL=drop mode, or after a failure): its peaks can be wrong, so\n"
    "            without this it is refused (exit 3); with it the first line says so. The\n"
    "            same for a damaged recording (pages overwritten: what can be read)\n"
    "  --device N  the figures are device N's instead of the busiest device's (a device the\n"
    "            program held no memory on: exit 2, naming the ones it did; on a recording with\n"
    "            memory on N alone, the output is the same as without it)\n"
    "\n"
    "gpumem report A.db B.db ... [--json] [--top N] [--frames user|all] [--device N], or gpumem\n"
    "report DIR\n"
    "(its *.db files): the recordings of a job's ranks (GPUMEM_DB=run-%r.db) merged: each\n"
    "rank's peak allocated and reserved, the step and NVTX phase of its peak and its leaks;\n"
    "the imbalance; the rank that sets the job's peak and what it holds at its peak that the\n"
    "others do not (top N tensor\n"
    "classes by phase, default 5; an unnamed allocation by its call site, read as --frames says,\n"
    "as for one database); the peak allocated of every step, side by side. Ranks come\n"
    "from meta.rank, else the order of the files. JSON shape in snapshot/README.md.\n"
    "Exit code: 0, 2 usage, 3 unreadable database, or events lost or pages damaged (without\n"
    "--lossy-ok).\n";

static const char *const usage_leaks =
    "usage: gpumem leaks DB [--json] [--top N] [--fail-on-leak] [--frames user|all] [--device N]\n"
    "                  [--lossy-ok]\n"
    "\n"
    "Allocations still alive when the recording ended, grouped by call site (with the calling\n"
    "frames) and by NVTX phase (\"step N\" grouped as \"step *\"), and the growth across steps\n"
    "where ranges named \"step N\" exist, with what grows: what step after step (two steps or\n"
    "more) made at one call site and kept past the last step; an allocation of the first or the\n"
    "last step only where a step between kept one of its size there (not a first step's workspace,\n"
    "not a loop's last input). A step runs until the next one begins: what is made after its\n"
    "update and before the next step's forward (kept after opt.step(), or the next batch) counts\n"
    "as it, said where what grows was made so. A program on several devices: the busiest\n"
    "device's allocations and steps (a PyTorch program's, also with --allocator gpumem: the\n"
    "busiest of its tensors' devices; said first; JSON\n"
    "\"device\", \"devices\", \"device_from\"; --device N for another's), never the devices'\n"
    "leaks added.\n"
    "The last line is\n"
    "  LEAK SUMMARY: N bytes leaked in M allocations\n"
    "  --fail-on-leak   exit 1 when N > 0 (for CI); exit 3 when it cannot judge: the recording\n"
    "                   lost events (frees may be missing) or the program did not run to its end\n"
    "  --lossy-ok       list the leaks of a recording that lost events or is damaged\n"
    "                   (without it, refused: exit 3); the first line says so\n"
    "  --json           one JSON object instead of text\n"
    "  --top N          call sites shown (default 10)\n"
    "  --frames user|all  call sites of Python programs (see gpumem report --help)\n"
    "  --device N       device N's leaks instead of the busiest device's (see gpumem report --help)\n"
    "Exit code: 0, 1 leaks with --fail-on-leak, 2 usage, 3 unreadable database, events lost\n"
    "(without --lossy-ok), or with --fail-on-leak, cannot judge.\n";

static const char *const usage_sql =
    "usage: gpumem sql DB [-c QUERY] [--write]\n"
    "\n"
    "Without -c, opens the sqlite3 shell on DB (or reads queries from standard input when the\n"
    "sqlite3 program is not installed). With -c, runs QUERY and prints the rows, columns\n"
    "separated by '|', with a header line; a QUERY that is a dot-command of the sqlite3 shell\n"
    "(-c '.tables', -c '.schema events') is run by that shell (native frames unnamed there).\n"
    "Queries read from standard input are SQL. The schema is in snapshot/README.md; start with\n"
    "  gpumem sql run.db -c 'SELECT * FROM allocations ORDER BY size DESC LIMIT 10'\n"
    "Where an allocation came from is its stack's call site with its caller, as report names\n"
    "it (stack_sites.site, \"t_alloc (gpt2.c:200) < layer_forward (gpt2.c:634)\"; its columns\n"
    "function, file and line are the site's frame alone; the table is made by gpumem sql;\n"
    "stack_frames may begin with the CUDA runtime's or its headers' frames, and in older\n"
    "recordings with gpumem's own):\n"
    "  gpumem sql run.db -c 'SELECT a.size, s.site FROM allocations a\n"
    "    LEFT JOIN stack_sites s ON s.stack = a.stack ORDER BY a.size DESC LIMIT 10'\n"
    "The database is read-only unless --write is given (a mistaken DELETE cannot destroy a\n"
    "recording).\n"
    "Exit code: 0, 2 usage, 3 unreadable database or failed query.\n";

static const char *const usage_export =
    "usage: gpumem export --format FORMAT DB [-o FILE] [--force] [--what peak|total]\n"
    "                     [--at peak|end|oom|SEQ] [--view torch|device] [--device N]\n"
    "\n"
    "Writes the recording in another tool's format (default: standard output). A program on\n"
    "several devices: trace, folded and speedscope are the busiest device's (a PyTorch\n"
    "program's: the busiest of its tensors' devices; said on stderr; each device has its own\n"
    "allocator); chrome, torch and csv keep each device apart.\n"
    "  --device N       device N's events only, in every format (trace, folded and speedscope:\n"
    "                   instead of the busiest device's); a device the program held no memory\n"
    "                   on is exit 2, naming the ones it did\n"
    "  --format trace   the allocator replay engine's text trace (gpumem-replay, alloc/README):\n"
    "                   one line per event, in recorded order:\n"
    "                     a <id> <size> <stream>   a device allocation (cudaMalloc, cudaMallocAsync)\n"
    "                     f <id>                   its cudaFree\n"
    "                     fa <id> <stream>         its cudaFreeAsync\n"
    "                   id = the allocation's event number (birth seq), size = the bytes the\n"
    "                   program requested, stream = the database's stream number (streams.id).\n"
    "                   Frees of memory not allocated in the recording are left out.\n"
    "  --format torch   PyTorch's memory snapshot pickle (torch.cuda.memory._dump_snapshot's\n"
    "                   format): segments and blocks at the peak (--at), device_traces with\n"
    "                   every alloc, free, segment map/unmap and OOM, with their frames (Python\n"
    "                   frames too) and tensor names (user_metadata), NVTX ranges as\n"
    "                   external_annotations, the allocator settings the recording ran with.\n"
    "                   A PyTorch program recorded with PyTorch's allocator: its tensors.\n"
    "                   Opens in pytorch.org/memory_viz and torch.cuda._memory_viz. Needs -o.\n"
    "  --at WHEN        (torch) the moment of the segments: peak (default: the peak allocated\n"
    "                   moment), end, oom (the first OOM), or an event's seq number\n"
    "  --format chrome  Chrome trace-event JSON (Perfetto, chrome://tracing): counters per\n"
    "                   device (allocated, reserved), NVTX ranges as slices per thread,\n"
    "                   allocations as async slices (name, size), OOMs as instant events.\n"
    "  --format folded  'frame;frame;frame bytes' lines for flamegraph.pl, inferno, speedscope:\n"
    "                   --what peak (default): device bytes live at the peak allocated moment\n"
    "                   (they sum to the report's peak allocated); --what total: all bytes\n"
    "                   ever allocated.\n"
    "  --format speedscope  speedscope's JSON file format: the peak and total profiles (or the\n"
    "                   one --what names).\n"
    "  --format csv     the `allocations` view (snapshot/README.md), with a header line.\n"
    "  --view torch|device  (chrome, folded, speedscope, csv) of a PyTorch program recorded on\n"
    "                   PyTorch's allocator: torch (the default there) its tensors, with their\n"
    "                   names and Python call sites, as report, leaks and diff show them (folded\n"
    "                   at the peak sums to max_memory_allocated()); device every device\n"
    "                   allocation (PyTorch's cached segments, cuBLAS's workspaces, unnamed).\n"
    "                   Other recordings have only the device's view. The output says which: the\n"
    "                   folded comment line, \"view\" in chrome and speedscope, csv's kind column.\n"
    "  -o FILE          write to FILE instead of standard output ('-': standard output). An\n"
    "                   existing FILE is replaced only when it is an export of the same format\n"
    "                   (or empty); never through a symbolic link, never onto DB. FILE is\n"
    "                   written whole or not at all (a temporary file, then renamed).\n"
    "  --force          replace FILE even when it is not an export of this format\n"
    "Example: gpumem export --format trace run.db -o run.trace &&\n"
    "         gpumem-replay --preset gpumem --conf expandable_segments:False run.trace\n"
    "         gpumem export --format folded run.db | flamegraph.pl > peak.svg\n"
    "Exit code: 0, 2 usage (or FILE refused), 3 unreadable database (or FILE cannot be written).\n";

static int wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) return 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    }
    return 0;
}

/* One line for the error, one for where the help is (the usage text names its command first:
 * "usage: gpumem report ..."). */
static int usage_error(const char *usage, const char *fmt, const char *arg) {
    char cmd[32] = "";
    sscanf(usage, "usage: gpumem %31s", cmd);
    fprintf(stderr, "gpumem %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(gpumem %s --help tells more)\n", cmd);
    return GM_EXIT_USAGE;
}

/* ---------------------------------------------------------------- report / leaks */

static int parse_common(int argc, char **argv, const char *usage, gm_opts *o, const char **db,
                        int leaks, int *frames_all, int *device) {
    o->json = 0, o->top = 10, o->fail_on_leak = 0, o->lossy_ok = 0;
    *frames_all = 0, *device = -1;
    *db = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) o->json = 1;
        else if (leaks && strcmp(a, "--fail-on-leak") == 0) o->fail_on_leak = 1;
        else if (strcmp(a, "--lossy-ok") == 0) o->lossy_ok = 1;
        else if (strcmp(a, "--top") == 0 || strncmp(a, "--top=", 6) == 0) {
            const char *v = a[5] == '=' ? a + 6 : gm_opt_value(argc, argv, &i);
            int rc = gm_arg_top(leaks ? "leaks" : "report", v, &o->top);
            if (rc) return rc;
        } else if (gm_opt_is_device(a)) {
            int rc = gm_arg_device(leaks ? "leaks" : "report", argc, argv, &i, device);
            if (rc) return rc;
        } else if (strcmp(a, "--frames") == 0 || strncmp(a, "--frames=", 9) == 0) {
            const char *v = a[8] == '=' ? a + 9 : gm_opt_value(argc, argv, &i);
            if (v && strcmp(v, "all") == 0) *frames_all = 1;
            else if (v && strcmp(v, "user") == 0) *frames_all = 0;
            else return usage_error(usage, "--frames takes user or all, got '%s'", v ? v : "");
        } else if (a[0] == '-' && a[1]) return usage_error(usage, "unknown option '%s'", a);
        else if (!*db) *db = a;
        else return usage_error(usage, "one database only; '%s' is extra", a);
    }
    if (!*db) return usage_error(usage, "%s", "which database? give its path");
    return 0;
}

static int cmd_report(int argc, char **argv, int leaks) {
    const char *usage = leaks ? usage_leaks : usage_report;
    if (wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    gm_opts o;
    const char *path;
    int frames_all, device;
    int rc = parse_common(argc, argv, usage, &o, &path, leaks, &frames_all, &device);
    if (rc) return rc;
    gm_db d;
    gm_model m;
    /* the report names a stack by its call site and caller only (gm_site_desc); leaks lists
     * whole stacks */
    if ((rc = gm_open_model(path, &d, &m, leaks)) != 0) return rc;
    if (!leaks) gm_symbolize_sites(&d, &m);
    /* events lost: refused, or (--lossy-ok) said first (on stderr under --json) */
    if ((rc = gm_lossy_gate(&d, leaks ? "leaks" : "report", o.lossy_ok, o.json ? stderr : stdout)) != 0 ||
        (rc = gm_damage_gate(&d, leaks ? "leaks" : "report", 1, o.lossy_ok, o.json ? stderr : stdout)) != 0) {
        gm_model_free(&m);
        gm_db_close(&d);
        return rc;
    }
    m.frames_all = frames_all;
    char err[8192];
    if (!leaks && gm_model_pick_device(&d, &m, device, err, sizeof err) != 0) { /* --device N leads */
        rc = gm_scope_fail("report", GM_SCOPE_NO_DEVICE, err, "the busiest device leading, each device's peaks said");
        gm_model_free(&m);
        gm_db_close(&d);
        return rc;
    }
    if (leaks) {
        /* several devices: the busiest device's (or --device's) allocations and steps, read again
         * (each device's leaks are its own memory; their sum is no device's) */
        int sc = gm_db_scope_one(&d, &m, device, err, sizeof err);
        if (sc == 1) {
            gm_model_free(&m);
            sc = gm_model_load(&d, &m, 1, err, sizeof err) == 0 ? 1 : -1;
            if (sc == 1) gm_symbolize(&d, &m), m.frames_all = frames_all;
        }
        if (sc < 0) {
            rc = gm_scope_fail("leaks", sc, err, "the busiest");
            gm_model_free(&m);
            gm_db_close(&d);
            return rc;
        }
        gm_scope_say(&d, "the leaked bytes and the growth per step", o.json ? stderr : stdout);
    }
    uint64_t leaked = 0;
    /* a PyTorch program's leaks are its tensors (gm_model_leak_view: the rule the ranks report
     * and viz share). Under --allocator gpumem (present == 2) the tensors are the recording's
     * own allocations: the torch view holds no tensors then, only PyTorch's peaks */
    gm_model tv = gm_model_leak_view(&m);
    rc = leaks ? gm_leaks(&d, &tv, &o, stdout, &leaked) : gm_report(&d, &m, &o, stdout);
    gm_model_free(&m);
    gm_db_close(&d);
    return rc;
}

/* ---------------------------------------------------------------- export */

static int cmd_export(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(usage_export, stdout);
        return 0;
    }
    const char *path = NULL, *format = NULL, *outpath = NULL, *at = NULL, *view_arg = NULL;
    int what = -1, force = 0, view = GM_VIEW_AUTO, device = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--force") == 0) {
            force = 1;
        } else if (gm_opt_is_device(a)) {
            int rc = gm_arg_device("export", argc, argv, &i, &device);
            if (rc) return rc;
        } else if (strcmp(a, "--at") == 0 || strncmp(a, "--at=", 5) == 0) {
            const char *v = a[4] == '=' ? a + 5 : gm_opt_value(argc, argv, &i);
            if (!v) return usage_error(usage_export, "%s", "--at needs peak, end, oom or an event's seq number");
            at = v; /* twice with two values: refused before (gm_args_repeats), as every option */
        } else if (strcmp(a, "--what") == 0 || strncmp(a, "--what=", 7) == 0) {
            const char *v = a[6] == '=' ? a + 7 : gm_opt_value(argc, argv, &i);
            if (v && strcmp(v, "peak") == 0) what = 0;
            else if (v && strcmp(v, "total") == 0) what = 1;
            else return usage_error(usage_export, "--what takes peak or total, got '%s'", v ? v : "");
        } else if (strcmp(a, "--view") == 0 || strncmp(a, "--view=", 7) == 0) {
            const char *v = a[6] == '=' ? a + 7 : gm_opt_value(argc, argv, &i);
            view_arg = v; /* twice with two values: refused before (gm_args_repeats) */
            if (v && strcmp(v, "torch") == 0) view = GM_VIEW_TORCH;
            else if (v && strcmp(v, "device") == 0) view = GM_VIEW_DEVICE;
            else return usage_error(usage_export, "--view takes torch or device, got '%s'", v ? v : "");
        } else if (strcmp(a, "--format") == 0 || strcmp(a, "-f") == 0) {
            const char *v = gm_opt_value(argc, argv, &i);
            if (!v) return usage_error(usage_export, "%s needs a format (trace, torch, chrome, folded, speedscope, csv)", a);
            format = v;
        } else if (strncmp(a, "--format=", 9) == 0) {
            format = a + 9;
        } else if (strcmp(a, "-o") == 0) {
            const char *v = gm_opt_value(argc, argv, &i);
            if (!v) return usage_error(usage_export, "%s", "-o needs a file name");
            outpath = v;
        } else if (a[0] == '-' && a[1]) {
            return usage_error(usage_export, "unknown option '%s'", a);
        } else if (!path) {
            path = a;
        } else {
            return usage_error(usage_export, "one database only; '%s' is extra", a);
        }
    }
    if (!format) return usage_error(usage_export, "%s", "which format? give --format trace, torch, chrome, folded, speedscope or csv");
    static const char *const formats[] = {"trace", "torch", "chrome", "folded", "speedscope", "csv"};
    static const gm_out_kind kinds[] = {GM_OUT_TRACE, GM_OUT_TORCH, GM_OUT_CHROME, GM_OUT_FOLDED, GM_OUT_SPEEDSCOPE, GM_OUT_CSV};
    int known = -1;
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (strcmp(format, formats[i]) == 0) known = (int)i;
    if (known < 0)
        return usage_error(usage_export, "unknown format '%s' (known: trace, torch, chrome, folded, speedscope, csv)", format);
    if (!path) return usage_error(usage_export, "%s", "which database? give its path");
    if (strcmp(format, "torch") == 0 && (!outpath || !strcmp(outpath, "-")) && isatty(STDOUT_FILENO))
        return usage_error(usage_export, "%s", "--format torch writes a binary pickle: give -o FILE (or redirect the output)");
    if (what >= 0 && strcmp(format, "folded") != 0 && strcmp(format, "speedscope") != 0)
        return usage_error(usage_export, "--what applies to --format folded and speedscope, not '%s'", format);
    if (view_arg && (strcmp(format, "trace") == 0 || strcmp(format, "torch") == 0))
        return usage_error(usage_export, "--view applies to --format chrome, folded, speedscope and csv, not '%s'", format);
    if (at && strcmp(format, "torch") != 0)
        return usage_error(usage_export, "--at applies to --format torch, not '%s'", format);
    char err[8192];
    const char *inputs[] = {path};
    /* the rule is checked before the (possibly long) reading, and again when the file opens */
    int bad = gm_out_check(outpath, kinds[known], force, inputs, 1, err, sizeof err);
    if (bad) {
        fprintf(stderr, "gpumem export: %s\n", err);
        return bad;
    }
    gm_db d;
    if (gm_db_open(path, &d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        return GM_EXIT_BADDB;
    }
    gm_lossy_say(&d, stderr); /* events lost: said first (the output is another tool's format) */
    gm_ending_say(&d, stderr); /* cut short: said too (and inside the formats that have room) */
    /* several devices: chrome (a counter per device), csv (a device column) and torch (a trace per
     * device) keep each device apart; the replay trace (one heap) and folded / speedscope (the
     * bytes live at the peak) are the busiest device's, each device having its own allocator */
    int one_heap = !strcmp(format, "trace") || !strcmp(format, "folded") || !strcmp(format, "speedscope");
    int sc = one_heap || device >= 0 ? gm_db_scope_one(&d, NULL, device, err, sizeof err) : 0;
    if (sc < 0) {
        gm_db_close(&d);
        return gm_scope_fail("export", sc, err, one_heap ? "the busiest" : "every device, each apart");
    }
    gm_scope_say(&d, !strcmp(format, "trace") ? "the trace's events" : one_heap ? "the bytes live at the peak" : "the exported events", stderr);
    gm_model m;
    int loaded = 0;
    if (strcmp(format, "trace") != 0 && strcmp(format, "csv") != 0) {
        if (gm_model_load(&d, &m, 1, err, sizeof err) != 0) {
            fprintf(stderr, "gpumem: %s\n", err);
            gm_model_free(&m);
            gm_db_close(&d);
            return GM_EXIT_BADDB;
        }
        loaded = 1;
        gm_symbolize(&d, &m);
    } else {
        gm_events_check(&d); /* the checks of a sweep (gm_damage_gate), for formats that read none */
    }
    if (gm_damage_gate(&d, "export", 0, 0, stderr)) { /* pages overwritten: refused */
        if (loaded) gm_model_free(&m);
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    uint64_t at_seq = 0;
    if (strcmp(format, "torch") == 0 && gm_export_at_seq(&m, at, &at_seq, err, sizeof err) != 0) {
        gm_model_free(&m);
        gm_db_close(&d);
        return usage_error(usage_export, "%s", err);
    }
    gm_out out;
    int rc = gm_out_open(&out, outpath, kinds[known], force, inputs, 1, err, sizeof err);
    if (rc) {
        fprintf(stderr, "gpumem export: %s\n", err);
    } else {
        rc = strcmp(format, "trace") == 0   ? gm_export_trace(&d, out.f)
             : strcmp(format, "torch") == 0 ? gm_export_torch(&d, &m, out.f, at_seq)
                                            : gm_export_format(&d, loaded ? &m : NULL, format, what, view, out.f);
        if (rc) {
            char fate[PATH_MAX + 64];
            gm_out_discard(&out);
            if (outpath) fprintf(stderr, "gpumem export: %s\n", gm_out_fate(&out, fate, sizeof fate));
        } else if ((rc = gm_out_commit(&out, err, sizeof err)) != 0) {
            fprintf(stderr, "gpumem export: %s\n", err);
        }
    }
    if (loaded) gm_model_free(&m);
    gm_db_close(&d);
    return rc;
}

/* ---------------------------------------------------------------- sql */

static int print_row(void *arg, int n, char **vals, char **cols) {
    int *header = arg;
    if (!*header) {
        for (int i = 0; i < n; i++) printf("%s%s", i ? "|" : "", cols[i]);
        putchar('\n');
        *header = 1;
    }
    for (int i = 0; i < n; i++) printf("%s%s", i ? "|" : "", vals[i] ? vals[i] : "");
    putchar('\n');
    return 0;
}

static int run_query(sqlite3 *db, const char *q) {
    int header = 0;
    char *err = NULL;
    if (sqlite3_exec(db, q, print_row, &header, &err) != SQLITE_OK) {
        if (sqlite3_errcode(db) == SQLITE_READONLY)
            fprintf(stderr, "gpumem sql: %s: databases are opened read-only, so that a query cannot "
                            "destroy a recording by mistake; add --write to change it\n",
                    err ? err : "read-only");
        else
            fprintf(stderr, "gpumem sql: %s\n", err ? err : "query failed");
        sqlite3_free(err);
        return GM_EXIT_BADDB;
    }
    return 0;
}

static int cmd_sql(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(usage_sql, stdout);
        return 0;
    }
    const char *path = NULL, *query = NULL;
    int write = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-c") == 0) {
            if (!(query = gm_opt_value(argc, argv, &i))) return usage_error(usage_sql, "%s", "-c needs a query");
        } else if (strcmp(argv[i], "--write") == 0) write = 1;
        else if (argv[i][0] == '-') return usage_error(usage_sql, "unknown option '%s'", argv[i]);
        else if (!path) path = argv[i];
        else if (!query)
            return usage_error(usage_sql, "one database only; '%s' is extra (a query goes after -c: "
                               "gpumem sql DB -c 'QUERY')", argv[i]);
        else return usage_error(usage_sql, "one database only; '%s' is extra", argv[i]);
    }
    if (!path) return usage_error(usage_sql, "%s", "which database? give its path");
    gm_db d;
    char err[8192];
    if (gm_db_open(path, &d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        return GM_EXIT_BADDB;
    }
    /* a dot-command (.tables, .schema) is the sqlite3 shell's, not SQL: the shell runs it, on the
     * database checked to be gpumem's as every query's is */
    if (query && query[strspn(query, " \t\r\n")] == '.') {
        const char *dot = query + strspn(query, " \t\r\n");
        gm_db_close(&d);
        fflush(NULL);
        if (write) execlp("sqlite3", "sqlite3", "-bail", path, dot, (char *)NULL);
        else execlp("sqlite3", "sqlite3", "-bail", "-readonly", path, dot, (char *)NULL);
        return usage_error(usage_sql,
                           "-c '%s' is a dot-command of the sqlite3 shell, which is not installed "
                           "(apt-get install sqlite3); without it -c takes SQL, e.g. -c \"SELECT name FROM "
                           "sqlite_master WHERE type = 'table'\"",
                           dot);
    }
    if (write && gm_db_allow_writes(&d, 1) != 0) {
        fprintf(stderr, "gpumem: %s cannot be written (file permissions)\n", path);
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    int rc = 0;
    /* names of native frames: symbolized in memory and shown through TEMP tables that shadow
     * frames / inlines / stack_frames, with stack_sites beside them (the file is never written
     * by a reader); only when the query can see them, and not with --write (then the tables are
     * the file's own) */
    if (!write && (!query || strcasestr(query, "frames") || strcasestr(query, "inlines") ||
                   strcasestr(query, "stack_sites"))) {
        gm_model m;
        if (gm_model_load_tables(&d, &m, err, sizeof err) == 0) {
            gm_symbolize(&d, &m);
            gm_symbols_temp(&d, &m);
        }
        gm_model_free(&m);
    }
    if (query) {
        rc = run_query(d.db, query);
    } else if (isatty(0)) {
        gm_db_close(&d);
        fprintf(stderr, "gpumem: note: the sqlite3 shell reads the file as recorded, native frames "
                        "unnamed; gpumem sql DB -c 'QUERY' names them\n");
        if (write) execlp("sqlite3", "sqlite3", path, (char *)NULL);
        else execlp("sqlite3", "sqlite3", "-readonly", path, (char *)NULL);
        fprintf(stderr, "gpumem: the sqlite3 shell is not installed (apt-get install sqlite3); "
                        "reading queries from standard input instead\n");
        if (gm_db_open(path, &d, err, sizeof err) != 0) return GM_EXIT_BADDB;
        if (write) gm_db_allow_writes(&d, 1);
        gm_model m;
        if (!write && gm_model_load_tables(&d, &m, err, sizeof err) == 0) {
            gm_symbolize(&d, &m);
            gm_symbols_temp(&d, &m);
        }
        if (!write) gm_model_free(&m);
    }
    if (!query) {
        char line[65536];
        unsigned ln = 0;
        while (fgets(line, sizeof line, stdin)) {
            const char *q = line + strspn(line, " \t\r\n");
            ln++;
            if (*q == '.') { /* the shell's, not SQL: said, and the lines after it still run */
                q = strtok(line, "\r\n");
                fprintf(stderr, "gpumem sql: line %u: '%s' is a dot-command of the sqlite3 shell; queries "
                                "on standard input are SQL: give a dot-command with -c '%s', or pipe "
                                "the lines to sqlite3 -readonly %s (native frames unnamed there)\n",
                        ln, q + strspn(q, " \t"), q + strspn(q, " \t"), path);
                if (!rc) rc = GM_EXIT_USAGE;
            } else if (*q && run_query(d.db, line) != 0) {
                rc = GM_EXIT_BADDB;
            }
        }
    }
    gm_db_close(&d);
    return rc;
}

/* ---------------------------------------------------------------- record */

static void self_dir(char *out, size_t n) {
    ssize_t r = readlink("/proc/self/exe", out, n - 1);
    out[r > 0 ? r : 0] = 0;
    char *s = strrchr(out, '/');
    if (s) *s = 0;
    else snprintf(out, n, ".");
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int gpu_driver_usable(void) {
    if (!file_exists("/dev/nvidiactl")) return 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
    dlclose(h);
    return 1;
}

static void prepend_env(const char *name, const char *value, char sep) {
    const char *old = getenv(name);
    if (old && *old) {
        size_t n = strlen(value) + strlen(old) + 2;
        char *v = malloc(n);
        if (!v) return;
        snprintf(v, n, "%s%c%s", value, sep, old);
        setenv(name, v, 1);
        free(v);
    } else {
        setenv(name, value, 1);
    }
}

static const char *gm_prog = "gpumem";

/* Reads the side channel (rec_status lines "<pid> db <path>" / "<pid> msg <text>"): the
 * database the recorded process (pid, or else the first process of the run that recorded — a
 * shell wrapper forks before the real program) wrote, or the first message saying why none.
 * A program that exec'd wrote one database per image: path is the last one's, earlier lists the
 * ones before it ("A, B"; "" when there was one). others lists the databases of the run's other
 * processes ("FILE (pid N), ..."; a launcher script's steps, each in its own file). *unwritten:
 * a process could not write its database at all (disk full, I/O error: the recorder said so and
 * removed the file). Returns 1 with path set, 0 with why set ("" when nobody said anything). */
/* a before b, as a run's files go: by name without the ".db" that ends them, so that a name
 * that is the start of the other comes first (k.db before k-123.db) */
static int db_name_before(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la >= 3 && !strcmp(a + la - 3, ".db")) la -= 3;
    if (lb >= 3 && !strcmp(b + lb - 3, ".db")) lb -= 3;
    int c = strncmp(a, b, la < lb ? la : lb);
    return c < 0 || (c == 0 && la < lb);
}

static int read_status(int fd, pid_t pid, char *path, size_t pathsz, char *earlier, size_t earliersz,
                       char *others, size_t otherssz, char *why, size_t whysz, gm_run_db *dbs, size_t maxdbs,
                       size_t *ndbs, int *unwritten) {
    path[0] = earlier[0] = others[0] = why[0] = 0;
    *ndbs = 0;
    *unwritten = 0;
    FILE *f = fdopen(dup(fd), "r");
    if (!f) return 0;
    rewind(f);
    char line[1200];
    int mine = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *sp1 = strchr(line, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
        if (!sp2) continue;
        *sp1 = *sp2 = 0;
        long p = strtol(line, NULL, 10);
        const char *what = sp1 + 1, *text = sp2 + 1;
        if (strcmp(what, "db") == 0) {
            size_t k = 0; /* each process's last database (an exec'd one records again) */
            while (k < *ndbs && dbs[k].pid != p) k++;
            if (k < maxdbs) {
                dbs[k].pid = p;
                dbs[k].empty = 0;
                snprintf(dbs[k].path, sizeof dbs[k].path, "%s", text);
                if (k == *ndbs) (*ndbs)++;
            }
            if (p == (long)pid) { /* the last: a program that exec'd recorded again, beside */
                if (mine) {
                    size_t l = strlen(earlier);
                    snprintf(earlier + l, earliersz - l, "%s%s", l ? ", " : "", path);
                }
                snprintf(path, pathsz, "%s", text), mine = 1;
            }
        } else if (strcmp(what, "empty") == 0) {
            /* a child that used no GPU: its recorder removed its file, which is not listed */
            for (size_t k = 0; k < *ndbs; k++)
                if (dbs[k].pid == p && !strcmp(dbs[k].path, text)) dbs[k].empty = 1;
        } else if (strcmp(what, "unwritten") == 0) {
            if (p == (long)pid || !*unwritten) *unwritten = 1; /* said on stderr by the recorder */
        } else if (strcmp(what, "msg") == 0 && !why[0]) {
            snprintf(why, whysz, "%s", text);
        }
    }
    fclose(f);
    /* The recorded process's own; else (a launcher that recorded nothing itself) the first of
     * its processes' files by name, compared without the ".db" that ends them (db_name_before):
     * run-0.db before run-1.db (ranks: torchrun's workers open at the same moment, in either
     * order), and k.db, the first to open, before k-<pid>.db, the later ones (a plain strcmp put
     * "k-" first: '-' sorts before '.'). */
    long chosen = mine ? (long)pid : 0;
    for (size_t k = 0; !mine && k < *ndbs; k++)
        if (!dbs[k].empty && (!path[0] || db_name_before(dbs[k].path, path)))
            snprintf(path, pathsz, "%s", dbs[k].path), chosen = dbs[k].pid;
    for (size_t k = 0; k < *ndbs; k++) {
        if (dbs[k].pid == chosen || dbs[k].empty) continue;
        size_t l = strlen(others);
        if (l + 8 >= otherssz) break;
        if (snprintf(others + l, otherssz - l, "%s%s (pid %ld)", l ? ", " : "", dbs[k].path, dbs[k].pid) >=
            (int)(otherssz - l))
            snprintf(others + otherssz - 5, 5, "...");
    }
    return path[0] != 0;
}

/* path, written by the recorder as absolute, as the user named it: from dir (record's working
 * directory) when it is under it ("run.db", "out/run.db"), else as it is. */
static void shown_from(const char *dir, char *path) {
    size_t dl = strlen(dir);
    if (dl > 1 && strncmp(path, dir, dl) == 0 && path[dl] == '/' && path[dl + 1])
        memmove(path, path + dl + 1, strlen(path + dl + 1) + 1);
}

/* The same for each name of a list ("A, B (pid 12), ..."): a name starts the list or follows ", ". */
static void shown_list_from(const char *dir, char *list, size_t n) {
    size_t dl = strlen(dir);
    if (dl <= 1) return;
    char out[4096];
    size_t o = 0;
    for (const char *p = list; *p && o + 1 < sizeof out;) {
        int start = p == list || (p - list >= 2 && p[-2] == ',' && p[-1] == ' ');
        if (start && strncmp(p, dir, dl) == 0 && p[dl] == '/' && p[dl + 1]) p += dl + 1;
        out[o++] = *p++;
    }
    out[o] = 0;
    snprintf(list, n, "%s", out);
}

/* How the program ended, for the diagnosis: "" when it exited with status 0; else "exited with
 * status 2" or "was killed by signal 11 (Segmentation fault)". */
static void program_end(int st, char *out, size_t n) {
    out[0] = 0;
    if (WIFEXITED(st) && WEXITSTATUS(st)) snprintf(out, n, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(out, n, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
}

/* A crash under GPUMEM_SIM_BACKING=virtual: that backing keeps the accounting and the addresses
 * but no memory, so a program that computes (reads or writes device memory) faults. */
static void virtual_backing_hint(int st) {
    const char *b = getenv("GPUMEM_SIM_BACKING");
    if (WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS) && b && !strcmp(b, "virtual"))
        fprintf(stderr, "gpumem: GPUMEM_SIM_BACKING=virtual backs no device memory: a program that reads or "
                        "writes it crashes. Use it for memory-only runs (the trainer's --dry-run), or unset "
                        "it to compute\n");
}

/* The summary of this run's own database (never of a file an earlier run left there). st: how
 * the program ended (waitpid's status): a program that failed is said to have failed, never to
 * have made no allocation or to have called what gpumem does not interpose. */
/* A recording whose writer failed (a full disk) leaves FILE-wal beside FILE, part of it: fold it
 * in if the disk now lets us, so FILE alone is the recording. 1 when a -wal is still there. */
static int fold_wal(const char *path) {
    if (gm_db_wal_bytes(path) <= 0) return 0; /* the side file's name: one place (rec_db_side) */
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK)
        sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    sqlite3_close(db);
    return gm_db_wal_bytes(path) > 0;
}

/* Whether the recording at path says its writer failed (meta.state; for -q, which reads no model) */
static int recording_failed(const char *path) {
    /* -q leaves the recording as the run left it (a killed one's -wal not folded in, no -shm
     * made or written): the summary reads nothing else */
    gm_db d;
    char err[8192];
    if (gm_db_open_as_found(path, &d, err, sizeof err) != 0) return 0;
    int failed = strcmp(d.state, "failed") == 0;
    gm_db_close(&d);
    return failed;
}

static uint64_t summarise_run(int found, const char *path, const char *why, pid_t pid, int st, int others,
                              int *failed) {
    uint64_t nallocs = 0;
    int64_t lost = 0;
    *failed = 0;
    char end[128];
    program_end(st, end, sizeof end);
    if (!found) {
        if (end[0])
            fprintf(stderr, "gpumem: nothing was recorded: the program (pid %ld) %s before any of its CUDA "
                            "calls reached gpumem; its own messages above say why\n", (long)pid, end);
        else if (why[0])
            fprintf(stderr, "gpumem: nothing was recorded: %s\n", why);
        else
            fprintf(stderr, "gpumem: nothing was recorded: the program (pid %ld) made no CUDA call "
                            "that reached gpumem, or libgpumem.so could not be loaded\n", (long)pid);
        virtual_backing_hint(st);
        return 0;
    }
    gm_db d;
    gm_model m;
    char err[8192];
    if (gm_db_open(path, &d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        return 0;
    }
    if (gm_model_load(&d, &m, 0, err, sizeof err) == 0) {
        /* a recording exists because the program's CUDA calls reached gpumem: with no
         * allocation in it, the program made none through any path gpumem interposes; unless
         * events were lost, when the counts are only what was kept (the summary says so), or the
         * program failed (then that is the news) */
        int whole = gm_summary_short(&d, &m, stderr);
        /* what the program allocated: gpumem's allocations, and also the memory a program maps
         * itself (PyTorch's expandable segments) and PyTorch's tensors, which are none of them */
        nallocs = m.nallocs + m.torch.nallocs + (m.peak_vmm > 0);
        *failed = strcmp(d.state, "failed") == 0;
        lost = (int64_t)gm_dropped(&d);
        if (end[0] && !d.closed)
            fprintf(stderr, "gpumem: the program %s; the recording holds what was committed up to ~100 ms "
                            "before the end (the counts above)\n", end);
        else if (end[0] && !nallocs && others)
            fprintf(stderr, "gpumem: the program %s; its own messages above say why\n", end);
        else if (end[0] && !nallocs)
            fprintf(stderr, "gpumem: the program %s before it made any device or pinned allocation; its own "
                            "messages above say why\n", end);
        else if (end[0])
            fprintf(stderr, "gpumem: the program %s; the recording covers its run up to then\n", end);
        else if (whole && !nallocs && !others) { /* with others: where its allocations are, below */
            /* meta.mode is written when a CUDA call first reaches gpumem (preload/core.c); a
             * recording without it was opened by a range alone (PyTorch's module hooks on the CPU) */
            char mode[32];
            gm_meta_text(&d, "mode", mode, sizeof mode);
            if (mode[0])
                fprintf(stderr, "gpumem: the program's CUDA calls reached gpumem, but it made no "
                                "device or pinned allocation\n");
            else
                fprintf(stderr, "gpumem: the program made no CUDA call that reached gpumem: the recording "
                                "holds its ranges only (PyTorch on the CPU, or NVTX without CUDA)\n");
        }
    } else {
        fprintf(stderr, "gpumem: %s\n", err);
    }
    virtual_backing_hint(st);
    gm_model_free(&m);
    gm_db_close(&d);
    /* report refuses a recording that lost events: point at what reads it, or say it holds
     * nothing worth reading */
    if ((*failed || lost > 0) && !nallocs)
        fprintf(stderr, "gpumem: %s holds no allocation of the program (%" PRId64 " events were lost): nothing "
                        "in it is worth reading; %s and record again\n", path, lost,
                *failed ? "free space where it goes (or choose another -o)" : "raise GPUMEM_RING");
    else if (*failed || lost > 0)
        fprintf(stderr, "gpumem: recorded to %s, %" PRId64 " events lost: %s report --lossy-ok %s reads what was "
                        "kept (its peaks can be too low)\n", path, lost, gm_prog, path);
    else
        fprintf(stderr, "gpumem: recorded to %s; see %s report %s\n", path, gm_prog, path);
    if (*failed && fold_wal(path))
        fprintf(stderr, "gpumem: %s-wal beside it holds part of the recording (the full disk kept it from being "
                        "folded in): keep the two together (copy both, or read %s where it is)\n", path, path);
    return nallocs;
}

/* The first "<pid> pluggable <error>" line of the side channel: gpumem/_torch.py writes it when
 * a Python program stopped on a limit of PyTorch's pluggable-allocator interface (under
 * --allocator gpumem: "pluggable does not yet support checkPoolLiveAllocations", which CUDA
 * graph trees call). Its traceback alone does not say that gpumem's allocator is the cause. */
static void pluggable_limit(int fd, char *out, size_t n) {
    out[0] = 0;
    FILE *f = fdopen(dup(fd), "r");
    if (!f) return;
    rewind(f);
    char line[1200];
    while (!out[0] && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *w = strchr(line, ' ');
        if (w && strncmp(w + 1, "pluggable ", 10) == 0) snprintf(out, n, "%s", w + 11);
    }
    fclose(f);
}

/* Before the program runs (it may run for hours): can the database go where it was asked to?
 * The recorder makes the same checks on the file it opens; doing them here too turns a
 * recording that would silently not happen into an error the user sees at once. A template
 * with %p names a file that does not exist yet, so only its directory can be checked. */
static int check_record_target(const char *tmpl, int force, const char *prog) {
    char path[PATH_MAX], err[PATH_MAX + 256];
    if (rec_expand_path(tmpl, 0, path, sizeof path) != 0 || !path[0]) {
        fprintf(stderr, "gpumem: -o %s: the path is empty or too long\n", tmpl);
        return GM_EXIT_USAGE;
    }
    if (strstr(tmpl, "%p")) {
        /* the real pid's file is new: only its directory can be checked, and the message names
         * the file as the user will see it (gpumem-<pid>.db) and the directory as it really is
         * (not "."), since neither was typed when the name is the default */
        char dir[PATH_MAX], real[PATH_MAX], shown[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (!slash) snprintf(dir, sizeof dir, ".");
        else if (slash == dir) dir[1] = 0;
        else *slash = 0;
        size_t n = 0;
        for (const char *t = tmpl; *t && n + 8 < sizeof shown; t++) {
            if (t[0] == '%' && t[1] == 'p') n += (size_t)snprintf(shown + n, sizeof shown - n, "<pid>"), t++;
            else shown[n++] = *t;
        }
        shown[n] = 0;
        struct stat ds;
        const char *why = stat(dir, &ds) != 0 || !S_ISDIR(ds.st_mode) ? "does not exist"
                          : access(dir, W_OK | X_OK) != 0              ? "is not writable"
                                                                       : NULL;
        if (why) {
            fprintf(stderr, "gpumem: cannot write %s: the directory %s %s; give -o with a place you may write "
                            "(gpumem record -o /tmp/run.db -- ...)\n",
                    shown, realpath(dir, real) ? real : dir, why);
            return GM_EXIT_USAGE;
        }
        return 0;
    }
    /* the output rule every writer follows (gm_out.h); the recorder then writes the file in
     * place, as it goes (a recording must survive a kill -9 of the program), which is why it
     * must also be a regular file and not a device */
    const char *inputs[] = {prog}; /* -o ./train -- ./train */
    int bad = gm_out_check(path, GM_OUT_DB, force, inputs, 1, err, sizeof err);
    if (bad) {
        fprintf(stderr, "gpumem: %s\n", err);
        return bad;
    }
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        fprintf(stderr, "gpumem: %s exists and is not a regular file; choose another -o\n", path);
        return GM_EXIT_USAGE;
    }
    /* an earlier recording is replaced in place (the recorder opens it for writing, it does not
     * rename a new file over it): one this user cannot write would leave the run unrecorded */
    if (lstat(path, &st) == 0 && access(path, R_OK | W_OK) != 0) {
        fprintf(stderr, "gpumem: -o %s: cannot write it: %s; choose another -o, or make it writable\n", path,
                strerror(errno));
        return GM_EXIT_USAGE;
    }
    return 0;
}

/* Why the program could not be started, and what to type instead: the three ways it goes wrong
 * are a script in the current directory given without ./ (execvp searches PATH only), a script
 * without its execute bit, and a directory. */
static void exec_failed(const char *prog, int e) {
    struct stat st;
    int here = stat(prog, &st) == 0;
    if (here && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "gpumem: cannot run %s: it is a directory; give the program to record after --\n", prog);
    } else if (e == ENOENT && !strchr(prog, '/') && here) {
        fprintf(stderr, "gpumem: cannot run %s: it is not on PATH; the one in this directory is ./%s "
                        "(gpumem record -- ./%s, or -- python3 %s for a script)\n", prog, prog, prog, prog);
    } else if (e == EACCES && here && S_ISREG(st.st_mode)) {
        fprintf(stderr, "gpumem: cannot run %s: Permission denied: it is not executable; chmod +x %s, or give "
                        "its interpreter (gpumem record -- python3 %s)\n", prog, prog, prog);
    } else {
        fprintf(stderr, "gpumem: cannot run %s: %s\n", prog, strerror(e));
    }
}

static int cmd_record(int argc, char **argv) {
    const char *out = NULL, *allocator = "torch";
    int quiet = 0, force = 0, i = 1, torch_history = 1, torch_hooks = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_record, stdout);
            return 0;
        }
        if (strcmp(argv[i], "-o") == 0) {
            if (!(out = gm_opt_value(argc, argv, &i)))
                return usage_error(usage_record, "%s", "-o needs a file name (gpumem record -o run.db -- CMD)");
        } else if (strcmp(argv[i], "-q") == 0) quiet = 1;
        else if (strcmp(argv[i], "--force") == 0) force = 1;
        else if (strcmp(argv[i], "--no-torch-history") == 0) torch_history = 0;
        else if (strcmp(argv[i], "--no-torch-hooks") == 0) torch_hooks = 0;
        else if (strcmp(argv[i], "--torch-ops") == 0) setenv("GPUMEM_TORCH_OPS", "1", 1);
        else if (strcmp(argv[i], "--allocator") == 0 || strncmp(argv[i], "--allocator=", 12) == 0) {
            const char *v = argv[i][11] == '=' ? argv[i] + 12 : gm_opt_value(argc, argv, &i);
            if (!v) v = "";
            if (strcmp(v, "torch") != 0 && strcmp(v, "gpumem") != 0)
                return usage_error(usage_record, "--allocator takes torch or gpumem, got '%s'", v);
            allocator = v;
        }
        else if (argv[i][0] == '-') return usage_error(usage_record, "unknown option '%s'", argv[i]);
        else break; /* the command, without "--" */
    }
    if (i >= argc) return usage_error(usage_record, "%s", "which command to record? gpumem record -- ./prog args");
    /* The settings, with the very parser libgpumem.so reads them with: one it cannot read
     * would turn gpumem off for the whole run, which would then record nothing */
    rec_settings set;
    alloc_config_t conf;
    char set_err[1024];
    if (rec_settings_read(&set, &conf, set_err, sizeof set_err) != 0) {
        fprintf(stderr, "gpumem record: %s; fix or unset it (the program was not started)\n", set_err);
        return GM_EXIT_USAGE;
    }
    /* a misspelled name (GPUMEM_LIMIT with a letter left out) would run the program without what was asked, as a bad
     * value would: refused the same way */
    if (rec_settings_unknown(set_err, sizeof set_err)) {
        fprintf(stderr, "gpumem record: %s; fix or unset it (the program was not started)\n", set_err);
        return GM_EXIT_USAGE;
    }
    /* -o, else the preload's own GPUMEM_DB (the setting a user of LD_PRELOAD has), else the
     * default; GPUMEM_DB=none (record nothing) contradicts the command */
    const char *env_db = getenv("GPUMEM_DB");
    if (!out && env_db && (!strcmp(env_db, "none") || !strcmp(env_db, "off"))) {
        fprintf(stderr, "gpumem record: GPUMEM_DB=%s records nothing, which gpumem record is for: "
                        "unset it, or give -o FILE (the program was not started)\n", env_db);
        return GM_EXIT_USAGE;
    }
    const char *tmpl = out ? out : env_db && *env_db ? env_db : REC_DEFAULT_DB;
    int bad = check_record_target(tmpl, force, argv[i]);
    if (bad) return bad;
    /* the program is given the name from here: it may chdir before its first CUDA call, and its
     * exec'd images and children may start elsewhere; the file goes where this command said */
    char cwd[PATH_MAX], abs_tmpl[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
    if (tmpl[0] != '/' && (!cwd[0] || rec_path_from(cwd, tmpl, abs_tmpl, sizeof abs_tmpl) != 0)) {
        fprintf(stderr, "gpumem: -o %s: %s; give an absolute -o (the program was not started)\n", tmpl,
                cwd[0] ? "the path is too long once made absolute" : "the current directory cannot be named");
        return GM_EXIT_USAGE;
    }
    if (tmpl[0] == '/') snprintf(abs_tmpl, sizeof abs_tmpl, "%s", tmpl);
    char dir[PATH_MAX], lib[PATH_MAX + 64], sim[PATH_MAX + 64];
    self_dir(dir, sizeof dir);
    snprintf(lib, sizeof lib, "%s/libgpumem.so", dir);
    if (!file_exists(lib)) snprintf(lib, sizeof lib, "%s/../lib/gpumem/libgpumem.so", dir);
    if (!file_exists(lib)) {
        fprintf(stderr, "gpumem: libgpumem.so is neither in %s nor in %s/../lib/gpumem; build it "
                        "(make) or reinstall gpumem\n", dir, dir);
        return GM_EXIT_NOLIB;
    }
    char *rl = realpath(lib, NULL);
    if (rl) {
        snprintf(lib, sizeof lib, "%s", rl);
        free(rl);
    }
    int on_sim = 0;
    if (!gpu_driver_usable()) {
        /* the virtual GPU: build tree (sim/ next to gpumem) or installed (../lib/gpumem/sim, or
         * ../lib/gpumem itself, where make install puts its libraries) */
        static const char *const where[] = {"%s/sim", "%s/../lib/gpumem/sim", "%s/../lib/gpumem"};
        int found = 0;
        for (size_t k = 0; k < sizeof where / sizeof where[0] && !found; k++) {
            char probe[PATH_MAX + 96];
            snprintf(sim, sizeof sim, where[k], dir);
            snprintf(probe, sizeof probe, "%s/libcuda.so.1", sim);
            found = file_exists(probe);
        }
        if (found) {
            char *rs = realpath(sim, NULL);
            if (rs) {
                snprintf(sim, sizeof sim, "%s", rs);
                free(rs);
            }
            prepend_env("LD_LIBRARY_PATH", sim, ':');
            on_sim = 1;
            if (!quiet) fprintf(stderr, "gpumem: no usable GPU driver; running on the virtual GPU (%s)\n", sim);
        } else if (!quiet) {
            fprintf(stderr, "gpumem: no usable GPU driver and no virtual GPU next to gpumem; "
                            "CUDA calls of the program will fail\n");
        }
    }
    gm_torch_run torch;
    if (gm_torch_prepare(&torch, argv[i], dir, on_sim ? sim : NULL, allocator, torch_history, torch_hooks,
                         quiet) != 0)
        return 127;
    if (!quiet) gm_torch_warn_flags(&torch, argv + i);
    prepend_env("LD_PRELOAD", lib, ':');
#ifdef __SANITIZE_ADDRESS__
    /* a gpumem built with AddressSanitizer (make SAN=address) preloads a library built with it
     * into a program that is not: ASan's runtime then comes in with the library, after the
     * program's own, which ASan refuses unless told that the order is known */
    prepend_env("ASAN_OPTIONS", "verify_asan_link_order=0", ':');
#endif
    setenv("GPUMEM_QUIET", "1", 1);
    /* the side channel (rec_status): which database this run wrote, or why none; an unlinked
     * file read back through our own descriptor, so nothing is left behind */
    char status_path[PATH_MAX];
    const char *td = getenv("TMPDIR");
    snprintf(status_path, sizeof status_path, "%s/gpumem-record-XXXXXX", td && *td ? td : "/tmp");
    int status_fd = mkostemp(status_path, O_CLOEXEC);
    if (status_fd >= 0) setenv("GPUMEM_RECORD_STATUS", status_path, 1);
    /* this run's name, in every database its processes write: none replaces another's (a
     * launcher script's steps), as a file left by an earlier run would be */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char run_id[64];
    snprintf(run_id, sizeof run_id, "%ld-%lld%09ld", (long)getpid(), (long long)now.tv_sec, now.tv_nsec);
    setenv("GPUMEM_RECORD_RUN", run_id, 1);
    if (force) setenv("GPUMEM_DB_FORCE", "1", 1);
    /* Ctrl-C is for the program: we stay to report. So is a hangup (the terminal or ssh
     * session closed; it reaches the program too), and a SIGTERM: we stay to merge PyTorch's
     * history and summarise, which a closed terminal may not show but the database keeps. A
     * signal sent to us alone (kill PID, Popen.terminate(), a supervisor) is passed on to the
     * program, which would otherwise run on, orphaned, its recording growing; one the terminal
     * sent to the whole group reached the program already and is not sent twice (gm_sig.h). */
    fflush(NULL);
    pid_t pid = gm_sig_fork();
    if (pid < 0) {
        fprintf(stderr, "gpumem: cannot fork: %s\n", strerror(errno));
        return 127;
    }
    if (pid == 0) {
        setenv("GPUMEM_DB", abs_tmpl, 1);
        /* the program is its tree's first process (rec.c remove_if_unused), also when this
         * record runs inside another recorded program */
        unsetenv("GPUMEM_RECORD_ROOT");
        gm_torch_child(&torch);
        execvp(argv[i], argv + i);
        exec_failed(argv[i], errno);
        _exit(127);
    }
    int st = 0;
    (void)gm_sig_wait_child(pid, &st); /* a signal that came was passed on: we exit as the program did */
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGINT, &ign, NULL); /* the summary is still to come */
    sigaction(SIGQUIT, &ign, NULL);
    sigaction(SIGHUP, &ign, NULL);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
    char path[PATH_MAX], earlier[4096], others[4096], why[1024];
    static gm_run_db dbs[256];
    size_t ndbs = 0;
    int unwritten = 0;
    int found = status_fd >= 0 && read_status(status_fd, pid, path, sizeof path, earlier, sizeof earlier, others,
                                              sizeof others, why, sizeof why, dbs, 256, &ndbs, &unwritten);
    char pluggable[1024] = "";
    if (status_fd >= 0) pluggable_limit(status_fd, pluggable, sizeof pluggable);
    if (status_fd >= 0) close(status_fd), unlink(status_path);
    /* the files as the user named them: from here, as -o was */
    shown_from(cwd, path);
    for (size_t k = 0; k < ndbs; k++) shown_from(cwd, dbs[k].path);
    shown_list_from(cwd, earlier, sizeof earlier);
    shown_list_from(cwd, others, sizeof others);
    struct stat fst;
    if (found && stat(path, &fst) != 0) {
        /* the recorder said it wrote it: a summary of nothing, or an exit 0, would be a lie */
        char end[128];
        program_end(st, end, sizeof end);
        fprintf(stderr, "gpumem: the recorder said it wrote %s, but it is not there (%s): it was moved or removed "
                        "while the program ran; the program %s; exit %d: the recording is lost\n",
                path, strerror(errno), end[0] ? end : "exited with status 0", GM_EXIT_BADDB);
        return GM_EXIT_BADDB;
    }
    gm_torch_finish(&torch, found ? path : NULL, dbs, ndbs, quiet);
    uint64_t nallocs = 0;
    if (unwritten && !found) {
        /* the recorder said why (one line above); the program's own status stays visible, and
         * the exit code says the recording could not be written, as export's does */
        char end[128];
        program_end(st, end, sizeof end);
        fprintf(stderr, "gpumem: nothing was recorded; the program %s; exit %d: the recording could not be "
                        "written\n", end[0] ? end : "exited with status 0", GM_EXIT_BADDB);
        return GM_EXIT_BADDB;
    }
    int failed = 0;
    if (!quiet && !(rc == 127 && !found))
        nallocs = summarise_run(found, path, why, pid, st, others[0] != 0, &failed);
    else if (found) failed = recording_failed(path);
    if (!quiet && found && earlier[0])
        fprintf(stderr, "gpumem: the program exec'd: its recording from before that is %s (the summary above is "
                        "the last one's)\n", earlier);
    if (!quiet && found && others[0] && !nallocs)
        fprintf(stderr, "gpumem: %s (the summary above) holds no allocation: the run's allocations are in its other "
                        "processes' files (a launcher's workers, a script's steps): %s; see %s report FILE, or "
                        "%s report FILE FILE ... for ranks side by side\n", path, others, gm_prog, gm_prog);
    else if (!quiet && found && others[0])
        fprintf(stderr, "gpumem: other processes of this run recorded too, each in its own file: %s (the summary "
                        "above is %s's)\n", others, path);
    if (!quiet && rc && pluggable[0])
        fprintf(stderr, "gpumem: the program stopped on a limit of PyTorch's pluggable-allocator interface, "
                        "which --allocator gpumem uses (\"%s\"): record it without --allocator gpumem "
                        "(under PyTorch's allocator; torch.compile's mode=\"reduce-overhead\" needs it)\n",
                pluggable);
    if (failed) {
        /* the writer failed once the program ran (a full disk): FILE is not the whole run */
        char end[128];
        program_end(st, end, sizeof end);
        fprintf(stderr, "gpumem: the program %s; exit %d: the recording could not be written whole\n",
                end[0] ? end : "exited with status 0", GM_EXIT_BADDB);
        return GM_EXIT_BADDB;
    }
    return rc;
}

/* The command a typo most likely meant, or NULL when none is close (at most 2 edits). */
static const char *nearest_command(const char *c) {
    static const char *const cmds[] = {"record", "report", "leaks", "sql", "export", "uses", "advise", "frag", "tune",
                                       "import", "diff", "viz", "flamegraph"};
    const char *best = NULL;
    int bd = 3;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        int dd = rec_edit_distance(c, cmds[i]);
        if (dd < bd) bd = dd, best = cmds[i];
    }
    return best;
}

static int run_command(int argc, char **argv) {
    /* linked as flamegraph.pl (where PyTorch's memory_viz runs it): the flame graph command */
    const char *base = argv[0] ? strrchr(argv[0], '/') : NULL;
    base = base ? base + 1 : argv[0];
    if (base && strcmp(base, "flamegraph.pl") == 0)
        return gm_args_repeats("flamegraph", argc, argv) ?: gm_cmd_flamegraph(argc, argv);
    if (argc < 2) {
        fputs(usage_main, stderr);
        return GM_EXIT_USAGE;
    }
    const char *c = argv[1];
    /* `gpumem help CMD` is `gpumem CMD --help`: a reader who typed the command's name wants
     * its page, not the list again (and a typo there is the same usage error as anywhere) */
    if (strcmp(c, "help") == 0 && argc >= 3 && strcmp(argv[2], "--help") && strcmp(argv[2], "-h")) {
        const char *near = nearest_command(argv[2]);
        if (argc > 3 || !near || strcmp(near, argv[2]) != 0) {
            if (argc > 3) fprintf(stderr, "gpumem help: one command at a time (gpumem help COMMAND)\n");
            else if (near) fprintf(stderr, "gpumem help: unknown command '%s'; did you mean '%s'?\n(gpumem --help lists the commands)\n", argv[2], near);
            else fprintf(stderr, "gpumem help: unknown command '%s'\n(gpumem --help lists the commands)\n", argv[2]);
            return GM_EXIT_USAGE;
        }
        char *help_argv[] = {argv[0], argv[2], "--help", NULL};
        return run_command(3, help_argv);
    }
    if (strcmp(c, "--help") == 0 || strcmp(c, "-h") == 0 || strcmp(c, "help") == 0) {
        fputs(usage_main, stdout);
        return 0;
    }
    if (strcmp(c, "--version") == 0) {
        printf("gpumem %s (database schema %d.%d)\n", REC_VERSION, REC_SCHEMA_MAJOR, REC_SCHEMA_MINOR);
        return 0;
    }
    /* one rule for an option given twice, in every command (gm_args.c) */
    if (!wants_help(argc - 1, argv + 1)) {
        int rc = gm_args_repeats(c, argc - 1, argv + 1);
        if (rc) return rc;
    }
    if (strcmp(c, "record") == 0) return cmd_record(argc - 1, argv + 1);
    if (strcmp(c, "report") == 0) {
        int gm_ranks_main(int, char **); /* several databases or a directory: gm_ranks.c */
        int r = wants_help(argc - 1, argv + 1) ? -1 : gm_ranks_main(argc - 1, argv + 1);
        if (r >= 0) return r;
        return cmd_report(argc - 1, argv + 1, 0);
    }
    if (strcmp(c, "leaks") == 0) return cmd_report(argc - 1, argv + 1, 1);
    if (strcmp(c, "sql") == 0) return cmd_sql(argc - 1, argv + 1);
    if (strcmp(c, "export") == 0) return cmd_export(argc - 1, argv + 1);
    if (strcmp(c, "uses") == 0) return gm_cmd_uses(argc - 1, argv + 1);
    if (strcmp(c, "import") == 0) return gm_cmd_import(argc - 1, argv + 1);
    if (strcmp(c, "flamegraph") == 0) return gm_cmd_flamegraph(argc - 1, argv + 1);
    if (strcmp(c, "diff") == 0) return gm_cmd_diff(argc - 1, argv + 1);
    if (strcmp(c, "advise") == 0) return gm_advise_main(argc - 1, argv + 1);
    if (strcmp(c, "frag") == 0) return gm_frag_main(argc - 1, argv + 1);
    if (strcmp(c, "tune") == 0) return gm_tune_main(argc - 1, argv + 1);
    if (strcmp(c, "viz") == 0) { int gm_viz_main(int, char **); return gm_viz_main(argc - 1, argv + 1); }
    /* a file where the command goes: the order was turned round (gpumem x.db report) */
    struct stat fst;
    if (strchr(c, '/') || strchr(c, '.') || stat(c, &fst) == 0) {
        const char *cmd = argc > 2 && nearest_command(argv[2]) && !strcmp(nearest_command(argv[2]), argv[2])
                              ? argv[2] : "report";
        fprintf(stderr, "gpumem: unknown command '%s': the command comes first, then the file (gpumem %s %s)\n"
                        "(gpumem --help lists the commands)\n", c, cmd, c);
        return GM_EXIT_USAGE;
    }
    const char *near = nearest_command(c);
    if (near) fprintf(stderr, "gpumem: unknown command '%s'; did you mean '%s'?\n(gpumem --help lists the commands)\n", c, near);
    else fprintf(stderr, "gpumem: unknown command '%s'\n(gpumem --help lists the commands)\n", c);
    return GM_EXIT_USAGE;
}

/* The one exit path of every command: what it printed must have reached standard output. A
 * full disk or a closed pipe shows only here (stdio buffers, and printf's result is checked
 * nowhere), and a report cut at 8192 bytes with exit 0 is worse than none: a script reads
 * half a JSON object as the answer. A command that already failed with exit 3 has said why
 * (export and viz name standard output themselves), so only the others get the line. */
static int stdout_written(const char *cmd, int rc) {
    errno = 0;
    int flushed = fflush(stdout) == 0;
    int e = errno;
    if ((flushed && !ferror(stdout)) || rc == GM_EXIT_BADDB) return rc;
    /* a write that failed inside printf left only the stream's error flag: its errno is long
     * gone (any later call may have set another), so no reason is guessed */
    if (!flushed && e)
        fprintf(stderr, "gpumem%s%s: writing standard output failed: %s\n", cmd ? " " : "", cmd ? cmd : "",
                strerror(e));
    else
        fprintf(stderr, "gpumem%s%s: writing standard output failed: what was printed is cut short\n",
                cmd ? " " : "", cmd ? cmd : "");
    return GM_EXIT_BADDB;
}

int main(int argc, char **argv) {
    /* the hints name the command as it was typed, so they can be pasted before gpumem is on PATH */
    if (argv[0] && strchr(argv[0], '/')) gm_prog = argv[0];
    const char *base = argv[0] ? strrchr(argv[0], '/') : NULL;
    base = base ? base + 1 : argv[0];
    const char *cmd = base && strcmp(base, "flamegraph.pl") == 0 ? "flamegraph"
                      : argc >= 2 && argv[1][0] != '-' && nearest_command(argv[1]) &&
                              !strcmp(nearest_command(argv[1]), argv[1])
                          ? argv[1]
                          : NULL;
    return stdout_written(cmd, run_command(argc, argv));
}
