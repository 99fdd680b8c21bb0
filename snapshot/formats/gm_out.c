/* gm_out.c — the one output rule (gm_out.h): every file a gpumem command writes is checked and
 * written here, so that no command can destroy a file the others protect.
 *
 * Why a temporary file and a rename: a writer that truncates its destination first loses the
 * old contents on any later failure (a full disk half-way through a 200 MB export, a crash, a
 * damaged recording found after the first rows). rename(2) within one directory is atomic, so
 * the name holds either the old file or the whole new one.
 *
 * Why dev/ino and not names: "run.db", "./run.db" and a hard link are one file; comparing what
 * stat(2) says is the only test that cannot be fooled by spelling. */
#include "snapshot/formats/gm_out.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshot/read/gm.h"
#include "snapshot/read/gm_sig.h"
#include "snapshot/record/rec.h"

#define MARK(s, w) {s, sizeof s - 1, w}
const gm_out_mark gm_out_marker[GM_OUT_KINDS] = {
    [GM_OUT_DB] = {"", 0, "a gpumem database"},
    [GM_OUT_TRACE] = MARK("# gpumem trace", "a trace gpumem exported"),
    /* PROTO 2, EMPTY_DICT, MARK, then the first key and value as BINUNICODE */
    [GM_OUT_TORCH] = MARK("\x80\x02}(X\x08\x00\x00\x00" "exporterX\x06\x00\x00\x00" "gpumem",
                          "a PyTorch snapshot gpumem exported"),
    [GM_OUT_CHROME] = MARK("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"exporter\":\"gpumem\"}",
                           "a Chrome trace gpumem exported"),
    [GM_OUT_FOLDED] = MARK("# gpumem folded", "a folded-stacks file gpumem exported"),
    [GM_OUT_SPEEDSCOPE] = MARK("{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\","
                               "\"exporter\":\"gpumem\"",
                               "a speedscope file gpumem exported"),
    [GM_OUT_CSV] = MARK("id,address,size,requested,kind,device,stream,thread,birth_seq,birth_ns,"
                        "death_seq,death_ns",
                        "a CSV gpumem exported"),
    [GM_OUT_HTML] = MARK("<meta name=\"generator\" content=\"gpumem viz\">", "a gpumem viz page"),
};
#undef MARK

int gm_out_is_own(int fd, gm_out_kind kind)
{
    if (kind == GM_OUT_DB) return rec_db_replaceable(fd);
    char buf[GM_OUT_MARK_WITHIN];
    ssize_t n;
    do n = pread(fd, buf, sizeof buf, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0) return -1;
    if (n == 0) return 1; /* empty: nothing to lose */
    const gm_out_mark *mk = &gm_out_marker[kind];
    if (kind == GM_OUT_HTML) return memmem(buf, (size_t)n, mk->bytes, mk->len) != NULL;
    return (size_t)n >= mk->len && memcmp(buf, mk->bytes, mk->len) == 0;
}

/* 1 when the file described by out is INPUT or one of its SQLite side files. */
static int is_input(const struct stat *out, const char *input)
{
    struct stat st;
    if (stat(input, &st) == 0 && st.st_dev == out->st_dev && st.st_ino == out->st_ino) return 1;
    /* an input read through a link has its side files beside the link's target (SQLite's) */
    char real[PATH_MAX];
    if (realpath(input, real)) input = real;
    for (int k = 0; k < REC_SIDES; k++) {
        char p[PATH_MAX + 16];
        if (rec_db_side(input, k, p, sizeof p) != 0) continue;
        if (stat(p, &st) == 0 && st.st_dev == out->st_dev && st.st_ino == out->st_ino) return 1;
    }
    return 0;
}

static int is_stdout(const char *path) { return !path || strcmp(path, "-") == 0; }

/* The directory a path's file lives in ("." for a bare name). */
static void dir_of(const char *path, char *dir, size_t dirsz)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    snprintf(dir, dirsz, "%s", dirname(tmp));
}

