/* gm_out.h — the one rule by which every gpumem command writes a file.
 *
 * record, import, export (every format), viz, and any later writer open their output here:
 * - a symbolic link at PATH itself is never followed (refused, --force or not); a linked
 *   directory above it is written into, as any directory;
 * - an existing file is replaced only when it is of the writer's own kind (a gpumem database;
 *   for text, HTML and pickle outputs, a file whose first bytes carry the marker this writer
 *   puts there) or empty; anything else needs --force;
 * - no input of the same command is ever written (compared by device and inode, the database's
 *   -wal, -shm and -journal side files included), --force or not;
 * - the data goes to a temporary file in the same directory, renamed over the path only when
 *   all of it was written and flushed, so a failure (a full disk, a crash) leaves the old file
 *   whole and nothing half-written under the name; a terminating signal (Ctrl-C, kill, a hangup)
 *   removes it before the command dies of the signal (read/gm_sig.h).
 * A path of "-" (or none, where the command allows it) is standard output; a character device
 * or a FIFO (/dev/null, a named pipe) is written in place, since nothing there can be lost.
 *
 * Exit codes: a refusal is GM_EXIT_USAGE (2), a failed write GM_EXIT_BADDB (3). */
#ifndef GM_OUT_H
#define GM_OUT_H

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

typedef enum {
    GM_OUT_DB,         /* a gpumem database (SQLite with gpumem's application_id) */
    GM_OUT_TRACE,      /* export --format trace: first line "# gpumem trace" */
    GM_OUT_TORCH,      /* export --format torch: a pickle whose first key is exporter: gpumem */
    GM_OUT_CHROME,     /* export --format chrome: {"displayTimeUnit":"ns","otherData":{"exporter":"gpumem"} */
    GM_OUT_FOLDED,     /* export --format folded: first line "# gpumem folded" */
    GM_OUT_SPEEDSCOPE, /* export --format speedscope: {"$schema":...,"exporter":"gpumem" */
    GM_OUT_CSV,        /* export --format csv: the allocations view's header line */
    GM_OUT_HTML,       /* viz: <meta name="generator" content="gpumem viz"> in the head */
    GM_OUT_KINDS
} gm_out_kind;

/* The marker of each kind (GM_OUT_DB: none, the application_id is checked instead). Writers
 * put exactly these bytes at the start of what they write (HTML: in the page's head, within
 * its first GM_OUT_MARK_WITHIN bytes); gm_out_is_own() looks for them there. */
typedef struct {
    const char *bytes;
    size_t len;
    const char *what; /* for messages: "a gpumem viz page" */
} gm_out_mark;
extern const gm_out_mark gm_out_marker[GM_OUT_KINDS];
#define GM_OUT_MARK_WITHIN 512

typedef struct {
    FILE *f;               /* write here (NULL after gm_out_release_file) */
    int direct;            /* standard output, a device or a FIFO: no temporary, no rename */
    int replacing;         /* an existing file is being replaced */
    mode_t mode;           /* the mode the renamed file gets */
    char path[PATH_MAX];   /* the destination */
    char tmp[2 * PATH_MAX + 32]; /* the temporary file beside it ("" when direct) */
    int sig_slot;          /* its gm_sig registration (removed if a signal ends the command), -1 */
} gm_out;

/* What the rule says of writing PATH as KIND, without writing anything: 0 when it may be
 * written, GM_EXIT_USAGE with a message for a person in err otherwise. inputs: the command's
 * input files (NULL entries skipped). */
int gm_out_check(const char *path, gm_out_kind kind, int force, const char *const *inputs,
                 size_t ninputs, char *err, size_t errsz);

/* Checks as gm_out_check, then opens the temporary file (or standard output for "-" or NULL,
 * or the device in place). Returns 0, or GM_EXIT_USAGE / GM_EXIT_BADDB with err set. */
int gm_out_open(gm_out *o, const char *path, gm_out_kind kind, int force,
                const char *const *inputs, size_t ninputs, char *err, size_t errsz);

/* For a writer that writes the temporary file by name (SQLite): closes the FILE; o->tmp stays
 * an empty file to open. */
void gm_out_release_file(gm_out *o);

/* Flushes, syncs and closes, then renames the temporary file over the path. Returns 0, or
 * GM_EXIT_BADDB with err set (the temporary file is removed; an old file is left whole). */
int gm_out_commit(gm_out *o, char *err, size_t errsz);

/* Gives up: closes and removes the temporary file; the path is left as it was. */
void gm_out_discard(gm_out *o);

/* What a failed or discarded write left at the path, for messages: "FILE is left as it was"
 * or "nothing was written to FILE". */
const char *gm_out_fate(const gm_out *o, char *buf, size_t bufsz);

/* 1 when the open file fd is of KIND's own kind (or empty), 0 when not, -1 on a read error. */
int gm_out_is_own(int fd, gm_out_kind kind);

#endif
