/*
 * cg_steps.c — callgrind's client requests for a Python program (tests/bench/cg_steps.py loads
 * this with ctypes): zero the counts at one step and dump them at a later one, so that a
 * profile holds the training steps alone, not the interpreter's start, PyTorch's import or the
 * exit. Outside valgrind the requests are no-ops. Built without sanitizers: it is loaded into a
 * Python that has none.
 */
#include <valgrind/callgrind.h>

void gm_cg_zero(void);
void gm_cg_dump(const char *why);

void gm_cg_zero(void) { CALLGRIND_ZERO_STATS; }

void gm_cg_dump(const char *why) { CALLGRIND_DUMP_STATS_AT(why); }
