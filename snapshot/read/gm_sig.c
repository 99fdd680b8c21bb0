/* gm_sig.c — temporary files removed and children told when a command is told to stop
 * (gm_sig.h).
 *
 * Everything the handler touches is async-signal-safe: a fixed table of paths (side files named
 * when registered) written before their slot is marked used, unlink(2), kill(2), open/read/close of /proc, raise(2). Each slot
 * keeps the pid that registered it: a forked child (viz's analyses, a re-run before its exec)
 * inherits the table and must never remove its parent's files. */
#include "snapshot/read/gm_sig.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "snapshot/record/rec.h" /* rec_db_side */

/* each slot: the path, then its SQLite side files (named by rec_db_side when registered: the
 * handler only unlinks) */
enum { SIG_SLOTS = 32, SIG_PATH = 4200, SIG_NAMES = 1 + REC_SIDES };
static char slot_path[SIG_SLOTS][SIG_NAMES][SIG_PATH];
static volatile sig_atomic_t slot_owner[SIG_SLOTS]; /* pid that registered it, 0: free */

static const int caught[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
static int installed;
static volatile sig_atomic_t waiting_child; /* the child gm_sig_wait_child waits for, 0: none */
static volatile sig_atomic_t waiting_owner; /* the process waiting for it */
static volatile sig_atomic_t arrived;       /* the first signal that came while waiting */

static void remove_registered(void) {
    pid_t me = getpid();
    for (int k = 0; k < SIG_SLOTS; k++)
        if (slot_owner[k] == me)
            for (int j = 0; j < SIG_NAMES; j++)
                if (slot_path[k][j][0]) unlink(slot_path[k][j]);
}

void gm_sig_die(int sig) {
    remove_registered();
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
    _exit(128 + sig); /* only if the default action did not end us */
}

/* 1 when /proc says sig is pending for pid (sent to the whole group, not yet taken). */
static int child_has_pending(pid_t pid, int sig) {
    char path[48] = "/proc/", num[16];
    int n = 0;
    for (pid_t v = pid; v > 0 && n < 15; v /= 10) num[n++] = (char)('0' + v % 10);
    size_t o = 6;
    while (n > 0) path[o++] = num[--n];
    memcpy(path + o, "/status", 8);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[2048];
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0) return 0;
    buf[got] = 0;
    /* "SigPnd:\t<hex>" (the thread's) and "ShdPnd:\t<hex>" (the process's); bit sig-1 */
    static const char *const keys[] = {"SigPnd:", "ShdPnd:"};
    for (size_t k = 0; k < 2; k++) {
        const char *p = strstr(buf, keys[k]);
        if (!p) continue;
        p += 7;
        while (*p == ' ' || *p == '\t') p++;
        const char *e = p;
        while ((*e >= '0' && *e <= '9') || (*e >= 'a' && *e <= 'f')) e++;
        int digit = (sig - 1) / 4; /* from the right */
        if (e - p <= digit) continue;
        char c = e[-1 - digit];
        int v = c <= '9' ? c - '0' : c - 'a' + 10;
        if (v & (1 << ((sig - 1) % 4))) return 1;
    }
    return 0;
}

static void on_signal(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    int saved = errno;
    pid_t child = waiting_child;
    if (child > 0 && waiting_owner == getpid()) {
        /* the terminal's signals reached the child already; a process's may have too */
        if (si->si_code != SI_KERNEL && !child_has_pending(child, sig)) kill(child, sig);
        if (!arrived) arrived = sig;
        errno = saved;
        return;
    }
    gm_sig_die(sig);
}

static void install(void) {
    if (installed) return;
    installed = 1;
    for (size_t k = 0; k < sizeof caught / sizeof caught[0]; k++) {
        struct sigaction old, sa = {.sa_sigaction = on_signal, .sa_flags = SA_SIGINFO};
        sigemptyset(&sa.sa_mask);
        for (size_t j = 0; j < sizeof caught / sizeof caught[0]; j++) sigaddset(&sa.sa_mask, caught[j]);
        if (sigaction(caught[k], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue; /* nohup */
        sigaction(caught[k], &sa, NULL);
    }
}

int gm_sig_remove_on_exit(const char *path) {
    install();
    if (strlen(path) >= SIG_PATH) return -1;
    for (int k = 0; k < SIG_SLOTS; k++) {
        if (slot_owner[k]) continue;
        snprintf(slot_path[k][0], SIG_PATH, "%s", path);
        for (int j = 0; j < REC_SIDES; j++) rec_db_side(path, j, slot_path[k][1 + j], SIG_PATH);
        slot_owner[k] = getpid(); /* after the names: the handler reads whole ones */
        return k;
    }
    return -1;
}

int gm_sig_mkostemp(char *tmpl, int flags, int *slot) {
    install();
    sigset_t hold, old;
    sigemptyset(&hold);
    for (size_t j = 0; j < sizeof caught / sizeof caught[0]; j++) sigaddset(&hold, caught[j]);
    sigprocmask(SIG_BLOCK, &hold, &old);
    int fd = mkostemp(tmpl, flags);
    int saved = errno;
    *slot = fd >= 0 ? gm_sig_remove_on_exit(tmpl) : -1;
    sigprocmask(SIG_SETMASK, &old, NULL); /* one that came meanwhile is taken here: the file removed */
    errno = saved;
    return fd;
}

void gm_sig_forget(int slot) {
    if (slot >= 0 && slot < SIG_SLOTS) slot_owner[slot] = 0;
}

pid_t gm_sig_fork(void) {
    install();
    sigset_t hold, old;
    sigemptyset(&hold);
    for (size_t j = 0; j < sizeof caught / sizeof caught[0]; j++) sigaddset(&hold, caught[j]);
    sigprocmask(SIG_BLOCK, &hold, &old);
    arrived = 0;
    pid_t pid = fork();
    if (pid > 0) waiting_child = pid, waiting_owner = getpid();
    sigprocmask(SIG_SETMASK, &old, NULL);
    return pid;
}

int gm_sig_wait_child(pid_t pid, int *status) {
    while (waitpid(pid, status, 0) < 0 && errno == EINTR) {}
    waiting_child = 0;
    int sig = arrived;
    arrived = 0;
    return sig;
}
