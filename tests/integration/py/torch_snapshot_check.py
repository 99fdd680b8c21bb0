"""Checks a `gpumem export --format torch` pickle field by field against its database
(tests/integration/export_formats.sh). Loads it with the standard pickle module only.
usage: torch_snapshot_check.py PICKLE DB PYFILE [REASON]
  PYFILE: the file name of a frame marked as Python in DB (frames.python = 1), which must appear
  in some trace entry's frames with its line and name.
  REASON: the recorder's own snapshot the pickle was exported at (`--at` its seq; 1 the last peak,
  3 exit, the default): the segments and blocks rebuilt from the events must be the ones the
  allocator's own walk wrote."""
import pickle
import sqlite3
import sys

pk, dbp, pyfile = sys.argv[1:4]
reason = int(sys.argv[4]) if len(sys.argv) > 4 else 3
with open(pk, "rb") as f:
    raw = f.read()
assert raw[0] == 0x80 and raw[1] <= 4, "protocol %d (must be <= 4)" % raw[1]
snap = pickle.loads(raw)
db = sqlite3.connect(dbp)
q = lambda sql: db.execute(sql).fetchall()

assert isinstance(snap, dict), type(snap)
for k in ("segments", "device_traces", "allocator_settings"):
    assert k in snap, "missing key %s" % k
traces = snap["device_traces"]
assert isinstance(traces, list) and all(isinstance(t, list) for t in traces)
entries = [e for t in traces for e in t]
FIELDS = {"action": str, "addr": int, "size": int, "stream": int, "time_us": int, "frames": list}
for e in entries:
    for k, ty in FIELDS.items():
        assert isinstance(e.get(k), ty), "trace entry field %s: %r" % (k, e)
    for fr in e["frames"]:
        assert isinstance(fr["filename"], str) and isinstance(fr["line"], int) and isinstance(fr["name"], str), fr
actions = {}
for e in entries:
    actions[e["action"]] = actions.get(e["action"], 0) + 1
n_dev_allocs = q("SELECT count(*) FROM events WHERE kind IN (1, 3)")[0][0]
assert actions.get("alloc", 0) == n_dev_allocs, "alloc actions %d != device allocations %d" % (actions.get("alloc", 0), n_dev_allocs)
n_frees = q("SELECT count(*) FROM alloc_life l JOIN events e ON e.seq = l.birth WHERE e.kind IN (1, 3) AND l.death IS NOT NULL")[0][0]
assert actions.get("free_requested", 0) == n_frees == actions.get("free_completed", 0), (actions, n_frees)
n_map = q("SELECT count(*) FROM events WHERE kind IN (14, 18)")[0][0]
assert actions.get("segment_map", 0) + actions.get("segment_alloc", 0) == n_map, (actions, n_map)
# times never go back within a device
for t in traces:
    ts = [e["time_us"] for e in t]
    assert ts == sorted(ts), "time_us goes back"
# every free names an address allocated before it
live = set()
for e in traces[0]:
    if e["action"] == "alloc":
        live.add(e["addr"])
    elif e["action"] == "free_completed":
        assert e["addr"] in live, "free of an address not allocated"
        live.discard(e["addr"])
# segments: those of the recorder's snapshot, same addresses and sizes
which = "(SELECT id FROM snapshots WHERE reason = %d ORDER BY seq DESC, id DESC LIMIT 1)" % reason
want = q("SELECT s.addr, s.mapped FROM segments s JOIN snapshots n ON n.id = s.snapshot "
         "WHERE n.id = %s ORDER BY s.addr" % which)
got = [(s["address"], s["total_size"]) for s in snap["segments"]]
assert got == want, "segments %r != the recorder's snapshot (reason %d) %r" % (got, reason, want)
SEG = {"address": int, "total_size": int, "stream": int, "segment_type": str, "allocated_size": int,
       "active_size": int, "blocks": list, "device": int}
for s in snap["segments"]:
    for k, ty in SEG.items():
        assert isinstance(s.get(k), ty), "segment field %s: %r" % (k, s.get(k))
    assert s["segment_type"] in ("small", "large")
    total = 0
    for b in s["blocks"]:
        assert b["state"] in ("active_allocated", "active_pending_free", "inactive"), b["state"]
        assert isinstance(b["size"], int) and isinstance(b["requested_size"], int) and isinstance(b["frames"], list)
        total += b["size"]
    assert s["allocated_size"] == sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")
    assert total == s["total_size"], "blocks cover %d of a segment of %d" % (total, s["total_size"])
want_blocks = q("SELECT count(*) FROM blocks b JOIN snapshots n ON n.id = b.snapshot WHERE b.state != 3 AND "
                "n.id = %s" % which)[0][0]
assert sum(len(s["blocks"]) for s in snap["segments"]) == want_blocks, (sum(len(s["blocks"]) for s in snap["segments"]), want_blocks)
want_live = q("SELECT b.addr, b.size FROM blocks b JOIN snapshots n ON n.id = b.snapshot WHERE b.state = 1 AND "
              "n.id = %s ORDER BY b.addr" % which)
got_live = sorted((b["address"], b["size"]) for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
assert got_live == want_live, "live blocks differ from the recorder's snapshot"
# Python frames are carried
py = q("SELECT file, line, function FROM frames WHERE python = 1 AND file = '%s'" % pyfile)
assert py, "no Python frame in the database"
hits = [fr for e in entries for fr in e["frames"] if fr["filename"] == pyfile]
assert hits, "the Python frame %s is in no trace entry" % pyfile
assert (hits[0]["filename"], hits[0]["line"], hits[0]["name"]) == py[0], (hits[0], py[0])
# frames: the program's own, gpumem's internals left out
inner = [e["frames"][0]["name"] for e in entries if e["action"] == "alloc" and e["frames"]]
assert inner and not any(n.startswith("gm_") for n in inner), "gpumem's own frames are in the stacks"
print("ok: torch pickle: %d alloc, %d free_requested, %d segment events, %d segments, %d blocks, Python frame %s:%d"
      % (actions.get("alloc", 0), actions.get("free_requested", 0), n_map, len(snap["segments"]), want_blocks,
         pyfile, py[0][1]))
