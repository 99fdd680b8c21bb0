/* gm_db.c — opening a gpumem database without trusting it.
 *
 * Order of checks, each with its own message: the file exists and is a regular file; it is
 * not empty; its first 16 bytes are the SQLite magic; SQLite opens it (read-write when we may
 * write the file and its directory, so a WAL left by a killed process can be recovered;
 * immutable when we may not and no -wal or -shm is beside it; read-only otherwise); it has a `meta`
 * table with schema_major (else it is some other SQLite file); the major version is one we
 * read (a newer one is refused, an older one would be migrated — schema 1 is the first, so
 * there is nothing to migrate yet); the tables the reports need are there. Everything after
 * that treats every value as possibly wrong (ids that point nowhere, NULLs, wrong types):
 * see gm_analyze.c.
 */
#include "snapshot/read/gm.h"
#include "snapshot/record/rec.h" /* REC_APPLICATION_ID, rec_db_side */

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GM_SCHEMA_MAJOR 1

/* A lookup statement of d's, prepared once (NULL: it does not prepare, e.g. no such table). */
static sqlite3_stmt *lookup(gm_db *d, sqlite3_stmt **st, const char *sql) {
    if (!*st && sqlite3_prepare_v2(d->db, sql, -1, st, NULL) != SQLITE_OK) {
        sqlite3_finalize(*st);
        *st = NULL;
    }
    return *st;
}

/* back to unused: no read transaction held, no binding kept */
static void lookup_done(sqlite3_stmt *s) {
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

int gm_table_exists(gm_db *d, const char *name) {
    sqlite3_stmt *s = lookup(d, &d->table_st,
                             "SELECT 1 FROM sqlite_master WHERE name = ? AND type IN ('table','view')");
    if (!s) return 0;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    int found = sqlite3_step(s) == SQLITE_ROW;
    lookup_done(s);
    return found;
}

int gm_names_have_birth(gm_db *d) {
    sqlite3_stmt *s;
    int found = 0;
    if (sqlite3_prepare_v2(d->db, "SELECT 1 FROM pragma_table_info('names') WHERE name = 'birth'", -1, &s, NULL) !=
        SQLITE_OK)
        return 0;
    found = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    return found;
}

int64_t gm_sql_int(gm_db *d, const char *sql) {
    sqlite3_stmt *q;
    int64_t v = 0;
    if (sqlite3_prepare_v2(d->db, sql, -1, &q, NULL) != SQLITE_OK) return 0;
    if (sqlite3_step(q) == SQLITE_ROW) v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

int64_t gm_meta_int(gm_db *d, const char *key, int64_t dflt) {
    sqlite3_stmt *s = lookup(d, &d->meta_st, "SELECT value FROM meta WHERE key = ?");
    int64_t v = dflt;
    if (!s) return dflt;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(s, 0);
    lookup_done(s);
    return v;
}

/* The running sums over the events, as the model's sweep keeps them (gm_analyze.c's sweep_row):
 * device allocations and their frees matched by address; segments, and each allocation passed
 * through as its own segment as one; the program's own VMM mappings. Peaks of allocated, of
 * reserved (allocated where no segment was recorded) and of the device-wide figure (that + VMM,
 * gm_model.peak_device). 0, or -1 where the scan could not be made. */
static int recorded_sums(gm_db *d, uint64_t *allocated, uint64_t *reserved, uint64_t *device) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, "SELECT kind, flags, addr, size FROM events WHERE kind IN "
                                  "(1, 2, 3, 4, 11, 12, 14, 15, 18, 19) ORDER BY seq", -1, &s, NULL) != SQLITE_OK)
        return -1;
    u64map live = {0}; /* address -> size << 1 | own segment */
    uint64_t a = 0, r = 0, vmm = 0, pa = 0, pr = 0, pdev = 0, pheld = 0;
    int segments = 0, nomem = 0, rc;
    while (!nomem && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        int kind = sqlite3_column_int(s, 0);
        unsigned flags = (unsigned)sqlite3_column_int64(s, 1);
        uint64_t addr = (uint64_t)sqlite3_column_int64(s, 2), size = (uint64_t)sqlite3_column_int64(s, 3), v;
        if (kind == REC_ALLOC || kind == REC_ALLOC_ASYNC || kind == REC_FREE || kind == REC_FREE_ASYNC) {
            if (u64map_del(&live, addr, &v)) {
                a -= v >> 1 < a ? v >> 1 : a;
                if (v & 1) r -= v >> 1 < r ? v >> 1 : r;
            }
            if (kind == REC_ALLOC || kind == REC_ALLOC_ASYNC) {
                int own = rec_is_own_segment((unsigned)kind, flags);
                nomem = u64map_put(&live, addr, size << 1 | (uint64_t)own) != 0;
                a += size;
                if (own) r += size;
            }
        } else if (kind == REC_VMM_MAP) {
            vmm += size;
        } else if (kind == REC_VMM_UNMAP) {
            vmm -= size < vmm ? size : vmm;
        } else if (kind == REC_SEG_MAP || kind == REC_DRIVER_ALLOC) {
            r += size, segments = 1;
        } else {
            r -= size < r ? size : r, segments = 1;
        }
        if (a > pa) pa = a;
        if (r > pr) pr = r;
        if (r + vmm > pdev) pdev = r + vmm;
        if (a + vmm > pheld) pheld = a + vmm;
    }
    int done = !nomem && rc == SQLITE_DONE;
    sqlite3_finalize(s);
    u64map_free(&live);
    if (!done) return -1;
    *allocated = pa;
    *reserved = segments ? pr : pa;
    *device = segments ? pdev : pheld;
    return 0;
}

