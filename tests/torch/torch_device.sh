#!/usr/bin/env bash
# torch_device.sh — PyTorch's CUDA build sees the virtual GPU as the device profile says:
# torch.cuda.is_available() and get_device_name() print "True <the profile's name>" (h100-80g,
# torch-env's default, and h200), total_memory is the profile's memory or GPUMEM_SIM_MEMORY,
# and the compute capability and SM count are the profile's.
set -euo pipefail
source "$(dirname "$0")/common.bash"
q='import torch
p = torch.cuda.get_device_properties(0)
print(torch.cuda.is_available(), torch.cuda.get_device_name())
print(p.total_memory, p.major, p.minor, p.multi_processor_count)'
out=$(torch_run -- -c "$q" 2>/dev/null)
[[ $(sed -n 1p <<<"$out") == "True NVIDIA H100 80GB HBM3" ]] && ok "h100-80g (torch-env's default): $(sed -n 1p <<<"$out")" \
  || bad "h100-80g: '$out'"
[[ $(sed -n 2p <<<"$out") == "$((81008 << 20)) 9 0 132" ]] && ok "h100-80g: 81008 MiB, sm_90, 132 SMs" \
  || bad "h100-80g properties: '$(sed -n 2p <<<"$out")'"
out=$(torch_run GPUMEM_SIM_PROFILE=h200 GPUMEM_SIM_MEMORY=100G -- -c "$q" 2>/dev/null)
[[ $(sed -n 1p <<<"$out") == "True NVIDIA H200" ]] && ok "h200: $(sed -n 1p <<<"$out")" || bad "h200: '$out'"
[[ $(sed -n 2p <<<"$out") == "$((100 << 30)) 9 0 132" ]] && ok "h200 with GPUMEM_SIM_MEMORY=100G: 100 GiB" \
  || bad "h200 properties: '$(sed -n 2p <<<"$out")'"
exit $fail
