#!/usr/bin/env bash
# Recorder benchmarks: rec.app_ns_nostack, rec.app_ns_stack16, rec.writer_events_per_s,
# rec.bytes_per_event, rec.launch_app_ns (tests/bench/rec_bench.c).
set -euo pipefail
BUILD=${BUILD:-build}
dir=$(mktemp -d "$BUILD/tests/bench/rec-XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$BUILD/tests/bench/rec_bench" micro "$dir"
