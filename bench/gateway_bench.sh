#!/usr/bin/env bash
# Gateway load benchmark: starts ferry_test_upstream and ferry (pinned to CPUs with taskset),
# then runs ferry_loadgen, which measures the upstream directly and through ferry in one go.
# Usage: bench/gateway_bench.sh [extra ferry_loadgen options, e.g. --duration 10 --json out.json]
# Environment: FERRY_BUILD_DIR (default build), FERRY_CPU (0), UPSTREAM_CPU (1), LOADGEN_CPU (1),
#   FERRY_IO_THREADS (1), FERRY_ACCESS_LOG (a file in the run's temp dir; "off" to disable),
#   BENCH_NICE (unset; e.g. -10 runs all three processes at that nice level, as root, so that
#   builds running beside the benchmark on a shared machine disturb it less),
#   BENCH_NGINX (default on; "off" to skip): nginx as a plain reverse proxy (one worker,
#   upstream keep-alive, no buffering) in front of the same upstream on FERRY_CPU, measured in
#   the same rounds as the reference for ferry's figures (`apt-get install nginx-light`; not
#   needed by anything else). Without nginx installed the run stops and says so, unless
#   BENCH_NGINX=off: a table without its reference cannot be read against issue 17's targets.
#   BENCH_RELAY (default on; "off" to skip): ferry_bench_relay, a byte relay that makes only
#   the system calls every proxy must (recv and send per message and direction, epoll_wait),
#   on FERRY_CPU in front of the same upstream: the kernel's floor for a proxied request here.
#   BENCH_RELAY_COMMIT (default on with BENCH_FULL and BENCH_RELAY; "off" to skip): the same
#   relay with --commit-dir (ferry-full's ledger directory), "relay-commit": it also follows each
#   answer's framing and holds the bytes that end it until one durable commit (a 4 KiB O_DIRECT
#   block and fdatasync, as the row log writes) covers the answers of its epoll_wait batch: the
#   floor, on this disk, of any proxy that records each answer durably before its last byte.
#   BENCH_FULL (default on; "off" to skip): a second ferry, "ferry-full", with the whole
#   accounting path (the key, an exact cl100k_base count, a 5-rule policy whose last rule
#   decides, a hard team budget, a durable SQLite ledger row, the access log) on FERRY_CPU in
#   front of the same upstream, measured in the same rounds as the pass-through ferry.
#   BENCH_FULL_APPLY_MS: ferry-full's ledger.apply_ms (default 1000, ferry's: the row log; 0: no row
#   log, each group committed to SQLite as before issue 17's session 16);
#   BENCH_FULL_GROUP_WAIT_US: its ledger.group_wait_us (default 1000, ferry's).
#   BENCH_COMPARE (unset: off): another pass-through ferry, "ferry-cmp", measured in the same
#   rounds as this one: the `ferry` binary of another build (e.g. a copy of main's) to A/B a
#   change; BENCH_COMPARE_ENV: VAR=VALUE words it runs with (e.g. LD_PRELOAD=...; with
#   BENCH_COMPARE=same, this build's binary). Alternating whole runs cannot resolve a few
#   percent here (nginx's own figure moves 5-10% between runs); rounds of one run can.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FERRY_BUILD_DIR:-build}
FERRY_CPU=${FERRY_CPU:-0}
UPSTREAM_CPU=${UPSTREAM_CPU:-1}
LOADGEN_CPU=${LOADGEN_CPU:-1}
IO_THREADS=${FERRY_IO_THREADS:-1}

if [ "${BENCH_NGINX:-on}" != off ] && ! command -v nginx >/dev/null 2>&1; then
  echo "gateway_bench: nginx, the same-run reference, is not installed:" \
    "apt-get install -y nginx-light (or BENCH_NGINX=off to run without it)" >&2
  exit 1
