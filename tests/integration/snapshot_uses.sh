#!/usr/bin/env bash
# Access tracking end to end without CUDA (snapshot_app uses drives rec_launch): the file is
# schema 1.2 with `launches` and `uses` rows, the README's query "every kernel that touched
# h3.mlp.fc" answers exactly the kernels that did (a copy from pinned memory included, not the
# kernel given a stale pointer), and the existing reports still read a file with launches.
source tests/integration/snapshot_common.bash
need "$GPUMEM" "$APP"
DB=$TMP/u.db
out=$(GPUMEM_DB=$DB GPUMEM_STACKS=0 "$APP" uses) || fail "snapshot_app uses failed"
[[ $out == "LAUNCHES 5 USES 6" ]] || fail "unexpected output: $out"
# gpumem sql -c prints a header line, then the rows
q() { "$GPUMEM" sql "$DB" -c "$1" | tail -n +2 | tr -d ' \r' ; }
[[ $(q "SELECT value FROM meta WHERE key='schema_minor'") -ge 3 ]] || fail "not a schema 1.3 file (or later)"
[[ $(q "SELECT count(*) FROM launches") == 5 ]] || fail "launches: $(q 'SELECT * FROM launches')"
[[ $(q "SELECT count(*) FROM uses") == 6 ]] || fail "uses: $(q 'SELECT * FROM uses')"
[[ $(q "SELECT count(*) FROM events WHERE kind=20") == 5 ]] || fail "launch events"
# the query documented in snapshot/README.md, verbatim
got=$("$GPUMEM" sql "$DB" -c "SELECT DISTINCT s.s FROM uses u JOIN alloc_life l ON l.birth=u.birth JOIN strings n ON n.id=l.name JOIN strings s ON s.id=u.kernel WHERE n.s='h3.mlp.fc';" | tail -n +2 | sort | tr '\n' ',')
[[ $got == "gelu,gemm,memcpy HtoD," ]] || fail "kernels that touched h3.mlp.fc: $got"
# a copy knows its direction: it wrote h3.mlp.fc and read the pinned staging buffer
[[ $(q "SELECT group_concat(n.s || ':' || u.access) FROM uses u JOIN alloc_life l ON l.birth=u.birth JOIN strings n ON n.id=l.name JOIN launches la ON la.seq=u.seq WHERE la.op=1 ORDER BY n.s") =~ ^(h3.mlp.fc:2,staging:1|staging:1,h3.mlp.fc:2)$ ]] \
  || fail "copy access: $(q 'SELECT * FROM uses')"
echo "ok: launches and uses recorded, README query answers gelu, gemm, memcpy HtoD"
"$GPUMEM" report "$DB" > "$TMP/report" 2>&1 || fail "gpumem report failed on a file with launches: $(cat "$TMP/report")"
"$GPUMEM" leaks "$DB" > "$TMP/leaks" 2>&1; rc=$?
[[ $rc -eq 0 ]] || fail "gpumem leaks failed on a file with launches (rc $rc): $(cat "$TMP/leaks")"
echo "ok: report and leaks read a file with launches"
