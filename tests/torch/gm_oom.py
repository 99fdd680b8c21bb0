"""PyTorch through gpumem's allocator: out of memory, and the hooks PyTorch hands the allocator
(tests/torch/torch_gm_oom.sh):
  gm_oom.py oom MiB        asks for MiB (too many), catches what is raised, then allocates again
  gm_oom.py fraction F     sets the per-process memory fraction F (twice), asks for 400 MiB, catches
                           what is raised, then allocates 8 MiB again
  gm_oom.py empty 0        frees 64 MiB, then empties the cache by PyTorch's C entry point
                           (torch._C._cuda_emptyCache) and by torch.cuda.empty_cache
  gm_oom.py streams 0      a 4 MiB block used on a side stream (Tensor.record_stream) and freed on
                           the current one while the side stream's work is not done: is the next
                           4 MiB allocation on the current stream given its address, and is one
                           after torch.cuda.synchronize() (the block reused once that work is done)?
  gm_oom.py pluggable C     calls what PyTorch's pluggable-allocator interface does not offer
                           (torch._C._cuda_checkPoolLiveAllocations, as CUDA graph trees do):
                           C 1 catches the RuntimeError and ends well, C 0 lets it end the program
Each line it prints is "WORD value...": RAISED <type> | <message>, NONE <data_ptr>, AGAIN <data_ptr>,
FIT <data_ptr>, REUSED_BEFORE 0|1, REUSED_AFTER 0|1."""
import sys

import torch

what, arg = sys.argv[1], float(sys.argv[2])
a = torch.ones(1024, device="cuda")


def ask(nbytes, word):
    try:
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        print("%s %#x" % (word, t.data_ptr()), flush=True)
        return t
    except Exception as e:  # noqa: BLE001 - the test says which type it was
        print("RAISED %s.%s | %s" % (type(e).__module__, type(e).__qualname__, str(e).splitlines()[0]), flush=True)
        print("IS_OOM %d" % isinstance(e, torch.OutOfMemoryError), flush=True)
        return None


if what == "oom":
    ask(int(arg * 2**20), "NONE")
    again = ask(8 * 2**20, "AGAIN")
elif what == "fraction":
    torch.cuda.set_per_process_memory_fraction(arg, 0)
    torch.cuda.set_per_process_memory_fraction(arg, 0)
    x = ask(400 * 2**20, "FIT")
    again = ask(8 * 2**20, "AGAIN")
elif what == "empty":
    x = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
    del x
    torch._C._cuda_emptyCache()
    torch.cuda.empty_cache()
    print("AGAIN %#x" % a.data_ptr(), flush=True)
elif what == "pluggable":
    try:
        torch._C._cuda_checkPoolLiveAllocations(0, (0, 1), set())
    except RuntimeError:
        if not arg:
            raise
    print("AGAIN %#x" % a.data_ptr(), flush=True)
else:  # streams
    n = 4 * 2**20
    side = torch.cuda.Stream()
    x = torch.empty(n, dtype=torch.uint8, device="cuda")
    px = x.data_ptr()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x.add(1)  # work on the side stream that reads x
    x.record_stream(side)
    del x  # freed on the current stream; the side stream's work is not done
    z = torch.empty(n, dtype=torch.uint8, device="cuda")
    print("REUSED_BEFORE %d" % (z.data_ptr() == px), flush=True)
    torch.cuda.synchronize()
    w = torch.empty(n, dtype=torch.uint8, device="cuda")
    print("REUSED_AFTER %d" % (w.data_ptr() == px), flush=True)
