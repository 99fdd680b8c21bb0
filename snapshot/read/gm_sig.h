/* gm_sig.h — what a gpumem command does when it is told to stop (SIGINT, SIGTERM, SIGHUP).
 *
 * Two promises, one handler:
 * - a temporary file a command made (the output rule's .NAME.gpumem-XXXXXX, --check's re-run
 *   databases) is removed, with its SQLite side files, before the command dies of the signal,
 *   so the exit status stays 128+N and nothing is left behind;
 * - a child the command waits for (record's program, --check's re-run, viz's analyses) is told
 *   too, and waited for: no child outlives the command, orphaned and still writing.
 *
 * The signals are SIGINT, SIGTERM, SIGHUP and SIGQUIT; one ignored when the command started
 * (nohup) stays ignored.
 *
 * A signal the terminal generated (Ctrl-C, Ctrl-\, a hangup: si_code SI_KERNEL) reached the
 * whole foreground process group, the child included, so it is not sent again: a program with
 * its own handler (Python's KeyboardInterrupt) must not see one Ctrl-C as two. A signal a process
 * sent (kill PID, Popen.terminate(), a supervisor) is forwarded unless the child has it pending
 * already (then it was sent to the group: standard signals do not queue, nothing to add). */
#ifndef GM_SIG_H
#define GM_SIG_H

#include <sys/types.h>

/* Registers PATH (and its -journal, -wal, -shm) to be removed when a terminating signal ends
 * this process. Returns a slot for gm_sig_forget, or -1 when the table is full (nothing is
 * lost but that promise). Installs the handlers on first use. */
int gm_sig_remove_on_exit(const char *path);
void gm_sig_forget(int slot);

/* mkostemp(3) of tmpl (flags as its), the file registered as gm_sig_remove_on_exit registers it
 * (*slot), with the signals held from before the file exists until it is registered: a signal
 * in between (the file there, the handler not knowing it, or not installed yet) left it behind.
 * Returns the descriptor, or -1 with errno (*slot -1). */
int gm_sig_mkostemp(char *tmpl, int flags, int *slot);

/* fork(2) for a child this process will wait for: the signals are held across the fork, so
 * none can end this process between the fork and the moment the child is known to the handler
 * (which would orphan it). In the child, a signal before its exec ends it alone: the parent's
 * registered files are the parent's. */
pid_t gm_sig_fork(void);

/* Waits for the child of gm_sig_fork as waitpid(pid, status, 0) does, forwarding SIGINT,
 * SIGTERM, SIGHUP and SIGQUIT as above. Returns the first of those signals that arrived
 * meanwhile, 0 when none: the caller cleans up, then calls gm_sig_die(sig) (or, as record,
 * carries on and exits as its program did). */
int gm_sig_wait_child(pid_t pid, int *status);

/* Removes every registered path, then dies of sig by its default action (exit status 128+sig). */
void gm_sig_die(int sig);

#endif
