/* rec_state.c — what both sides of the recorder share: its one state (rec_g), its clock, its
 * messages, and the end of a signal's close handed over to the writer. The application side (rec.c) and the writer thread (rec_writer.c) both stand
 * on this file and neither calls back into the other's internals through it; rec.c starts and
 * stops the writer (rec_writer_*), the writer reads the state here. */
#include "snapshot/record/rec_internal.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

rec_state rec_g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .db_lock = PTHREAD_MUTEX_INITIALIZER,
    .gen = 1,
    .lock_fd = -1,
    .end_timer = -1,
    .items_tail = &rec_g.items,
};

void rec_note_start(void) {
    /* the process tree's first process with libgpumem.so: the one whose recording always stays;
     * an exec'd image keeps its pid, a child of any kind finds its parent's (rec_close) */
    const char *root = getenv("GPUMEM_RECORD_ROOT");
    char *end = NULL;
    long r = root ? strtol(root, &end, 10) : 0;
    if (r > 0 && end && !*end) {
        rec_g.root_pid = r;
    } else {
        char pid[24];
        snprintf(pid, sizeof pid, "%ld", (long)getpid());
        setenv("GPUMEM_RECORD_ROOT", pid, 1);
        rec_g.root_pid = (long)getpid();
    }
    if (!getcwd(rec_g.start_cwd, sizeof rec_g.start_cwd)) rec_g.start_cwd[0] = 0;
    /* the recording's name, from here: an exec'd image or a child that starts elsewhere (or this
     * program after a chdir) reads GPUMEM_DB again, and must find the same directory */
    const char *db = getenv("GPUMEM_DB");
    if (!rec_g.start_cwd[0] || (db && (db[0] == '/' || !strcmp(db, "none") || !strcmp(db, "off")))) return;
    char abs[sizeof rec_g.tmpl];
    if (rec_path_from(rec_g.start_cwd, db && *db ? db : REC_DEFAULT_DB, abs, sizeof abs) == 0)
        setenv("GPUMEM_DB", abs, 1);
}

/* Raw system calls: async-signal-safe (rec.c's handler calls the first), and no helper thread
 * or allocation of the C library's. */
void rec_end_timer_push(rec_state *g) {
    int id = atomic_load_explicit(&g->end_timer, memory_order_acquire);
    if (__builtin_expect(id < 0, 1)) return;
    uint64_t now = rec_now_ns(), at = now + REC_WAIT_IDLE_NS, cap = g->end_since + REC_WAIT_CAP_NS;
    if (at > cap) at = cap;
    uint64_t in = at > now ? at - now : 1;
    struct itimerspec its = {.it_value = {(time_t)(in / 1000000000u), (long)(in % 1000000000u)}};
    syscall(SYS_timer_settime, id, 0, &its, NULL);
}

void rec_end_signal_deliver(rec_state *g) {
    int sig = atomic_load(&g->end_signal);
    if (sig && (long)getpid() == g->pid) kill(getpid(), sig);
}

uint64_t rec_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void rec_warn(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    fprintf(stderr, "gpumem: recorder: %s\n", buf);
    rec_status("msg", buf);
}