/* The rule; st (may be NULL) gets the lstat of an existing path, *exists whether it exists. */
static int check(const char *path, gm_out_kind kind, int force, const char *const *inputs,
                 size_t ninputs, struct stat *st, int *exists, char *err, size_t errsz)
{
    *exists = 0;
    if (!*path) {
        snprintf(err, errsz, "the output file name is empty");
        return GM_EXIT_USAGE;
    }
    if (strlen(path) + 32 >= PATH_MAX) {
        snprintf(err, errsz, "the output file name is too long");
        return GM_EXIT_USAGE;
    }
    if (lstat(path, st) != 0) {
        if (errno != ENOENT) {
            snprintf(err, errsz, "cannot write %s: %s", path, strerror(errno));
            return GM_EXIT_USAGE;
        }
        char dir[PATH_MAX];
        struct stat ds;
        dir_of(path, dir, sizeof dir);
        if (stat(dir, &ds) != 0 || !S_ISDIR(ds.st_mode)) {
            snprintf(err, errsz, "cannot write %s: the directory %s does not exist", path, dir);
            return GM_EXIT_USAGE;
        }
        if (access(dir, W_OK | X_OK) != 0) {
            snprintf(err, errsz, "cannot write %s: the directory %s is not writable", path, dir);
            return GM_EXIT_USAGE;
        }
        return 0;
    }
    *exists = 1;
    if (S_ISLNK(st->st_mode)) {
        snprintf(err, errsz,
                 "%s is a symbolic link; gpumem never writes through one (give the real path)",
                 path);
        return GM_EXIT_USAGE;
    }
    for (size_t i = 0; i < ninputs; i++)
        if (inputs[i] && is_input(st, inputs[i])) {
            if (strcmp(path, inputs[i]) == 0)
                snprintf(err, errsz, "%s is an input of this command; choose another output file",
                         path);
            else
                snprintf(err, errsz,
                         "%s is the same file as %s, an input of this command; choose another "
                         "output file",
                         path, inputs[i]);
            return GM_EXIT_USAGE;
        }
    if (S_ISCHR(st->st_mode) || S_ISFIFO(st->st_mode)) { /* /dev/null, a pipe */
        if (kind != GM_OUT_DB) return 0;
        snprintf(err, errsz, "%s is not a regular file; a database needs one", path);
        return GM_EXIT_USAGE;
    }
    if (S_ISDIR(st->st_mode)) {
        snprintf(err, errsz, "%s is a directory; give a file name", path);
        return GM_EXIT_USAGE;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, errsz, "%s exists and is not a regular file; choose another output file",
                 path);
        return GM_EXIT_USAGE;
    }
    char dir[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    if (access(dir, W_OK | X_OK) != 0) {
        /* the file is replaced by a rename in its directory, not written in place */
        snprintf(err, errsz, "cannot replace %s: the directory %s is not writable", path, dir);
        return GM_EXIT_USAGE;
    }
    if (force) return 0;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    int own = fd < 0 ? -1 : gm_out_is_own(fd, kind);
    int e = errno;
    if (fd >= 0) close(fd);
    if (own == 1) return 0;
    if (own < 0)
        snprintf(err, errsz, "cannot read %s to see what it is: %s; choose another output file",
                 path, strerror(e));
    else
        snprintf(err, errsz,
                 "%s exists and is not %s; refusing to replace it (choose another output file, "
                 "or add --force to replace it)",
                 path, gm_out_marker[kind].what);
    return GM_EXIT_USAGE;
}

/* A database is written by SQLite, by name: never to standard output. */
static int stdout_refused(const char *path, gm_out_kind kind, char *err, size_t errsz)
{
    if (kind != GM_OUT_DB) return 0;
    snprintf(err, errsz, "%s: a database cannot be written to standard output; give a file name",
             path ? path : "no file given");
    return GM_EXIT_USAGE;
}

int gm_out_check(const char *path, gm_out_kind kind, int force, const char *const *inputs,
                 size_t ninputs, char *err, size_t errsz)
{
    if (is_stdout(path)) return stdout_refused(path, kind, err, errsz);
    struct stat st;
    int exists;
    return check(path, kind, force, inputs, ninputs, &st, &exists, err, errsz);
}

