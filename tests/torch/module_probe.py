# module_probe.py — the virtual GPU's modules (sim/sim_module.c) on a cubin Triton built, through
# the driver API as Triton and PyTorch call it (ctypes), for tests/torch/torch_compile.sh.
#   module_probe.py LIBCUDA CUBIN KERNEL   prints one "name value" line per fact
#   module_probe.py --child                starts PyTorch's CUDA (a context, no memory, no launch),
#                                          as a compile worker of torch.compile does
import ctypes
import sys

if sys.argv[1] == "--child":
    import torch

    print("child", torch.cuda.current_device())
    sys.exit(0)
cu = ctypes.CDLL(sys.argv[1])
cubin, name = sys.argv[2], sys.argv[3].encode()
ctx = ctypes.c_void_p()
assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
mod, mod2 = ctypes.c_void_p(), ctypes.c_void_p()
print("load_file", cu.cuModuleLoad(ctypes.byref(mod), cubin.encode()))
image = open(cubin, "rb").read()
print("load_data", cu.cuModuleLoadData(ctypes.byref(mod2), image))
f, f_again, f2 = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
print("get", cu.cuModuleGetFunction(ctypes.byref(f), mod, name))
cu.cuModuleGetFunction(ctypes.byref(f_again), mod, name)
cu.cuModuleGetFunction(ctypes.byref(f2), mod2, name)
print("same_module_same_handle", int(f.value is not None and f.value == f_again.value))
print("other_module_other_handle", int(f.value != f2.value))
print("missing", cu.cuModuleGetFunction(ctypes.byref(f_again), mod, b"no_such_kernel"))
n = ctypes.c_uint()
print("count", cu.cuModuleGetFunctionCount(ctypes.byref(n), mod), n.value)
layout = []
off, size = ctypes.c_size_t(), ctypes.c_size_t()
while cu.cuFuncGetParamInfo(f, ctypes.c_size_t(len(layout)), ctypes.byref(off), ctypes.byref(size)) == 0:
    layout.append(f"{off.value}:{size.value}")
print("layout", ",".join(layout))
print("name_attr_regs", cu.cuFuncGetAttribute(ctypes.byref(ctypes.c_int()), 4, f))  # NUM_REGS
ptx = b".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\nret;\n}\n"
print("ptx", cu.cuModuleLoadData(ctypes.byref(ctypes.c_void_p()), ptx))
print("garbage", cu.cuModuleLoadData(ctypes.byref(ctypes.c_void_p()), b"\x01\x02\x03\x04not an image\0"))
print("unload", cu.cuModuleUnload(mod))
print("after_unload_param", cu.cuFuncGetParamInfo(f, ctypes.c_size_t(0), ctypes.byref(off), ctypes.byref(size)))
print("after_unload_other", cu.cuFuncGetParamInfo(f2, ctypes.c_size_t(0), ctypes.byref(off), ctypes.byref(size)))
print("unload_twice", cu.cuModuleUnload(mod))
