# devices_reset.py — PyTorch's peak stats reset on one device of two (tests/torch/torch_devices.sh):
# 32 MiB kept on cuda:0; 96 MiB on cuda:1, freed; reset_peak_memory_stats(1), which resets device
# 1's statistics only; then 16 MiB on cuda:1. Device 1 holds the most (its reserve stays 96 MiB),
# its max_memory_allocated(1) counts from the reset (16 MiB), device 0's is the whole run's.
# Prints PyTorch's own figures per device:
# "MAX {"allocated": [d0, d1], "reserved": [d0, d1]}".
import json, torch
a0 = torch.empty(32 * 2**20, dtype=torch.uint8, device="cuda:0")
b1 = torch.empty(96 * 2**20, dtype=torch.uint8, device="cuda:1")
del b1
torch.cuda.reset_peak_memory_stats(1)
c1 = torch.empty(16 * 2**20, dtype=torch.uint8, device="cuda:1")
print("MAX", json.dumps({"allocated": [torch.cuda.max_memory_allocated(d) for d in (0, 1)],
                         "reserved": [torch.cuda.max_memory_reserved(d) for d in (0, 1)]}), flush=True)
