# tests/torch/: PyTorch's CUDA build on the virtual GPU (sim/README.md, "PyTorch on the virtual
# GPU"): the device query, the libraries it binds, the GPT-2 script under both allocator
# configs, the kernel-skip counting. Each skips (77) when PyTorch is not installed
# (GPUMEM_TORCH_PY, default /root/.cache/gpumem/torch-2.14.1). Included from tests/module.mk.
SCRIPT_TESTS += tests/torch/torch_device.sh tests/torch/torch_bindings.sh \
                tests/torch/torch_kernels.sh tests/torch/torch_gpt2.sh tests/torch/torch_record.sh \
                tests/torch/torch_categories.sh
BENCHES += tests/bench/torch_gpt2_bench.sh
