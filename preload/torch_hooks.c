/*
 * torch_hooks.c — the hot paths of the PyTorch hooks that `gpumem record` installs
 * (preload/python/gpumem/_torch.py, class _Hooks) as CPython builtin functions.
 *
 * Every module call of a PyTorch program runs a forward pre-hook and a forward hook, and its
 * backward a node pre-hook; written in Python, with the recorder reached through ctypes, they
 * cost a tiny GPT-2 step about as much as everything else gpumem does on its main thread
 * (tests/bench/README.md, torch.rec_vs_off). Here they are C functions that call the recorder's
 * range functions (nvtx.c) without ctypes, run around each module call by a C
 * torch.nn.Module.__call__ (wrap_call: no Python frame, and Module._call_impl keeps its short
 * path, which any global hook would leave) or, where that cannot be made, by PyTorch as global
 * hooks (vectorcall: no argument tuple). The range stack of each thread is kept here, and the
 * optimizer hooks' scan for the gradients and state values not named yet; the rest (naming
 * modules, parameters, gradients and optimizer state) stays in Python, which these functions call
 * back for what happens once: a module seen for the first time, a warning.
 *
 * The behaviour is _Hooks' own, rule for rule (the Python code is the reference, and what runs
 * when this is absent): "step N/fwd|bwd|opt/<module path>" ranges, one module range open at a
 * time, "step N" and "bwd" opened by the first backward node of a pass (or by a forward on a
 * thread running the backward: a reentrant checkpoint's re-run) and closed by the engine's
 * end-of-backward callback, no range while the program names its own phases
 * (gpumem._user_ranges, which gpumem also tells this file: user_ranges_on), an Exception inside a hook swallowed after _torch._warn's one warning.
 *
 * Interface: gpumem_torch_hooks((resolve, warn, first_grad, grad_enabled, queue_callback,
 * gpumem, torch.Tensor)) returns (fwd_pre, fwd_post, opt_begin, opt_end, changed_grads, changed_state,
 * remember, wrap_call), the _Hooks methods of those names (opt_begin, opt_end: _begin_opt,
 * _end_opt; remember: what _seen_grad and _seen_value store, the values named) and
 * wrap_call(Module.__call__), the __call__ that runs fwd_pre's and fwd_post's work itself (an
 * exception when this Python lacks the functions it needs); _torch.py calls it
 * through ctypes.PyDLL(None) (restype py_object, which takes its own reference: the tuple returned
 * is one this file keeps). A NULL return (no Python C API found, a CPython outside 3.9-3.13 or
 * free-threaded) leaves _torch.py on its Python hooks.
 *
 * CPython is reached as python.c does: nothing links libpython, the functions are looked up with
 * dlsym(RTLD_DEFAULT), and only functions of the stable ABI and the stable PyMethodDef,
 * PyType_Spec and PyMemberDef layouts are used (no object layout is read but the object head of
 * the one type made here, wrap_call's, and a dict's type and version tag, changed_state's memo,
 * checked at setup). Every function here runs holding the GIL (PyTorch calls
 * hooks with it), which is also the lock of this file's shared state; the one exception,
 * gpumem_torch_cpaths_run's common case on autograd's thread, touches only that thread's state
 * and paths that no longer change.
 */
#include "preload/gm_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct _object PyObject; /* opaque */
typedef ssize_t Py_ssize_t;

/* The stable layout of a builtin function's definition (Include/methodobject.h). */
typedef struct {
    const char *ml_name;
    void *ml_meth;
    int ml_flags;
    const char *ml_doc;
} py_method_def;
#define PY_METH_NOARGS 0x0004
#define PY_METH_O 0x0008
#define PY_METH_FASTCALL 0x0080
#define PY_EQ 2

static struct {
    const char *(*Py_GetVersion)(void);
    PyObject *(*PyCFunction_NewEx)(py_method_def *, PyObject *, PyObject *);
    PyObject *(*PyObject_GetAttr)(PyObject *, PyObject *);
    PyObject *(*PyObject_CallObject)(PyObject *, PyObject *);
    PyObject *(*PyObject_CallFunctionObjArgs)(PyObject *, ...);
    PyObject *(*PyObject_CallMethodObjArgs)(PyObject *, PyObject *, ...);
    int (*PyObject_IsTrue)(PyObject *);
    PyObject *(*PyUnicode_InternFromString)(const char *);
    PyObject *(*PyUnicode_AsEncodedString)(PyObject *, const char *, const char *);
    char *(*PyBytes_AsString)(PyObject *);
    PyObject *(*PyTuple_Pack)(Py_ssize_t, ...);
    Py_ssize_t (*PyTuple_Size)(PyObject *);
    Py_ssize_t (*PyObject_Hash)(PyObject *);
    PyObject *(*PyTuple_GetItem)(PyObject *, Py_ssize_t);
    int (*PyErr_ExceptionMatches)(PyObject *);
    void (*PyErr_Fetch)(PyObject **, PyObject **, PyObject **);
    void (*PyErr_NormalizeException)(PyObject **, PyObject **, PyObject **);
    void (*PyErr_Clear)(void);
    void (*PyErr_SetString)(PyObject *, const char *);
    PyObject *(*PyErr_NoMemory)(void);
    PyObject *(*PyErr_Occurred)(void);
    PyObject *(*PyObject_GetItem)(PyObject *, PyObject *);
    PyObject *(*PyObject_GetIter)(PyObject *);
    PyObject *(*PyIter_Next)(PyObject *);
    int (*PyObject_RichCompareBool)(PyObject *, PyObject *, int);
    long long (*PyLong_AsLongLong)(PyObject *);
    PyObject *(*PyList_New)(Py_ssize_t);
    int (*PyList_Append)(PyObject *, PyObject *);
    int (*PyDict_Next)(PyObject *, Py_ssize_t *, PyObject **, PyObject **);
    Py_ssize_t (*PyList_Size)(PyObject *);
    PyObject *(*PyList_GetItem)(PyObject *, Py_ssize_t);
    int (*PyList_SetItem)(PyObject *, Py_ssize_t, PyObject *);
    PyObject *(*PyWeakref_NewRef)(PyObject *, PyObject *);
    PyObject *(*PyWeakref_GetObject)(PyObject *);
    PyObject *(*PyObject_Type)(PyObject *);
    int (*PyType_IsSubtype)(PyObject *, PyObject *);
    void (*Py_IncRef)(PyObject *);
    void (*Py_DecRef)(PyObject *);
    PyObject *None;             /* &_Py_NoneStruct */
    PyObject *PyDict_Type;      /* &PyDict_Type */
    PyObject *PyTuple_Type;     /* &PyTuple_Type */
    PyObject **PyExc_Exception; /* the exported variables, read when used */
    PyObject **PyExc_AttributeError;
    PyObject **PyExc_TypeError;
    /* not exported by every CPython served (an inline function in the headers of some): NULL,
     * and call1 calls PyObject_CallFunctionObjArgs instead */
    PyObject *(*PyObject_CallOneArg)(PyObject *, PyObject *);
    /* for wrap_call (Module.__call__ in C): without them, the global hooks */
    PyObject *(*PyObject_Vectorcall)(PyObject *, PyObject *const *, size_t, PyObject *);
    PyObject *(*PyType_FromSpec)(void *);
    PyObject *(*PyType_GenericAlloc)(PyObject *, Py_ssize_t);
    PyObject *(*PyMethod_New)(PyObject *, PyObject *);
    PyObject *(*PyVectorcall_Call)(PyObject *, PyObject *, PyObject *);
    PyObject *(*PyObject_GenericGetAttr)(PyObject *, PyObject *);
    void *(*PyVectorcall_Function)(PyObject *); /* where exported (3.11 is; an inline function in some) */
    unsigned long (*PyLong_AsUnsignedLong)(PyObject *); /* for the C++ data_ptr (64 bits on LP64: the
                                                      * digits read in a loop, not _PyLong_AsByteArray) */
    /* for the C++ pre-hooks (torch_prehook.cpp), which autograd calls without the GIL */
    int (*PyGILState_Ensure)(void);
    void (*PyGILState_Release)(int);
    void (*PyErr_WriteUnraisable)(PyObject *);
    /* for dict_tags_check (changed_state's memo): without it, no memo */
    int (*PyObject_SetItem)(PyObject *, PyObject *, PyObject *);
} py;

/* ---- state ---------------------------------------------------------------------------------- */

enum { K_STEP, K_PASS, K_MOD };
enum { P_FWD, P_BWD, P_OPT };
static const char *const pass_label[] = {"fwd", "bwd", "opt"};

/* A range this thread opened (_Hooks' (kind, label, pushed); a label is only needed when it is
 * pushed, and of a pass only which one it is). */
typedef struct {
    unsigned char kind, pass, pushed;
} hk_ent;

/* The path of a C++ pre-hook (torch_prehook.cpp): a module's path encoding (hk.tab's, never
 * released) and its text, made once with the GIL with the module's entry and never changed nor
 * freed, as the encoding is not (autograd's thread reads it without the GIL:
 * gpumem_torch_cpaths_run). Every hook of the module shares it: a node autograd destroys, on any
 * thread, GIL or not, lets go of nothing. (A block of its own for each hook, freed by the hook's
 * destructor, cost a malloc and a free a hook, ~22 hooks a tiny GPT-2 step: tests/bench/README.md,
 * "Thirteenth pass".) */
typedef struct cpaths {
    PyObject *enc;
    const char *label;
} cpaths;

/* A module seen by the forward hooks: its path encoded as _Hooks._enc does (bytes, UTF-8 with
 * "replace"), and its backward-start callback (a builtin whose self is that path). */
typedef struct {
    const void *module; /* the key only, as id(module) is _Hooks.paths': never dereferenced */
    PyObject *enc, *cb;
    const char *label;   /* enc's text (enc is never released) */
    cpaths *cp;          /* (enc, label) for the C++ pre-hooks, never freed (mod_lookup) */
    /* on the thread's stack only: the module's first argument (borrowed: the caller holds it
     * until the module returns), and whether it is the output hooked last (resume_parent) */
    PyObject *in;
    int in_out;
} hk_mod;

typedef struct {
    hk_ent *st; /* the range stack */
    int n, cap;
    hk_mod *mods; /* the modules whose forward runs, outermost first (copies of cache entries) */
    int nmods, capm;
} hk_thread;

