# devices_one.py — PyTorch's tensors on cuda:0 only, and 8 MiB on device 1 that PyTorch never
# held (a cudaMalloc through ctypes, outside its allocator): a recording with memory on two
# devices whose PyTorch history has nothing on device 1 (tests/torch/torch_devices.sh: --device 1
# says so, never device 0's figures or zeros as device 1's). Prints "MAX0 <max_memory_allocated(0)>".
# argv[1]: the MiB on device 1 (default 8); 256 makes device 1 the busiest by gpumem's account while
# PyTorch's tensors are all on device 0 (every command then reads device 0 without --device), also
# with gpumem as PyTorch's allocator (--allocator gpumem: no max_memory_allocated, "MAX0 none").
import ctypes, sys, torch
mib = int(sys.argv[1]) if len(sys.argv) > 1 else 8
l0 = torch.nn.Linear(256, 256).to("cuda:0")
for step in range(2):
    x = torch.randn(32, 256, device="cuda:0")
    l0(x).sum().backward()
rt = ctypes.CDLL("libcudart.so.13")
p = ctypes.c_void_p()
assert rt.cudaSetDevice(1) == 0 and rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(mib << 20)) == 0
assert rt.cudaSetDevice(0) == 0
try:
    print("MAX0", torch.cuda.max_memory_allocated(0), flush=True)
except RuntimeError:  # gpumem as PyTorch's allocator (--allocator gpumem): no stats of its own
    print("MAX0 none (a pluggable allocator)", flush=True)
