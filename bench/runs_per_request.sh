#!/usr/bin/env bash
# How often each server runs a request, and its CPU a request from the scheduler's own clock:
# the pass-through ferry of gateway_bench.sh and nginx (gateway_bench.sh's configuration), both
# on FERRY_CPU at BENCH_NICE -10, ferry_test_upstream and ferry_loadgen on LOADGEN_CPU. The two
# are measured alternately, ROUNDS times each, at the loadgen scenario SCENARIO (default
# "chat 200/s"). A request's figures are the process's change over the run (all its threads,
# /proc/PID/task/*/schedstat and status) divided by the requests the loadgen completed:
#   runs        times a thread of the server was put on the CPU (schedstat's third field)
#   voluntary   of them, wake-ups after a sleep (epoll_wait, a socket read)
#   cpu us      time on the CPU (schedstat's first field), user and system together
#   bench/runs_per_request.sh [SECONDS] [ROUNDS]   (FERRY_BUILD_DIR, SCENARIO, FERRY_ENV: words
#   put before ferry's command by env(1), e.g. a variable a patched build reads)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FERRY_BUILD_DIR:-build}
seconds=${1:-10}
rounds=${2:-2}
scenario=${SCENARIO:-chat 200/s}
# shellcheck source=bench/gateway_common.sh
source bench/gateway_common.sh
bench_binaries
command -v nginx >/dev/null || { echo "runs_per_request: nginx is not installed" >&2; exit 1; }
make_work_dir ferry-runs
ferry_cpu=${FERRY_CPU:-0}
loadgen_cpu=${LOADGEN_CPU:-1}
taskset -c "$loadgen_cpu" "$upstream_bin" --listen 127.0.0.1:0 >"$work/upstream.out" 2>&1 &
pids+=($!)
upstream_url=$(wait_listening "$work/upstream.out" ferry_test_upstream)
write_pass_config "$work/ferry.yaml" "$upstream_url"
read -r -a ferry_env <<<"${FERRY_ENV:-}"
nice -n -10 taskset -c "$ferry_cpu" env "${ferry_env[@]}" "$ferry_bin" serve \
  --config "$work/ferry.yaml" >"$work/ferry.out" 2>&1 &
ferry_pid=$!
pids+=("$ferry_pid")
ferry_url=$(wait_listening "$work/ferry.out" ferry)
mkdir -p "$work/nginx"
nginx_port=$(free_port)
write_nginx_config "$work/nginx" "$upstream_url" "$nginx_port"
nice -n -10 taskset -c "$ferry_cpu" nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" \
  >"$work/nginx.out" 2>&1 &
nginx_pid=$!
pids+=("$nginx_pid")
wait_port "$nginx_port"

# The process's counters now, summed over its threads: "runs voluntary cpu_ns".
counters() {
  local runs=0 voluntary=0 ns=0 t on_cpu waited slices
  for t in /proc/"$1"/task/*; do
    read -r on_cpu waited slices <"$t/schedstat"
    : "$waited"
    runs=$((runs + slices))
    ns=$((ns + on_cpu))
    voluntary=$((voluntary + $(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status")))
  done
  echo "$runs $voluntary $ns"
}

printf '%-8s %-6s %10s %10s %10s %10s\n' server round requests runs/req voluntary cpu_us/req
for round in $(seq 1 "$rounds"); do
  for server in ferry nginx; do
    if [ "$server" = ferry ]; then
      pid=$ferry_pid url=$ferry_url
    else
      pid=$nginx_pid url=http://127.0.0.1:$nginx_port
    fi
    load=("$loadgen_bin" --direct "$upstream_url" --ferry "$url" --only "$scenario")
    taskset -c "$loadgen_cpu" "${load[@]}" --duration 1 --warmup 0.2 >/dev/null
    read -r -a before <<<"$(counters "$pid")"
    taskset -c "$loadgen_cpu" "${load[@]}" --duration "$seconds" --warmup 0 >"$work/load.out"
    read -r -a after <<<"$(counters "$pid")"
    # The loadgen's req/s for the target it calls "ferry" (the word after it is the rate).
    rate=$(awk '{for (i = 1; i < NF; i++) if ($i == "ferry" && $(i + 1) ~ /^[0-9.]+$/) print $(i + 1)}' \
      "$work/load.out")
    awk -v s="$server" -v r="$round" -v rate="$rate" -v secs="$seconds" \
      -v r0="${before[0]}" -v r1="${after[0]}" -v v0="${before[1]}" -v v1="${after[1]}" \
      -v c0="${before[2]}" -v c1="${after[2]}" 'BEGIN {
        n = rate * secs
        printf "%-8s %-6s %10d %10.2f %10.2f %10.1f\n", s, r, n, (r1 - r0) / n, (v1 - v0) / n,
          (c1 - c0) / n / 1000
      }'
  done
done