void gm_recorded_peaks(gm_db *d, uint64_t *allocated, uint64_t *reserved) {
    uint64_t pa, pr, pdev;
    /* one device's: the allocator's statistics are the process's, every device's together */
    if (d->scoped) {
        *allocated = *reserved = 0;
        if (recorded_sums(d, &pa, &pr, &pdev) == 0) *allocated = pa, *reserved = pr;
        return;
    }
    *allocated = (uint64_t)gm_meta_int(d, "stat.peak_allocated", 0);
    *reserved = (uint64_t)gm_meta_int(d, "stat.peak_reserved", 0);
    sqlite3_stmt *s;
    /* the allocator's statistics are exact where it saw every allocation: none passed through as
     * its own segment (as the advice's checks for PyTorch's rows are). A closed recording counts
     * them (meta own_segment_allocs); else a scan for one (a full scan of 10 M events where there
     * is none: 7% of frag's time) */
    int64_t own = gm_meta_int(d, "own_segment_allocs", -1);
    if (own == 0) return;
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT 1 FROM events WHERE kind IN (1, 3) AND flags & %u LIMIT 1",
             (unsigned)GM_OWN_SEGMENT_FLAGS);
    if (sqlite3_prepare_v2(d->db, sql, -1, &s, NULL) != SQLITE_OK) return;
    int any = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    if (!any) return;
    if (recorded_sums(d, &pa, &pr, &pdev) == 0) *allocated = pa, *reserved = pr;
}

uint64_t gm_recorded_device_peak(gm_db *d) {
    uint64_t pa, pr, pdev;
    if (recorded_sums(d, &pa, &pr, &pdev) == 0) return pdev;
    gm_recorded_peaks(d, &pa, &pr);
    return pr;
}

void gm_meta_text(gm_db *d, const char *key, char *out, size_t outsz) {
    sqlite3_stmt *s = lookup(d, &d->meta_st, "SELECT value FROM meta WHERE key = ?");
    out[0] = 0;
    if (!s) return;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(s, 0);
        if (t) snprintf(out, outsz, "%s", (const char *)t);
    }
    lookup_done(s);
}

int gm_meta_pytorch_conf(gm_db *d, char *out, size_t outsz) {
    out[0] = 0;
    /* --device N where PyTorch held nothing on N (gm_torch_absent): N's memory was not served by
     * PyTorch's allocator, whatever it served on the other devices */
    if (d->torch_absent) return 0;
    sqlite3_stmt *s = lookup(d, &d->meta_st, "SELECT value FROM meta WHERE key = ?");
    int has = 0;
    if (!s) return 0;
    sqlite3_bind_text(s, 1, "torch_conf", -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(s, 0);
        if (t) snprintf(out, outsz, "%s", (const char *)t);
        has = 1;
    }
    lookup_done(s);
    return has;
}

void gm_db_close(gm_db *d) {
    sqlite3_finalize(d->meta_st);
    sqlite3_finalize(d->table_st);
    d->meta_st = d->table_st = NULL;
    if (d->db) sqlite3_close(d->db);
    d->db = NULL;
}

static int db_validate(gm_db *d, char *err, size_t errsz);

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A file cut short (copied while it was written, a transfer stopped, a full disk): its header
 * says how many pages the database has (bytes 28-31, valid when the "version-valid-for" number
 * at 92 equals the change counter at 24) and how large they are (16-17); a file smaller than
 * that lost pages, and SQLite only notices where a query happens to read them. Cheap: the
 * header and the file's size. 1 (err set) when cut short. */
static int cut_short(const char *path, const unsigned char *h, size_t n, uint64_t size, char *err, size_t errsz) {
    if (n < 100) return 0;
    uint32_t psz = (uint32_t)h[16] << 8 | h[17];
    if (psz == 1) psz = 65536;
    uint32_t pages = be32(h + 28);
    if (psz < 512 || (psz & (psz - 1)) || !pages || be32(h + 92) != be32(h + 24)) return 0;
    uint64_t want = (uint64_t)pages * psz;
    if (size >= want) return 0;
    snprintf(err, errsz, "%s is cut short: its header says %" PRIu32 " pages of %" PRIu32 " bytes (%" PRIu64
             " bytes) but the file holds %" PRIu64 " (%.1f%%); it was copied or written only in part. Copy it "
             "again from where it was recorded; to salvage what is left: sqlite3 %s .recover | sqlite3 "
             "salvaged.db",
             path, pages, psz, want, size, 100.0 * (double)size / (double)want, path);
    return 1;
}