int gm_out_open(gm_out *o, const char *path, gm_out_kind kind, int force,
                const char *const *inputs, size_t ninputs, char *err, size_t errsz)
{
    memset(o, 0, sizeof *o);
    o->sig_slot = -1;
    if (is_stdout(path)) {
        int rc = stdout_refused(path, kind, err, errsz);
        if (rc) return rc;
        o->f = stdout;
        o->direct = 1;
        snprintf(o->path, sizeof o->path, "standard output");
        return 0;
    }
    struct stat st;
    int exists, rc = check(path, kind, force, inputs, ninputs, &st, &exists, err, errsz);
    if (rc) return rc;
    snprintf(o->path, sizeof o->path, "%s", path);
    if (exists && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
        int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || !(o->f = fdopen(fd, "w"))) {
            snprintf(err, errsz, "cannot write %s: %s", path, strerror(errno));
            if (fd >= 0) close(fd);
            return GM_EXIT_BADDB;
        }
        o->direct = 1;
        return 0;
    }
    /* .NAME.gpumem-XXXXXX beside NAME: same file system, so the rename is atomic */
    char dir[PATH_MAX], base[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    snprintf(base, sizeof base, "%s", path);
    snprintf(o->tmp, sizeof o->tmp, "%s/.%s.gpumem-XXXXXX", dir, basename(base));
    int fd = gm_sig_mkostemp(o->tmp, O_CLOEXEC, &o->sig_slot);
    if (fd < 0) {
        snprintf(err, errsz, "cannot write in %s: %s", dir, strerror(errno));
        o->tmp[0] = 0;
        return GM_EXIT_BADDB;
    }
    if (exists) {
        o->replacing = 1;
        o->mode = st.st_mode & 07777;
    } else if (kind == GM_OUT_DB) {
        o->mode = 0600; /* recordings hold the program's command line and paths */
    } else {
        mode_t um = umask(0);
        umask(um);
        o->mode = 0666 & ~um;
    }
    if (fchmod(fd, o->mode) != 0 || !(o->f = fdopen(fd, "w"))) {
        snprintf(err, errsz, "cannot write %s: %s", o->tmp, strerror(errno));
        close(fd);
        unlink(o->tmp);
        o->tmp[0] = 0;
        gm_sig_forget(o->sig_slot);
        o->sig_slot = -1;
        return GM_EXIT_BADDB;
    }
    return 0;
}

void gm_out_release_file(gm_out *o)
{
    if (o->f && !o->direct) fclose(o->f);
    if (!o->direct) o->f = NULL;
}

void gm_out_discard(gm_out *o)
{
    if (o->f && o->f != stdout) fclose(o->f);
    o->f = NULL;
    if (o->tmp[0]) unlink(o->tmp);
    o->tmp[0] = 0;
    gm_sig_forget(o->sig_slot);
    o->sig_slot = -1;
}

const char *gm_out_fate(const gm_out *o, char *buf, size_t bufsz)
{
    if (o->replacing) snprintf(buf, bufsz, "%s is left as it was", o->path);
    else snprintf(buf, bufsz, "nothing was written to %s", o->path);
    return buf;
}

int gm_out_commit(gm_out *o, char *err, size_t errsz)
{
    int bad = 0, e = 0;
    /* test hook (GPUMEM_TEST_OUT_STALL=1): every byte is in the temporary file and the command
     * waits for a signal before the rename, so a test can end it mid-write, every writer alike */
    const char *stall = getenv("GPUMEM_TEST_OUT_STALL");
    if (stall && !strcmp(stall, "1") && !o->direct)
        for (;;) pause();
    if (o->f) {
        if (fflush(o->f) != 0 || ferror(o->f)) bad = 1, e = errno ? errno : EIO;
        if (!bad && !o->direct && fsync(fileno(o->f)) != 0) bad = 1, e = errno;
        if (o->f != stdout && fclose(o->f) != 0 && !bad) bad = 1, e = errno;
        o->f = NULL;
    }
    if (o->direct) {
        if (bad) snprintf(err, errsz, "writing %s failed: %s", o->path, strerror(e));
        return bad ? GM_EXIT_BADDB : 0;
    }
    if (!bad && rename(o->tmp, o->path) != 0) bad = 1, e = errno;
    if (bad) {
        char fate[PATH_MAX + 64];
        unlink(o->tmp);
        o->tmp[0] = 0;
        gm_sig_forget(o->sig_slot);
        o->sig_slot = -1;
        snprintf(err, errsz, "writing %s failed: %s; %s", o->path, strerror(e),
                 gm_out_fate(o, fate, sizeof fate));
        return GM_EXIT_BADDB;
    }
    o->tmp[0] = 0;
    gm_sig_forget(o->sig_slot); /* after the rename: until then the temporary file is ours */
    o->sig_slot = -1;
    /* the rename itself survives a power cut only once the directory is synced (best effort) */
    char dir[PATH_MAX];
    dir_of(o->path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return 0;
}
