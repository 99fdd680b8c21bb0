"""Runs a training script (argv[1:]) whose lines "step N/..." mark its steps, with callgrind's
counts zeroed when step CG_FROM is printed and dumped ("steps") when step CG_TO is: the profile
of steps CG_FROM+1..CG_TO. CG_LIB is cg_steps.so (tests/bench/cg_steps.c). Used by
tests/bench/torch_rec_instr.sh."""
import ctypes
import os
import runpy
import sys

FROM, TO = int(os.environ.get("CG_FROM", "3")), int(os.environ.get("CG_TO", "13"))
_cg = ctypes.CDLL(os.environ["CG_LIB"])


class _Marks:
    def __init__(self, out):
        self.out = out

    def write(self, text):
        n = self.out.write(text)
        words = text.split()
        if len(words) > 1 and words[0] == "step":
            step = words[1].split("/")[0]
            if step == str(FROM):
                _cg.gm_cg_zero()
            elif step == str(TO):
                _cg.gm_cg_dump(b"steps")
        return n

    def __getattr__(self, name):
        return getattr(self.out, name)


sys.stdout = _Marks(sys.stdout)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