static __thread hk_thread tls __attribute__((tls_model("initial-exec")));
static pthread_key_t tls_key; /* frees a thread's stacks when it exits */
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static struct {
    PyObject *resolve, *warn, *first_grad, *grad_enabled, *queue_callback, *gpumem, *tensor;
    /* torch._C._current_autograd_node, or NULL (a caller that passed 7: none asked) */
    PyObject *current_node;
    PyObject *s_user_ranges, *s_requires_grad, *s_grad_fn, *s_register_prehook, *s_register_hook,
        *s_backward_hooks, *s_fwd_what, *s_bwd_what, *s_data_ptr, *s_grad, *s_params, *s_items;
    PyObject *bwd_end, *out_gone, *fns;
    long step;
    /* An optimizer's step ends step N, but the next one begins only with the next forward or
     * backward pass: a second optimizer stepped right after the first (an encoder's and a
     * head's, scaler.step(o1); scaler.step(o2)) is the same step's. step_done: an optimizer
     * stepped since the last pass; stepped: the optimizers that did (their addresses, never
     * read), an optimizer stepped twice starting the next step (a loop with no module or
     * backward to open one). */
    int step_done, nstepped;
    const void *stepped[8];
    hk_mod *tab; /* module address -> hk_mod, open addressing; entries are never removed */
    size_t mask, count;
} hk;

/* ---- the thread's stacks -------------------------------------------------------------------- */

static void tls_free(void *p)
{
    hk_thread *t = p;
    free(t->st), free(t->mods);
    memset(t, 0, sizeof *t);
}
static void tls_key_make(void)
{
    pthread_key_create(&tls_key, tls_free);
}

static int grow(void **arr, int *cap, size_t size)
{
    int n = *cap ? *cap * 2 : 32;
    void *a = realloc(*arr, (size_t)n * size);
    if (!a) {
        py.PyErr_NoMemory();
        return -1;
    }
    if (!*cap) {
        pthread_once(&tls_once, tls_key_make);
        pthread_setspecific(tls_key, &tls);
    }
    *arr = a, *cap = n;
    return 0;
}

/* The program names its own phases (gpumem.range, gpumem.annotate): no range is pushed here.
 * gpumem._user_ranges as the C hooks see it, kept here so that a range push reads a flag, not
 * the module's dict (~100 instructions, ~75 times a tiny GPT-2 step), and autograd's thread needs
 * no GIL for it (gpumem_torch_cpaths_run). Its one writer is gpumem's _own_ranges
 * (gpumem/__init__.py), which sets both through gpumem_torch_user_ranges; gpumem_torch_hooks
 * also takes the attribute's value when the hooks are set up. Never cleared, like the attribute. */
static atomic_int user_ranges_on;

GM_EXPORT void gpumem_torch_user_ranges(void)
{
    atomic_store_explicit(&user_ranges_on, 1, memory_order_relaxed);
}

static int user_ranges(void)
{
    return atomic_load_explicit(&user_ranges_on, memory_order_relaxed);
}

/* key: NULL, or an address naming label for good (a module path's bytes, a pass's label) */
static int push(hk_thread *t, int kind, int pass, const char *label, const void *key)
{
    if (t->n == t->cap && grow((void **)&t->st, &t->cap, sizeof *t->st) != 0) return -1;
    int pushed = !user_ranges() && (key ? gm_nvtx_user_push_kept(key, label) : gm_nvtx_user_push(label)) >= 0;
    t->st[t->n++] = (hk_ent){(unsigned char)kind, (unsigned char)pass, (unsigned char)pushed};
    return 0;
}

static void pop(hk_thread *t)
{
    if (t->st[--t->n].pushed) gm_nvtx_user_pop();
}

/* The module's range: in place of the innermost when that is a module's (flat), else on top.
 * label: enc's text. With room for one more range on t's stack it neither fails nor calls
 * Python (gpumem_torch_cpaths_run calls it without the GIL then). */
static int enter_mod(hk_thread *t, PyObject *enc, const char *label)
{
    /* enc is never released (module paths are kept for good): the key of its text */
    if (!t->n || t->st[t->n - 1].kind != K_MOD) return push(t, K_MOD, 0, label, enc);
    int was = t->st[--t->n].pushed;
    if (was) {
        if (!user_ranges()) { /* the pop and the push in one call */
            t->st[t->n++] = (hk_ent){K_MOD, 0, gm_nvtx_user_swap_kept(enc, label) >= 0};
            return 0;
        }
        gm_nvtx_user_pop();
    }
    return push(t, K_MOD, 0, label, enc);
}

/* "step N" into b (32 bytes), as snprintf's "step %ld" writes it: not snprintf, whose format
 * parsing cost ~700 instructions a call, twice a step (the main thread's and autograd's). */
static void step_label(char *b, long step)
{
    char d[24];
    int n = 0;
    unsigned long v = step < 0 ? 0ul - (unsigned long)step : (unsigned long)step;
    do
        d[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    memcpy(b, "step ", 5);
    int k = 5;
    if (step < 0) b[k++] = '-';
    while (n) b[k++] = d[--n];
    b[k] = 0;
}

/* "step N" (unless open on this thread) and the pass; opt: the optimizer of an update (NULL for
 * a forward or backward), hk.step_done's rule deciding whether the pass begins step N+1. */
static int open_step(hk_thread *t, int pass, const void *opt)
{
    if (hk.step_done) {
        int again = pass != P_OPT || hk.nstepped == (int)(sizeof hk.stepped / sizeof hk.stepped[0]);
        for (int j = 0; !again && j < hk.nstepped; j++)
            again = hk.stepped[j] == opt;
        if (again) hk.step++, hk.step_done = 0, hk.nstepped = 0;
    }
    if (pass == P_OPT && hk.nstepped < (int)(sizeof hk.stepped / sizeof hk.stepped[0]))
        hk.stepped[hk.nstepped++] = opt;
    int i = 0;
    while (i < t->n && t->st[i].kind != K_STEP)
        i++;
    if (i == t->n) {
        char label[32];
        step_label(label, hk.step);
        if (push(t, K_STEP, 0, label, NULL) != 0) return -1;
    }
    return push(t, K_PASS, pass, pass_label[pass], pass_label[pass]);
}

static void close_pass(hk_thread *t)
{
    while (t->n && t->st[t->n - 1].kind != K_PASS)
        pop(t);
    if (t->n) pop(t);
}

/* ---- errors --------------------------------------------------------------------------------- */

static PyObject *none(void)
{
    py.Py_IncRef(py.None);
    return py.None;
}

/* An Exception raised inside a hook: _torch._warn(what, exc) (one warning in all) and None, as
 * the Python hooks' `except Exception`. Anything else (KeyboardInterrupt) goes on up. */
static PyObject *swallow(PyObject *what)
{
    if (!py.PyErr_ExceptionMatches(*py.PyExc_Exception)) return NULL;
    PyObject *type, *value, *tb;
    py.PyErr_Fetch(&type, &value, &tb);
    py.PyErr_NormalizeException(&type, &value, &tb);
    PyObject *r = py.PyObject_CallFunctionObjArgs(hk.warn, what, value ? value : py.None, NULL);
    py.Py_DecRef(type), py.Py_DecRef(value), py.Py_DecRef(tb);
    if (!r) return NULL;
    py.Py_DecRef(r);
    return none();
}

/* swallow's, for a hook's work done inside a call that goes on: 0 when the Exception was
 * swallowed, -1 when what was raised goes on up. */
static int swallowed(PyObject *what)
{
    PyObject *r = swallow(what);
    if (!r) return -1;
    py.Py_DecRef(r);
    return 0;
}

/* ---- the module cache ----------------------------------------------------------------------- */

static size_t mod_hash(const void *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32);
}

static int tab_grow(void)
{
    size_t cap = hk.tab ? (hk.mask + 1) * 2 : 256;
    hk_mod *n = calloc(cap, sizeof *n);
    if (!n) {
        py.PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; hk.tab && i <= hk.mask; i++) {
        if (!hk.tab[i].module) continue;
        size_t j = mod_hash(hk.tab[i].module) & (cap - 1);
        while (n[j].module)
            j = (j + 1) & (cap - 1);
        n[j] = hk.tab[i];
    }
    free(hk.tab);
    hk.tab = n, hk.mask = cap - 1;
    return 0;
}

static PyObject *bwd_start(PyObject *enc, PyObject *arg);
static py_method_def bwd_start_def = {"gpumem_bwd_start", (void *)bwd_start, PY_METH_O,
                                      "a module's backward starts (gpumem/_torch.py)"};

/* The module's entry; a module not seen yet gets its path from _Hooks (which names it and its
 * parameters). A copy: the table may move. Returns 0, or -1 with an exception. */
static int mod_lookup(PyObject *module, hk_mod *out)
{
    size_t i = mod_hash(module) & hk.mask;
    for (;;) {
        hk_mod *e = &hk.tab[i];
        if (e->module == module) {
            *out = *e;
            return 0;
        }
        if (!e->module) break;
        i = (i + 1) & hk.mask;
    }
    PyObject *path = py.PyObject_CallFunctionObjArgs(hk.resolve, module, NULL);
    if (!path) return -1;
    PyObject *enc = py.PyUnicode_AsEncodedString(path, "utf-8", "replace");
    py.Py_DecRef(path);
    if (!enc) return -1;
    const char *label = py.PyBytes_AsString(enc);
    PyObject *cb = label ? py.PyCFunction_NewEx(&bwd_start_def, enc, NULL) : NULL;
    cpaths *cp = cb ? malloc(sizeof *cp) : NULL;
    if (cb && !cp) py.PyErr_NoMemory();
    if (!cp || ((hk.count + 1) * 2 > hk.mask + 1 && tab_grow() != 0)) {
        free(cp);
        py.Py_DecRef(enc);
        if (cb) py.Py_DecRef(cb);
        return -1;
    }
    *cp = (cpaths){enc, label};
    i = mod_hash(module) & hk.mask;
    while (hk.tab[i].module)
        i = (i + 1) & hk.mask;
    hk.tab[i] = (hk_mod){module, enc, cb, label, cp, NULL, 0};
    hk.count++;
    *out = hk.tab[i];
    return 0;
}

/* ---- the node hooked last ------------------------------------------------------------------ */


