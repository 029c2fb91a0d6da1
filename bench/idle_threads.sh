#!/usr/bin/env bash
# ferry-full's CPU while it serves nothing, by thread: what its background threads cost a
# second (the stored-keys watcher, the ledger's threads, the access log), with N API keys stored
# in the ledger's database (written straight into its api_keys table once ferry is up).
#   bench/idle_threads.sh [KEYS] [SECONDS]   (default 1 key, 10 s; FERRY_BUILD_DIR: the build,
#   default build). Prints each thread that used more than 1 us a second: CPU us a second (the
#   scheduler's run time) and times run a second.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FERRY_BUILD_DIR:-build}
keys=${1:-1}
seconds=${2:-10}
# shellcheck source=bench/gateway_common.sh
source bench/gateway_common.sh
bench_binaries
make_work_dir ferry-idle
start_upstream
write_ferry_full_config "$work" "$upstream_url" 5 1 sk-ferry-bench 1000
"$ferry_bin" serve --config "$work/ferry.yaml" >"$work/ferry.out" 2>&1 &
ferry_pid=$!
pids+=("$ferry_pid")
wait_listening "$work/ferry.out" ferry >/dev/null
python3 - "$work/ledger.db" "$keys" <<'PY'
import sqlite3
import sys
db = sqlite3.connect(sys.argv[1], timeout=10)
db.executemany(
    "INSERT INTO api_keys(id, sha256, team, project, role, tags, created_us, created_by) "
    "VALUES (?, ?, 't', 'p', 'app', '[]', ?, 'bench')",
    [(f"k-{i:012x}", f"{i:064x}", 1700000000000000 + i) for i in range(int(sys.argv[2]))])
db.commit()
PY
sleep 3  # the watcher's first look after the keys arrived
snapshot() {
  for task in /proc/"$ferry_pid"/task/*; do
    echo "$(basename "$task") $(cat "$task/comm") $(cut -d' ' -f1,3 "$task/schedstat")"
  done | sort
}
snapshot >"$work/before"
sleep "$seconds"
snapshot >"$work/after"
echo "ferry-full idle for $seconds s with $keys stored keys:"
join "$work/before" "$work/after" | awk -v s="$seconds" '{
  cpu = ($6 - $3) / 1e3 / s; runs = ($7 - $4) / s
  if (cpu > 1) printf "  %-16s %-8s CPU %8.1f us/s, runs %5.1f/s\n", $2, $1, cpu, runs }'
