// torch_prehook.cpp — the backward-start pre-hooks of `gpumem record`'s PyTorch hooks, added to
// autograd's nodes in C++ (part of libgpumem_torch.so, beside torch_trace.cpp), and the one other
// read of PyTorch's C++ objects the hooks make: a tensor's data pointer and a parameter's gradient
// (data_ptr_of, grad_of, for the optimizer hooks' scan).
//
// The module hooks (preload/torch_hooks.c) open a module's backward range when autograd reaches
// the node that made the module's output: a pre-hook on that node. Through Python
// (Node.register_prehook) each registration makes a torch.utils.hooks.RemovableHandle (~9 K
// instructions, 18 a tiny GPT-2 step), and at each call the engine takes the GIL and packs the
// gradients into a tuple for a hook that reads none of them. Here the hook is a C++
// FunctionPreHook added to the node directly: no handle, and autograd's thread calls it without
// Python; it takes the GIL itself only where torch_hooks.c's bwd_start must call Python
// (gpumem_torch_cpaths_run). tests/bench/README.md (torch.rec_vs_off) has the figures.
//
// Nodes are reached through PyTorch's own objects for them: a C++ node's Python object
// (THPCppFunction) and a custom autograd.Function's (THPFunction) both hold the Node. Anything
// else is left to the Python pre-hook (gpumem_torch_node_prehook answers NULL). The layouts are
// this wheel's headers': _torch.py attaches this library only to the PyTorch it was built for.
//
// The hook holds no Python object: its path is torch_hooks.c's (a module path encoding that
// file never releases, in a block that file keeps with the module's entry for the process and
// that every hook of the module shares), so autograd may destroy the node on any thread, at any
// time, with or without the GIL (even while the interpreter finalizes) and the destructor
// touches nothing, of Python or of torch_hooks.c.
//
// Compiled autograd: compiled_args is a no-op, so a graph compiled by it leaves this hook out
// (the backward's module ranges are missing there) rather than failing as a hook without it does.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_function.h>
#include <torch/csrc/autograd/python_variable.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/GradMode.h>

#include <cstdint>
#include <exception>
#include <memory>

// libgpumem.so's (preload/torch_hooks.c)
extern "C" void gpumem_torch_cpaths_run(void *paths);
extern "C" void gpumem_torch_hooks_cxx(void *(*add)(PyObject *, void *), int (*data_ptr)(PyObject *, unsigned long long *));
extern "C" void gpumem_torch_hooks_cxx_tensor(int (*node_state)(PyObject *, int), void *(*add_pending)(void *),
                                              int (*grad_enabled)(void));
extern "C" void gpumem_torch_hooks_cxx_grad(PyObject *(*grad)(PyObject *));
extern "C" void gpumem_torch_hooks_cxx_in(void (*keep_in)(PyObject *), void *(*add_in)(void *));

namespace {

struct GmPreHook final : torch::autograd::FunctionPreHook {
    void *paths; // torch_hooks.c's, kept there for the process: nothing to let go of
    explicit GmPreHook(void *p) : paths(p) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list &grads) override
    {
        gpumem_torch_cpaths_run(paths);
        return grads;
    }
    void compiled_args(torch::dynamo::autograd::CompiledNodeArgs &) const override {}
};

// t's autograd metadata where its grad_fn and grad are the fields themselves: the tensor is not a
// view (a view's grad_fn may be remade from its base: VariableHooks::grad_fn). *meta is NULL for
// a tensor without metadata (no grad_fn, no gradient). False: ask PyTorch's own accessors.
// Those go through the variable hooks' virtual calls (grad_fn(), ~140 instructions; grad() asks
// is_leaf(), another grad_fn(), to decide on its warning), for what these two fields hold.
bool plain_meta(const at::Tensor &t, torch::autograd::AutogradMeta **meta)
{
    *meta = torch::autograd::impl::get_autograd_meta(t);
    return !*meta || !(*meta)->is_view_;
}

