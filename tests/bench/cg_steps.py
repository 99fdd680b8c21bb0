"""Runs a training script (argv[1:]) whose lines "step N/..." mark its steps, under callgrind
with the counts of the threads a step waits for limited to steps CG_FROM+1..CG_TO:
- the main thread's are zeroed when step CG_FROM is printed and dumped ("steps") when step CG_TO
  is;
- autograd's device thread, which runs a CUDA backward while the main thread waits, has its
  zeroed at the start of the backward after step CG_FROM (a hook on the loss, run there) and
  dumped ("backward") at the start of the one after step CG_TO.
The script must run at least CG_TO + 1 steps. CG_LIB is cg_steps.so (tests/bench/cg_steps.c),
whose client requests act on the calling thread only. Used by tests/bench/torch_rec_instr.sh."""
import ctypes
import os
import runpy
import sys

import torch

FROM, TO = int(os.environ.get("CG_FROM", "3")), int(os.environ.get("CG_TO", "13"))
_cg = ctypes.CDLL(os.environ["CG_LIB"])
_last = {"step": 0}


class _Marks:
    def __init__(self, out):
        self.out = out

    def write(self, text):
        n = self.out.write(text)
        words = text.split()
        if len(words) > 1 and words[0] == "step":
            step = int(words[1].split("/")[0])
            _last["step"] = step
            if step == FROM:
                _cg.gm_cg_zero()
            elif step == TO:
                _cg.gm_cg_dump(b"steps")
        return n

    def __getattr__(self, name):
        return getattr(self.out, name)


def _zero_here(grad):
    _cg.gm_cg_zero()


def _dump_here(grad):
    _cg.gm_cg_dump(b"backward")


_backward = torch.Tensor.backward


def _marked_backward(self, *args, **kwargs):
    step = _last["step"]
    if step in (FROM, TO) and self.requires_grad:
        self.register_hook(_zero_here if step == FROM else _dump_here)
        _last["step"] = -1  # once per mark
    return _backward(self, *args, **kwargs)


torch.Tensor.backward = _marked_backward
sys.stdout = _Marks(sys.stdout)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