/* 1 when this process may change the file and create its -wal and -shm beside it: the file is
 * writable by us and so is its directory (access(2) answers for the file system too: EROFS on
 * a read-only mount). Only then is the database opened read-write, so that a WAL left by a
 * killed recorder is folded in and its -wal and -shm are removed when the connection closes.
 * A read-only connection cannot remove them: opened plainly in a directory it may write, it
 * would leave both behind. */
static int may_write(const char *path) {
    if (access(path, R_OK | W_OK) != 0) return 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    return access(dir, W_OK | X_OK) == 0;
}

/* 1 when path-wal or path-shm exists: a recorder is writing the file (in WAL mode it holds
 * both while it runs), or one was killed and its last commits are in the -wal. */
static int wal_files_beside(const char *path) {
    char side[4200];
    struct stat st;
    if (rec_db_side(path, REC_SIDE_WAL, side, sizeof side) == 0 && lstat(side, &st) == 0) return 1;
    return rec_db_side(path, REC_SIDE_SHM, side, sizeof side) == 0 && lstat(side, &st) == 0;
}

int64_t gm_db_wal_bytes(const char *path) {
    char wal[4200], real[PATH_MAX];
    struct stat st;
    /* the log is beside the file a link names: SQLite puts it there */
    if (realpath(path, real)) path = real;
    if (rec_db_side(path, REC_SIDE_WAL, wal, sizeof wal) != 0 || stat(wal, &st) != 0) return 0;
    return st.st_size;
}

/* A WAL-mode file we may not write, with no -wal or -shm beside it: no writer has it open (a
 * live recorder holds both) and no commit is outside the file, so the file alone is the
 * database. SQLite would still want a -shm for its WAL index, which it cannot create in a
 * read-only directory or mount ("attempt to write a readonly database", "unable to open
 * database file") and would leave behind in a writable one. immutable=1 reads the file as it
 * is, without locks or shared memory, and creates nothing. The path goes in a URI: its
 * characters that a URI gives a meaning to are escaped. */
static int open_immutable(const char *path, sqlite3 **db) {
    char uri[3 * 4096 + 64];
    /* "file://" + an absolute path: an empty authority, so a path that starts with "//" is not
     * taken for a host */
    size_t n = (size_t)snprintf(uri, sizeof uri, path[0] == '/' ? "file://" : "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p && n + 4 < sizeof uri; p++) {
        if (*p == '%' || *p == '?' || *p == '#' || *p <= ' ' || *p >= 0x7f)
            n += (size_t)snprintf(uri + n, sizeof uri - n, "%%%02X", *p);
        else
            uri[n++] = (char)*p;
    }
    snprintf(uri + n, sizeof uri - n, "?immutable=1");
    return sqlite3_open_v2(uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
}

/* ---- as found: a VFS that reads a file, its -wal included, and changes nothing ----
 *
 * A read-only connection still writes: SQLite keeps a WAL's index in the -shm beside the file,
 * which it creates when it is missing and writes its read marks and a rebuilt index into
 * (immutable=1 writes nothing but reads no -wal: a killed recording's last commits are
 * there). "gm-asis" is the default VFS with two changes: every file opens read-only, and the
 * WAL index is this connection's own heap memory, so -shm is never opened, created or
 * written; SQLite rebuilds the index from the -wal (its recovery) into that memory. Nothing
 * is deleted. Its index is seen by no other connection: it is for a file no process is writing
 * (a finished or killed recording), as gm_db_open_as_found says. */
typedef struct asis_file {
    sqlite3_file base;     /* pMethods: asis_io */
    void **region;         /* the WAL index: nregion regions of region_size bytes */
    int nregion, region_size;
    sqlite3_file *real;    /* the default VFS's file, right after this struct */
} asis_file;

static sqlite3_vfs asis_vfs, *asis_base;
static sqlite3_io_methods asis_io;

#define REAL(f) (((asis_file *)(f))->real)
static int asis_close(sqlite3_file *f) {
    asis_file *a = (asis_file *)f;
    for (int i = 0; i < a->nregion; i++) free(a->region[i]);
    free(a->region);
    a->region = NULL, a->nregion = 0;
    return REAL(f)->pMethods->xClose(REAL(f));
}
static int asis_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off) {
    return REAL(f)->pMethods->xRead(REAL(f), p, n, off);
}
static int asis_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off) {
    (void)f, (void)p, (void)n, (void)off;
    return SQLITE_READONLY;
}
static int asis_truncate(sqlite3_file *f, sqlite3_int64 n) {
    (void)f, (void)n;
    return SQLITE_READONLY;
}
static int asis_sync(sqlite3_file *f, int flags) {
    (void)f, (void)flags;
    return SQLITE_OK; /* nothing was written */
}
static int asis_size(sqlite3_file *f, sqlite3_int64 *n) { return REAL(f)->pMethods->xFileSize(REAL(f), n); }
static int asis_lock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int asis_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int asis_reserved(sqlite3_file *f, int *r) { return REAL(f)->pMethods->xCheckReservedLock(REAL(f), r); }
static int asis_fcntl(sqlite3_file *f, int op, void *arg) {
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}
static int asis_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int asis_devchar(sqlite3_file *f) {
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int asis_shm_map(sqlite3_file *f, int i, int size, int extend, void volatile **pp) {
    asis_file *a = (asis_file *)f;
    (void)extend; /* the index exists from the start: it is this connection's */
    *pp = NULL;
    if (a->nregion && size != a->region_size) return SQLITE_IOERR_SHMMAP;
    if (i >= a->nregion) {
        void **g = realloc(a->region, (size_t)(i + 1) * sizeof *g);
        if (!g) return SQLITE_NOMEM;
        a->region = g;
        for (; a->nregion <= i; a->nregion++)
            if (!(a->region[a->nregion] = calloc(1, (size_t)size))) return SQLITE_NOMEM;
        a->region_size = size;
    }
    *pp = a->region[i];
    return SQLITE_OK;
}
static int asis_shm_lock(sqlite3_file *f, int off, int n, int flags) {
    (void)f, (void)off, (void)n, (void)flags;
    return SQLITE_OK; /* no other connection sees this index */
}
static void asis_shm_barrier(sqlite3_file *f) {
    (void)f;
    /* the index is this connection's alone, used by one thread (NOMUTEX): no other thread or
     * process reads it, so the compiler's order is all the order it needs (and ThreadSanitizer
     * builds refuse a bare fence) */
    __asm__ volatile("" ::: "memory");
}
static int asis_shm_unmap(sqlite3_file *f, int del) {
    asis_file *a = (asis_file *)f;
    (void)del; /* there is no -shm to delete */
    for (int i = 0; i < a->nregion; i++) free(a->region[i]);
    free(a->region);
    a->region = NULL, a->nregion = 0;
    return SQLITE_OK;
}
static int asis_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp) {
    return REAL(f)->pMethods->xFetch(REAL(f), off, n, pp);
}
static int asis_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p) {
    return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}
