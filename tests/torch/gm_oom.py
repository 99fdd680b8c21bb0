"""PyTorch through gpumem's allocator, out of memory (tests/torch/torch_gm_oom.sh):
  gm_oom.py oom MiB      asks for MiB (too many), catches what is raised, then allocates again
  gm_oom.py fraction F   sets the per-process memory fraction F (twice), then allocates 400 MiB
Each line it prints is "WORD value...": RAISED <type> | <message>, NONE <data_ptr>, AGAIN <data_ptr>."""
import sys

import torch

what, arg = sys.argv[1], float(sys.argv[2])
a = torch.ones(1024, device="cuda")
if what == "oom":
    try:
        huge = torch.empty(int(arg * 2**20), dtype=torch.uint8, device="cuda")
        print("NONE %#x" % huge.data_ptr(), flush=True)
    except Exception as e:  # noqa: BLE001 - the test says which type it was
        print("RAISED %s.%s | %s" % (type(e).__module__, type(e).__qualname__, str(e).splitlines()[0]), flush=True)
        print("IS_OOM %d" % isinstance(e, torch.OutOfMemoryError), flush=True)
    again = torch.empty(8 * 2**20, dtype=torch.uint8, device="cuda")
    print("AGAIN %#x" % again.data_ptr(), flush=True)
else:
    torch.cuda.set_per_process_memory_fraction(arg, 0)
    torch.cuda.set_per_process_memory_fraction(arg, 0)
    x = torch.empty(400 * 2**20, dtype=torch.uint8, device="cuda")
    print("AGAIN %#x" % x.data_ptr(), flush=True)
