# tests/torch/: PyTorch's CUDA build on the virtual GPU (sim/README.md, "PyTorch on the virtual
# GPU"): the device query, the libraries it binds, the GPT-2 script under both allocator
# configs, the kernel-skip counting; the `pytorch` presets against PyTorch's own allocator
# (torch_parity.sh), GPUMEM_CONF against PyTorch's own parser (torch_conf_keys.sh), PyTorch's
# memory_viz on gpumem's exports (torch_memviz.sh), gpumem tune --check on the script (torch_tune.sh),
# PyTorch's snapshot at an OOM beside the recording and the report naming it (torch_oom.sh),
# CUDA graph capture and a graph's pool given back (torch_graphs.sh, torch_graph_release.py), gpumem advise --check on the script (torch_advise.sh), and
# advise --ranks N on it, FSDP2 predicted and re-run with --fsdp N (torch_fsdp.sh).
# Each skips (77) when PyTorch is not installed (GPUMEM_TORCH_PY, default /root/.cache/gpumem/torch-2.14.1). Included from tests/module.mk.
SCRIPT_TESTS += tests/torch/torch_device.sh tests/torch/torch_bindings.sh \
                tests/torch/torch_kernels.sh tests/torch/torch_gpt2.sh tests/torch/torch_record.sh \
                tests/torch/torch_parity.sh tests/torch/torch_conf_keys.sh tests/torch/torch_memviz.sh \
                tests/torch/torch_tune.sh tests/torch/torch_oom.sh tests/torch/torch_graphs.sh \
                tests/torch/torch_categories.sh tests/torch/torch_advise.sh tests/torch/torch_fsdp.sh
# the planted leak at its Python line with gpumem as PyTorch's allocator (torch_record.sh: PyTorch's own)
SCRIPT_TESTS += tests/torch/torch_leak_gpumem.sh
# gpumem.name(tensor) under PyTorch's allocator names the tensor, not its segment
SCRIPT_TESTS += tests/torch/torch_names.sh
# advise on a user's own loop: no batch size made up, set_to_none read from the gradients' lives,
# checkpointing a user's blocks predicted against the checkpointed run (torch_advise_ckpt.py)
SCRIPT_TESTS += tests/torch/torch_advise_user.sh
# PyTorch under a launcher (a shell script's step, torchrun's workers): each process's trace in its own database
SCRIPT_TESTS += tests/torch/torch_launchers.sh
# the views of a PyTorch recording (device and PyTorch's) against the database: per-step tables,
# stretches over time, the device-vs-PyTorch account, leaks and what grows (torch_views.sh)
SCRIPT_TESTS += tests/torch/torch_views.sh
# the PyTorch hooks in C (preload/torch_hooks.c) against their Python versions (gpumem/_torch.py)
SCRIPT_TESTS += tests/torch/torch_hooks.sh
# the forward's op log (gpumem record --torch-ops): its tables, and no allocation changed by it
SCRIPT_TESTS += tests/torch/torch_ops.sh
# the Python stacks of PyTorch's trace entries when code objects are freed and made again at the
# same addresses (exec in a loop, torch_churn.py): each tensor its own function, on the main thread
# and on another; the merge with hundreds of distinct frame strings (torch_churn.sh)
SCRIPT_TESTS += tests/torch/torch_churn.sh
# two devices in one process (PyTorch's view and a C program's): each device's peaks, never their
# sum; an OOM's tables its own device's; every other command says where it adds devices
SCRIPT_TESTS += tests/torch/torch_devices.sh
# record's summary says what report says, for every kind of recording; an allocator setting the run
# does not use is said (stderr, meta ignored.NAME, report), never dropped (torch_summary.sh)
SCRIPT_TESTS += tests/torch/torch_summary.sh
# gpumem as PyTorch's allocator out of memory: torch.OutOfMemoryError with gpumem's figures, the
# OOM recorded, the program going on; PyTorch's hooks reaching gpumem: set_per_process_memory_fraction
# caps it, record_stream fences a free, emptyCache by its C name empties it (torch_gm_oom.sh)
SCRIPT_TESTS += tests/torch/torch_gm_oom.sh
# gpumem as PyTorch's allocator answers PyTorch's memory statistics (memory_stats, max_memory_*,
# memory_summary, the resets), equal to the report's figures, with and without libgpumem_torch.so
SCRIPT_TESTS += tests/torch/torch_stats.sh
# tests/gpu/'s PyTorch scripts: on the virtual GPU here (tests/gpu/common.bash, gpu_or_sim), on the
# GPU where nvidia-smi lists one
SCRIPT_TESTS += tests/gpu/pytorch_three_ways.sh tests/gpu/pytorch_frames.sh tests/gpu/pytorch_parity.sh
BENCHES += tests/bench/torch_gpt2_bench.sh tests/bench/torch_parity_bench.sh tests/bench/torch_rec_bench.sh \
           tests/bench/torch_advise_bench.sh tests/bench/torch_fsdp_bench.sh tests/bench/torch_merge_bench.sh