#undef REAL

static int asis_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags, int *out) {
    (void)vfs;
    asis_file *a = (asis_file *)f;
    memset(a, 0, sizeof *a);
    a->real = (sqlite3_file *)(a + 1);
    flags = (flags & ~(SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_DELETEONCLOSE)) | SQLITE_OPEN_READONLY;
    int rc = asis_base->xOpen(asis_base, name, a->real, flags, out);
    a->base.pMethods = rc == SQLITE_OK && a->real->pMethods ? &asis_io : NULL;
    if (out) *out = (*out & ~(SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) | SQLITE_OPEN_READONLY;
    return rc;
}
static int asis_delete(sqlite3_vfs *vfs, const char *name, int sync) {
    (void)vfs, (void)name, (void)sync;
    return SQLITE_IOERR_DELETE; /* as found: nothing goes */
}

static void asis_register(void) {
    asis_base = sqlite3_vfs_find(NULL);
    if (!asis_base) return;
    asis_vfs = *asis_base;
    asis_vfs.pNext = NULL;
    asis_vfs.zName = "gm-asis";
    asis_vfs.szOsFile = (int)sizeof(asis_file) + asis_base->szOsFile;
    asis_vfs.xOpen = asis_open;
    asis_vfs.xDelete = asis_delete;
    asis_io = (sqlite3_io_methods){
        .iVersion = 3, .xClose = asis_close, .xRead = asis_read, .xWrite = asis_write,
        .xTruncate = asis_truncate, .xSync = asis_sync, .xFileSize = asis_size, .xLock = asis_lock,
        .xUnlock = asis_unlock, .xCheckReservedLock = asis_reserved, .xFileControl = asis_fcntl,
        .xSectorSize = asis_sector, .xDeviceCharacteristics = asis_devchar, .xShmMap = asis_shm_map,
        .xShmLock = asis_shm_lock, .xShmBarrier = asis_shm_barrier, .xShmUnmap = asis_shm_unmap,
        .xFetch = asis_fetch, .xUnfetch = asis_unfetch};
    if (sqlite3_vfs_register(&asis_vfs, 0) != SQLITE_OK) asis_base = NULL;
}

static int db_open(const char *path, gm_db *d, int as_found, char *err, size_t errsz);

int gm_db_open(const char *path, gm_db *d, char *err, size_t errsz) { return db_open(path, d, 0, err, errsz); }

int gm_db_open_as_found(const char *path, gm_db *d, char *err, size_t errsz) {
    return db_open(path, d, 1, err, errsz);
}

static int db_open(const char *path, gm_db *d, int as_found, char *err, size_t errsz) {
    memset(d, 0, sizeof *d);
    snprintf(d->path, sizeof d->path, "%s", path);
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errsz, "%s: %s (give the database written by gpumem record / GPUMEM_DB)",
                 path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, errsz, "%s is a directory, not a database: give a database file (%s/run.db); for "
                 "a directory of ranks' recordings, gpumem report %s", path, path, path);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errsz, "%s is not a regular file: give a database file written by gpumem record", path);
        return -1;
    }
    if (st.st_size == 0) {
        snprintf(err, errsz, "%s is empty: the recording never started (was the program run "
                 "with gpumem record, and did it reach a CUDA allocation?)", path);
        return -1;
    }
    /* Reading follows symbolic links, in the directories of the path and at its last name
     * (latest.db -> run-12.db, a linked $HOME or /scratch): only writers refuse a link, and only
     * at the name they write (gm_out.h). Everything below works on the file the link names, so
     * that the -wal and -shm looked for, and the directory whose permission decides a
     * read-write open, are the ones SQLite uses: it creates them beside the target. Messages
     * keep the name the user gave (d->path). */
    char real[PATH_MAX];
    const char *file = realpath(path, real) ? real : path;
    unsigned char hdr[100] = {0};
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, hdr, sizeof hdr) : -1;
    if (fd < 0 || got < 16 || memcmp(hdr, "SQLite format 3", 16) != 0) {
        if (fd >= 0) close(fd);
        /* PROTO 2 or newer: a pickle, which is what PyTorch's memory snapshots are
         * (torch.cuda.memory._dump_snapshot, gpumem export --format torch); import reads them */
        if (got >= 2 && hdr[0] == 0x80 && hdr[1] >= 2 && hdr[1] <= 5)
            snprintf(err, errsz, "%s is a PyTorch memory snapshot (a pickle), not a gpumem database: import it "
                     "first (gpumem import %s -o run.db), then give run.db", path, path);
        else
            snprintf(err, errsz, "%s is not a gpumem database (not an SQLite file, or truncated "
                     "before its first page)", path);
        return -1;
    }
    close(fd);
    /* With a write-ahead log beside it (more than its 32-byte header) the file may be shorter
     * than its header says: a checkpoint that stopped midway (a full disk) wrote page 1 but not
     * all the pages after it, which the log still holds and SQLite reads from there. */
    int logged = gm_db_wal_bytes(file) > 32;
    if (!logged && cut_short(path, hdr, (size_t)got, (uint64_t)st.st_size, err, errsz)) return -1;
    /* NOMUTEX: one thread uses the connection; otherwise every sqlite3_column_* call takes a
     * mutex, which is a tenth of a 10-million-event report */
    int rc;
    if (as_found) {
        /* no -wal (or an empty one): the file alone is the database, read as it is; else the
         * -wal too, through gm-asis (above), which writes nothing */
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, asis_register);
        if (gm_db_wal_bytes(file) <= 32)
            rc = open_immutable(file, &d->db);
        else if (!asis_base)
            rc = SQLITE_CANTOPEN;
        else
            rc = sqlite3_open_v2(file, &d->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, "gm-asis");
    } else if (may_write(file)) {
        rc = sqlite3_open_v2(file, &d->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
        d->writable = rc == SQLITE_OK;
        if (rc != SQLITE_OK) {
            sqlite3_close(d->db);
            d->db = NULL;
            rc = sqlite3_open_v2(file, &d->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
        }
    } else if ((hdr[18] == 2 || hdr[19] == 2) && !wal_files_beside(file)) {
        rc = open_immutable(file, &d->db);
    } else {
        rc = sqlite3_open_v2(file, &d->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    }
    if (rc != SQLITE_OK) {
        snprintf(err, errsz, "%s: SQLite cannot open it: %s", path,
                 d->db ? sqlite3_errmsg(d->db) : sqlite3_errstr(rc));
        gm_db_close(d);
        return -1;
    }
    return db_validate(d, err, errsz);
}

/* PRAGMA application_id, or -1. */
static int application_id(gm_db *d) {
    sqlite3_stmt *s;
    int id = -1;
    if (sqlite3_prepare_v2(d->db, "PRAGMA application_id", -1, &s, NULL) != SQLITE_OK) return -1;
    if (sqlite3_step(s) == SQLITE_ROW) id = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return id;
}

/* Checks what SQLite opened (d->db; d->path names it in messages): the meta table, the schema
 * version, the tables. */
static int db_validate(gm_db *d, char *err, size_t errsz) {
    const char *path = d->path;
    int rc;
    sqlite3_busy_timeout(d->db, 2000);
    sqlite3_exec(d->db, "PRAGMA cache_size=-65536", NULL, NULL, NULL);
    /* SQLite's pages read through a memory map, not copied by pread: a sweep of the events
     * through SQLite reads the whole file once, and the copies were a tenth of its time. SQLite
     * maps only what the file holds and reads the rest (a WAL's pages) as before. The page
     * reader of the sweep (gm_analyze_pages.c) turns the map off while it reads: it copies a
     * window of pages at a time, so the report does not keep the whole file resident. */
    sqlite3_exec(d->db, "PRAGMA mmap_size=68719476736", NULL, NULL, NULL);
    sqlite3_stmt *s;
    rc = sqlite3_prepare_v2(d->db, "SELECT value FROM meta WHERE key = 'schema_major'", -1, &s, NULL);
    if (rc != SQLITE_OK) {
        /* SQLite's message is the last call's: kept before application_id's statements reset
         * it to "not an error" */
        int code = sqlite3_errcode(d->db);
        char why[512];
        snprintf(why, sizeof why, "%s", sqlite3_errmsg(d->db));
        if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB)
            snprintf(err, errsz, "%s is damaged (SQLite: %s); it may have been truncated or "
                     "overwritten — nothing can be read from it", path, why);
        else if (application_id(d) == REC_APPLICATION_ID)
            /* the recorder writes the id first: it stopped before its schema was committed */
            snprintf(err, errsz, "%s is a gpumem recording that stopped before its first commit "
                     "(its disk was full, or the program was killed as it started): it holds "
                     "nothing; record again where the database has room", path);
        else
            snprintf(err, errsz, "%s is an SQLite file but not a gpumem database (%s)", path, why);
        gm_db_close(d);
        return -1;
    }
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        snprintf(err, errsz, rc == SQLITE_DONE
                     ? "%s has no schema version in its meta table: not a gpumem database"
                     : "%s is damaged: cannot read its meta table (%s)",
                 path, sqlite3_errmsg(d->db));
        sqlite3_finalize(s);
        gm_db_close(d);
        return -1;
    }
    d->schema_major = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    d->schema_minor = (int)gm_meta_int(d, "schema_minor", 0);
    if (d->schema_major > GM_SCHEMA_MAJOR) {
        snprintf(err, errsz, "%s was written by a newer gpumem (schema %d.%d); this gpumem reads "
                 "schema %d.x — upgrade gpumem to read it", path, d->schema_major,
                 d->schema_minor, GM_SCHEMA_MAJOR);
        gm_db_close(d);
        return -1;
    }
    if (d->schema_major < 1) {
        snprintf(err, errsz, "%s has schema version %d, which no gpumem ever wrote: not a "
                 "gpumem database", path, d->schema_major);
        gm_db_close(d);
        return -1;
    }
    static const char *const need[] = {"events", "strings", "ranges", "stacks", "frames", "modules"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!gm_table_exists(d, need[i])) {
            snprintf(err, errsz, "%s is a gpumem database without its '%s' table: damaged or "
                     "edited; it cannot be reported on", path, need[i]);
            gm_db_close(d);
            return -1;
        }
    /* The meta table says how the recording ended and how many events it holds: a page of it
     * overwritten reads as a recording that "did not end cleanly", with no numbers. It is a page
     * or two, so SQLite's own check of its B-tree (its table argument: that table alone) costs
     * nothing against a sweep; the events are checked as they are read (gm_analyze_pages.c). */
    if (sqlite3_prepare_v2(d->db, "PRAGMA quick_check(meta)", -1, &s, NULL) == SQLITE_OK) {
        rc = sqlite3_step(s);
        const unsigned char *t = rc == SQLITE_ROW ? sqlite3_column_text(s, 0) : NULL;
        if (t && !strncmp((const char *)t, "*** ", 4)) { /* "*** in database main ***": the finding follows */
            rc = sqlite3_step(s);
            t = rc == SQLITE_ROW ? sqlite3_column_text(s, 0) : NULL;
        }
        if (rc != SQLITE_ROW || !t || strcmp((const char *)t, "ok") != 0)
            gm_db_damaged(d, "its meta table is damaged (SQLite: %s)",
                          t ? (const char *)t : sqlite3_errmsg(d->db));
        sqlite3_finalize(s);
    }
    gm_meta_text(d, "state", d->state, sizeof d->state);
    gm_meta_text(d, "failure", d->failure, sizeof d->failure);
    /* an interrupted recording (an ending signal: SIGINT, SIGHUP, ...) was closed by the recorder: complete too */
    d->closed = strcmp(d->state, "closed") == 0 || strcmp(d->state, "interrupted") == 0;
    /* Readers never change a recording: every statement after this is refused by SQLite if it
     * writes, until gm_db_allow_writes (symbol write-back, gpumem sql --write). Opening
     * read-write above is for recovery only: closing a read-write connection folds the WAL a
     * killed recorder left (run.db-wal) into run.db, so one file holds everything after it. */
    sqlite3_exec(d->db, "PRAGMA query_only=1", NULL, NULL, NULL);
    return 0;
}