fi
ferry_bin=$BUILD_DIR/gateway/ferry
upstream_bin=$BUILD_DIR/tests/integration/ferry_test_upstream
loadgen_bin=$BUILD_DIR/bench/ferry_loadgen
relay_bin=$BUILD_DIR/bench/ferry_bench_relay
fsync_bin=$BUILD_DIR/bench/ferry_bench_fsync
if [ ! -x "$ferry_bin" ] || [ ! -x "$upstream_bin" ] || [ ! -x "$loadgen_bin" ] ||
  [ ! -x "$relay_bin" ] || [ ! -x "$fsync_bin" ]; then
  # A directory of copied binaries (another build's, for an A/B) is not built over.
  if [ -n "${FERRY_BUILD_DIR:-}" ] && [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    echo "gateway_bench: $BUILD_DIR lacks one of gateway/ferry, tests/integration/ferry_test_upstream," \
      "bench/ferry_loadgen, bench/ferry_bench_relay, bench/ferry_bench_fsync" >&2
    exit 2
  fi
  cmake -S . -B "$BUILD_DIR" -G Ninja >/dev/null
  cmake --build "$BUILD_DIR" --target ferry ferry_test_upstream ferry_loadgen ferry_bench_relay \
    ferry_bench_fsync
fi

# taskset execs the command, so $! below is the server's own pid (for /proc/<pid>/stat).
pin() {  # pin CPU: prints the words that run a command on that CPU (and at BENCH_NICE)
  local words=""
  if [ -n "${BENCH_NICE:-}" ]; then words="nice -n $BENCH_NICE "; fi
  if command -v taskset >/dev/null 2>&1; then words+="taskset -c $1"; fi
  echo "$words"
}
read -r -a pin_upstream <<<"$(pin "$UPSTREAM_CPU")"
read -r -a pin_ferry <<<"$(pin "$FERRY_CPU")"
read -r -a pin_loadgen <<<"$(pin "$LOADGEN_CPU")"

# shellcheck source=bench/gateway_common.sh
source bench/gateway_common.sh
make_work_dir ferry-bench

"${pin_upstream[@]}" "$upstream_bin" --listen 127.0.0.1:0 >"$work/upstream.out" 2>&1 &
upstream_pid=$!
pids+=("$upstream_pid")
upstream_url=$(wait_listening "$work/upstream.out" ferry_test_upstream)

# The slow streaming model the load generator asks for (--slow-stream-ms, default 5).
slow_ms=5
args=("$@")
for i in "${!args[@]}"; do
  if [ "${args[$i]}" = --slow-stream-ms ]; then slow_ms=${args[$((i + 1))]:-5}; fi
done

# The pass-through ferry, as issue 17 defines it: no keys, no policy, no ledger; the access log
# only when FERRY_ACCESS_LOG names a file.
access_log=${FERRY_ACCESS_LOG:-off}
api_key=sk-ferry-bench
models_yaml() {  # the two models the load generator asks for; $1: extra lines for each
  printf '%s\n' "models:" "  - name: echo" "    backend: upstream" "    upstream_model: echo" "$1" \
    "  - name: stream-slow-$slow_ms" "    backend: upstream" \
    "    upstream_model: stream-slow-$slow_ms" "$1" | sed '/^$/d'
}
cat >"$work/ferry.yaml" <<EOF
server:
  listen: 127.0.0.1:0
  io_threads: $IO_THREADS
backends:
  - name: upstream
    base_url: $upstream_url/v1
    max_idle_connections: 64
$(models_yaml "")
log:
  access_log: $access_log
EOF

"${pin_ferry[@]}" "$ferry_bin" serve --config "$work/ferry.yaml" >"$work/ferry.out" 2>&1 &
ferry_pid=$!
pids+=("$ferry_pid")
ferry_url=$(wait_listening "$work/ferry.out" ferry)

reference_args=()
if [ -n "${BENCH_COMPARE:-}" ]; then
  compare_bin=$BENCH_COMPARE
  if [ "$compare_bin" = same ]; then compare_bin=$ferry_bin; fi
  read -r -a compare_env <<<"${BENCH_COMPARE_ENV:-}"
  "${pin_ferry[@]}" env "${compare_env[@]}" "$compare_bin" serve --config "$work/ferry.yaml" \
    >"$work/compare.out" 2>&1 &
  compare_pid=$!
  pids+=("$compare_pid")
  compare_url=$(wait_listening "$work/compare.out" ferry-cmp)
  reference_args+=(--reference "$compare_url" --reference-pid "$compare_pid"
    --reference-name ferry-cmp)
fi
if [ "${BENCH_FULL:-on}" != off ]; then
  mkdir -p "$work/full"
  write_ferry_full_config "$work/full" "$upstream_url" "$slow_ms" "$IO_THREADS" "$api_key" \
    "${BENCH_FULL_APPLY_MS:-1000}"
  "${pin_ferry[@]}" "$ferry_bin" serve --config "$work/full/ferry.yaml" >"$work/full/ferry.out" 2>&1 &
  full_pid=$!
  pids+=("$full_pid")
  full_url=$(wait_listening "$work/full/ferry.out" ferry-full)
  reference_args+=(--reference "$full_url" --reference-pid "$full_pid" --reference-name ferry-full)
fi
if [ "${BENCH_NGINX:-on}" != off ]; then
  mkdir -p "$work/nginx"
  nginx_port=$(free_port)
  write_nginx_config "$work/nginx" "$upstream_url" "$nginx_port"
  "${pin_ferry[@]}" nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" >"$work/nginx.out" 2>&1 &
  nginx_pid=$!
  pids+=("$nginx_pid")
  wait_port "$nginx_port" || true
  reference_args+=(--reference "http://127.0.0.1:$nginx_port" --reference-pid "$nginx_pid"
    --reference-name nginx)
fi
if [ "${BENCH_RELAY:-on}" != off ]; then
  "${pin_ferry[@]}" "$relay_bin" --listen 127.0.0.1:0 --upstream "${upstream_url#http://}" \
    >"$work/relay.out" 2>&1 &
  relay_pid=$!
  pids+=("$relay_pid")
  relay_url=$(wait_listening "$work/relay.out" ferry_bench_relay)
  reference_args+=(--reference "$relay_url" --reference-pid "$relay_pid" --reference-name relay)
  if [ "${BENCH_RELAY_COMMIT:-on}" != off ] && [ "${BENCH_FULL:-on}" != off ]; then
    "${pin_ferry[@]}" "$relay_bin" --listen 127.0.0.1:0 --upstream "${upstream_url#http://}" \
      --commit-dir "$work/full" >"$work/relay-commit.out" 2>&1 &
    relay_commit_pid=$!
    pids+=("$relay_commit_pid")
    relay_commit_url=$(wait_listening "$work/relay-commit.out" relay-commit)
    reference_args+=(--reference "$relay_commit_url" --reference-pid "$relay_commit_pid"
      --reference-name relay-commit)
  fi
fi

echo "ferry $("$ferry_bin" --version 2>/dev/null | head -1) on CPU $FERRY_CPU ($IO_THREADS I/O" \
  "threads), upstream on CPU $UPSTREAM_CPU, loadgen on CPU $LOADGEN_CPU, nice ${BENCH_NICE:-0};" \
  "access log: $access_log; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# The durable commit's floor on this disk, before and after the rounds (ferry-full's ledger's
# directory; 10 pages: what one row's commit writes to the WAL, 20 pwrites of a frame header and a page;
# 1 page 5 ms apart: a row log group of one row at 200 req/s, the fixed-rate scenarios' commit;
# the same with O_DIRECT: how the row log writes its pre-sized segments; and that commit made by
# a writer thread the caller hands it to and hears back from, as ferry's I/O loop does).
fsync_floor() {
  if [ "${BENCH_FULL:-on}" != off ]; then
    "${pin_ferry[@]}" "$fsync_bin" --dir "$work/full" --pages 10 --commits 200 --interval-us 2000
    "${pin_ferry[@]}" "$fsync_bin" --dir "$work/full" --pages 1 --commits 200 --interval-us 5000
    "${pin_ferry[@]}" "$fsync_bin" --dir "$work/full" --pages 1 --commits 200 --interval-us 5000 \
      --direct
    "${pin_ferry[@]}" "$fsync_bin" --dir "$work/full" --pages 1 --commits 200 --interval-us 5000 \
      --direct --hand-off
  fi
}
fsync_floor
status=0
"${pin_loadgen[@]}" "$loadgen_bin" --direct "$upstream_url" --ferry "$ferry_url" \
  --api-key "$api_key" --ferry-pid "$ferry_pid" --upstream-pid "$upstream_pid" \
  "${reference_args[@]}" "$@" || status=$?
fsync_floor
if [ "$status" -ne 0 ]; then
  echo "gateway_bench: ferry_loadgen exited with $status (errors above); last lines of ferry's output:"
  tail -n 20 "$work/ferry.out"
fi
exit "$status"
