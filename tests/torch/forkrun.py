#!/usr/bin/env python3
"""forkrun.py — several runs of train_gpt2.py (or of other scripts) under different allocator
configurations, from one interpreter that imported torch once (a second or more of every run is
torch's import).

  forkrun.py OUTDIR JOBS SPEC...      SPEC = "NAME|PYTORCH_CUDA_ALLOC_CONF|ARGS"
  forkrun.py --serve OUTDIR           one SPEC a line on stdin, run one at a time; each run's
                                      exit status, a line, on stdout when it ends

ARGS: train_gpt2.py's arguments; or a script's path (ending in .py) and its arguments, run as
`python SCRIPT ARGS` runs it (as __main__, its folder first on sys.path); or -m MODULE ARGS, as
`python -m MODULE ARGS`. Words are split at white space. common.bash's torch_serve and torch_fork
run the server and ask it for runs (a test's measuring runs, where no gpumem record is made).

Each run is a child forked before CUDA is initialized (so each has its own CUDA state, as a new
process would): it puts the configuration in the environment and hands it to torch's own parser,
torch._C._accelerator_setAllocatorSettings (what torch does with PYTORCH_CUDA_ALLOC_CONF at
start-up; a bad key fails the run as it would fail the program), then runs the script's main()
with stdout in OUTDIR/NAME.out and stderr in OUTDIR/NAME.err; the exit status goes to the end of
NAME.err when it is not 0. JOBS children at a time. Exit status: 0, or 1 when a run failed.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def child(outdir, name, conf, args):
    out = os.open(os.path.join(outdir, name + ".out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(os.path.join(outdir, name + ".err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    status = 1
    try:
        import torch
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
        torch._C._accelerator_setAllocatorSettings(conf)
        status = run(args)
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # noqa: BLE001 - reported, the run fails
        print("forkrun: %s: %s: %s" % (name, type(e).__name__, e), file=sys.stderr)
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if status:
        os.write(2, b"\nexit %d\n" % status)
    os._exit(status)


def run(args):
    """ARGS as the docstring says: train_gpt2.py's main(), a script or a module; its status."""
    import runpy
    if args and args[0] == "-m":
        sys.argv = [args[1]] + args[2:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return 0
    if args and args[0].endswith(".py"):
        sys.argv = list(args)
        sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
        runpy.run_path(args[0], run_name="__main__")
        return 0
    sys.path.insert(0, HERE)
    import train_gpt2
    sys.argv = ["train_gpt2.py"] + args
    return train_gpt2.main(args)


def serve(outdir):
    """One run a line of stdin, each forked and waited for; its exit status a line of stdout."""
    for line in sys.stdin:
        name, conf, args = line.rstrip("\n").split("|", 2)
        pid = os.fork()
        if pid == 0:
            child(outdir, name, conf, args.split())
        _, st = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(st)
        print(code if code >= 0 else 128 - code, flush=True)
    return 0


def main(argv):
    serving = len(argv) == 2 and argv[0] == "--serve"
    if len(argv) < 3 and not serving:
        print(__doc__, file=sys.stderr)
        return 2
    import torch  # noqa: F401 - once, before the forks
    if torch.cuda.is_initialized():
        print("forkrun: CUDA is already initialized; cannot fork runs", file=sys.stderr)
        return 2
    if serving:
        return serve(argv[1])
    outdir, jobs, specs = argv[0], int(argv[1]), argv[2:]
    running, failed = {}, 0
    for spec in specs:
        name, conf, args = spec.split("|", 2)
        while len(running) >= jobs:
            pid, st = os.wait()
            failed |= st != 0
            running.pop(pid, None)
        pid = os.fork()
        if pid == 0:
            child(outdir, name, conf, args.split())
        running[pid] = name
    while running:
        pid, st = os.wait()
        failed |= st != 0
        running.pop(pid, None)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