/* libgpumem_torch.so's pre-hook functions, handed over when it is attached (gpumem_torch_hooks_cxx) */
static struct {
    void *(*add)(PyObject *node, void *paths); /* the hook added, or NULL: not a node it knows */
    int (*data_ptr)(PyObject *v, unsigned long long *out); /* v.data_ptr() read in C++: 0, else -1 */
    /* a module's output read in C++ (gpumem_torch_hooks_cxx_tensor): its node against the node
     * hooked last from a tensor, when held (-1 not read there, 0 no node, 1 that node, 2 another
     * node, then hooked by add_pending), and torch.is_grad_enabled() */
    int (*node_state)(PyObject *t, int last_held);
    void *(*add_pending)(void *paths);
    int (*grad_enabled)(void);
    PyObject *(*grad)(PyObject *p); /* p.grad read in C++ (a new reference); NULL: ask Python */
    /* a module's input's node remembered weakly, and a hook added to it (resume_parent) */
    void (*keep_in)(PyObject *t);
    void *(*add_in)(void *paths);
    unsigned long long added, added_py;          /* node pre-hooks added in C++, through Python */
} cxx;

/* One pre-hook per node, the first module's: a module that returns its last child's output as it
 * is (the tiny GPT-2's attn and mlp return their c_proj's, the model its lm_head's, an
 * nn.Sequential its last module's) has that child's node, and the node's backward is the
 * child's. A hook of the parent's, run after the child's, left the parent's range open over the
 * child's backward ("step N/bwd/Tied" holding the head's matmul: ranges are flat, the innermost
 * module's, as in the forward), and cost PyTorch a Python handle object (~9 K instructions). So a
 * module whose node is the one hooked last hooks nothing: the child's name stands (its parent's
 * own work that made the child's input, after the child's in the backward, gets the parent's
 * range again: resume_parent; a module's work between two other children stays under the later
 * child's range, as it always has). `last` holds the node's
 * Python object, so that while it is held the same node is the same object (and no other node
 * can take its address), only as long as it cannot keep the node alive: until the next module's
 * forward starts, the outermost forward returns, or the output it came from is freed (a weak
 * reference's callback: a node of an output nobody uses goes with the output, as without
 * gpumem). A node hooked from the output tensor in C++ (hook_tensor_cxx) is remembered there,
 * weakly; `tensor` says that one is the last. */
static struct {
    PyObject *node, *wr;
    int tensor;
    PyObject *in_node; /* without cxx.keep_in: the node of the module's input (resume_parent) */
} last;


static void last_release(void)
{
    PyObject *node = last.node, *wr = last.wr, *in = last.in_node;
    last.node = last.wr = last.in_node = NULL;
    last.tensor = 0;
    if (wr) py.Py_DecRef(wr); /* first: its callback is not called */
    if (node) py.Py_DecRef(node);
    if (in) py.Py_DecRef(in);
}

/* The output hooked last is x (a module's input that its sibling returned: that node's backward
 * is the sibling's). Read with the weak reference held; a node hooked from a tensor in C++ is
 * told apart in libgpumem_torch.so (add_in). */
static int last_is(PyObject *x)
{
    return x && last.wr && py.PyWeakref_GetObject(last.wr) == x;
}

/* A parent's own work that made its child's input runs in the backward after the child's: where
 * the parent returned the child's output as it is (hook_node), the child's name stands over the
 * child's backward, and the parent's range opens again at the node that made the child's input,
 * as the forward's range goes back to the parent when the child returns. keep_in remembers that
 * input (in: NULL where the parent has no work of its own there: the input is the parent's own
 * input, or the output of the module hooked last), after each module's hook, for the module's
 * parent; resume_parent hooks its node with the parent's path. In C++ the node is remembered
 * weakly, and a node already hooked for a module is left to it; without libgpumem_torch.so the
 * node is held as the node hooked last is, and as long (the input itself may be gone by the
 * parent's return: a view that the child's work did not keep; last_is tells a sibling's output).
 * 0, or -1 with an exception. */
static int keep_in(PyObject *in)
{
    if (cxx.keep_in) {
        cxx.keep_in(in);
        return 0;
    }
    if (last.in_node) py.Py_DecRef(last.in_node);
    last.in_node = NULL;
    PyObject *tp = in && last.wr ? py.PyObject_Type(in) : NULL;
    if (tp) py.Py_DecRef(tp);
    if (!tp || tp != hk.tensor) return 0;
    PyObject *node = py.PyObject_GetAttr(in, hk.s_grad_fn);
    if (!node) return -1;
    if (node == py.None) py.Py_DecRef(node);
    else last.in_node = node;
    return 0;
}

/* m returned its child's output as it is: its range again from the node that made the child's
 * input (keep_in), then its own input kept for its parent. 0, or -1 with an exception. */
static int resume_parent(const hk_mod *m)
{
    if (cxx.add_in) {
        if (cxx.add_in(m->cp)) cxx.added++;
    } else if (last.in_node) {
        PyObject *r = py.PyObject_CallMethodObjArgs(last.in_node, hk.s_register_prehook, m->cb, NULL);
        if (!r) return -1;
        py.Py_DecRef(r);
        cxx.added_py++;
    }
    return keep_in(m->in);
}

/* The weak reference's callback: the output the held node came from is being freed. */
static PyObject *out_gone(PyObject *self, PyObject *wr)
{
    (void)self;
    if (wr == last.wr) last_release();
    return none();
}
static py_method_def out_gone_def = {"gpumem_out_gone", (void *)out_gone, PY_METH_O,
                                     "a hooked module output is freed (gpumem/_torch.py)"};

/* Holds node as the one hooked last while its output out lives (the weak reference's callback
 * lets go); nothing held when out takes no weak reference (its parent then hooks the node too). */
static void hold_last(PyObject *node, PyObject *out)
{
    PyObject *wr = py.PyWeakref_NewRef(out, hk.out_gone);
    if (!wr) {
        py.PyErr_Clear();
        return;
    }
    py.Py_IncRef(node);
    last.node = node, last.wr = wr;
}

/* Module m's pre-hook on node in C++ (torch_prehook.cpp): 1 added, 0 not a node it knows, -1
 * with an exception. */
static int hook_node_cxx(const hk_mod *m, PyObject *node, PyObject *out)
{
    if (!cxx.add(node, m->cp)) return 0;
    cxx.added++;
    hold_last(node, out);
    return keep_in(m->in) == 0 ? 1 : -1;
}

/* Module m's backward starts at node, the grad_fn of its output out. 0, or -1 with an exception. */
static int hook_node(const hk_mod *m, PyObject *node, PyObject *out)
{
    if (node == last.node) return resume_parent(m); /* its child's: the child's name stands */
    last_release();
    int c = cxx.add ? hook_node_cxx(m, node, out) : 0; /* no Python handle, no Python call from
                                                         * autograd's thread */
    if (c) return c < 0 ? -1 : 0;
    PyObject *r = py.PyObject_CallMethodObjArgs(node, hk.s_register_prehook, m->cb, NULL);
    if (!r) return -1;
    py.Py_DecRef(r);
    cxx.added_py++;
    hold_last(node, out);
    return keep_in(m->in);
}

/* Module m's backward start hooked from its output out, a torch.Tensor, in C++: the node read
 * from the tensor, not made a Python object by out.grad_fn (torch_prehook.cpp says what that
 * cost), and left to the module before when it hooked that node (hook_node says why). 1 hooked
 * (or left), 0 out has no node, -1 with an exception, -2 not read there (the caller goes
 * through Python). */
static int hook_tensor_cxx(const hk_mod *m, PyObject *out)
{
    int st = cxx.node_state(out, last.tensor);
    if (st == -1) return -2;
    if (st == 0) return 0;
    if (st == 1) return resume_parent(m) == 0 ? 1 : -1; /* its child's: the child's name stands */
    last_release();
    if (!cxx.add_pending(m->cp)) /* PyTorch refused: through Python, as a node this file cannot reach */
        return -2;
    cxx.added++;
    last.tensor = 1;
    return keep_in(m->in) == 0 ? 1 : -1;
}

/* ---- forward -------------------------------------------------------------------------------- */

static int bwd_pass(const hk_thread *t);
static int open_bwd(hk_thread *t);

/* 1 where this thread runs autograd's backward (torch._C._current_autograd_node() is a node),
 * 0 where not or not known, -1 with an exception. */
static int in_backward(void)
{
    if (!hk.current_node || hk.current_node == py.None) return 0;
    PyObject *n = py.PyObject_CallObject(hk.current_node, NULL);
    if (!n) return -1;
    int in = n != py.None;
    py.Py_DecRef(n);
    return in;
}

/* Before a module's forward: its range (and "step N/fwd" when it is the outermost). in: its
 * first argument, or NULL. 0, or -1 with an exception.
 *
 * An outermost forward on a thread running the backward, with no backward pass open there, is
 * torch.utils.checkpoint's re-run with use_reentrant=True (its Function's backward, before any
 * module's backward started: the checkpointed forward ran without grad, so hooked none): it
 * opens "bwd" first, as the non-reentrant re-run finds it open, so the re-run is the
 * backward's and not a forward pass of the loop ("4 forward passes a step" of a loop of one). */
static int pre_work(PyObject *module, PyObject *in)
{
    hk_thread *t = &tls;
    hk_mod m;
    int in_out = last_is(in);
    last_release();
    if (mod_lookup(module, &m) != 0) return -1;
    m.in = in, m.in_out = in_out;
    if (!t->nmods) {
        int b = bwd_pass(t) == t->n ? in_backward() : 0;
        if (b < 0 || (b && open_bwd(t) != 0)) return -1;
        if (open_step(t, P_FWD, NULL) != 0) return -1;
    }
    if (enter_mod(t, m.enc, m.label) != 0) return -1;
    if (t->nmods == t->capm && grow((void **)&t->mods, &t->capm, sizeof *t->mods) != 0) return -1;
    t->mods[t->nmods++] = m;
    return 0;
}

/* register_module_forward_pre_hook's: (module, args) -> None */
static PyObject *fwd_pre(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs < 1) {
        py.PyErr_SetString(*py.PyExc_TypeError, "gpumem fwd_pre: (module, args)");
        return swallow(hk.s_fwd_what);
    }
    PyObject *tp = nargs > 1 ? py.PyObject_Type(args[1]) : NULL, *in = NULL;
    if (tp) py.Py_DecRef(tp);
    if (tp == py.PyTuple_Type && py.PyTuple_Size(args[1]) > 0) in = py.PyTuple_GetItem(args[1], 0);
    return pre_work(args[0], in) == 0 ? none() : swallow(hk.s_fwd_what);
}

