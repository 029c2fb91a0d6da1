#!/usr/bin/env bash
# A test of ferry_loadgen (ctest `bench.loadgen_notices_a_stopped_server`): a server stopped by
# SIGSTOP during a run (another session's /tmp/quiet.sh on a shared machine) makes the run's
# row say it is void, and a run nobody stops does not.
#   bench/loadgen_stop_test.sh LOADGEN UPSTREAM
set -euo pipefail
loadgen=$1 upstream=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-loadgen-stop.XXXXXX")
upstream_pid=
cleanup() {
  if [ -n "$upstream_pid" ]; then
    kill -CONT "$upstream_pid" 2>/dev/null || true
    kill "$upstream_pid" 2>/dev/null || true
    wait "$upstream_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
"$upstream" --listen 127.0.0.1:0 >"$work/upstream.out" 2>&1 &
upstream_pid=$!
for _ in $(seq 1 100); do
  grep -q '^listening on ' "$work/upstream.out" 2>/dev/null && break
  sleep 0.1
done
url=$(grep -m1 '^listening on ' "$work/upstream.out" | sed 's/^listening on //')
run() {  # the closed-loop chat scenario against the upstream, as "direct" and as "ferry"
  "$loadgen" --direct "$url" --ferry "$url" --ferry-pid "$upstream_pid" \
    --upstream-pid "$upstream_pid" --only "chat c=" --concurrency 2 --warmup 0.1 --duration 1.5
}

run >"$work/quiet.txt" || { cat "$work/quiet.txt"; exit 1; }
if grep -q 'void' "$work/quiet.txt"; then
  echo "FAIL: a run nobody stopped was reported void:"
  cat "$work/quiet.txt"
  exit 1
fi

# The upstream is stopped for 0.8 s in the middle of the first run ("direct").
(sleep 0.5 && kill -STOP "$upstream_pid" && sleep 0.8 && kill -CONT "$upstream_pid") &
stopper=$!
run >"$work/stopped.txt" || true
wait "$stopper"
if ! grep -A1 '^chat c=2 *direct' "$work/stopped.txt" | grep -q 'void: the server was stopped'; then
  echo "FAIL: the stopped run was not reported void:"
  cat "$work/stopped.txt"
  exit 1
fi
echo "ok"
