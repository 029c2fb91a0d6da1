#!/usr/bin/env bash
# ferry-full's CPU per request by thread, natively (user and system time, which callgrind does
# not show): ferry-full (the accounting path of gateway_bench.sh) on FERRY_CPU, ferry_test_upstream
# and `chat c=16` from ferry_loadgen on the other CPU, each thread's utime and stime from
# /proc/<pid>/task/<tid>/stat over the measured window, divided by the rows recorded in it. The
# ledger's threads are named (ledger-writer: the row log's pwrite and fdatasync; ledger-applier:
# the SQLite commits; ledger-ckpt: the checkpoints); the I/O loop is the first `ferry`.
#   bench/full_threads.sh [SECONDS]   (FERRY_BUILD_DIR: the build, default build; FERRY_CPU (0),
#   LOADGEN_CPU (1); BENCH_NICE: as gateway_bench.sh; FULL_APPLY_MS: ledger.apply_ms, default 1000;
#   FULL_ONLY: the loadgen scenario, default "chat c=16"; e.g. "chat 200/s" for the fixed rate;
#   FULL_CONCURRENCY: the loadgen's connections, default 16 (with FULL_ONLY "chat c=N"))
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FERRY_BUILD_DIR:-build}
seconds=${1:-8}
# The words that run a command on CPU $1 (and at BENCH_NICE), as gateway_bench.sh's pin().
pin() {
  local words=""
  if [ -n "${BENCH_NICE:-}" ]; then words="nice -n $BENCH_NICE "; fi
  echo "${words}taskset -c $1"
}
read -r -a on_ferry_cpu <<<"$(pin "${FERRY_CPU:-0}")"
read -r -a on_loadgen_cpu <<<"$(pin "${LOADGEN_CPU:-1}")"
# shellcheck source=bench/gateway_common.sh
source bench/gateway_common.sh
bench_binaries
make_work_dir ferry-threads
"${on_loadgen_cpu[@]}" "$upstream_bin" --listen 127.0.0.1:0 >"$work/upstream.out" 2>&1 &
pids+=($!)
upstream_url=$(wait_listening "$work/upstream.out" ferry_test_upstream)
api_key=sk-ferry-bench
write_ferry_full_config "$work" "$upstream_url" 5 1 "$api_key" "${FULL_APPLY_MS:-1000}"
"${on_ferry_cpu[@]}" "$ferry_bin" serve --config "$work/ferry.yaml" >"$work/ferry.out" 2>&1 &
ferry_pid=$!
pids+=("$ferry_pid")
ferry_url=$(wait_listening "$work/ferry.out" ferry)
metric() { curl -s "$ferry_url/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
load() {
  "${on_loadgen_cpu[@]}" "$loadgen_bin" --direct "$upstream_url" --ferry "$ferry_url" \
    --ferry-pid "$ferry_pid" --api-key "$api_key" --only "${FULL_ONLY:-chat c=16}" --duration "$1" \
    --concurrency "${FULL_CONCURRENCY:-16}" \
    >"$work/loadgen.$1.out" 2>&1 || true
}
# tid, name, utime, stime (clock ticks), run time (ns) and times run (schedstat: each wake-up
# or return from preemption) of every thread
snapshot() {
  for task in /proc/"$ferry_pid"/task/*; do
    echo "$(basename "$task") $(tr ' ' _ <"$task/comm") $(awk '{print $14, $15}' "$task/stat")" \
      "$(cut -d' ' -f1,3 "$task/schedstat")"
  done | sort
}
load 2  # warm-up: connections, caches, the first rows
rows_before=$(metric ferry_ledger_rows_committed_total)
batches_before=$(metric ferry_ledger_batches_total)
snapshot >"$work/before"
load "$seconds"
snapshot >"$work/after"
rows=$(($(metric ferry_ledger_rows_committed_total) - rows_before))
batches=$(($(metric ferry_ledger_batches_total) - batches_before))
echo "rows recorded in the window: $rows in $batches row-log groups; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
grep -E "^ *(scenario|${FULL_ONLY:-chat c=16} +ferry )" "$work/loadgen.$seconds.out" || true
# CPU: the scheduler's run time (exact); user and system: the 10 ms ticks of /proc/<pid>/stat,
# which at a few hundred wake-ups a second are a sample (a thread that runs 50 us at a time is
# charged whole ticks, to whichever mode the tick finds it in): read them as a rough split.
# runs: the times the thread was put on the CPU a request (its wake-ups, mostly).
join "$work/before" "$work/after" | awk -v rows="$rows" -v hz="$(getconf CLK_TCK)" '
  { user = ($8 - $3) * 1e6 / hz / rows; sys = ($9 - $4) * 1e6 / hz / rows
    cpu = ($10 - $5) / 1e3 / rows; runs = ($11 - $6) / rows
    total_user += user; total_sys += sys; total_cpu += cpu; total_runs += runs
    if (cpu >= 0.05) printf "%-16s %-8s CPU %6.1f us/request (ticks: user %6.1f  sys %6.1f) runs %5.2f\n", $2, $1, cpu, user, sys, runs }
  END { printf "%-25s CPU %6.1f us/request (ticks: user %6.1f  sys %6.1f) runs %5.2f\n", "all threads", total_cpu,
        total_user, total_sys, total_runs }'
# A run during which a process was stopped (another session's SIGSTOP) is not a measurement.
if grep -q 'void:' "$work/loadgen.$seconds.out"; then
  echo "VOID RUN: $(grep -m1 'void:' "$work/loadgen.$seconds.out" | sed 's/^ *^ //')"
fi
