/* abort_stacks.c — preloaded into a process under test (tests/torch/exit_stress.sh): at a
 * SIGABRT, every thread prints its native stack to stderr, then the abort goes on (exit 134,
 * a core where cores are kept). Exit-time aborts ("terminate called without an active
 * exception") depend on what the other threads are doing at that instant, which a debugger
 * changes too much to see (such a race hides under gdb) and a core needs a core_pattern this
 * machine may not let a test set.
 *
 * The aborting thread prints its own stack, then sends SIGURG to each other thread of the
 * process in turn and waits (up to a second) for it to print its own. Only calls that are safe
 * in a signal handler are made there: backtrace() is called once at load time, so that its
 * first call (which loads libgcc's unwinder) is not made in a handler. */
#define _GNU_SOURCE
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t printed; /* stacks printed by other threads so far */

static void say(const char *s)
{
    (void)!write(2, s, strlen(s));
}

static void say_num(long v)
{
    char b[24], *p = b + sizeof b;
    *--p = 0;
    do
        *--p = (char)('0' + v % 10);
    while ((v /= 10) > 0);
    say(p);
}

static void print_stack(const char *which)
{
    void *frames[64];
    int n = backtrace(frames, 64);
    say("abort_stacks: ");
    say(which);
    say(" thread ");
    say_num((long)syscall(SYS_gettid));
    say("\n");
    backtrace_symbols_fd(frames, n, 2);
}

static void on_urg(int sig)
{
    (void)sig;
    print_stack("other");
    printed++;
}

/* linux_dirent64, as getdents64 fills it */
struct task_entry {
    unsigned long long ino;
    long long off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

static void on_abrt(int sig)
{
    print_stack("aborting");
    long me = (long)syscall(SYS_gettid);
    int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
    char buf[4096];
    long len;
    while (fd >= 0 && (len = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        for (long at = 0; at < len;) {
            struct task_entry *e = (struct task_entry *)(void *)(buf + at);
            at += e->reclen;
            long tid = 0;
            for (const char *c = e->name; *c >= '0' && *c <= '9'; c++)
                tid = tid * 10 + (*c - '0');
            if (tid <= 0 || tid == me) continue;
            sig_atomic_t before = printed; /* one at a time: their lines would interleave */
            if (syscall(SYS_tgkill, (long)getpid(), tid, SIGURG) != 0) continue;
            struct timespec tick = {0, 5000000};
            for (int i = 0; i < 200 && printed == before; i++)
                nanosleep(&tick, NULL);
        }
    }
    if (fd >= 0) close(fd);
    signal(sig, SIG_DFL); /* delivered when this handler returns: the abort goes on */
    raise(sig);
}

__attribute__((constructor)) static void abort_stacks_install(void)
{
    void *warm[1];
    backtrace(warm, 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_urg;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGURG, &sa, NULL);
    sa.sa_handler = on_abrt;
    sigaction(SIGABRT, &sa, NULL);
}