// A GmPreHook on n running paths (PyTorch may throw: the caller's catch). The hook.
GmPreHook *arm(torch::autograd::Node *n, void *paths)
{
    auto h = std::make_unique<GmPreHook>(paths);
    GmPreHook *k = h.get();
    n->add_pre_hook(std::move(h));
    return k;
}

torch::autograd::Node *node_of(PyObject *o)
{
    if (torch::autograd::THPCppFunction_Check(o))
        return reinterpret_cast<torch::autograd::THPCppFunction *>(o)->cdata.get();
    if (THPFunction_Check(o)) return reinterpret_cast<THPFunction *>(o)->cdata.get();
    return nullptr;
}

// The hook added to the node whose Python object is node (GIL held), running paths; NULL when
// node is not one this file knows, or PyTorch refused.
void *add_prehook(PyObject *node, void *paths)
{
    torch::autograd::Node *n = node_of(node);
    if (!n) return nullptr;
    try {
        return arm(n, paths);
    } catch (const std::exception &) {
        return nullptr;
    }
}

// o.data_ptr() for a torch.Tensor or torch.nn.Parameter (their exact types: no
// __torch_function__ to consult, which is all Python's data_ptr() does before the same call), read
// in C++: 0, or -1 for anything else (the caller then calls o.data_ptr() through Python). The
// optimizer hooks' scan asks this of every gradient and state value each step (torch_hooks.c,
// unchanged): ~330 instructions a call through Python.
int data_ptr_of(PyObject *o, unsigned long long *out)
{
    if (!THPVariableClass || !THPVariable_CheckExact(o)) return -1;
    try {
        *out = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(THPVariable_Unpack(o).data_ptr()));
        return 0;
    } catch (const std::exception &) {
        return -1;
    }
}

// o.grad for a torch.Tensor or torch.nn.Parameter (exact types, no __torch_function__ mode: the
// getter's own path) that is a leaf (a parameter is; the getter warns about another's missing
// gradient, under its warning handler): a new reference, None for no gradient. NULL with no
// exception for anything else (the caller asks Python), NULL with one where the wrap failed.
// The optimizer hooks' scan asks this of every parameter each step (torch_hooks.c,
// changed_grads): ~530 instructions through Python's attribute lookup and the getter.
PyObject *grad_of(PyObject *o)
{
    if (!THPVariableClass || !THPVariable_CheckExact(o) || at::impl::torch_function_mode_enabled()) return nullptr;
    try {
        const at::Tensor &t = THPVariable_Unpack(o);
        torch::autograd::AutogradMeta *m;
        if (plain_meta(t, &m)) {
            if (!m) return THPVariable_Wrap(at::TensorBase()); // None
            if (m->grad_fn_) return nullptr;                   // not a leaf
            return THPVariable_Wrap(m->grad_);
        }
        if (!t.is_leaf()) return nullptr;
        return THPVariable_Wrap(t.grad());
    } catch (const std::exception &) {
        return nullptr;
    }
}

// A module's output read in C++ (tensor_node_state, add_pending): its node reached from the tensor
// itself, not through Python's `output.grad_fn`, which made the node a Python object (a
// THPCppFunction, freed again when the hook let go of it) under a warning handler: ~1,300
// instructions a module call, 25 a tiny GPT-2 step (tests/bench/README.md, "Sixth pass: the
// launch hook and the torch hooks"). The node the last hook went on is remembered weakly (a
// weak_intrusive_ptr: it never keeps the node alive, and a node freed since is never taken for
// it, whatever its address); pending is the node tensor_node_state found, for add_pending right
// after (both under the GIL, one after the other). A node hooked already for the module before (a
// module that returns its child's output as it is) is not hooked again: the child's name stands
// (torch_hooks.c, hook_node).
c10::weak_intrusive_ptr<torch::autograd::Node> last_node{c10::intrusive_ptr<torch::autograd::Node>()};
c10::intrusive_ptr<torch::autograd::Node> pending;

