#!/usr/bin/env bash
# Instructions per request of ferry-full (the accounting path of gateway_bench.sh: key, exact
# count, 5-rule policy, hard budget, durable SQLite ledger row, access log) under callgrind,
# every thread counted: `chat c=16` from ferry_loadgen, counters zeroed after a warm-up, the
# instructions of the measured window divided by the rows recorded in it. Instructions do
# not depend on the machine's load.
#   bench/full_callgrind.sh [SECONDS]   (FERRY_BUILD_DIR: the build to measure; default build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FERRY_BUILD_DIR:-build}
seconds=${1:-20}
ferry_bin=$BUILD_DIR/gateway/ferry
upstream_bin=$BUILD_DIR/tests/integration/ferry_test_upstream
loadgen_bin=$BUILD_DIR/bench/ferry_loadgen
work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-callgrind.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
wait_listening() {
  for _ in $(seq 1 600); do
    if grep -q '^listening on ' "$1" 2>/dev/null; then
      grep -m1 '^listening on ' "$1" | sed 's/^listening on //'
      return 0
    fi
    sleep 0.1
  done
  cat "$1" >&2
  return 1
}
"$upstream_bin" --listen 127.0.0.1:0 >"$work/upstream.out" 2>&1 &
pids+=($!)
upstream_url=$(wait_listening "$work/upstream.out")
api_key=sk-ferry-bench
cat >"$work/policy.yaml" <<EOF
targets: { echo: echo, slow: stream-slow-5 }
models: [echo, stream-slow-5]
rules:
  - id: too-long
    when: { prompt_tokens: { gt: 120000 } }
    reject: { status: 400, message: too long }
  - id: finance-never
    when: { team: finance }
    reject: { status: 403, message: no }
  - id: night-tools
    when: { tools: present, hour: { lt: 6 } }
    route: [slow]
  - id: premium
    when: { tags: premium, max_tokens: { gt: 4096 } }
    route: [slow, echo]
  - id: by-model
    when: { model: echo, fits: echo }
    route: [echo]
default:
  route: [slow]
EOF
cat >"$work/ferry.yaml" <<EOF
server:
  listen: 127.0.0.1:0
  io_threads: 1
auth:
  keys:
    - { id: bench, sha256: $(printf %s "$api_key" | sha256sum | cut -d' ' -f1), team: bench, project: loadgen, role: app }
backends:
  - { name: upstream, base_url: $upstream_url/v1, max_idle_connections: 64 }
models:
  - { name: echo, backend: upstream, upstream_model: echo, tokenizer: cl100k_base }
  - { name: stream-slow-5, backend: upstream, upstream_model: stream-slow-5, tokenizer: cl100k_base }
log:
  access_log: $work/access.log
policy:
  file: $work/policy.yaml
  watch: false
ledger:
  path: $work/ledger.db
prices:
  - { model: echo, effective_from: 2026-01-01, input: 0.20, output: 0.60 }
  - { model: stream-slow-5, effective_from: 2026-01-01, input: 0.20, output: 0.60 }
budgets:
  - { name: bench-monthly, scope: team, match: bench, amount: 1000000000.00, period: month, mode: hard }
EOF
valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$work/cg.out" \
  "$ferry_bin" serve --config "$work/ferry.yaml" >"$work/ferry.out" 2>"$work/valgrind.err" &
ferry_pid=$!
pids+=("$ferry_pid")
ferry_url=$(wait_listening "$work/ferry.out")
rows() { curl -s "$ferry_url/metrics" | awk '/^ferry_ledger_rows_committed_total/ {print $2}'; }
load() {
  "$loadgen_bin" --direct "$upstream_url" --ferry "$ferry_url" --ferry-pid "$ferry_pid" \
    --api-key "$api_key" --only "chat c=16" --duration "$1" >"$work/loadgen.$1.out" 2>&1 || true
}
load 3  # warm-up: connections, caches, the first rows
callgrind_control -z "$ferry_pid" >/dev/null
before=$(rows)
load "$seconds"
after=$(rows)
callgrind_control -d "$ferry_pid" >/dev/null
sleep 1
dump=$(ls -t "$work"/cg.out.* | head -1)
total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "rows recorded in the window: $((after - before)); instructions: $total"
echo "instructions per request: $((total / (after - before)))"
# CALLGRIND_OUT=FILE keeps the dump (callgrind_annotate --inclusive=yes FILE).
if [ -n "${CALLGRIND_OUT:-}" ]; then cp "$dump" "$CALLGRIND_OUT"; fi
