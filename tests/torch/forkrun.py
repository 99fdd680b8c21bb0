#!/usr/bin/env python3
"""forkrun.py — several runs of train_gpt2.py under different allocator configurations, from one
interpreter that imported torch once (a second or more of every run is torch's import).

  forkrun.py OUTDIR JOBS SPEC...      SPEC = "NAME|PYTORCH_CUDA_ALLOC_CONF|train_gpt2.py args"

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
        sys.path.insert(0, HERE)
        import train_gpt2
        sys.argv = ["train_gpt2.py"] + args
        status = train_gpt2.main(args)
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


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    outdir, jobs, specs = argv[0], int(argv[1]), argv[2:]
    import torch  # noqa: F401 - once, before the forks
    if torch.cuda.is_initialized():
        print("forkrun: CUDA is already initialized; cannot fork runs", file=sys.stderr)
        return 2
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
