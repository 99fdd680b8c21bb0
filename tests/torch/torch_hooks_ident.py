"""torch_hooks_ident.py — which gradients and optimizer state values gpumem's PyTorch hooks name
again (gpumem/_torch.py's _changed_grads, _changed_state, _seen_grad, _seen_value and _name; in C,
preload/torch_hooks.c with its table of the values named), for tests/torch/torch_hooks.sh. A new
gradient after zero_grad(set_to_none=True) may reuse the old one's C++ object address (_cdata) and
data pointer: it must still be named, as a new allocation. Stand-in tensors make that reuse certain
here, where with real ones it depends on the heap.

One table: each row changes the parameters, their gradients or the optimizer state, then scans as
the optimizer hooks do (gradients, then state) and names what the scan lists. The hooks installed
(C or Python, by GPUMEM_TORCH_C_HOOKS) must list what the row expects, and what _Hooks' Python scan
lists on a second, Python-only instance with its own dictionaries (the reference). Prints
"ok: ..." per row and exits 1 on the first that fails.
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


class NoRef:
    """A value with a data pointer that takes no weak reference: never taken for the one seen."""
    __slots__ = ("_ptr",)

    def __init__(self, ptr):
        self._ptr = ptr

    def data_ptr(self):
        return self._ptr


class Param:
    grad = None

    def __init__(self, name):
        self.name = name


def check(what, cond):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)


hooks = next(h.__self__ for h in O._global_optimizer_pre_hooks.values())
print("scan", type(hooks._changed_grads).__name__)
ref = _torch._Hooks.__new__(_torch._Hooks)  # the Python scan, its own dictionaries
ref.seen_grads, ref.seen_state = {}, {}

p, q = Param("p"), Param("q")
many = [Param("m%d" % i) for i in range(300)]  # the C table grows past its first size
groups = [{"params": [p]}]
state = {}
keep = {}  # values the rows hold on to
tname = {}  # id -> the name of a real parameter (a tensor's .name is its dimension names')


def nm(x):
    return tname.get(id(x)) or x.name


def scan(h):
    """The optimizer hooks' two scans, naming what they list: (gradients' params, (param, key))."""
    try:
        gs = h._changed_grads(groups)
        for x in gs:
            h._seen_grad(x, x.grad)
        st = h._changed_state(state)
        for x, k, v in st:
            h._seen_value(x, k, v)
    except Exception as e:  # noqa: BLE001 - a row may expect the scan's exception
        return type(e).__name__
    return [nm(x) for x in gs], [(nm(x), k) for x, k, _ in st]


def r_grad():
    p.grad = Fake(0x5000, 0x7f0000001000)
    state[p] = {"exp_avg": keep.setdefault("v", Fake(0x6000, 0x7f0000003000)), "step": 3}


def r_regrad():
    p.grad = Fake(0x5000, 0x7f0000001000)  # the old one is gone; its _cdata and pointer reused


def r_move():
    p.grad._ptr = 0x7f0000002000


def r_restate():
    del keep["v"]
    state[p]["exp_avg"] = Fake(0x6000, 0x7f0000003000)
    keep["v"] = state[p]["exp_avg"]


def r_equal_key():
    # a key equal to the one named, made anew (a state_dict loaded back): the same entry
    state[p] = {"".join(["exp_", "avg"]): keep["v"], "step": 4}


def r_q():
    groups[0]["params"].append(q)
    q.grad = Fake(0x5100, 0x7f0000001100)
    state[q] = {"exp_avg": keep.setdefault("w", Fake(0x6100, 0x7f0000003100))}


def r_many():
    groups.append({"params": many})
    for i, m in enumerate(many):
        m.grad = Fake(0x9000 + i, 0x7f1000000000 + 256 * i)
        state[m] = {"exp_avg": Fake(0xa000 + i, 0x7f2000000000 + 256 * i)}


def r_one_of_many():
    many[150].grad = Fake(0x9000 + 150, 0x7f1000000000 + 256 * 150)
    state[many[151]]["exp_avg"]._ptr += 8


def r_noref():
    state[q]["max"] = keep.setdefault("n", NoRef(0x7f0000009000))


class Pairs:
    """A mapping of state as the scan sees one that is not a dict: its items() (any key)."""

    def __init__(self, kv):
        self.kv = kv

    def items(self):
        return list(self.kv)


def r_unhashable():
    keep["q"] = state[q]
    state[q] = Pairs(list(state[q].items()) + [(["list"], Fake(0x6200, 0x7f0000003200))])


def r_hashable_again():
    state[q] = keep.pop("q")


def r_torch():
    # real parameters (CPU tensors): their gradient read in C++ where the hooks are in C
    keep["t"] = torch.nn.Parameter(torch.zeros(4))
    tname[id(keep["t"])] = "t"
    keep["t"].grad = torch.ones(4)
    groups.append({"params": [keep["t"]]})


def r_torch_regrad():
    keep["t"].grad = torch.ones(4)  # a new gradient (set_to_none, then backward)


def r_torch_none():
    keep["t"].grad = None


def nothing():
    pass


M = ["m%d" % i for i in range(300)]
rows = [
    ("no gradient, no state: nothing to name", nothing, ([], [])),
    ("a first gradient and state named", r_grad, (["p"], [("p", "exp_avg"), ("p", "step")])),
    ("the same ones not again (a number is not a tensor)", nothing, ([], [("p", "step")])),
    ("a new gradient at the old one's _cdata and pointer is named", r_regrad, (["p"], [("p", "step")])),
    ("the same object at another pointer is named", r_move, (["p"], [("p", "step")])),
    ("a new state value at the old one's _cdata and pointer is named", r_restate,
     ([], [("p", "exp_avg"), ("p", "step")])),
    ("a key equal to the one named, made anew, is that entry", r_equal_key, ([], [("p", "step")])),
    ("another parameter's same key is its own entry", r_q, (["q"], [("p", "step"), ("q", "exp_avg")])),
    ("300 more parameters named once", r_many, (M, [("p", "step")] + [(m, "exp_avg") for m in M])),
    ("and not again", nothing, ([], [("p", "step")])),
    ("one new gradient and one moved state value among them", r_one_of_many,
     (["m150"], [("p", "step"), ("m151", "exp_avg")])),
    ("a value that takes no weak reference is named each time", r_noref,
     ([], [("p", "step"), ("q", "max")])),
    ("and again", nothing, ([], [("p", "step"), ("q", "max")])),
    ("an unhashable state key raises as the dict's lookup does", r_unhashable, "TypeError"),
    ("the scan goes on after it", r_hashable_again, ([], [("p", "step"), ("q", "max")])),
    ("a torch.nn.Parameter's gradient named", r_torch, (["t"], [("p", "step"), ("q", "max")])),
    ("and not again", nothing, ([], [("p", "step"), ("q", "max")])),
    ("its new gradient named", r_torch_regrad, (["t"], [("p", "step"), ("q", "max")])),
    ("no gradient: nothing", r_torch_none, ([], [("p", "step"), ("q", "max")])),
]
for what, change, want in rows:
    change()
    got, py_got = scan(hooks), scan(ref)
    check("%s (%s)" % (what, "as Python's" if got == py_got else "Python's: %r, here: %r" % (py_got, got)),
          got == want and py_got == want)

# the scan walks a plain dict (or defaultdict) in place and any other mapping through items(): the
# same order either way, the one Python's scan gives (an OrderedDict moved keeps its own order)
v, w = keep["v"], Fake(0x6300, 0x7f0000005000)
inner = collections.OrderedDict([("exp_avg", v), ("max_exp_avg_sq", w), ("step", 4)])
inner.move_to_end("exp_avg")
state = collections.defaultdict(dict, {p: inner, Param("r"): {"step": 5, "exp_avg": w}})
got, want = hooks._changed_state(state), ref._changed_state(state)
check("an OrderedDict and a defaultdict of state scanned in items() order",
      got == want and [x[1] for x in want] == ["max_exp_avg_sq", "step", "step", "exp_avg"])

# A scan that found nothing new is kept (preload/torch_hooks.c's smemo) and answers the next one
# where no dict of the state changed (their version tags) and no entry of the table did: each
# value's data pointer is still read. Real tensors only (their pointers read in C++; the rows above
# have a number and stand-ins, which the memo leaves to the walk; CUDA's, on the virtual GPU: its
# start attaches the C++ side), each row scanned three times: the second makes the memo (the first
# named something), the third is answered from it, and the next row's first must not be.
dev = "cuda"
groups = []
a, b, c = (torch.nn.Parameter(torch.zeros(2)) for _ in range(3))
tname.update({id(a): "a", id(b): "b", id(c): "c"})
state = collections.defaultdict(dict)


def m_first():
    state[a].update(exp_avg=torch.zeros(4, device=dev), step=torch.tensor(0.0, device=dev))
    state[b]["exp_avg"] = torch.zeros(4, device=dev)


def m_inplace():
    state[a]["exp_avg"].add_(1)
    state[a]["step"] += 1


def m_set():
    state[a]["exp_avg"].set_(torch.ones(8, device=dev))  # the same object in the same dict, other memory


def m_data():
    state[b]["exp_avg"].data = torch.ones(8, device=dev)


def m_replace():
    state[a]["step"] = torch.tensor(5.0, device=dev)


def m_add_key():
    state[b]["step"] = torch.tensor(1.0, device=dev)


def m_add_param():
    state[c]["exp_avg"] = torch.zeros(4, device=dev)


def m_del_key():
    keep["step"] = state[a].pop("step")


def m_readd_key():
    state[a]["step"] = keep.pop("step")  # the value named before, back: not named again


def m_copy_outer():
    global state
    state = collections.defaultdict(dict, state)


def m_copy_inner():
    state[a] = dict(state[a])


def m_swap():
    state[a]["exp_avg"], state[c]["exp_avg"] = state[c]["exp_avg"], state[a]["exp_avg"]


def m_grad():
    groups.append({"params": [a]})
    a.grad = torch.ones(2)
    state[b]["exp_avg"].set_(torch.ones(16, device=dev))  # the table changed by the gradient's entry too


def m_view():
    # another object at the same pointer named for the same key (another optimizer's state of
    # the same parameter): the value in this state is then not the one last named
    keep["view"] = state[a]["exp_avg"].view(-1)
    hooks._seen_value(a, "exp_avg", keep["view"])
    ref._seen_value(a, "exp_avg", keep["view"])


memo_rows = [
    ("real tensors' state named", m_first, ([], [("a", "exp_avg"), ("a", "step"), ("b", "exp_avg")])),
    ("and not again", nothing, ([], [])),
    ("changed in place: not named", m_inplace, ([], [])),
    ("a value set_ to other memory is named", m_set, ([], [("a", "exp_avg")])),
    ("a value's .data replaced is named", m_data, ([], [("b", "exp_avg")])),
    ("a value replaced in its dict is named", m_replace, ([], [("a", "step")])),
    ("a key added is named", m_add_key, ([], [("b", "step")])),
    ("a parameter's state added is named", m_add_param, ([], [("c", "exp_avg")])),
    ("a key removed: nothing", m_del_key, ([], [])),
    ("the value named before put back: not named", m_readd_key, ([], [])),
    ("the state dict copied: nothing", m_copy_outer, ([], [])),
    ("a parameter's dict copied: nothing", m_copy_inner, ([], [])),
    ("two values swapped: both named", m_swap, ([], [("a", "exp_avg"), ("c", "exp_avg")])),
    ("a view named for its key: the value is named again", m_view, ([], [("a", "exp_avg")])),
    ("a gradient named and a value moved", m_grad, (["a"], [("b", "exp_avg")])),
]
for what, change, want in memo_rows:
    change()
    for again, w in (("", want), (", scanned again", ([], [])), (", and again", ([], []))):
        got, py_got = scan(hooks), scan(ref)
        check("memo: %s%s (%s)" % (what, again, "as Python's" if got == py_got else
                                   "Python's: %r, here: %r" % (py_got, got)), got == w and py_got == w)

names = _torch._state["names"]
n0 = len(names)
t = Fake(0x7000, 0x7f0000004000)
hooks._name(t, "grad.ident")
hooks._name(t, "grad.ident")
check("_name: the same tensor twice is one name", len(names) == n0 + 1)
del t
hooks._name(Fake(0x7000, 0x7f0000004000), "grad.ident")
check("_name: a new tensor at the old one's _cdata and pointer is named", len(names) == n0 + 2)
