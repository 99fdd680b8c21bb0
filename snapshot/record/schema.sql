-- gpumem database schema, version 1.4 (meta.schema_major = 1, meta.schema_minor = 4).
-- 1.1 added ooms.name and the inlines table; 1.2 the launches table and uses.access (access
-- tracking); 1.3 frames.python (Python frames in stacks), event kinds 21..28 (record_stream,
-- the program's own VMM, pools and arrays, the driver's cuMemGetInfo samples) and event flags
-- 1024 (pitched), 2048 (from a program's pool) and 4096 (made through the framework's hook,
-- gpumem_torch_malloc); readers accept older files without them. 1.4 writes NULL in
-- ooms.limit_bytes where no limit was set (0 became a legal limit of 0 bytes); readers take a 0
-- in an older file as none.
-- Written by the recorder (librec.a inside libgpumem.so), read by the gpumem command.
-- This file is embedded into both at build time; snapshot/README.md documents it for users.
-- Compatibility: readers refuse a newer schema_major and read every older/equal one; minor
-- versions only add tables, columns or views.
--
-- Conventions: times are nanoseconds since the recording started (meta.start_ns holds the
-- CLOCK_MONOTONIC origin, meta.start_unix_ns the wall clock); sizes are bytes; text lives in
-- `strings` and tables refer to it by id; NULL means "unknown / not applicable".

-- Key/value facts about the run: schema_major, schema_minor, gpumem_version, pid, ppid,
-- cmdline, exe, start_unix_ns, start_ns, hostname, stacks (frames per stack), state
-- ('recording', then 'closed' after a clean close, 'interrupted' when SIGINT/SIGTERM ended the
-- program and the recorder closed it, 'exec' when the program replaced itself by exec of meta
-- `exec` (committed up to the exec; the next image records beside it), 'failed' with `failure`
-- when writing failed), events, dropped_events, writer_cpu_ns,
-- app_ns_per_event, uses (access tracking: 0, 1 or timed; 1.2), launches, uses_rows,
-- launch_words_lost (launches whose argument words were partly dropped: no uses rows for them),
-- launches_unread (kernel launches whose arguments could not be read, the driver giving no
-- parameter layout for the kernel: no uses rows for them either; 1.3),
-- launches_untimed (timed launches that got no time; 1.2), and the allocator's stats at exit
-- as stat.<name> (rec_alloc_stats).
-- Under a launcher (mpirun, torchrun, srun): rank, world_size, local_rank and rank_from (the
-- variable the rank came from; rec_launch_rank in rec.h); absent otherwise.
-- config is gpumem's configuration as GPUMEM_CONF (for an imported PyTorch snapshot: the one
-- that replays PyTorch's allocator); where PyTorch's allocator ran (its history merged, or
-- `gpumem import`) torch_conf is its own PYTORCH_CUDA_ALLOC_CONF ('' unset) and
-- torch_allocator_settings its snapshot's allocator_settings dict as PyTorch wrote it (a BLOB:
-- a protocol-2 pickle), which `export --format torch` writes back field for field.
CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;

CREATE TABLE strings (id INTEGER PRIMARY KEY, s TEXT NOT NULL);

-- id is the recorder's small thread number (events.thread); tid the kernel thread id.
CREATE TABLE threads (id INTEGER PRIMARY KEY, tid INTEGER, name TEXT);

-- id is the small stream number used by events.stream; handle the CUstream value (0 = legacy).
-- One row per stream: an event of device memory is on its memory's device (a free, unmap or
-- destroy on its allocation's, whichever thread or context makes it; a refused free (kinds 9,
-- 10) on the allocation's it names, a foreign one's on the driver's answer for the pointer,
-- else its stream's); device -1 is pinned host
-- and managed memory's (kinds 5-8), which have no device, and their row (-1, 0) no stream.
CREATE TABLE streams (id INTEGER PRIMARY KEY, device INTEGER, handle INTEGER);

-- Loaded objects that appear in stacks. build_id is hex (NULL when the object has none).
CREATE TABLE modules (id INTEGER PRIMARY KEY, path TEXT NOT NULL, build_id TEXT,
                      base INTEGER, size INTEGER);

-- One row per distinct return address: module-relative offset (an address in the ELF file's
-- own layout), symbolized after the run by gpumem with elfutils libdw (function, file, line
-- stay NULL until then; symbolized = 1 once tried).
-- python (1.3): 1 for a Python frame (the recorder captured it from CPython: function = the
-- code object's name, file = its file name, line = the line being executed; module and offset
-- NULL, symbolized = 1); NULL for a native frame. One row per distinct (function, file, line).
CREATE TABLE frames (id INTEGER PRIMARY KEY, module INTEGER, offset INTEGER,
                     function TEXT, file TEXT, line INTEGER, symbolized INTEGER DEFAULT 0,
                     python INTEGER);