int gm_db_open_mem(const char *name, const void *data, size_t size, gm_db *d, char *err,
                   size_t errsz) {
    memset(d, 0, sizeof *d);
    snprintf(d->path, sizeof d->path, "%s", name);
    if (size < 16 || memcmp(data, "SQLite format 3", 16) != 0) {
        snprintf(err, errsz, "%s is not a gpumem database (not an SQLite file, or truncated "
                 "before its first page)", name);
        return -1;
    }
    if (cut_short(name, data, size, size, err, errsz)) return -1;
    if (sqlite3_open_v2(":memory:", &d->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        snprintf(err, errsz, "%s: out of memory", name);
        gm_db_close(d);
        return -1;
    }
    /* The image is read where it lies (read-only: SQLite never writes into it, and at a fixed
     * size it hands out its pages by pointer instead of copying them into its cache), unless
     * its header says WAL: an image has no -wal beside it, so such a file is read as the
     * rollback file it then is (header bytes 18-19, write and read versions: 2 = WAL, which
     * memdb cannot open), from a copy with those bytes changed. */
    const unsigned char *img = data;
    unsigned flags = SQLITE_DESERIALIZE_READONLY;
    if (size >= 20 && (img[18] == 2 || img[19] == 2)) {
        unsigned char *copy = sqlite3_malloc64(size);
        if (!copy) {
            snprintf(err, errsz, "%s: out of memory", name);
            gm_db_close(d);
            return -1;
        }
        memcpy(copy, data, size);
        if (copy[18] == 2) copy[18] = 1;
        if (copy[19] == 2) copy[19] = 1;
        img = copy;
        flags |= SQLITE_DESERIALIZE_FREEONCLOSE; /* SQLite frees the copy, also when this fails */
    }
    if (sqlite3_deserialize(d->db, "main", (unsigned char *)img, (sqlite3_int64)size,
                            (sqlite3_int64)size, flags) != SQLITE_OK) {
        snprintf(err, errsz, "%s: SQLite cannot open it: %s", name, sqlite3_errmsg(d->db));
        gm_db_close(d);
        return -1;
    }
    return db_validate(d, err, errsz);
}

int gm_db_allow_writes(gm_db *d, int on) {
    if (!d->writable) return on ? -1 : 0;
    return sqlite3_exec(d->db, on ? "PRAGMA query_only=0" : "PRAGMA query_only=1", NULL, NULL,
                        NULL) == SQLITE_OK ? 0 : -1;
}

/* ---------------------------------------------------------------- recordings that lost events */

uint64_t gm_dropped(gm_db *d) {
    int64_t n = gm_meta_int(d, "dropped_events", 0);
    return n > 0 ? (uint64_t)n : 0;
}

/* why the events were lost, for the lines below */
static void lossy_why(gm_db *d, char *out, size_t n) {
    char ring[16];
    gm_meta_text(d, "ring_full", ring, sizeof ring);
    if (strcmp(d->state, "failed") == 0)
        snprintf(out, n, "the recording failed: %s", d->failure[0] ? d->failure : "see gpumem report");
    else if (strcmp(ring, "drop") == 0)
        snprintf(out, n, "the ring was full, and it was recorded with GPUMEM_RING_FULL=drop");
    else if (strcmp(ring, "wait") == 0)
        snprintf(out, n, "the writer was gone, stuck or parked for a fork while the ring was full");
    else
        snprintf(out, n, "the ring was full");
}

void gm_lossy_line(gm_db *d, char *out, size_t n) {
    uint64_t lost = gm_dropped(d);
    out[0] = 0;
    if (!lost) return;
    char why[700];
    lossy_why(d, why, sizeof why);
    snprintf(out, n, "gpumem: WARNING: %s lost %" PRIu64 " event%s (%s): peaks, leaks and advice from it "
                     "can be wrong",
             d->path, lost, lost == 1 ? "" : "s", why);
}

void gm_signal_name(int sig, int hint, char *out, size_t n) {
    /* SIGIO rather than glibc's SIGPOLL (the same number): the name kill -l and signal(7) use */
    const char *abbrev = sig == SIGIO ? "IO" : sig > 0 ? sigabbrev_np(sig) : NULL;
    const char *why = !hint ? "" : sig == SIGINT ? " (Ctrl-C)" : sig == SIGHUP ? " (its terminal or session closed)" : "";
    if (sig >= SIGRTMIN && sig <= SIGRTMAX) /* glibc names no real-time signal; kill -l's names */
        snprintf(out, n, sig == SIGRTMIN ? "SIGRTMIN" : sig == SIGRTMAX ? "SIGRTMAX" : "SIGRTMIN+%d", sig - SIGRTMIN);
    else if (abbrev) snprintf(out, n, "SIG%s%s", abbrev, why);
    else if (sig > 0) snprintf(out, n, "signal %d", sig);
    else snprintf(out, n, "a signal");
}

const char *gm_ending(gm_db *d, char *buf, size_t n) {
    if (strcmp(d->state, "closed") == 0) return NULL;
    if (strcmp(d->state, "interrupted") == 0) {
        char sig[96];
        gm_signal_name((int)gm_meta_int(d, "signal", 0), 0, sig, sizeof sig);
        snprintf(buf, n, "ended by %s", sig);
    } else
        snprintf(buf, n, "%s", strcmp(d->state, "exec") == 0     ? "it replaced itself by exec"
                               : strcmp(d->state, "failed") == 0 ? "the recording failed"
                                                                 : "killed, or still running");
    return buf;
}

void gm_ending_line(gm_db *d, char *out, size_t n) {
    char why[128];
    out[0] = 0;
    if (gm_ending(d, why, sizeof why))
        snprintf(out, n, "the program did not run to its end (%s): what it held then shows as alive, not "
                         "necessarily leaked",
                 why);
}

void gm_ending_say(gm_db *d, FILE *out) {
    char line[256];
    gm_ending_line(d, line, sizeof line);
    if (line[0]) fprintf(out, "gpumem: note: %s: %s\n", d->path, line);
}

int gm_db_device_list(gm_db *d, int *devs, int max) {
    int n = 0;
    /* The memory recorded, not the streams table: a stream made on a device the program never
     * allocated on holds nothing there. But every event names one of the recording's streams,
     * so the streams' devices bound the answer: one or none (most recordings) needs no look at
     * the events; each further one, the first allocation on it (an index-free scan that stops
     * there, and reads the whole table only for a device that holds nothing). Allocations
     * (1, 3), gpumem's segments (14) and its driver allocations (18), PyTorch's tensors (31)
     * and segments (34): what the peaks count. */
    int cand[64], nc = 0;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, "SELECT DISTINCT device FROM streams WHERE device >= 0 ORDER BY device", -1,
                           &s, NULL) != SQLITE_OK)
        return 0;
    while (sqlite3_step(s) == SQLITE_ROW && nc < (int)(sizeof cand / sizeof cand[0]))
        cand[nc++] = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    if (nc <= 1) {
        if (nc && max > 0) devs[0] = cand[0];
        return nc;
    }
    if (sqlite3_prepare_v2(d->db, "SELECT 1 FROM events WHERE device = ?1 AND kind IN (1, 3, 14, 18, 31, 34) LIMIT 1",
                           -1, &s, NULL) != SQLITE_OK)
        return 0;
    for (int i = 0; i < nc; i++) {
        sqlite3_bind_int(s, 1, cand[i]);
        if (sqlite3_step(s) == SQLITE_ROW) {
            if (n < max) devs[n] = cand[i];
            n++;
        }
        sqlite3_reset(s);
    }
    sqlite3_finalize(s);
    return n;
}

