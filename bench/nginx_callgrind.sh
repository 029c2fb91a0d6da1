#!/usr/bin/env bash
# nginx's user-space instructions per request, for scale beside bench/full_callgrind.sh's
# FULL_PASS=1 figure for ferry: nginx (gateway_bench.sh's configuration: one worker, no access
# log, upstream keep-alive, responses not buffered) under callgrind in front of
# ferry_test_upstream, driven by ferry_loadgen; counters zeroed before the measured run, the
# instructions of the run divided by the requests the loadgen completed (its req/s times the
# run's seconds; no warm-up inside the window). Instructions do not depend on the machine's load.
#   bench/nginx_callgrind.sh [SECONDS]   (default 10; FERRY_BUILD_DIR: the build whose upstream
#   and loadgen are used, default build; NGINX_ONLY: the loadgen scenario, default "chat c=16",
#   e.g. "chat stream c=16"; CALLGRIND_OUT: keep the profile there; CALLGRIND_FOOTPRINT=1: as
#   full_callgrind.sh's)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FERRY_BUILD_DIR:-build}
seconds=${1:-10}
scenario=${NGINX_ONLY:-chat c=16}
command -v nginx >/dev/null || { echo "nginx_callgrind: nginx is not installed" >&2; exit 1; }
# shellcheck source=bench/gateway_common.sh
source bench/gateway_common.sh
bench_binaries
make_work_dir nginx-callgrind
start_upstream
mkdir -p "$work/nginx"
port=$(free_port)
write_nginx_config "$work/nginx" "$upstream_url" "$port"
dump_instr=(--dump-instr=no)
if [ "${CALLGRIND_FOOTPRINT:-0}" = 1 ]; then dump_instr=(--dump-instr=yes --dump-line=no); fi
valgrind --tool=callgrind "${dump_instr[@]}" --callgrind-out-file="$work/cg.out" \
  nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" >"$work/nginx.out" 2>"$work/valgrind.err" &
nginx_pid=$!
pids+=("$nginx_pid")
for _ in $(seq 1 10); do wait_port "$port" && break; done
load() {
  "$loadgen_bin" --direct "$upstream_url" --ferry "http://127.0.0.1:$port" --ferry-pid "$nginx_pid" \
    --only "$scenario" --warmup 0 --duration "$1" >"$work/loadgen.$1.out" 2>&1 || true
}
load 2  # warm-up, not counted
callgrind_control -z "$nginx_pid"
load "$seconds"
callgrind_control -d "$nginx_pid"
sleep 1
profile=$(ls -t "$work"/cg.out* | head -1)
instructions=$(awk '/^(summary|totals):/ {print $2; exit}' "$profile")
# The measured run's row: "<scenario> ferry <req/s> ..." (the loadgen names its target ferry).
rate=$(awk -v s="$scenario" 'index($0, s) == 1 && $0 ~ / ferry +[0-9]/ {
  sub(s, ""); print $2; exit }' "$work/loadgen.$seconds.out")
[ -n "$rate" ] || { echo "nginx_callgrind: no rate in the loadgen's output:" >&2;
  cat "$work/loadgen.$seconds.out" >&2; exit 1; }
requests=$((rate * seconds))
[ -n "${CALLGRIND_OUT:-}" ] && cp "$profile" "$CALLGRIND_OUT"
echo "nginx, $scenario: $requests requests in the window ($rate/s); instructions: $instructions"
echo "instructions per request: $((instructions / requests))"
if [ "${CALLGRIND_FOOTPRINT:-0}" = 1 ]; then bench/code_footprint.py "$profile" 15; fi