/* _torch._first_grad(output): the first tensor in it that needs a gradient, or None (new
 * references). A tuple of torch.Tensors (a model's (logits, loss)) is answered here, as
 * _first_grad would (a Tensor is one of its _tensors, asked for requires_grad); anything else,
 * or an item that is not a torch.Tensor, by _first_grad itself. */
static PyObject *first_grad(PyObject *output)
{
    PyObject *tp = py.PyObject_Type(output);
    int tuple = tp == py.PyTuple_Type;
    if (tp) py.Py_DecRef(tp);
    Py_ssize_t n = tuple ? py.PyTuple_Size(output) : 0, i;
    for (i = 0; tuple && i < n; i++) {
        PyObject *y = py.PyTuple_GetItem(output, i), *yt = y ? py.PyObject_Type(y) : NULL;
        if (yt) py.Py_DecRef(yt);
        if (!yt || yt != hk.tensor) break;
        PyObject *rg = py.PyObject_GetAttr(y, hk.s_requires_grad);
        int needs = rg ? py.PyObject_IsTrue(rg) : -1;
        if (rg) py.Py_DecRef(rg);
        if (needs < 0) return NULL;
        if (needs) {
            py.Py_IncRef(y);
            return y;
        }
    }
    if (tuple && i == n) return none();
    if (py.PyErr_Occurred()) return NULL;
    return py.PyObject_CallFunctionObjArgs(hk.first_grad, output, NULL);
}

/* Whether cb is one of leaf t's tensor hooks already (its _backward_hooks' values): a module that
 * returns the same leaf every forward (a parameter as is) hooks it once, not once a forward, where
 * the hooks piled up on the parameter, every one run at each backward (three "bwd/Leaf" ranges in
 * a third step). 1, 0, or -1 with an exception. */
static int leaf_hooked(PyObject *t, PyObject *cb)
{
    PyObject *d = py.PyObject_GetAttr(t, hk.s_backward_hooks), *k, *v;
    if (!d) {
        if (!py.PyErr_ExceptionMatches(*py.PyExc_AttributeError)) return -1;
        py.PyErr_Clear(); /* not a torch.Tensor's: no hooks of its own to ask */
        return 0;
    }
    int found = 0;
    Py_ssize_t pos = 0;
    while (!found && py.PyDict_Next(d, &pos, &k, &v)) /* 0 at once for None or a non-dict */
        found = v == cb;
    py.Py_DecRef(d);
    return found;
}

/* The module's backward starts when autograd runs the node that made its output: a pre-hook on
 * that node (_Hooks._on_backward_of says why not a tensor hook), or on a leaf returned as is,
 * a tensor hook. A torch.Tensor with a node needs a gradient (requires_grad is true wherever
 * grad_fn is set), so for the common output, a tensor an operation made, the node is asked
 * first and requires_grad not at all; anything else takes _Hooks' order of questions, where a
 * tuple's requires_grad is the AttributeError it always is (the type has no such attribute and
 * its objects take none), not asked. The tensor found in the output is hooked as the output
 * itself is, its node read in C++ (a model's (logits, loss): the logits' node, often the one
 * hooked for the module before, takes this path too). */
static int on_backward_of(const hk_mod *m, PyObject *output)
{
    PyObject *out, *r = NULL, *node = NULL, *tp = py.PyObject_Type(output);
    int read = 0; /* output's node was read in C++: it has none */
    if (tp == hk.tensor && cxx.node_state) {
        int rc = hook_tensor_cxx(m, output);
        if (rc == 1 || rc == -1) {
            py.Py_DecRef(tp);
            return rc < 0 ? -1 : 0;
        }
        if (rc == 0) { /* no node: as a tensor whose grad_fn is None, below */
            py.Py_DecRef(tp);
            tp = NULL;
            read = 1;
        }
    }
    if (tp == hk.tensor) {
        if (!(node = py.PyObject_GetAttr(output, hk.s_grad_fn))) {
            py.Py_DecRef(tp);
            return -1;
        }
        if (node != py.None) {
            int rc = hook_node(m, node, output);
            py.Py_DecRef(node), py.Py_DecRef(tp);
            return rc;
        }
        py.Py_DecRef(node);
        node = NULL;
    }
    int tuple = tp && tp == py.PyTuple_Type, needs = 0;
    if (tp) py.Py_DecRef(tp);
    PyObject *rg = tuple ? NULL : py.PyObject_GetAttr(output, hk.s_requires_grad);
    if (rg) {
        needs = py.PyObject_IsTrue(rg);
        py.Py_DecRef(rg);
        if (needs < 0) return -1;
    } else if (!tuple) {
        if (!py.PyErr_ExceptionMatches(*py.PyExc_AttributeError)) return -1;
        py.PyErr_Clear();
    }
    if (needs) {
        out = output;
        py.Py_IncRef(out);
    } else if (!(out = first_grad(output))) {
        return -1;
    }
    if (out == py.None) {
        py.Py_DecRef(out);
        return 0;
    }
    int rc = -2;
    if (out != output || !read) {
        PyObject *ot = py.PyObject_Type(out);
        if (ot) py.Py_DecRef(ot);
        if (ot == hk.tensor && cxx.node_state) rc = hook_tensor_cxx(m, out);
    } else {
        rc = 0; /* read above: no node */
    }
    if (rc == 1 || rc == -1) {
        py.Py_DecRef(out);
        return rc < 0 ? -1 : 0;
    }
    if (rc == 0) {
        node = py.None;
        py.Py_IncRef(node);
    } else {
        node = py.PyObject_GetAttr(out, hk.s_grad_fn);
    }
    rc = -1;
    if (node && node != py.None) {
        rc = hook_node(m, node, out);
    } else if (node) {
        int has = leaf_hooked(out, m->cb);
        if (has == 0) {
            r = py.PyObject_CallMethodObjArgs(out, hk.s_register_hook, m->cb, NULL);
            if (r) py.Py_DecRef(r);
        }
        rc = has > 0 || (has == 0 && r) ? 0 : -1;
    }
    if (node) py.Py_DecRef(node);
    py.Py_DecRef(out);
    return rc;
}

/* After a module's forward returned output: the range back to its caller's module (or the
 * forward pass closed), and its backward's start hooked. 0, or -1 with an exception. */
static int post_work(PyObject *output)
{
    hk_thread *t = &tls;
    if (!t->nmods) return 0;
    hk_mod m = t->mods[--t->nmods];
    if (t->nmods) {
        const hk_mod *up = &t->mods[t->nmods - 1];
        if (m.in_out || m.in == up->in) m.in = NULL; /* no work of up's own made it (keep_in) */
        if (enter_mod(t, up->enc, up->label) != 0) return -1;
    } else {
        if (t->n && t->st[t->n - 1].kind == K_MOD) pop(t);
        close_pass(t);
    }
    int on;
    if (cxx.grad_enabled) {
        on = cxx.grad_enabled();
    } else {
        PyObject *g = py.PyObject_CallObject(hk.grad_enabled, NULL);
        if (!g) return -1;
        on = py.PyObject_IsTrue(g);
        py.Py_DecRef(g);
    }
    if (on > 0) on = on_backward_of(&m, output);
    if (!t->nmods) last_release(); /* the outermost module returned */
    return on < 0 ? -1 : 0;
}

/* A module's forward raised (an OOM that the program catches, to go on with a smaller batch):
 * its range back to its caller's module, or the forward pass closed, as post_work closes them,
 * with no backward to hook. Left open, the thread's later events were all read as that step's
 * forward (a step 3 that held steps 4-6's forwards and updates, its optimizer's steps seen by
 * no step). Neither fails nor calls Python (enter_mod into the slot the module's range held):
 * the exception stays as it is. */
static void raise_work(void)
{
    hk_thread *t = &tls;
    if (!t->nmods) return;
    t->nmods--;
    if (t->nmods) {
        const hk_mod *up = &t->mods[t->nmods - 1];
        (void)enter_mod(t, up->enc, up->label);
    } else {
        if (t->n && t->st[t->n - 1].kind == K_MOD) pop(t);
        close_pass(t);
    }
}

/* register_module_forward_hook's: (module, args, output) -> None */
static PyObject *fwd_post(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!tls.nmods) return none();
    if (nargs < 3) {
        py.PyErr_SetString(*py.PyExc_TypeError, "gpumem fwd_post: (module, args, output)");
        return swallow(hk.s_fwd_what);
    }
    return post_work(args[2]) == 0 ? none() : swallow(hk.s_fwd_what);
}

/* torch.nn.Module.__call__ in place of the two global hooks (wrap_call): an object of a small type
 * made here (gpumem_module_call) holding orig, the __call__ it replaced, which it calls with the
 * same arguments between pre_work and post_work, where PyTorch would have run the hooks (and
 * raise_work when the forward raises, as PyTorch runs a forward hook registered always_call).
 * Why: a global hook sends every
 * module call through the long path of Module._call_impl (a closure, a set, the hook
 * dictionaries copied into tuples: ~12,000 instructions a call, 23 calls a tiny GPT-2 step;
 * tests/bench/README.md, torch.rec_vs_off), while this keeps the short one and adds no Python
 * frame.
 *
 * The type is what a Python method is to its class: a method descriptor (called through the
 * class with the module first, bound by __get__ otherwise) called by vectorcall, whose
 * __wrapped__ is orig, so that inspect.signature(module) reads orig's (self, *args, **kwargs) as
 * before, and whose other attributes (__name__, __qualname__, __doc__...) are orig's. A builtin
 * function would do the calling, but inspect refuses a builtin __call__, and a library that
 * asks a module for its signature would fail under gpumem. */
typedef struct {
    Py_ssize_t refcnt;
    PyObject *type;
    void *vectorcall; /* module_call: the instance's vectorcall (__vectorcalloffset__) */
    PyObject *orig;
} call_obj;

#define PY_VECTORCALL_ARGUMENTS_OFFSET ((size_t)1 << (8 * sizeof(size_t) - 1))