int gm_db_devices(gm_db *d, int *lo, int *hi) {
    int devs[64];
    int n = gm_db_device_list(d, devs, 64);
    *lo = *hi = 0;
    if (n) *lo = devs[0], *hi = devs[(n < 64 ? n : 64) - 1];
    return n;
}

int gm_db_scope_view(char *buf, size_t n, const char *table, int dev) {
    /* a row of no device (a host event, a range's mark) belongs to every device's reading */
    int k = snprintf(buf, n, "VIEW %s AS SELECT * FROM main.%s WHERE device IS NULL OR device < 0 OR device = %d",
                     table, table, dev);
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

int gm_db_scope_device(gm_db *d, int dev) {
    static const char *const tables[] = {"events", "ooms", "snapshots", "segments"};
    char sql[1024] = "";
    size_t len = 0;
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        char view[256];
        if (gm_db_scope_view(view, sizeof view, tables[i], dev) != 0) return -1;
        int k = snprintf(sql + len, sizeof sql - len, "CREATE TEMP %s;", view);
        if (k < 0 || (size_t)k >= sizeof sql - len) return -1;
        len += (size_t)k;
    }
    if (sqlite3_exec(d->db, "PRAGMA query_only=0; SAVEPOINT scope", NULL, NULL, NULL) != SQLITE_OK) return -1;
    int rc = sqlite3_exec(d->db, sql, NULL, NULL, NULL);
    sqlite3_exec(d->db, rc == SQLITE_OK ? "RELEASE scope" : "ROLLBACK TO scope; RELEASE scope", NULL, NULL, NULL);
    sqlite3_exec(d->db, "PRAGMA query_only=1", NULL, NULL, NULL);
    if (rc != SQLITE_OK) return -1;
    /* statements prepared before name the file's tables */
    sqlite3_finalize(d->meta_st);
    sqlite3_finalize(d->table_st);
    d->meta_st = d->table_st = NULL;
    d->scoped = dev + 1;
    return 0;
}

