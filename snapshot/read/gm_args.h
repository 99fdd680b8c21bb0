/* gm_args.h — the command-line rule every command of gpumem reads its options' values by,
 * without the rest of the reading side: gpumem-replay (alloc/replay_main.c), which links only
 * gm_args.o of snapshot/, reads its values by the same rule as the gpumem command, so that the
 * two never disagree on what a value is. Plain C, no SQLite. */
#ifndef GPUMEM_SNAPSHOT_GM_ARGS_H
#define GPUMEM_SNAPSHOT_GM_ARGS_H

/* (gm_args.c) Command lines: the value of the option at argv[i], the next argument; NULL when there is none
 * or when it is itself option-like ("--", "--json", "-o"): a forgotten value must never take the
 * next option, or the "--" before a command, as a file name. "-" (standard input or output),
 * "-5" (a number, refused by its own check) and "-- text" are values. gm_opt_value also steps
 * *i over the value it returns; gm_opt_peek does not. Every command's parser takes its values so. */
const char *gm_opt_peek(int argc, char **argv, int i);
const char *gm_opt_value(int argc, char **argv, int *i);

#endif