static PyObject *module_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = (Py_ssize_t)(nargsf & ~PY_VECTORCALL_ARGUMENTS_OFFSET);
    if (nargs < 1) {
        py.PyErr_SetString(*py.PyExc_TypeError, "Module.__call__: no module");
        return NULL;
    }
    if (pre_work(args[0], nargs > 1 ? args[1] : NULL) != 0 && swallowed(hk.s_fwd_what) != 0) return NULL;
    PyObject *out = py.PyObject_Vectorcall(((call_obj *)self)->orig, args, nargsf, kwnames);
    if (!out) raise_work();
    if (out && post_work(out) != 0 && swallowed(hk.s_fwd_what) != 0) {
        py.Py_DecRef(out);
        return NULL;
    }
    return out;
}

/* __get__: through the class (no instance), itself; through a module, a method bound to it */
static PyObject *call_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (!obj || obj == py.None) {
        py.Py_IncRef(self);
        return self;
    }
    return py.PyMethod_New(self, obj);
}

/* an attribute not its own (__name__, __qualname__, __doc__, __module__...): orig's */
static PyObject *call_getattro(PyObject *self, PyObject *name)
{
    PyObject *r = py.PyObject_GenericGetAttr(self, name);
    if (r || !py.PyErr_ExceptionMatches(*py.PyExc_AttributeError)) return r;
    py.PyErr_Clear();
    return py.PyObject_GetAttr(((call_obj *)self)->orig, name);
}

/* The stable ABI's type spec, slots and members (Include/object.h, typeslots.h, descrobject.h). */
typedef struct { int slot; void *pfunc; } py_type_slot;
typedef struct { const char *name; int basicsize, itemsize; unsigned flags; py_type_slot *slots; } py_type_spec;
typedef struct { const char *name; int type; Py_ssize_t offset; int flags; const char *doc; } py_member_def;
enum { PY_TP_CALL = 50, PY_TP_DESCR_GET = 54, PY_TP_GETATTRO = 58, PY_TP_MEMBERS = 72, PY_TP_DOC = 56 };
enum { PY_T_OBJECT = 6, PY_T_PYSSIZET = 19, PY_READONLY = 1 };
#define PY_TPFLAGS_DEFAULT (1ul << 18)           /* Py_TPFLAGS_HAVE_VERSION_TAG */
#define PY_TPFLAGS_HAVE_VECTORCALL (1ul << 11)
#define PY_TPFLAGS_METHOD_DESCRIPTOR (1ul << 17)

static PyObject *call_type;

/* wrap_call(orig) -> the object to set as torch.nn.Module.__call__ */
static PyObject *wrap_call(PyObject *self, PyObject *orig)
{
    (void)self;
    if (!py.PyObject_Vectorcall || !py.PyType_FromSpec || !py.PyType_GenericAlloc || !py.PyMethod_New ||
        !py.PyVectorcall_Call || !py.PyObject_GenericGetAttr || !py.PyVectorcall_Function) {
        py.PyErr_SetString(*py.PyExc_TypeError, "gpumem wrap_call: this Python lacks vectorcall");
        return NULL;
    }
    if (!call_type) {
        static py_member_def members[] = {
            {"__vectorcalloffset__", PY_T_PYSSIZET, offsetof(call_obj, vectorcall), PY_READONLY, NULL},
            {"__wrapped__", PY_T_OBJECT, offsetof(call_obj, orig), PY_READONLY, NULL},
            {NULL, 0, 0, 0, NULL}};
        static py_type_slot slots[] = {
            {PY_TP_CALL, NULL}, /* PyVectorcall_Call, filled below */
            {PY_TP_DESCR_GET, (void *)call_get},
            {PY_TP_GETATTRO, (void *)call_getattro},
            {PY_TP_MEMBERS, members},
            {PY_TP_DOC, (void *)"torch.nn.Module.__call__ with gpumem's forward ranges (preload/torch_hooks.c)"},
            {0, NULL}};
        static py_type_spec spec = {"gpumem_module_call", (int)sizeof(call_obj), 0,
                                    PY_TPFLAGS_DEFAULT | PY_TPFLAGS_HAVE_VECTORCALL | PY_TPFLAGS_METHOD_DESCRIPTOR,
                                    slots};
        slots[0].pfunc = (void *)py.PyVectorcall_Call;
        if (!(call_type = py.PyType_FromSpec(&spec))) return NULL;
    }
    call_obj *c = (call_obj *)py.PyType_GenericAlloc(call_type, 0);
    if (!c) return NULL;
    c->vectorcall = (void *)module_call;
    py.Py_IncRef(orig);
    c->orig = orig;
    /* the interpreter finds the vectorcall where __vectorcalloffset__ said (a Python whose
     * PyType_FromSpec ignored it would call the object head): else the global hooks */
    if (py.PyVectorcall_Function((PyObject *)c) != (void *)module_call) {
        py.Py_DecRef((PyObject *)c);
        py.PyErr_SetString(*py.PyExc_TypeError, "gpumem wrap_call: the type's vectorcall is not where it was put");
        return NULL;
    }
    return (PyObject *)c;
}

/* ---- backward ------------------------------------------------------------------------------- */

/* The index of the backward pass on this thread's stack (t->n: none). */
static int bwd_pass(const hk_thread *t)
{
    int i = 0;
    while (i < t->n && !(t->st[i].kind == K_PASS && t->st[i].pass == P_BWD))
        i++;
    return i;
}

/* A forward opened in the backward (above its pass at i) whose modules never returned:
 * checkpointing's re-run stopped early once it had the tensors it needed (torch.utils.
 * checkpoint's early stop raises out of the forward). The backward goes on, or ends: closed. */
static void close_abandoned_fwd(hk_thread *t, int i)
{
    int j = i + 1;
    while (j < t->n && !(t->st[j].kind == K_PASS && t->st[j].pass == P_FWD))
        j++;
    if (j >= t->n) return;
    while (t->n > j)
        pop(t);
    t->nmods = 0;
}

/* "step N/bwd" on this thread, closed by bwd_end when the backward ends (the engine's callback,
 * queued here). 0, or -1 with an exception. */
static int open_bwd(hk_thread *t)
{
    if (open_step(t, P_BWD, NULL) != 0) return -1;
    PyObject *r = py.PyObject_CallFunctionObjArgs(hk.queue_callback, hk.bwd_end, NULL);
    if (!r) return -1;
    py.Py_DecRef(r);
    return 0;
}

/* Node.register_prehook's (grad_outputs) and Tensor.register_hook's (grad): self is the path. */
static PyObject *bwd_start(PyObject *enc, PyObject *arg)
{
    (void)arg;
    hk_thread *t = &tls;
    int i = bwd_pass(t);
    if (i == t->n) {
        if (open_bwd(t) != 0) return swallow(hk.s_bwd_what);
    } else {
        close_abandoned_fwd(t, i);
    }
    const char *label = py.PyBytes_AsString(enc);
    if (!label || enter_mod(t, enc, label) != 0) return swallow(hk.s_bwd_what);
    return none();
}

/* A C++ pre-hook's call (torch_prehook.cpp: autograd's thread, without the GIL): the module's
 * bwd_start. An error that is not an Exception (swallowed by bwd_start) is reported as
 * unraisable: a C++ hook cannot raise into the backward.
 *
 * Without the GIL where bwd_start would call no Python: the backward pass open on this thread
 * (no "step N" to open, no callback to queue) and room on the thread's stack (enter_mod then
 * cannot fail). Everything read or written then is this thread's (tls), the path (never
 * changed), the user-ranges flag and the recorder's range calls, which take no lock of
 * Python's (nvtx.c keeps its name ids per thread). Taking the GIL only to run these cost ~420
 * instructions a node (18 a tiny GPT-2 step). */
GM_EXPORT void gpumem_torch_cpaths_run(void *paths)
{
    cpaths *p = paths;
    hk_thread *t = &tls;
    int b = bwd_pass(t);
    if (b < t->n) {
        close_abandoned_fwd(t, b); /* pops only */
        if (t->n < t->cap) {
            enter_mod(t, p->enc, p->label);
            return;
        }
    }
    int g = py.PyGILState_Ensure();
    PyObject *r = bwd_start(p->enc, NULL);
    if (r) py.Py_DecRef(r);
    else py.PyErr_WriteUnraisable(hk.s_bwd_what);
    py.PyGILState_Release(g);
}

/* libgpumem_torch.so hands over its pre-hook functions when it is attached (both, or NULL to
 * stop using them). The forward hooks then add C++ pre-hooks where they can. Only with the C
 * hooks set up and a Python that has the GIL functions. */
GM_EXPORT void gpumem_torch_hooks_cxx(void *(*add)(PyObject *, void *), int (*data_ptr)(PyObject *, unsigned long long *))
{
    if (!hk.fns || !py.PyGILState_Ensure || !py.PyGILState_Release || !py.PyErr_WriteUnraisable || !add) return;
    cxx.add = add;
    cxx.data_ptr = py.PyLong_AsUnsignedLong && sizeof(unsigned long) == 8 ? data_ptr : NULL;
}

/* The output-tensor side of the C++ pre-hooks (torch_prehook.cpp), handed over after
 * gpumem_torch_hooks_cxx: taken only with the node side. */
GM_EXPORT void gpumem_torch_hooks_cxx_tensor(int (*node_state)(PyObject *, int), void *(*add_pending)(void *),
                                             int (*grad_enabled)(void))
{
    if (!cxx.add || !node_state || !add_pending || !grad_enabled) return;
    cxx.node_state = node_state, cxx.add_pending = add_pending, cxx.grad_enabled = grad_enabled;
}

/* A parameter's gradient read in C++ (torch_prehook.cpp, grad_of), handed over after
 * gpumem_torch_hooks_cxx: for the optimizer hooks' scan. */
GM_EXPORT void gpumem_torch_hooks_cxx_grad(PyObject *(*grad)(PyObject *))
{
    if (cxx.add) cxx.grad = grad;
}

/* A module's input's node remembered and hooked in C++ (torch_prehook.cpp, keep_in and add_in),
 * handed over after gpumem_torch_hooks_cxx: for resume_parent. */
GM_EXPORT void gpumem_torch_hooks_cxx_in(void (*keep)(PyObject *), void *(*add)(void *))
{
    if (!cxx.add || !keep || !add) return;
    last_release(); /* an input's node held is the C++ side's from now on */
    cxx.keep_in = keep, cxx.add_in = add;
}

/* How many node pre-hooks the forward hooks added in C++ and through Python (tests). */
GM_EXPORT void gpumem_torch_prehooks(unsigned long long *in_cxx, unsigned long long *in_python)
{
    *in_cxx = cxx.added, *in_python = cxx.added_py;
}

