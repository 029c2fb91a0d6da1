#!/usr/bin/env bash
# Instructions per request of ferry-full (the accounting path of gateway_bench.sh: key, exact
# count, 5-rule policy, hard budget, durable SQLite ledger row, access log) under callgrind,
# every thread counted: `chat c=16` from ferry_loadgen, counters zeroed after a warm-up, the
# instructions of the measured window divided by the rows recorded in it. Instructions do
# not depend on the machine's load.
#   bench/full_callgrind.sh [SECONDS]   (FERRY_BUILD_DIR: the build to measure, default build;
#   FULL_APPLY_MS: ledger.apply_ms, default 1000: the row log; 0: each group a SQLite commit;
#   FULL_ONLY: the loadgen scenario, default "chat c=16"; e.g. "chat 200/s" for the fixed rate;
#   FULL_PASS=1: the pass-through ferry of gateway_bench.sh instead - no key, policy or ledger,
#   access log off - its requests counted from ferry_requests_total; CALLGRIND_FOOTPRINT=1: the
#   profile keeps instruction addresses and bench/code_footprint.py prints the code the window
#   ran, in 64-byte lines)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FERRY_BUILD_DIR:-build}
seconds=${1:-20}
# shellcheck source=bench/gateway_common.sh
source bench/gateway_common.sh
bench_binaries
make_work_dir ferry-callgrind
start_upstream
api_key=sk-ferry-bench
if [ "${FULL_PASS:-0}" = 1 ]; then
  write_pass_config "$work/ferry.yaml" "$upstream_url"
else
  write_ferry_full_config "$work" "$upstream_url" 5 1 "$api_key" "${FULL_APPLY_MS:-1000}"
fi
dump_instr=(--dump-instr=no)
if [ "${CALLGRIND_FOOTPRINT:-0}" = 1 ]; then dump_instr=(--dump-instr=yes --dump-line=no); fi
valgrind --tool=callgrind "${dump_instr[@]}" --compress-strings=no --callgrind-out-file="$work/cg.out" \
  "$ferry_bin" serve --config "$work/ferry.yaml" >"$work/ferry.out" 2>"$work/valgrind.err" &
ferry_pid=$!
pids+=("$ferry_pid")
ferry_url=$(wait_listening "$work/ferry.out" ferry)
if [ "${FULL_PASS:-0}" = 1 ]; then
  rows() { curl -s "$ferry_url/metrics" | awk '/^ferry_requests_total/ {s += $2} END {print s}'; }
else
  rows() { curl -s "$ferry_url/metrics" | awk '/^ferry_ledger_rows_committed_total/ {print $2}'; }
fi
load() {
  "$loadgen_bin" --direct "$upstream_url" --ferry "$ferry_url" --ferry-pid "$ferry_pid" \
    --api-key "$api_key" --only "${FULL_ONLY:-chat c=16}" --duration "$1" >"$work/loadgen.$1.out" 2>&1 || true
}
load 3  # warm-up: connections, caches, the first rows
# The rows are read from /metrics outside the window, so that the scrapes are not counted.
before=$(rows)
callgrind_control -z "$ferry_pid" >/dev/null
load "$seconds"
callgrind_control -d "$ferry_pid" >/dev/null
sleep 1
after=$(rows)
dump=$(ls -t "$work"/cg.out.* | head -1)
total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "rows recorded in the window: $((after - before)); instructions: $total"
echo "instructions per request: $((total / (after - before)))"
# CALLGRIND_OUT=FILE keeps the dump (callgrind_annotate --inclusive=yes FILE).
if [ -n "${CALLGRIND_OUT:-}" ]; then cp "$dump" "$CALLGRIND_OUT"; fi
if [ "${CALLGRIND_FOOTPRINT:-0}" = 1 ]; then bench/code_footprint.py "$dump" 15; fi