-- Inlined calls at a frame (1.1), written by gpumem when it symbolizes: frames.function/file/
-- line name the innermost source position of the return address (inside the innermost
-- inlined function); each row here is one enclosing function the code was inlined into,
-- depth 1 the nearest, with the file:line of the inlined call. The outermost row is the real
-- (out-of-line) function. A frame without rows was not inlined.
CREATE TABLE inlines (frame INTEGER, depth INTEGER, function TEXT, file TEXT, line INTEGER,
                      PRIMARY KEY (frame, depth)) WITHOUT ROWID;

-- Each distinct call stack once; depth 0 is the innermost frame (the caller of the CUDA call).
-- In a Python program (1.3) the native frames come first, up to the interpreter's own, then
-- the Python frames (frames.python = 1), innermost first (snapshot/README.md: "Python frames").
CREATE TABLE stacks (stack INTEGER, depth INTEGER, frame INTEGER,
                     PRIMARY KEY (stack, depth)) WITHOUT ROWID;

-- NVTX ranges. kind 0: push/pop (nested per thread, parent = enclosing range), 1: start/end
-- (not nested), 2: mark (end_ns = start_ns). path is the '/'-joined names from the outermost
-- range ("step 12/fwd/h3/attn"). end_ns NULL: still open when recording stopped.
CREATE TABLE ranges (id INTEGER PRIMARY KEY, parent INTEGER, thread INTEGER, kind INTEGER,
                     domain INTEGER, name INTEGER, start_ns INTEGER, end_ns INTEGER,
                     path TEXT);
CREATE INDEX ranges_parent ON ranges (parent);

-- Every allocation event, in order. seq is global order (gaps are range/name records).
-- kind: see the `kinds` table. flags: a bit means what the row's kind makes it mean (read it with
-- the kind: `flags & 256` alone counts OOMs and interior frees too). On a device allocation
-- (kinds 1, 3): 256 = served from cache, 512 = needed the driver (one with neither was passed to
-- the real driver or runtime, not served by gpumem), 1024 = pitched or 3D (1.3), 2048 = from a
-- memory pool the program chose (1.3), 4096 = made through the framework's hook, 16384 = a
-- graph's memory node (the driver's, made during a stream capture), 32768 = in a graph capture's
-- private pool. On a device free (2, 4): 8192 = its block waited for stream events (a
-- free_completed, 29, follows); on 2, 256 = after the program's synchronization of the device
-- (free_sync:device): settled at once (below, kind 41). On a foreign free (9): 256 = interior
-- pointer. On an OOM (13): 256 / 512 / 768 = the limit it met (the ooms table). On a segment event (14, 15, 18, 19) and
-- PyTorch's rows (31-35): 32768 as above. On a bad access (30): 256 / 512 /
-- 1024 = the operation. On torch_empty_cache (36) and torch_memory_fraction (37): 4096 =
-- gpumem's allocator as PyTorch's; on 37, 1024 = the starting fraction. The same bit on another
-- kind means nothing (snapshot/record/rec.h: rec_is_cache_hit, rec_is_graph_node...).
-- Kinds 22..28 (1.3): vmm_create/vmm_release (addr = the physical handle, size = its bytes),
-- vmm_map (11) carries the handle in alloc_id; device_info (addr = free, size = used,
-- requested = total bytes as the real driver's cuMemGetInfo said; alloc_id 1 start, 2 a new
-- high of the memory gpumem knows of, 3 exit); pool_create/pool_destroy (addr = the pool);
-- array_alloc/array_free (addr = the CUarray, size = bytes of its elements).
-- range: the innermost open push/pop range of the thread (NULL: none). stack: stacks.stack.
CREATE TABLE events (seq INTEGER PRIMARY KEY, t INTEGER, kind INTEGER, flags INTEGER,
                     device INTEGER, stream INTEGER, thread INTEGER, addr INTEGER,
                     size INTEGER, requested INTEGER, alloc_id INTEGER, stack INTEGER,
                     range INTEGER);