/* The engine's callback at the end of the backward pass. */
static PyObject *bwd_end(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    hk_thread *t = &tls;
    close_abandoned_fwd(t, bwd_pass(t));
    while (t->n && !(t->st[t->n - 1].kind == K_PASS && t->st[t->n - 1].pass == P_BWD))
        pop(t);
    if (t->n) pop(t);
    if (t->n && t->st[t->n - 1].kind == K_STEP && !t->nmods)
        pop(t); /* opened on this (autograd) thread for the backward */
    return none();
}

/* ---- optimizer: the range, and the scans (the names stay in _Hooks.opt_pre / opt_post) ------- */

static PyObject *opt_begin(PyObject *self, PyObject *opt)
{
    (void)self;
    if (open_step(&tls, P_OPT, opt) != 0) return NULL;
    return none();
}

static PyObject *opt_end(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    hk_thread *t = &tls;
    close_pass(t);
    if (t->n && t->st[t->n - 1].kind == K_STEP) pop(t);
    hk.step_done = 1; /* the next pass is step N+1's (open_step) */
    return none();
}

/* The optimizer hooks name every gradient and state value again each step, in case one is a new
 * allocation; these find the few that are (_Hooks._changed_grads and _changed_state are the
 * same in Python): a value that is the object its weak reference answers, with the data pointer
 * it was last named with (the table below, _Hooks.seen_grads' and seen_state's in Python), is
 * unchanged. The tiny GPT-2's AdamW asks this 112 times a step, so the scan keeps to calls that
 * make no objects where it can: the weak reference read in place, the state dictionaries walked
 * with PyDict_Next (not items(), a view and a tuple per entry) and data_ptr() called through
 * its type's descriptor (no method lookup, no argument list to build). */

static PyObject *call1(PyObject *f, PyObject *a)
{
    return py.PyObject_CallOneArg ? py.PyObject_CallOneArg(f, a)
                                  : py.PyObject_CallFunctionObjArgs(f, a, NULL);
}

/* The type whose data_ptr was last looked up and that attribute, kept while it is a method
 * descriptor (a builtin's, as torch.Tensor's): then calling it with v is v.data_ptr() (a
 * Python-level data_ptr, a function or anything else, goes through the method call). */
static struct {
    PyObject *type, *fn, *descr_type; /* descr_type: the type of dict.items, a method descriptor */
} dp;

static PyObject *data_ptr(PyObject *v)
{
    PyObject *tp = py.PyObject_Type(v);
    if (!tp) return NULL;
    if (tp != dp.type && dp.descr_type) {
        PyObject *fn = py.PyObject_GetAttr(tp, hk.s_data_ptr), *ft = NULL;
        if (!fn) py.PyErr_Clear(); /* the method call below raises what v.data_ptr() raises */
        if (fn && (ft = py.PyObject_Type(fn)) == dp.descr_type) {
            if (dp.type) py.Py_DecRef(dp.type), py.Py_DecRef(dp.fn);
            py.Py_IncRef(tp);
            dp.type = tp, dp.fn = fn;
            fn = NULL;
        }
        if (ft) py.Py_DecRef(ft);
        if (fn) py.Py_DecRef(fn);
    }
    PyObject *r = tp == dp.type ? call1(dp.fn, v) : py.PyObject_CallMethodObjArgs(v, hk.s_data_ptr, NULL);
    py.Py_DecRef(tp);
    return r;
}

/* The values named so far (_Hooks.seen_grads' and seen_state's entries, here in one table):
 * (id(p), None) -> p's gradient, (id(p), k) -> p's state value k, each with the weak reference
 * and the data pointer it was named with. Python's dicts cost the scan a Python int made for
 * id(p), a dict lookup and a tuple read per value; here the key is the parameter's address (never
 * dereferenced, as id(p) is not) and the state key, found by identity first and by hash and ==
 * after, as a dict finds it. Entries are replaced, never removed (the dicts' were not either). */
typedef struct {
    const void *p;              /* id(p); NULL: a free slot */
    PyObject *k;                /* the state key (a reference); NULL: p's gradient */
    Py_ssize_t kh;              /* hash(k) */
    PyObject *ref, *named;      /* _ref(v) and v.data_ptr() when named (references) */
    unsigned long long named_u; /* named as a C number, where named_ok */
    int named_ok;
} hk_seen;

static struct {
    hk_seen *tab;
    size_t mask, count;
    unsigned long long gen; /* bumped by every change of an entry or of where entries are */
} seen;

static size_t seen_hash(const void *p, Py_ssize_t kh)
{
    unsigned long long h = ((unsigned long long)(uintptr_t)p ^ (unsigned long long)kh * 0x9e3779b97f4a7c15ull) *
                           0xff51afd7ed558ccdull;
    return (size_t)(h ^ h >> 31);
}

/* (p, k)'s entry, or the free slot where it goes; NULL with an exception (k's ==). */
static hk_seen *seen_find(const void *p, PyObject *k, Py_ssize_t kh)
{
    for (size_t i = seen_hash(p, kh) & seen.mask;; i = (i + 1) & seen.mask) {
        hk_seen *e = &seen.tab[i];
        if (!e->p || (e->p == p && e->k == k)) return e;
        if (e->p != p || !e->k || !k || e->kh != kh) continue;
        int eq = py.PyObject_RichCompareBool(e->k, k, PY_EQ);
        if (eq < 0) return NULL;
        if (eq) return e;
    }
}

static int seen_grow(void)
{
    size_t n = seen.tab ? (seen.mask + 1) * 2 : 256;
    hk_seen *old = seen.tab, *tab = calloc(n, sizeof *tab);
    size_t oldn = old ? seen.mask + 1 : 0;
    if (!tab) {
        py.PyErr_NoMemory();
        return -1;
    }
    seen.tab = tab, seen.mask = n - 1;
    seen.gen++;
    for (size_t i = 0; i < oldn; i++) {
        if (!old[i].p) continue;
        size_t j = seen_hash(old[i].p, old[i].kh) & seen.mask;
        while (tab[j].p)
            j = (j + 1) & seen.mask;
        tab[j] = old[i];
    }
    free(old);
    return 0;
}

/* v.data_ptr() as a C number where the C++ read serves v: 1, else 0 */
static int data_ptr_cxx(PyObject *v, unsigned long long *dp)
{
    return cxx.data_ptr && cxx.data_ptr(v, dp) == 0;
}

/* 1 when v is the value (p, k) was last named with, 0 when not (or none was), -1 with an
 * exception: _Hooks._unchanged. k NULL: p's gradient. *e_out (where not NULL): the entry of a 1
 * answered by the weak reference read in place and the C++ data pointer, no Python code run but
 * k's hash (NULL for any other answer or way). */
static int unchanged(const void *p, PyObject *k, PyObject *v, hk_seen **e_out)
{
    if (e_out) *e_out = NULL;
    Py_ssize_t kh = k ? py.PyObject_Hash(k) : 0; /* an unhashable key raises, as dict.get does */
    if (kh == -1 && py.PyErr_Occurred()) return -1;
    if (!seen.tab) return 0;
    hk_seen *e = seen_find(p, k, kh);
    if (!e) return -1;
    if (!e->p) return 0;
    /* the weak reference's object, or None; _ref's stand-in for an object that takes none is a
     * function, called */
    PyObject *was = py.PyWeakref_GetObject(e->ref); /* borrowed */
    int same, c_only = was != NULL;
    if (was) {
        same = was == v;
    } else {
        py.PyErr_Clear();
        PyObject *ref = e->ref; /* the call may replace the entry */
        py.Py_IncRef(ref);
        was = py.PyObject_CallObject(ref, NULL);
        py.Py_DecRef(ref);
        if (!was) return -1;
        same = was == v;
        py.Py_DecRef(was);
        if (same && !(e = seen_find(p, k, kh))) return -1;
        if (same && !e->p) return 0;
    }
    if (!same) return 0;
    unsigned long long dp;
    if (e->named_ok && data_ptr_cxx(v, &dp)) { /* a Tensor's or Parameter's */
        if (e_out && c_only && e->named_u == dp) *e_out = e;
        return e->named_u == dp;
    }
    PyObject *named = e->named, *ptr; /* compared as Python compares */
    py.Py_IncRef(named);
    int eq = (ptr = data_ptr(v)) ? py.PyObject_RichCompareBool(named, ptr, PY_EQ) : -1;
    if (ptr) py.Py_DecRef(ptr);
    py.Py_DecRef(named);
    return eq;
}

/* (p, ref, ptr) or (p, k, ref, ptr): p's gradient, or its state value k, named now, with _ref(v)
 * and v.data_ptr() (_Hooks._seen_grad and _seen_value in C; the Python callers make the two,
 * which happens once per new value). */
static PyObject *remember(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3 && nargs != 4) {
        py.PyErr_SetString(*py.PyExc_TypeError, "remember(param, [key,] ref, data_ptr)");
        return NULL;
    }
    PyObject *k = nargs == 4 ? args[1] : NULL, *ref = args[nargs - 2], *ptr = args[nargs - 1];
    Py_ssize_t kh = k ? py.PyObject_Hash(k) : 0;
    if (kh == -1 && py.PyErr_Occurred()) return NULL;
    if ((seen.count + 1) * 2 > (seen.tab ? seen.mask + 1 : 0) && seen_grow() != 0) return NULL;
    hk_seen *e = seen_find(args[0], k, kh);
    if (!e) return NULL;
    if (!e->p) {
        if (k) py.Py_IncRef(k);
        e->p = args[0], e->k = k, e->kh = kh, e->ref = e->named = NULL;
        seen.count++;
    }
    PyObject *old_ref = e->ref, *old_named = e->named;
    seen.gen++;
    py.Py_IncRef(ref), py.Py_IncRef(ptr);
    e->ref = ref, e->named = ptr;
    e->named_ok = 0;
    if (py.PyLong_AsUnsignedLong) {
        e->named_u = py.PyLong_AsUnsignedLong(ptr);
        e->named_ok = !(e->named_u == (unsigned long long)-1 && py.PyErr_Occurred());
        if (!e->named_ok) py.PyErr_Clear(); /* not an int: compared as Python compares */
    }
    /* let go last: a weak reference's callback or a value's __del__ may run Python */
    if (old_ref) py.Py_DecRef(old_ref);
    if (old_named) py.Py_DecRef(old_named);
    return none();
}