// t's node against the node the last hook went on (last_held: torch_hooks.c still holds it as
// the node hooked last): -1 when t is not read here (not exactly a torch.Tensor or Parameter, or
// a __torch_function__ mode is on, which Python's grad_fn would consult: the caller asks
// Python), 0 when t has no node, 1 when its node is that one (hooked already), 2 when it is
// another node, kept for add_pending.
int tensor_node_state(PyObject *t, int last_held)
{
    pending.reset();
    if (!THPVariableClass || !THPVariable_CheckExact(t) || at::impl::torch_function_mode_enabled()) return -1;
    try {
        const at::Tensor &x = THPVariable_Unpack(t);
        torch::autograd::AutogradMeta *m;
        if (plain_meta(x, &m) && !m) return 0; // no metadata: no node
        const c10::intrusive_ptr<torch::autograd::Node> &fn = m && !m->is_view_ ? m->grad_fn_ : x.grad_fn();
        if (!fn) return 0;
        if (last_held && last_node.lock().get() == fn.get()) return 1;
        pending = fn;
        return 2;
    } catch (const std::exception &) {
        return -1;
    }
}

// The hook added to the node tensor_node_state kept, running paths: the hook, or NULL (no node
// kept, paths NULL, or PyTorch refused).
void *add_pending(void *paths)
{
    c10::intrusive_ptr<torch::autograd::Node> n = std::move(pending);
    pending.reset();
    if (!n || !paths) return nullptr;
    try {
        GmPreHook *k = arm(n.get(), paths);
        last_node = c10::weak_intrusive_ptr<torch::autograd::Node>(n);
        return k;
    } catch (const std::exception &) {
        return nullptr;
    }
}

// The node that made a module's input, remembered weakly (keep_in) for the module's parent: a
// parent that returns this module's output as it is leaves the node of that output to the child
// (above), and its own work that made the child's input runs in the backward after the child's,
// from that input's node on. add_in hooks the node with the parent's path (torch_hooks.c,
// resume_parent), unless one of this file's hooks is on it already (a module's output, hooked
// for that module: its name stands, as a module's whose output a sibling took as it is).
c10::weak_intrusive_ptr<torch::autograd::Node> in_node{c10::intrusive_ptr<torch::autograd::Node>()};

// Remembers t's node (NULL, or anything not read here: none remembered). GIL held.
void keep_in(PyObject *t)
{
    in_node.reset();
    if (!t || !THPVariableClass || !THPVariable_CheckExact(t) || at::impl::torch_function_mode_enabled()) return;
    try {
        const at::Tensor &x = THPVariable_Unpack(t);
        torch::autograd::AutogradMeta *m;
        if (plain_meta(x, &m) && !m) return;
        const c10::intrusive_ptr<torch::autograd::Node> &fn = m && !m->is_view_ ? m->grad_fn_ : x.grad_fn();
        if (fn) in_node = c10::weak_intrusive_ptr<torch::autograd::Node>(fn);
    } catch (const std::exception &) {
        in_node.reset();
    }
}

// The hook added to the node keep_in remembered (still alive, none of this file's hooks on it),
// running paths: the hook, or NULL.
void *add_in(void *paths)
{
    c10::intrusive_ptr<torch::autograd::Node> n = in_node.lock();
    in_node.reset();
    if (!n || !paths) return nullptr;
    try {
        for (const auto &h : n->pre_hooks())
            if (dynamic_cast<GmPreHook *>(h.get())) return nullptr;
        return arm(n.get(), paths);
    } catch (const std::exception &) {
        return nullptr;
    }
}

// torch.is_grad_enabled() without a Python call
int grad_enabled() { return c10::GradMode::is_enabled() ? 1 : 0; }

} // namespace

// Called once the library is attached (torch_trace.cpp): the forward hooks use the C++ pre-hooks,
// and the optimizer hooks the data pointer read here.
void gm_torch_prehook_register()
{
    gpumem_torch_hooks_cxx(add_prehook, data_ptr_of);
    gpumem_torch_hooks_cxx_tensor(tensor_node_state, add_pending, grad_enabled);
    gpumem_torch_hooks_cxx_grad(grad_of);
    gpumem_torch_hooks_cxx_in(keep_in, add_in);
}