CREATE TABLE kinds (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO kinds VALUES (1,'alloc'),(2,'free'),(3,'alloc_async'),(4,'free_async'),
  (5,'host_alloc'),(6,'host_free'),(7,'managed_alloc'),(8,'managed_free'),(9,'foreign_free'),
  (10,'double_free'),(11,'vmm_map'),(12,'vmm_unmap'),(13,'oom'),(14,'seg_map'),
  (15,'seg_unmap'),(16,'seg_reserve'),(17,'seg_release'),(18,'driver_alloc'),
  (19,'driver_free'),(20,'launch'),(21,'record_stream'),(22,'vmm_create'),(23,'vmm_release'),(24,'device_info'),
  (25,'pool_create'),(26,'pool_destroy'),(27,'array_alloc'),(28,'array_free');

-- Names given to allocations (gpumem_name, NVTX memory naming): the allocation live at addr
-- when the name was given. birth (added within 1.3) = that allocation's alloc_life.birth, NULL
-- when no allocation was live at addr: readers join a name to its allocation by birth, never by
-- the address alone (an address is handed out again under other names).
CREATE TABLE names (seq INTEGER PRIMARY KEY, addr INTEGER, name INTEGER, birth INTEGER);

-- OOM forensics, one row per failed allocation (seq = the REC_OOM event, whose range is the
-- OOM's NVTX phase). name (1.1): the name the program gave the allocation that failed
-- (gpumem_name_next), a strings id; NULL when unnamed. limit_bytes: the cap on reserved memory
-- the allocation met, NULL where none was set (1.4; 0 is a cap of 0 bytes: before 1.4 a 0 meant
-- none, and readers take it so in older files).
CREATE TABLE ooms (seq INTEGER PRIMARY KEY, device INTEGER, stream INTEGER,
                   requested INTEGER, allocated INTEGER, reserved INTEGER,
                   free_cached INTEGER, largest_free INTEGER, device_free INTEGER,
                   device_total INTEGER, limit_bytes INTEGER, name INTEGER);

-- Allocator state: reason 1 peak, 2 oom, 3 exit, 4 user; seq = last event before it.
CREATE TABLE snapshots (id INTEGER PRIMARY KEY, seq INTEGER, t INTEGER, reason INTEGER,
                        device INTEGER);
CREATE TABLE segments (snapshot INTEGER, idx INTEGER, device INTEGER, stream INTEGER,
                       addr INTEGER, size INTEGER, mapped INTEGER, flags INTEGER,
                       PRIMARY KEY (snapshot, idx)) WITHOUT ROWID;
-- state: 0 free (cached), 1 allocated, 2 pending (freed, waiting on a stream), 3 unmapped.
CREATE TABLE blocks (snapshot INTEGER, addr INTEGER, segment INTEGER, state INTEGER,
                     size INTEGER, requested INTEGER, alloc_id INTEGER,
                     PRIMARY KEY (snapshot, addr)) WITHOUT ROWID;

-- Derived by the writer as it goes (and completed at close): the lifetime of every
-- allocation. birth = seq of its alloc event, death = seq of its free (NULL: alive when
-- recording stopped). Rows are appended in order of death (cheap to write; no index: join it
-- to events by seq, or use the `allocations` view). A process killed before close has no rows
-- for what was still alive; gpumem derives those on read.
CREATE TABLE alloc_life (birth INTEGER NOT NULL, death INTEGER, name INTEGER);

-- Kernel launches, copies and memsets (1.2; filled when access tracking is on, GPUMEM_USES=1 or
-- timed): one row per event of kind 20 'launch' (events.t = when it was issued, events.addr =
-- the CUfunction, events.size = bytes copied or set). op: 0 kernel, 1 copy, 2 memset. kernel:
-- strings id of the name (a kernel's mangled name as the driver gives it; "memcpy HtoD",
-- "memcpy DtoH", "memcpy DtoD", "memcpy HtoH", "memset" for the others). start_ns/end_ns: when
-- it ran on the device, on the clock of events.t (GPUMEM_USES=timed; NULL otherwise).
CREATE TABLE launches (seq INTEGER PRIMARY KEY, op INTEGER, kernel INTEGER, bytes INTEGER,
                       start_ns INTEGER, end_ns INTEGER);

-- Accesses: one row per (allocation, launch) where an argument of the launch pointed into the
-- allocation while it was live (an interior pointer counts). birth = the allocation's id
-- (alloc_life.birth), seq = the launch event, kernel = launches.kernel (copied here so that
-- "every kernel that touched X" needs no join). access (1.2): 1 read, 2 write, 3 both, 0
-- unknown (kernel arguments; copies and memsets know their direction).
-- Keyed in launch order, (seq, birth), so that the recorder appends: keyed by birth, every
-- insert landed in the middle of the table and the writer slowed to tens of microseconds per
-- launch after a few hundred thousand. The index by allocation, uses_birth, is built once at
-- close (a file from a killed process has none; reports read uses in one sweep anyway).
CREATE TABLE uses (birth INTEGER, seq INTEGER, kernel INTEGER, access INTEGER,
                   PRIMARY KEY (seq, birth)) WITHOUT ROWID;

-- torch_ops and torch_op_args (within 1.3) are not made here: the merge of PyTorch's history
-- makes them when the recording logged the forward's ops (`gpumem record --torch-ops`);
-- snapshot/README.md documents them, and readers do without them.

-- One row per allocation with everything a user usually wants.
CREATE VIEW allocations AS
  SELECT l.birth AS id, b.addr AS address, b.size AS size, b.requested AS requested,
         b.kind AS kind, b.device AS device, b.stream AS stream, b.thread AS thread,
         l.birth AS birth_seq, b.t AS birth_ns, l.death AS death_seq, d.t AS death_ns,
         b.stack AS stack, b.range AS range, r.path AS phase, sn.s AS name
  FROM alloc_life l JOIN events b ON b.seq = l.birth
       LEFT JOIN events d ON d.seq = l.death
       LEFT JOIN ranges r ON r.id = b.range
       LEFT JOIN strings sn ON sn.id = l.name;

-- Stacks with their frames spelled out (python, 1.3: 1 for a Python frame); inlined_into (1.1) lists the functions the frame's
-- code was inlined into, nearest first: "gpt2_forward (gpt2.c:664) < gpt2_step (gpt2.c:712)".
CREATE VIEW stack_frames AS
  SELECT s.stack AS stack, s.depth AS depth, f.function AS function, f.file AS file,
         f.line AS line, m.path AS module, f.offset AS offset,
         (SELECT group_concat(i.function || ' (' || i.file || ':' || i.line || ')', ' < ')
          FROM (SELECT * FROM inlines WHERE frame = f.id ORDER BY depth) i) AS inlined_into,
         f.python AS python
  FROM stacks s JOIN frames f ON f.id = s.frame LEFT JOIN modules m ON m.id = f.module;

-- Event kind 29 'free_completed' (added within 1.3; older files have none): a free that waited
-- for stream events landed in gpumem's allocator, so its block became reusable at that point of
-- the event order (PyTorch snapshots' free_completed). addr, size = the block, alloc_id = the
-- allocation's (as on its alloc and free events), stream = the allocation's. A free whose block
-- was reusable at once (same stream, or after cudaFree's synchronization) has none.
INSERT INTO kinds VALUES (29,'free_completed');

-- Event kind 30 'bad_access' (added within 1.3; older files have none): a copy or memset that
-- gpumem refused with the driver's CUDA_ERROR_INVALID_VALUE because its bytes do not all lie in
-- one live allocation (past its end, or in freed memory). addr = the address accessed, size =
-- the bytes of the access, requested = the allocation's requested size and alloc_id its id (both
-- 0 when no allocation is live there), flags 256 = a memset, 512 = the destination of a copy,
-- 1024 = its source; stack = where the program made the call. Flag 16384 on a device
-- allocation (kinds 1, 3 only): a graph allocation (the driver's memory node, made during a
-- stream capture). Flag 32768 on an allocation or segment event: in a graph capture's private
-- pool (gpumem's pools of a capture, stream handle 4 x capture id + 1; or, kinds 31-35, a
-- PyTorch pool other than (0, 0)).
INSERT INTO kinds VALUES (30,'bad_access');

-- Event kinds 31-35 (added within 1.3): PyTorch's own allocator, tensor by tensor, never written
-- by the recorder: `gpumem record` merges PyTorch's memory history into the recording after a
-- Python program ends (snapshot/formats/gm_torch.c), renumbering seq to place each entry by time.
-- 31 torch_alloc: addr = the block, size = the block's bytes (what PyTorch's allocated_bytes
-- count), requested = the tensor's bytes, stack = its Python frames, range = the phase open at
-- its time; 32 torch_free (PyTorch's free_requested: its statistics drop here); 33
-- torch_free_completed (the block reusable again: the tensor's death in alloc_life); 34
-- torch_segment_map / 35 torch_segment_unmap (segment_alloc / segment_map and their inverses:
-- PyTorch's reserved). meta: torch_history (entries merged), torch_version, torch_conf,
-- torch_expandable, torch_blocks_guessed, torch_dumped_at (exit or oom), torch_clock_offset_ns
-- (ns added to PyTorch's times to put them on the recording's clock, mid-run) and
-- torch_clock_drift_ns (how much that correction varied over the run), torch_placement (exact:
-- every entry placed by the recorder's position when PyTorch made it, from gpumem's trace
-- tracker; clock: by those corrected times; exact N of M: both), torch_stacks (where the
-- allocations' Python frames came from: gpumem, read by its tracker; pytorch, its history's own
-- stacks, without the tracker; both; none) and torch_stacks_lost (allocations whose stack the
-- tracker could not keep: its store of distinct stacks was full or out of memory).
INSERT INTO kinds VALUES (31,'torch_alloc'),(32,'torch_free'),(33,'torch_free_completed'),
  (34,'torch_segment_map'),(35,'torch_segment_unmap');

-- Event kinds 36-37 (added within 1.3, 2026-12-06; older files have none and replay as before):
-- the program's own calls that change PyTorch's cache, from gpumem's hooks in the program
-- (preload/python/gpumem/_torch.py), merged with PyTorch's trace and placed as its entries are.
-- 36 torch_empty_cache: torch.cuda.empty_cache() was called (device = the current device), also
-- where it gave nothing back (expandable segments) and PyTorch's trace has no entry for it; 37
-- torch_memory_fraction: torch.cuda.set_per_process_memory_fraction, or the fraction in force
-- when CUDA started (one row a device when it is below 1): size = PyTorch's cap on reserved
-- bytes (the fraction x the device's total memory; 0: no cap), requested = the fraction in
-- millionths.
INSERT INTO kinds VALUES (36,'torch_empty_cache'),(37,'torch_memory_fraction');

-- Event kind 38 (added within 1.3, 2026-12-08; older files have none): torch_reset_peak, the
-- program called torch.cuda.reset_peak_memory_stats (or reset_max_memory_allocated / _cached)
-- for device: from there its max_memory_allocated() / max_memory_reserved() count only what
-- follows. Noted and merged as 36-37 are; report, tune, frag, advise and viz say where the
-- program reset them and give PyTorch's figures since the last reset beside the whole run's.
INSERT INTO kinds VALUES (38,'torch_reset_peak');

-- Event kinds 39-40 (added within 1.3, 2026-12-09; older files have none and replay as before):
-- gpumem's allocator's marker events (alloc/README.md, "Releasing without synchronizing"). Its
-- release before growth does not synchronize: it records a marker event on each stream whose
-- cached blocks may still be in use (39 marker_record) and unmaps only what markers it finds
-- complete have settled (40 marker_done: that stream's oldest marker). device, stream only, in
-- the allocator's order; `gpumem export --format trace` writes them as "mr" / "md" lines, and
-- a replay of the recorded configuration (tune, frag, advise, gpumem-replay --markers) takes
-- them for its event queries' answers, so it unmaps what the run did. Readers that do not know
-- them skip them.
INSERT INTO kinds VALUES (39,'marker_record'),(40,'marker_done');

-- Event kind 41 (added within 1.3; older files have none and replay as before): gpumem's
-- allocator synchronized the device (its OOM path, the release threshold, empty_cache, a stream
-- forgotten, a failed event record): every free made before it is settled. flags 256: the
-- allocation in progress then started over on the frees it landed. On 39, 40 and 41, size is the
-- settle point within the allocation recorded next (1, 2...: its releases' event queries and its
-- synchronizations; 0: made outside an allocation), so that a replay takes each where the
-- allocation reached it. `gpumem export --format trace` writes 41 as "sy [step]" / "sr", 39 and
-- 40 as "mr <stream> [step]" / "md <stream> [step]". A device free (2) flagged 256 came after the
-- program's synchronization of the device (free_sync:device, a plain cudaFree): the allocator
-- settled its block at once; the trace's "fs <id>".
INSERT INTO kinds VALUES (41,'alloc_sync');
-- Event kind 42 (added within 1.3; older files have none): the program destroyed a stream that
-- held memory and gpumem's allocator forgot it (device, stream): it synchronized (the 41 before
-- it) and released the free pages of the forgotten streams' pools there and then. `gpumem export
-- --format trace` writes it as "sf <stream>".
INSERT INTO kinds VALUES (42,'stream_forget');
-- Event kind 43 (added within 1.3; older files have none): gpumem's allocator is about to drop its
-- lock and wait for the device (addr: the wait's number; requested, stream: the allocation in
-- progress, 0 outside one; size: its step). Written under the lock: events after it and before
-- the 41 whose addr is the same number were made by other threads during the wait, and that
-- synchronization landed only what was fenced and freed before the 43. `gpumem export --format
-- trace` writes it as "sw <wait> [<requested> <stream>]", and the 41 then as
-- "sy <step> <wait>" / "sr <wait>". A 41 with addr 0 (older files) settles every free before it.
-- A free_completed (29) flagged 256 was landed by such a synchronization (settled there): the
-- trace's "fy <id>" where "fc <id>" is one whose stream events completed.
INSERT INTO kinds VALUES (43,'alloc_wait');