/* (param_groups) -> [p for each group's params whose p.grad is not None and not unchanged] */
static PyObject *changed_grads(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 1) {
        py.PyErr_SetString(*py.PyExc_TypeError, "changed_grads(param_groups)");
        return NULL;
    }
    PyObject *out = py.PyList_New(0), *groups = py.PyObject_GetIter(args[0]), *group, *p;
    if (!out || !groups) goto fail;
    while ((group = py.PyIter_Next(groups))) {
        PyObject *params = py.PyObject_GetItem(group, hk.s_params);
        py.Py_DecRef(group);
        PyObject *it = params ? py.PyObject_GetIter(params) : NULL;
        if (params) py.Py_DecRef(params);
        if (!it) goto fail;
        while ((p = py.PyIter_Next(it))) {
            PyObject *g = cxx.grad ? cxx.grad(p) : NULL; /* p.grad, or NULL: ask Python */
            if (!g && !py.PyErr_Occurred()) g = py.PyObject_GetAttr(p, hk.s_grad);
            int r = -1;
            if (g && g == py.None) {
                r = 1;
            } else if (g) {
                r = unchanged(p, NULL, g, NULL);
                if (r == 0) r = py.PyList_Append(out, p) == 0 ? 1 : -1;
            }
            if (g) py.Py_DecRef(g);
            py.Py_DecRef(p);
            if (r < 0) {
                py.Py_DecRef(it);
                goto fail;
            }
        }
        py.Py_DecRef(it);
        if (py.PyErr_Occurred()) goto fail;
    }
    if (py.PyErr_Occurred()) goto fail;
    py.Py_DecRef(groups);
    return out;
fail:
    if (groups) py.Py_DecRef(groups);
    if (out) py.Py_DecRef(out);
    return NULL;
}

/* A dict whose items() is dict's (dict itself, defaultdict: not OrderedDict, whose order is its
 * own): PyDict_Next walks it in the order items() gives. The last such subclass is kept. */
static PyObject *dict_like, *dict_items;

static int plain_dict(PyObject *o)
{
    PyObject *tp = py.PyObject_Type(o);
    int r = tp == py.PyDict_Type || (tp && tp == dict_like);
    if (!r && tp && dict_items && py.PyType_IsSubtype(tp, py.PyDict_Type)) {
        PyObject *items = py.PyObject_GetAttr(tp, hk.s_items);
        if (!items) py.PyErr_Clear();
        if ((r = items == dict_items)) {
            py.Py_IncRef(tp);
            if (dict_like) py.Py_DecRef(dict_like);
            dict_like = tp;
        }
        if (items) py.Py_DecRef(items);
    }
    if (tp) py.Py_DecRef(tp);
    return r;
}

/* A mapping's (key, value) pairs in items() order, one at a time: PyDict_Next on a plain dict,
 * items() otherwise. next() gives new references, or 0 at the end (or with an exception). */
typedef struct {
    PyObject *d, *it; /* it: items()' iterator, NULL for a plain dict */
    Py_ssize_t pos;
} pairs;

static int pairs_open(pairs *w, PyObject *d)
{
    w->d = d, w->it = NULL, w->pos = 0;
    if (plain_dict(d)) return 0;
    PyObject *items = py.PyObject_CallMethodObjArgs(d, hk.s_items, NULL);
    if (!items) return -1;
    w->it = py.PyObject_GetIter(items);
    py.Py_DecRef(items);
    return w->it ? 0 : -1;
}

static int pairs_next(pairs *w, PyObject **k, PyObject **v)
{
    if (!w->it) {
        if (!py.PyDict_Next(w->d, &w->pos, k, v)) return 0;
        py.Py_IncRef(*k), py.Py_IncRef(*v);
        return 1;
    }
    PyObject *kv = py.PyIter_Next(w->it);
    if (!kv) return 0;
    *k = py.PyTuple_GetItem(kv, 0), *v = py.PyTuple_GetItem(kv, 1);
    if (*k && *v) py.Py_IncRef(*k), py.Py_IncRef(*v);
    py.Py_DecRef(kv);
    return *k && *v ? 1 : -1;
}

static void pairs_close(pairs *w)
{
    if (w->it) py.Py_DecRef(w->it);
    w->it = NULL;
}

/* The last state scan that found every value unchanged, kept so that the next one (the tiny
 * GPT-2's AdamW: 28 dicts, 84 values a step) can answer without walking the dicts, hashing the
 * keys and probing the table: when the state dict and each parameter's dict are the ones walked
 * and none changed since (CPython's dict version tag, below), they hold the same keys and values
 * (alive: the dicts hold them); when no entry of the table changed either (seen.gen), each value's
 * entry is the one found then, whose weak reference still answers that value; what is left to ask
 * is each value's data pointer, read in C++ as the walk did. Any other answer (a pointer moved, a
 * dict changed, a value the walk answered some other way) takes the walk, which alone builds the
 * list; the memo runs no Python code and changes nothing, so falling back is exact. */
typedef struct {
    PyObject *st, *type; /* a parameter's state dict and its type then (borrowed: the state holds it) */
    uint64_t tag;        /* its version tag then */
    size_t n;            /* its values, the next n of smemo.v */
} memo_dict;

typedef struct {
    PyObject *v; /* a value (borrowed: its dict holds it) */
    hk_seen *e;  /* its entry (seen.gen guards where it is and what it holds) */
} memo_val;

static struct {
    int ok;
    PyObject *state, *type; /* the state dict (compared, not held: its tag tells a new one) */
    uint64_t tag;
    unsigned long long gen;
    memo_dict *d;
    memo_val *v;
    size_t nd, nv, cap_d, cap_v;
} smemo;

/* A dict's version tag (PEP 509's ma_version_tag, right after the object head and ma_used in
 * CPython 3.9-3.13's PyDictObject; 3.14 has none): every dict made or changed (an entry added,
 * removed or given another value) takes a new one from a counter, so the same address with the
 * same tag is the same dict, unchanged. dict_tags_check finds it there and working at setup;
 * without that, no memo. */
enum { DICT_TAG_OFF = 24, DICT_USED_OFF = 16, OB_TYPE_OFF = 8 };
static int dict_tags;

static uint64_t dict_tag(const PyObject *d)
{
    uint64_t t;
    memcpy(&t, (const char *)d + DICT_TAG_OFF, sizeof t);
    return t;
}

static PyObject *ob_type(const PyObject *o)
{
    PyObject *t;
    memcpy(&t, (const char *)o + OB_TYPE_OFF, sizeof t);
    return t;
}

static Py_ssize_t dict_used(const PyObject *d)
{
    Py_ssize_t n;
    memcpy(&n, (const char *)d + DICT_USED_OFF, sizeof n);
    return n;
}

static void dict_tags_check(void)
{
    dict_tags = 0;
    if (!py.PyObject_SetItem) return;
    PyObject *a = py.PyObject_CallObject(py.PyDict_Type, NULL), *b = NULL;
    if (!a) {
        py.PyErr_Clear();
        return;
    }
    uint64_t t0 = dict_tag(a), t1 = 0, t2 = 0;
    int ok = ob_type(a) == py.PyDict_Type && dict_used(a) == 0 &&
             py.PyObject_SetItem(a, hk.s_items, py.None) == 0 && dict_used(a) == 1 && (t1 = dict_tag(a)) > t0 &&
             py.PyObject_SetItem(a, hk.s_items, hk.s_grad) == 0 && (t2 = dict_tag(a)) > t1 &&
             (b = py.PyObject_CallObject(py.PyDict_Type, NULL)) && dict_tag(b) > t2;
    if (!b) py.PyErr_Clear();
    if (b) py.Py_DecRef(b);
    py.Py_DecRef(a);
    dict_tags = ok;
}

/* 1: state is the memo's and nothing it holds changed (every value unchanged), else 0 */
static int memo_same(PyObject *state)
{
    if (!smemo.ok || state != smemo.state || seen.gen != smemo.gen || ob_type(state) != smemo.type ||
        dict_tag(state) != smemo.tag)
        return 0;
    const memo_val *mv = smemo.v;
    for (size_t i = 0; i < smemo.nd; i++) {
        const memo_dict *d = &smemo.d[i];
        if (dict_tag(d->st) != d->tag || ob_type(d->st) != d->type) return 0;
        for (const memo_val *end = mv + d->n; mv < end; mv++) {
            unsigned long long dp;
            if (!data_ptr_cxx(mv->v, &dp) || dp != mv->e->named_u) return 0;
        }
    }
    return 1;
}

static int memo_room(void **a, size_t *cap, size_t n, size_t size)
{
    if (n < *cap) return 1;
    size_t c = *cap ? *cap * 2 : 64;
    void *p = realloc(*a, c * size);
    if (!p) return 0;
    *a = p, *cap = c;
    return 1;
}

/* (state) -> [(p, k, v) for p, st in state.items() for k, v in st.items() if not unchanged] */
static PyObject *changed_state(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 1) {
        py.PyErr_SetString(*py.PyExc_TypeError, "changed_state(state)");
        return NULL;
    }
    if (memo_same(args[0])) return py.PyList_New(0);
    PyObject *out = py.PyList_New(0), *p, *st, *k, *v;
    pairs outer = {0}, inner;
    int ok = out && pairs_open(&outer, args[0]) == 0, n;
    /* the memo of this walk, kept where every value is answered unchanged in C */
    int memo = ok && dict_tags && !outer.it;
    uint64_t tag = memo ? dict_tag(args[0]) : 0;
    unsigned long long gen = seen.gen;
    smemo.ok = 0, smemo.nd = smemo.nv = 0;
    while (ok && (n = pairs_next(&outer, &p, &st)) != 0) {
        if (n < 0) {
            ok = 0;
            break;
        }
        ok = pairs_open(&inner, st) == 0;
        memo = memo && ok && !inner.it && memo_room((void **)&smemo.d, &smemo.cap_d, smemo.nd, sizeof *smemo.d);
        if (memo) smemo.d[smemo.nd++] = (memo_dict){st, ob_type(st), dict_tag(st), 0};
        while (ok && (n = pairs_next(&inner, &k, &v)) != 0) {
            hk_seen *e = NULL;
            int r = n > 0 ? unchanged(p, k, v, memo ? &e : NULL) : -1;
            if (r == 0) {
                PyObject *t = py.PyTuple_Pack(3, p, k, v);
                r = t && py.PyList_Append(out, t) == 0 ? 1 : -1;
                if (t) py.Py_DecRef(t);
            }
            memo = memo && e && memo_room((void **)&smemo.v, &smemo.cap_v, smemo.nv, sizeof *smemo.v);
            if (memo) smemo.v[smemo.nv++] = (memo_val){v, e}, smemo.d[smemo.nd - 1].n++;
            if (n > 0) py.Py_DecRef(k), py.Py_DecRef(v);
            ok = r >= 0;
        }
        pairs_close(&inner);
        ok = ok && !py.PyErr_Occurred();
        py.Py_DecRef(p), py.Py_DecRef(st);
    }
    pairs_close(&outer);
    if (!ok || py.PyErr_Occurred()) {
        if (out) py.Py_DecRef(out);
        return NULL;
    }
    /* the tags and the generation are those from before each was read: Python code that the walk
     * ran (a key's hash or ==) and changed one leaves a memo that never matches */
    if (memo) smemo.ok = 1, smemo.state = args[0], smemo.type = ob_type(args[0]), smemo.tag = tag, smemo.gen = gen;
    return out;
}