void gm_lossy_say(gm_db *d, FILE *out) {
    char line[1200];
    gm_lossy_line(d, line, sizeof line);
    if (line[0]) fprintf(out, "%s\n", line);
}

int gm_lossy_gate(gm_db *d, const char *cmd, int lossy_ok, FILE *out) {
    uint64_t lost = gm_dropped(d);
    if (!lost) return 0;
    if (lossy_ok) {
        char line[1200];
        gm_lossy_line(d, line, sizeof line);
        fprintf(out, "%s (--lossy-ok)\n", line);
        return 0;
    }
    char why[700];
    lossy_why(d, why, sizeof why);
    fprintf(stderr, "gpumem %s: %s lost %" PRIu64 " event%s (%s), so its %s can be wrong. Record it again "
                    "(a full ring waits for the writer by default), or give --lossy-ok to analyse what "
                    "was kept.\n",
            cmd, d->path, lost, lost == 1 ? "" : "s", why,
            !strcmp(cmd, "leaks") ? "leaks" : !strcmp(cmd, "advise") ? "advice" : "peaks");
    return GM_EXIT_BADDB;
}

/* ---------------------------------------------------------------- damaged recordings */

void gm_db_damaged(gm_db *d, const char *fmt, ...) {
    if (d->damage[0]) return; /* the first reason: what followed from it says less */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->damage, sizeof d->damage, fmt, ap);
    va_end(ap);
}

int gm_damage_gate(gm_db *d, const char *cmd, int has_lossy_ok, int lossy_ok, FILE *out) {
    if (!d->damage[0]) return 0;
    if (lossy_ok) {
        fprintf(out, "gpumem: WARNING: %s is damaged: %s; what could be read is analysed (--lossy-ok): its "
                     "peaks, leaks and advice can be wrong\n",
                d->path, d->damage);
        return 0;
    }
    fprintf(stderr, "gpumem %s: the recording is damaged: %s: %s; its %s would be wrong. Record it again, or "
                    "give %s--lossy-ok to analyse what can be read.\n",
            cmd, d->path, d->damage,
            !strcmp(cmd, "leaks") ? "leaks" : !strcmp(cmd, "advise") ? "advice" : "peaks",
            has_lossy_ok ? "" : "gpumem report ");
    return GM_EXIT_BADDB;
}
