"""PyTorch's memory statistics with gpumem as its allocator (tests/torch/torch_stats.sh says what
is checked). One line a fact:
  OK <name> | RAISE <name> <error>   each statistics entry point of torch.cuda, called at the end
  PEAKS <max_memory_allocated> <max_memory_reserved> <requested_bytes.all.peak>   the whole run's
  DEV <d> <memory_allocated(d)> <max_memory_allocated(d)> <requested peak(d)> <max_memory_reserved(d)>
  RESET <figure> <got> <want>   after reset_peak_memory_stats, by PyTorch's rule: each peak is the
                                current value, then the top of what follows (below the whole run's)
  OOM <raised> <num_ooms> <num_alloc_retries>   after one request over the device (gpumem freed
                                its cache, the 40 MiB freed above, and tried again first)
  ACC <num_ooms> <allocation.all.allocated>   after reset_accumulated_memory_stats
  FRACTION <get_per_process_memory_fraction()> <the same after set_per_process_memory_fraction(0.25)>
  END <max_memory_allocated> <max_memory_reserved>   at the end: since the last of 4 resets
"""
import sys
import warnings

import torch

warnings.simplefilter("ignore", FutureWarning)  # reset_max_memory_allocated's, max_memory_cached's
MiB = 1 << 20
cuda = torch.cuda


def entry_points():
    calls = [("memory_allocated", cuda.memory_allocated), ("max_memory_allocated", cuda.max_memory_allocated),
             ("memory_reserved", cuda.memory_reserved), ("max_memory_reserved", cuda.max_memory_reserved),
             ("memory_cached", cuda.memory_cached), ("max_memory_cached", cuda.max_memory_cached),
             ("memory_stats", cuda.memory_stats), ("memory_stats_as_nested_dict", cuda.memory_stats_as_nested_dict),
             ("memory_summary", cuda.memory_summary),
             ("reset_accumulated_memory_stats", cuda.reset_accumulated_memory_stats),
             ("reset_peak_memory_stats", cuda.reset_peak_memory_stats),
             ("reset_max_memory_allocated", cuda.reset_max_memory_allocated),
             ("reset_max_memory_cached", cuda.reset_max_memory_cached),
             ("get_per_process_memory_fraction", cuda.get_per_process_memory_fraction)]
    for name, fn in calls:
        try:
            fn()
            print("OK", name)
        except Exception as e:  # noqa: BLE001 - the point: which ones raise
            print("RAISE %s %s: %s" % (name, type(e).__name__, str(e).splitlines()[0][:100]))


def figures(what):
    """Each figure the rows read; a figure that raises prints its error and ends the run (1)."""
    try:
        return what()
    except Exception as e:  # noqa: BLE001
        print("RAISE figures %s: %s" % (type(e).__name__, str(e).splitlines()[0][:300]))
        sys.exit(1)


def requested(dev=None, key="peak"):
    return cuda.memory_stats(dev)["requested_bytes.all." + key]


def main():
    a = torch.empty(40 * MiB, dtype=torch.uint8, device="cuda")
    b = torch.empty(3 * MiB + 100, dtype=torch.uint8, device="cuda")
    c = torch.empty(1000, device="cuda")
    ones = [torch.empty(5000, device="cuda:%d" % d) for d in range(1, cuda.device_count())]
    print("PEAKS %d %d %d" % figures(lambda: (cuda.max_memory_allocated(), cuda.max_memory_reserved(), requested())))
    for d in range(cuda.device_count()):
        print("DEV %d %d %d %d %d" % figures(lambda: (d, cuda.memory_allocated(d), cuda.max_memory_allocated(d),
                                                      requested(d), cuda.max_memory_reserved(d))))
    del a
    figures(cuda.reset_peak_memory_stats)
    for name, got, want in (("allocated", cuda.max_memory_allocated, cuda.memory_allocated),
                            ("reserved", cuda.max_memory_reserved, cuda.memory_reserved),
                            ("requested", requested, lambda: requested(key="current"))):
        print("RESET %s %d %d" % figures(lambda: (name, got(), want())))
    d = torch.empty(MiB, dtype=torch.uint8, device="cuda")  # a new top, below the whole run's
    print("RESET allocated-then %d %d" % figures(lambda: (cuda.max_memory_allocated(), cuda.memory_allocated())))
    raised = 0
    try:
        torch.empty(200 << 30, dtype=torch.uint8, device="cuda")  # over the 80 GiB device
    except torch.OutOfMemoryError:
        raised = 1
    st = figures(cuda.memory_stats)
    print("OOM %d %d %d" % (raised, st["num_ooms"], st["num_alloc_retries"]))
    figures(cuda.reset_accumulated_memory_stats)
    st = figures(cuda.memory_stats)
    print("ACC %d %d" % (st["num_ooms"], st["allocation.all.allocated"]))
    before = figures(cuda.get_per_process_memory_fraction)
    cuda.set_per_process_memory_fraction(0.25)
    print("FRACTION %g %g" % (before, figures(cuda.get_per_process_memory_fraction)))
    entry_points()  # 3 more resets of device 0's peaks: 4 in all
    e = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")  # a top after the last reset
    print("END %d %d" % figures(lambda: (cuda.max_memory_allocated(), cuda.max_memory_reserved())))
    del b, c, d, e, ones
    return 0


if __name__ == "__main__":
    sys.exit(main())