/* ---- making them ---------------------------------------------------------------------------- */

static py_method_def defs[] = {
    {"fwd_pre", (void *)fwd_pre, PY_METH_FASTCALL, "gpumem's forward pre-hook"},
    {"fwd_post", (void *)fwd_post, PY_METH_FASTCALL, "gpumem's forward hook"},
    {"opt_begin", (void *)opt_begin, PY_METH_O, "opens step N/opt for the optimizer given"},
    {"opt_end", (void *)opt_end, PY_METH_NOARGS, "closes step N/opt; the next forward or backward is step N+1's"},
    {"changed_grads", (void *)changed_grads, PY_METH_FASTCALL,
     "(param_groups) -> the parameters whose gradient is not the one last named"},
    {"changed_state", (void *)changed_state, PY_METH_FASTCALL,
     "(state) -> the (param, key, value) not the ones last named"},
    {"remember", (void *)remember, PY_METH_FASTCALL,
     "(param, [key,] ref, data_ptr): param's gradient (or state value key) named now"},
    {"wrap_call", (void *)wrap_call, PY_METH_O,
     "(Module.__call__) -> the same with gpumem's forward ranges, in place of the global hooks"},
    {"bwd_end", (void *)bwd_end, PY_METH_NOARGS, "the end of the backward pass"},
};

#define HK_SYM(name) (*(void **)&py.name = gm_real_dlsym_fn(RTLD_DEFAULT, #name))

static int find_python(void)
{
    if (py.PyExc_TypeError) return 0;
    HK_SYM(Py_GetVersion);
    if (!py.Py_GetVersion) return -1;
    const char *v = py.Py_GetVersion();
    int major = 0, minor = 0;
    if (!v || sscanf(v, "%d.%d", &major, &minor) != 2 || major != 3 || minor < 9 || minor > 13 ||
        strstr(v, "free-threading"))
        return -1;
    HK_SYM(PyCFunction_NewEx);
    HK_SYM(PyObject_GetAttr);
    HK_SYM(PyObject_CallObject);
    HK_SYM(PyObject_CallFunctionObjArgs);
    HK_SYM(PyObject_CallMethodObjArgs);
    HK_SYM(PyObject_IsTrue);
    HK_SYM(PyUnicode_InternFromString);
    HK_SYM(PyUnicode_AsEncodedString);
    HK_SYM(PyBytes_AsString);
    HK_SYM(PyTuple_Pack);
    HK_SYM(PyTuple_Size);
    HK_SYM(PyObject_Hash);
    HK_SYM(PyTuple_GetItem);
    HK_SYM(PyErr_ExceptionMatches);
    HK_SYM(PyErr_Fetch);
    HK_SYM(PyErr_NormalizeException);
    HK_SYM(PyErr_Clear);
    HK_SYM(PyErr_SetString);
    HK_SYM(PyErr_NoMemory);
    HK_SYM(PyErr_Occurred);
    HK_SYM(PyObject_GetItem);
    HK_SYM(PyObject_GetIter);
    HK_SYM(PyIter_Next);
    HK_SYM(PyObject_RichCompareBool);
    HK_SYM(PyLong_AsLongLong);
    HK_SYM(PyList_New);
    HK_SYM(PyList_Append);
    HK_SYM(PyDict_Next);
    HK_SYM(PyList_Size);
    HK_SYM(PyList_GetItem);
    HK_SYM(PyList_SetItem);
    HK_SYM(PyWeakref_NewRef);
    HK_SYM(PyWeakref_GetObject);
    HK_SYM(PyObject_Type);
    HK_SYM(PyType_IsSubtype);
    HK_SYM(Py_IncRef);
    HK_SYM(Py_DecRef);
    py.None = gm_real_dlsym_fn(RTLD_DEFAULT, "_Py_NoneStruct");
    py.PyDict_Type = gm_real_dlsym_fn(RTLD_DEFAULT, "PyDict_Type");
    py.PyTuple_Type = gm_real_dlsym_fn(RTLD_DEFAULT, "PyTuple_Type");
    py.PyExc_Exception = gm_real_dlsym_fn(RTLD_DEFAULT, "PyExc_Exception");
    py.PyExc_AttributeError = gm_real_dlsym_fn(RTLD_DEFAULT, "PyExc_AttributeError");
    py.PyExc_TypeError = gm_real_dlsym_fn(RTLD_DEFAULT, "PyExc_TypeError");
    void **all = (void **)&py;
    for (size_t i = 0; i < offsetof(__typeof__(py), PyObject_CallOneArg) / sizeof(void *); i++)
        if (!all[i]) {
            memset(&py, 0, sizeof py);
            return -1;
        }
    HK_SYM(PyObject_CallOneArg);
    HK_SYM(PyObject_Vectorcall);
    HK_SYM(PyType_FromSpec);
    HK_SYM(PyType_GenericAlloc);
    HK_SYM(PyMethod_New);
    HK_SYM(PyVectorcall_Call);
    HK_SYM(PyObject_GenericGetAttr);
    HK_SYM(PyVectorcall_Function);
    HK_SYM(PyLong_AsUnsignedLong);
    HK_SYM(PyGILState_Ensure);
    HK_SYM(PyGILState_Release);
    HK_SYM(PyErr_WriteUnraisable);
    HK_SYM(PyObject_SetItem);
    return 0;
}

static PyObject *intern(const char *s, int *ok)
{
    PyObject *o = py.PyUnicode_InternFromString(s);
    if (!o) *ok = 0;
    return o;
}

/* (resolve, warn, first_grad, grad_enabled, queue_callback, gpumem, torch.Tensor[, current_node])
 * -> (fwd_pre, fwd_post, opt_begin, opt_end, changed_grads, changed_state, remember, wrap_call), a
 * reference this file keeps (ctypes' py_object takes its own); NULL when the C API is not there,
 * or with an exception. current_node: torch._C._current_autograd_node (None, or left out: a
 * forward in the backward is not looked for, pre_work). A second call gives the same functions,
 * calling back the new objects. */
GM_EXPORT PyObject *gpumem_torch_hooks(PyObject *args)
{
    if (find_python() != 0) return NULL;
    Py_ssize_t nargs = py.PyTuple_Size(args);
    if (nargs != 7 && nargs != 8) {
        py.PyErr_SetString(*py.PyExc_TypeError, "gpumem_torch_hooks: a tuple of 7 or 8");
        return NULL;
    }
    PyObject **slot[] = {&hk.resolve,    &hk.warn,   &hk.first_grad, &hk.grad_enabled, &hk.queue_callback,
                         &hk.gpumem,     &hk.tensor, &hk.current_node};
    for (int i = 0; i < nargs; i++) {
        PyObject *o = py.PyTuple_GetItem(args, i);
        if (!o) return NULL;
        PyObject **s = slot[i];
        py.Py_IncRef(o);
        if (*s) py.Py_DecRef(*s);
        *s = o;
    }
    int ok = 1;
    if (!hk.s_user_ranges && !(hk.s_user_ranges = intern("_user_ranges", &ok))) return NULL;
    /* the program may have named its phases before (gpumem's _own_ranges told the flag too) */
    PyObject *u = py.PyObject_GetAttr(hk.gpumem, hk.s_user_ranges);
    int on = u ? py.PyObject_IsTrue(u) : -1;
    if (u) py.Py_DecRef(u);
    if (on < 0) return NULL;
    if (on) gpumem_torch_user_ranges();
    if (hk.fns) return hk.fns;
    hk.s_requires_grad = intern("requires_grad", &ok);
    hk.s_grad_fn = intern("grad_fn", &ok);
    hk.s_backward_hooks = intern("_backward_hooks", &ok);
    hk.s_register_prehook = intern("register_prehook", &ok);
    hk.s_register_hook = intern("register_hook", &ok);
    hk.s_fwd_what = intern("a forward hook", &ok);
    hk.s_bwd_what = intern("a backward hook", &ok);
    hk.s_data_ptr = intern("data_ptr", &ok);
    hk.s_grad = intern("grad", &ok);
    hk.s_params = intern("params", &ok);
    hk.s_items = intern("items", &ok);
    if (!ok || tab_grow() != 0) return NULL;
    /* dict.items, and its type (a method descriptor's): plain_dict and data_ptr compare with
     * them */
    if (!(dict_items = py.PyObject_GetAttr(py.PyDict_Type, hk.s_items)) ||
        !(dp.descr_type = py.PyObject_Type(dict_items)))
        return NULL;
    dict_tags_check();
    hk.step = 1, hk.step_done = 0, hk.nstepped = 0;
    enum { N = sizeof defs / sizeof defs[0] };
    PyObject *f[N];
    for (int i = 0; i < N; i++)
        if (!(f[i] = py.PyCFunction_NewEx(&defs[i], NULL, NULL))) return NULL;
    hk.bwd_end = f[N - 1];
    if (!(hk.out_gone = py.PyCFunction_NewEx(&out_gone_def, NULL, NULL))) return NULL;
    hk.fns = py.PyTuple_Pack(N - 1, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]);
    for (int i = 0; i < N - 1; i++)
        py.Py_DecRef(f[i]);
    return hk.fns;
}