# what a recorded step costs in instructions (callgrind; torch_rec_instr.sh) and the client
# requests it needs, loaded into the Python under valgrind (no sanitizers)
$(BUILD)/tests/bench/cg_steps.so: tests/bench/cg_steps.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) -std=gnu17 -O1 -g -Wall -Wextra -Werror -fPIC -shared -o $@ $<
ALL_TARGETS += $(BUILD)/tests/bench/cg_steps.so
# every thread's stack at a SIGABRT, preloaded by tests/torch/exit_stress.sh (a manual stress check
# for exit-time aborts; not in SCRIPT_TESTS), into the Python that runs PyTorch (no sanitizers)
$(BUILD)/tests/torch/abort_stacks.so: tests/torch/abort_stacks.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) -std=gnu17 -O1 -g -Wall -Wextra -Werror -fPIC -shared -o $@ $<
ALL_TARGETS += $(BUILD)/tests/torch/abort_stacks.so
BENCHES += tests/bench/torch_rec_instr.sh
# PYTORCH_CUDA_ALLOC_CONF's per_process_memory_fraction key under PyTorch's own allocator: every
# reader names the key as the OOM's cap (a call replacing it, the call), tune's and frag's
# replays meet the recorded OOM; one rule for the key and a call in gpumem's allocator, its
# replays and tune's recommendation, and advise leaves the key's at-start note out (torch_fraction_key.sh)
SCRIPT_TESTS += tests/torch/torch_fraction_key.sh
# the steps the PyTorch hooks mark are the program's: optimizers stepped one after another are one
# step (two optimizers, scaler.step each), one optimizer stepped twice with no pass between is
# two; leaks' growth per step on them (torch_steps.sh, torch_steps.py)
SCRIPT_TESTS += tests/torch/torch_steps.sh
# gpumem's outputs against small PyTorch programs' memory truths: leaks' growth per step with a
# validation forward after the last optimizer step (a partial step, left out), advise recommending
# no technique that raises the peak reserved, an OOM's live tensors at their Python line rather than
# PyTorch's segments, what was alive at the OOM a run stopped at no parameter or optimizer state
# "from phases", leaks saying that what grows was made between steps (torch_truths.sh, torch_truths.py)
SCRIPT_TESTS += tests/torch/torch_truths.sh
# gpumem's outputs on PyTorch features no other test covers, against the program's own figures: a
# tensor freed after record_stream, its free pending at the end, is no leak; checkpointing's
# recompute is no forward pass and its tensors no saved activations; each step's end is
# memory_allocated() at the end of the iteration; the replays reach max_memory_reserved() under a
# memory fraction with garbage_collection_threshold or max_split_size_mb; a MemPool is not called a
# graph capture; report says PyTorch's retries at its cap (num_alloc_retries, an empty_cache none,
# exact under garbage_collection_threshold, max_split_size_mb and expandable segments);
# advise lists a technique that lowers the peak allocated only apart; advise's offload of saved
# activations predicts what save_on_cpu measures (tied, amp), a Sequential's or a model's last
# module's saved tensors offloaded too (torch_features.sh, .py)
SCRIPT_TESTS += tests/torch/torch_features.sh
# a script with no module and no optimizer, with pinned host memory: report and advise say the
# hooks were on and what the script lacked for them (no "record with the hooks"), and the pinned
# bytes (at the peak, in all) are what PyTorch's host allocator counted; an attention loop's
# inferred steps have no update (no optimizer.step() ran: no optimizer state); bytes no source
# categorised read "undecided", not "by nothing" (torch_extras.sh, .py)
SCRIPT_TESTS += tests/torch/torch_extras.sh
# PyTorch's pinned host cache (a DataLoader's pin_memory=True) is not a leak, and is said apart
# with torch._C._host_emptyCache(); a pinned tensor kept to the end is, on each allocator
# (torch_host_cache.sh, host_cache.py)
SCRIPT_TESTS += tests/torch/torch_host_cache.sh
# PyTorch's cuBLAS and cuBLASLt workspaces (one per handle and stream, kept to exit) are not
# leaks: freed at exit by gpumem's hooks, said apart by leaks and report, on each allocator
# (torch_workspaces.sh, workspaces.py)
SCRIPT_TESTS += tests/torch/torch_workspaces.sh
# the frees of gpumem's exit hooks (pinned host cache, cuBLAS workspaces) are in no step, also
# when the program stopped inside one (an OOM): recorded with no range, and read so in every
# reader (torch_exit_frees.sh, exit_frees.py)
SCRIPT_TESTS += tests/torch/torch_exit_frees.sh
# the steps inferred from a PyTorch recording's periodicity: a loop followed by an evaluation
# (--no-torch-hooks), a loop with no backward (torch_steps_inferred.sh)
SCRIPT_TESTS += tests/torch/torch_steps_inferred.sh
# gpumem's commands on PyTorch recordings (its history and hooks; gpumem as its allocator with the
# op log) under valgrind's memcheck, where the sanitizer stages skip tests/torch (torch_memcheck.sh)
SCRIPT_TESTS += tests/torch/torch_memcheck.sh
# torch.compile: Triton's cubins loaded as modules on the virtual GPU, the compiled kernels'
# launches and uses recorded, the leaks an eager run's, and no database left by the compile
# workers or by any child that used no GPU (torch_compile.sh, torch_compile.py, module_probe.py)
SCRIPT_TESTS += tests/torch/torch_compile.sh
