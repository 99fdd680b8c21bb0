"""Code objects freed and made again, likely at the same addresses, under PyTorch's allocator:
200 functions compiled by exec, one at a time, each allocating one tensor (its size says which:
512 * (i + 1) bytes) and dropped before the next (tests/torch/torch_churn.sh). The Python stack of
each of PyTorch's trace entries is read by the GIL-less reader, whose chain memo and caches key
on code objects' addresses: each allocation must still carry its own function's name.

usage: python3 torch_churn.py main|thread [FILE]
FILE: the file name the functions are compiled under (default torch_churn_exec.py); "<string>"
as exec of a string names it, whose frames are the program's Python frames all the same.
"""
import sys
import threading

import torch

SRC = """def churn_%d():
    return torch.empty(%d, dtype=torch.uint8, device="cuda")
"""


FILE = sys.argv[2] if len(sys.argv) > 2 else "torch_churn_exec.py"


def run():
    for i in range(200):
        ns = {"torch": torch}
        exec(compile(SRC % (i, 512 * (i + 1)), FILE, "exec"), ns)
        t = ns["churn_%d" % i]()
        del t, ns


torch.zeros(1, device="cuda")  # CUDA and the tracker set up before the churn
if sys.argv[1] == "thread":
    th = threading.Thread(target=run)
    th.start()
    th.join()
else:
    run()
print("torch_churn: done")
