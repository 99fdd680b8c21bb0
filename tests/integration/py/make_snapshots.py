"""Writes PyTorch memory snapshots the way torch.cuda.memory._dump_snapshot pickles them (plain
dicts and lists; PyTorch 2.x fields, and a 1.13-style one with block "history"), at pickle
protocols 2 to 5, for tests/integration/import_roundtrip.sh. Prints the expected figures.
usage: make_snapshots.py DIR"""
import os
import pickle
import sys

out = sys.argv[1]
MiB = 1 << 20
S = 0x7F00_0000_0000  # segment address
stream = 0x5555_0000_1234  # a CUstream handle


def fr(name, line, filename="train.py"):
    return {"filename": filename, "line": line, "name": name}


stack_a = [fr("empty", 0, "??"), fr("forward", 12), fr("train_step", 40), fr("<module>", 99)]
stack_b = [fr("c10::cuda::CUDACachingAllocator::malloc", 0, "CUDACachingAllocator.cpp"), fr("backward", 20)]


def e(action, addr, size, t, frames=(), **kw):
    d = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t, "frames": list(frames)}
    d.update(kw)
    return d


# trace: A 1 MiB, B 2 MiB (peak 3 MiB), A freed, D 1 MiB while A's free waits on another stream
# (A completes later: allocated until then, so the peak is A + B + D = 4 MiB), C 512 KiB, an OOM.
trace = [
    e("segment_alloc", S, 8 * MiB, 100),
    e("alloc", S, MiB, 110, stack_a),
    e("alloc", S + MiB, 2 * MiB, 120, stack_b),
    e("free_requested", S, MiB, 130, stack_a),
    e("alloc", S + 3 * MiB, MiB, 140, stack_a),
    e("free_completed", S, MiB, 150, stack_a),
    e("free_requested", S + 3 * MiB, MiB, 160, stack_a),
    e("free_completed", S + 3 * MiB, MiB, 160, stack_a),
    e("alloc", S, MiB // 2, 170, stack_b),
    e("oom", 0, 64 * MiB, 180, stack_a, device_free=3 * MiB),
]
blocks = [
    {"address": S, "size": MiB // 2, "requested_size": MiB // 2, "state": "active_allocated", "frames": stack_b},
    {"address": S + MiB // 2, "size": MiB // 2, "requested_size": 0, "state": "inactive", "frames": []},
    {"address": S + MiB, "size": 2 * MiB, "requested_size": 2 * MiB, "state": "active_allocated", "frames": stack_b},
    {"address": S + 3 * MiB, "size": 5 * MiB, "requested_size": 0, "state": "inactive", "frames": []},
]
seg = {"device": 0, "address": S, "total_size": 8 * MiB, "stream": stream, "segment_type": "large",
       "segment_pool_id": (0, 0), "is_expandable": False, "allocated_size": 2 * MiB + MiB // 2,
       "active_size": 2 * MiB + MiB // 2, "requested_size": 2 * MiB + MiB // 2, "blocks": blocks}
full = {"segments": [seg], "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                               "garbage_collection_threshold": 0.0, "expandable_segments": False,
                               "roundup_power2_divisions": {1: 0}}}
for proto in (2, 3, 4, 5):
    with open(os.path.join(out, "full-p%d.pickle" % proto), "wb") as f:
        pickle.dump(full, f, protocol=proto)
# without traces (record_memory_history off): the end state only
with open(os.path.join(out, "notrace.pickle"), "wb") as f:
    pickle.dump({"segments": [seg], "device_traces": []}, f, protocol=4)
# 1.13 style: a list of blocks with "history", no device_traces key
old = dict(seg)
old["blocks"] = [dict(b) for b in blocks]
for b in old["blocks"]:
    fr_ = b.pop("frames")
    if b["state"] == "active_allocated":
        b["history"] = [{"addr": b["address"], "real_size": b["size"], "frames": fr_}]
with open(os.path.join(out, "old.pickle"), "wb") as f:
    pickle.dump({"segments": [old]}, f, protocol=2)
# expected: peak allocated, peak reserved, alive at exit (bytes, count), OOMs
print("full", 4 * MiB, 8 * MiB, 2 * MiB + MiB // 2, 2, 1)
print("notrace", 2 * MiB + MiB // 2, 8 * MiB, 2 * MiB + MiB // 2, 2, 0)
