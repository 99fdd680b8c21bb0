"""Writes hostile and damaged pickles for tests/integration/import_hostile.sh (and the seeds of
the pickle fuzzer's corpus). Each one would run code, or eat memory or time, if loaded by a
reader that trusted it. The marker file MARKER is what the os.system ones would create.
usage: make_hostile.py DIR MARKER"""
import collections
import os
import pickle
import struct
import sys

out, marker = sys.argv[1], sys.argv[2]


class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + marker,))


def w(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


for p in (0, 2, 4, 5):
    w("system-p%d.pickle" % p, pickle.dumps({"segments": [], "x": Evil()}, protocol=p))
w("ordereddict.pickle", pickle.dumps({"segments": collections.OrderedDict(a=1)}, protocol=4))
good = pickle.dumps({"segments": [{"address": 1, "total_size": 2, "blocks": []}], "device_traces": [[]]}, protocol=4)
w("truncated.pickle", good[: len(good) // 2])
# whole, but one string's length in the middle changed to 2 GiB: damaged there, not cut short
whole = pickle.dumps({"segments": [{"address": 1, "total_size": 2, "blocks": []}],
                      "device_traces": [[{"action": "alloc", "addr": 1, "size": 2}] * 20]}, protocol=2)
at = whole.index(b"X\x0a\x00\x00\x00total_size")
w("damaged.pickle", whole[: at + 1] + struct.pack("<I", 0x7F000000) + whole[at + 5:])
w("empty.pickle", b"")
w("text.pickle", b"this is not a pickle\n")
w("list.pickle", pickle.dumps([1, 2, 3], protocol=2))
w("nosegments.pickle", pickle.dumps({"device_traces": []}, protocol=2))
# a string that claims 4 GiB
w("hugestr.pickle", b"\x80\x04X" + struct.pack("<I", 0xFFFFFFF0) + b"abc.")
# the memo bomb: a list of 1000 references to one segment whose blocks are 1000 references
# to one block: a million blocks from a few kilobytes
blk = b"}q\x01(X\x05\x00\x00\x00stateX\x10\x00\x00\x00active_allocatedX\x04\x00\x00\x00sizeK\x10u"
blocks = b"]q\x02(" + blk + b"h\x01" * 999 + b"e"
seg = b"}q\x03(X\x06\x00\x00\x00blocks" + blocks + b"u"
bomb = b"\x80\x02}(X\x08\x00\x00\x00segments](" + seg + b"h\x03" * 999 + b"eu."
w("memo-bomb.pickle", bomb)
# the memo fan-out: 88 references to one segment whose blocks are 848 references to one
# active block, 2 KB that once imported as 74,712 events (the pickle fuzzer's slow input); a
# PyTorch snapshot holds each segment, block and trace entry once
blk = {"address": 4096, "size": 512, "requested_size": 500, "state": "active_allocated",
       "frames": []}
seg = {"device": 0, "address": 0, "total_size": 1 << 20, "stream": 0, "blocks": [blk] * 848}
w("memo-fanout.pickle", pickle.dumps({"segments": [seg] * 88, "device_traces": []}, protocol=2))
# the same trace entry twice in a device's trace
ent = {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 1, "frames": []}
w("memo-entry.pickle", pickle.dumps({"segments": [], "device_traces": [[ent, ent]]}, protocol=4))
# a stack bomb: a million MARKs and EMPTY_LISTs (deep nesting is never recursed into)
w("deep.pickle", b"\x80\x02" + b"(]" * 1000000 + b".")
# APPEND to something that is not a list, a memo entry never stored, a pop of an empty stack
w("append-int.pickle", b"\x80\x02K\x01K\x02a.")
w("badmemo.pickle", b"\x80\x02h\x07.")
w("pop-empty.pickle", b"\x80\x020.")
print(len(os.listdir(out)))
