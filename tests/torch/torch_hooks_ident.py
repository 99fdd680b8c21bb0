"""torch_hooks_ident.py — which gradients and optimizer state values gpumem's PyTorch hooks name
again (gpumem/_torch.py's _changed_grads, _changed_state and _name; in C, preload/torch_hooks.c),
for tests/torch/torch_hooks.sh. A new gradient after zero_grad(set_to_none=True) may reuse the old
one's C++ object address (_cdata) and data pointer: it must still be named, as a new allocation.
Stand-in tensors make that reuse certain here, where with real ones it depends on the heap.
Prints "ok: ..." per check and exits 1 on the first that fails.
"""
import collections
import sys

import torch  # noqa: F401 - gpumem's hooks are installed on torch's import
from torch.optim import optimizer as O

from gpumem import _torch


class Fake:
    """A tensor as the hooks see one: _cdata and data_ptr() (and a weak reference)."""

    def __init__(self, cdata, ptr):
        self._cdata, self._ptr = cdata, ptr
        self.is_cuda = True

    def data_ptr(self):
        return self._ptr

    def numel(self):
        return 1


class Param:
    grad = None


def check(what, cond):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)


hooks = next(h.__self__ for h in O._global_optimizer_pre_hooks.values())
print("scan", type(hooks._changed_grads).__name__)
p = Param()
groups = [{"params": [p]}]
seen = {}
check("no gradient: nothing to name", hooks._changed_grads(groups, seen) == [])
p.grad = Fake(0x5000, 0x7f0000001000)
check("a first gradient is named", hooks._changed_grads(groups, seen) == [p])
hooks._seen(seen, id(p), p.grad)
check("the same gradient is not named again", hooks._changed_grads(groups, seen) == [])
p.grad = Fake(0x5000, 0x7f0000001000)  # the old one is gone; its _cdata and pointer reused
check("a new gradient at the old one's _cdata and pointer is named",
      hooks._changed_grads(groups, seen) == [p])
hooks._seen(seen, id(p), p.grad)
p.grad._ptr = 0x7f0000002000
check("the same object at another pointer is named", hooks._changed_grads(groups, seen) == [p])

v = Fake(0x6000, 0x7f0000003000)
state, seen_state = {p: {"exp_avg": v, "step": 3}}, {}
check("first state named", [x[1] for x in hooks._changed_state(state, seen_state)] == ["exp_avg", "step"])
for k, x in state[p].items():
    hooks._seen(seen_state.setdefault(id(p), {}), k, x)
check("the same state is not named again (a number is not a tensor)",
      [x[1] for x in hooks._changed_state(state, seen_state)] == ["step"])
del v
state[p]["exp_avg"] = Fake(0x6000, 0x7f0000003000)
check("a new state value at the old one's _cdata and pointer is named",
      [x[1] for x in hooks._changed_state(state, seen_state)] == ["exp_avg", "step"])

# the scan walks a plain dict (or defaultdict) in place and any other mapping through items(): the
# same order either way, the one Python's scan gives (an OrderedDict moved keeps its own order)
v, w = state[p]["exp_avg"], Fake(0x6100, 0x7f0000005000)
hooks._seen(seen_state[id(p)], "exp_avg", v)
inner = collections.OrderedDict([("exp_avg", v), ("max_exp_avg_sq", w), ("step", 4)])
inner.move_to_end("exp_avg")
state = collections.defaultdict(dict, {p: inner, Param(): {"step": 5, "exp_avg": w}})
want = _torch._Hooks._changed_state(hooks, state, seen_state)
check("an OrderedDict and a defaultdict of state scanned in items() order",
      hooks._changed_state(state, seen_state) == want and
      [x[1] for x in want] == ["max_exp_avg_sq", "step", "step", "exp_avg"])

names = _torch._state["names"]
n0 = len(names)
t = Fake(0x7000, 0x7f0000004000)
hooks._name(t, "grad.ident")
hooks._name(t, "grad.ident")
check("_name: the same tensor twice is one name", len(names) == n0 + 1)
del t
hooks._name(Fake(0x7000, 0x7f0000004000), "grad.ident")
check("_name: a new tensor at the old one's _cdata and pointer is named", len(names) == n0 + 2)
