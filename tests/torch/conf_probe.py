#!/usr/bin/env python3
"""conf_probe.py — what PyTorch's own allocator-configuration parser says, for
tests/torch/torch_conf_keys.sh (run on the virtual GPU: build/sim/torch-env).

  conf_probe.py keys LIB...     the configuration keys torch knows, found in torch itself: every
                                identifier in the libraries' read-only strings is handed to the
                                parser as "KEY:1"; a key is known unless the parser answers
                                "Unrecognized key". One per line.
  conf_probe.py forms FILE      each line of FILE a configuration string ("<empty>" is ""; '#'
                                lines are comments): "OK<TAB>d0,...,d15" (the 16
                                roundup_power2_divisions torch then holds, from its snapshot's
                                allocator_settings) or "ERR<TAB>message"
  conf_probe.py keys+forms LIB... FILE   both, the keys, a line "--", then the forms
  conf_probe.py settings        (a child started with PYTORCH_*ALLOC_CONF in its environment)
                                "OK<TAB>max_split_size<TAB>expandable<TAB>gc_threshold<TAB>conf" of
                                the configuration torch took at start-up, or "ERR<TAB>message"

torch._C._accelerator_setAllocatorSettings is the parser torch runs on PYTORCH_CUDA_ALLOC_CONF
at start-up (c10::CachingAllocator::setAllocatorSettings). Before each string the state a
previous one left is put back to the defaults that matter to accepting or refusing
(large_segment_size_mb bounds max_split_size_mb); each string starts from the divisions all 0.
"""
import re
import sys


def _torch():
    import torch
    return torch


def _divisions(torch):
    d = torch.cuda.memory._snapshot()["allocator_settings"]["roundup_power2_divisions"]
    # as unsigned 64-bit numbers (size_t in torch; a division of 2^63 comes back negative)
    return ",".join(str(d[k] % (1 << 64)) for k in sorted(d, key=int))


def keys(libs):
    torch = _torch()
    parse = torch._C._accelerator_setAllocatorSettings
    names = set()
    for lib in libs:
        with open(lib, "rb") as f:
            names.update(m.decode() for m in re.findall(rb"(?<![A-Za-z0-9_])[a-z][a-z0-9_]{2,63}(?=\0)", f.read()))
    for k in sorted(names):
        try:
            parse(k + ":1")
            print(k)
        except Exception as e:  # noqa: BLE001 - the parser's verdict
            if "Unrecognized key" not in str(e):
                print(k)
        parse("large_segment_size_mb:20")


def forms(path):
    torch = _torch()
    parse = torch._C._accelerator_setAllocatorSettings
    torch.zeros(1, device="cuda")  # the snapshot needs CUDA
    for line in open(path).read().split("\n"):
        if not line or line.startswith("#"):
            continue
        form = "" if line == "<empty>" else line
        parse("large_segment_size_mb:20,max_non_split_rounding_mb:20,roundup_power2_divisions:[1:0,>:0]")
        try:
            parse(form)
            print("OK\t%s" % _divisions(torch))
        except Exception as e:  # noqa: BLE001
            print("ERR\t%s" % str(e).splitlines()[0][:200])


def settings():
    try:
        torch = _torch()
        torch.zeros(1, device="cuda")
        s = torch.cuda.memory._snapshot()["allocator_settings"]
        print("OK\t%d\t%s\t%g\t%s" % (s["max_split_size"], s["expandable_segments"],
                                      s["garbage_collection_threshold"], s["PYTORCH_CUDA_ALLOC_CONF"]))
    except Exception as e:  # noqa: BLE001
        print("ERR\t%s" % str(e).splitlines()[-1][:200])


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "keys+forms":  # one interpreter for both
        keys(sys.argv[2:-1])
        print("--", flush=True)
        forms(sys.argv[-1])
    elif len(sys.argv) >= 3 and sys.argv[1] == "keys":
        keys(sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "forms":
        forms(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "settings":
        settings()
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
