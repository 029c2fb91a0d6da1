#!/usr/bin/env bash
# The memory a server touches per request at a low rate: the server under valgrind's lackey
# (every instruction and data access traced, and which thread runs), `chat` requests from
# ferry_loadgen at 2 a second, and bench/touch_footprint.py counting the distinct 64-byte lines
# each wake-up (from one epoll_wait to the next) touches: code and data lines and 4 KiB pages,
# data lines by thread, and data lines by the server function that touched them (or called the
# library that did), then code lines by the server function they are in (or that called the
# library they are in). At 200 req/s a request finds the caches cold, and what it pays is
# roughly these lines fetched again (bench/README.md, issue 17 session 30). Counts do not depend
# on the machine's load.
#   bench/touch_footprint.sh [pass|full|nginx] [SECONDS]   (default pass, 60: 120 requests;
#   ~2-5 minutes: lackey runs ~200x slower than native)
#   pass: gateway_bench.sh's pass-through ferry; full: its ferry-full (the ledger's apply_ms
#   set to 60000 so that the SQLite apply, once a second at 200 req/s, is not charged to two
#   requests a second); nginx: its nginx (stripped: totals only). FERRY_BUILD_DIR: the build
#   (default build); TOUCH_TOP: the functions listed (default 40).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FERRY_BUILD_DIR:-build}
mode=${1:-pass}
seconds=${2:-60}
rate=2
# shellcheck source=bench/gateway_common.sh
source bench/gateway_common.sh
bench_binaries
make_work_dir ferry-touch
start_upstream
api_key=sk-ferry-bench
case $mode in
  pass) write_pass_config "$work/ferry.yaml" "$upstream_url" ;;
  full) write_ferry_full_config "$work" "$upstream_url" 5 1 "$api_key" 60000 ;;
  nginx)
    command -v nginx >/dev/null || { echo "touch_footprint: nginx is not installed" >&2; exit 1; }
    mkdir -p "$work/nginx"
    port=$(free_port)
    write_nginx_config "$work/nginx" "$upstream_url" "$port"
    ;;
  *)
    echo "usage: bench/touch_footprint.sh [pass|full|nginx] [SECONDS]" >&2
    exit 2
    ;;
esac
# The trace goes through a FIFO to the counter, which skips it until the addresses are known.
mkfifo "$work/trace"
python3 bench/touch_footprint.py "$work/addrs" "$work/go" "$work/stop" "$work/maps" \
  "$work/requests" "${TOUCH_TOP:-40}" <"$work/trace" >"$work/result" &
counter_pid=$!
lackey=(valgrind --tool=lackey --trace-mem=yes --trace-sched=yes --log-file="$work/trace")
if [ "$mode" = nginx ]; then
  server_bin=$(command -v nginx)
  "${lackey[@]}" nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" >"$work/server.out" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  for _ in $(seq 1 60); do wait_port "$port" && break; done
  server_url=http://127.0.0.1:$port
else
  server_bin=$(readlink -f "$ferry_bin")
  "${lackey[@]}" "$ferry_bin" serve --config "$work/ferry.yaml" >"$work/server.out" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  # Under lackey ferry-full's start (the tokenizer's tables) takes minutes.
  for _ in $(seq 1 1200); do
    grep -q '^listening on ' "$work/server.out" && break
    sleep 0.5
  done
  server_url=$(wait_listening "$work/server.out" ferry)
fi
# epoll_wait's entry in the server's libc, and the server's text range.
read -r libc_start libc_offset libc_path < <(awk '$2 ~ /x/ && $6 ~ /\/libc\.so/ {
  split($1, a, "-"); print a[1], $3, $6; exit }' "/proc/$server_pid/maps")
epoll=$(nm -D "$libc_path" | awk '$3 ~ /^epoll_wait@/ { print $1 }' | head -1)
# (.text only: a call through the PLT is not the caller)
base=$(awk -v b="$server_bin" '$6 == b && $3 == "00000000" { split($1, a, "-"); print a[1]; exit }' \
  "/proc/$server_pid/maps")
read -r text_at text_size < <(readelf -SW "$server_bin" | awk '{
  for (i = 1; i < NF; i++) if ($i == ".text") { print $(i + 2), $(i + 4); exit } }')
text_lo=$(printf '%x' $((0x$base + 0x$text_at)))
text_hi=$(printf '%x' $((0x$base + 0x$text_at + 0x$text_size)))
cp "/proc/$server_pid/maps" "$work/maps"
echo "$server_bin" >"$work/addrs.binary"
printf '%x %s %s\n' $((0x$libc_start + 0x$epoll - 0x$libc_offset)) "$text_lo" "$text_hi" \
  >"$work/addrs"
load() {  # load SECONDS [JSON]: `chat` at $rate a second through the server
  "$loadgen_bin" --direct "$upstream_url" --ferry "$server_url" --api-key "$api_key" \
    --only "chat $rate/s" --rate "$rate" --warmup 0 --duration "$1" --rounds 1 \
    ${2:+--json "$2"} >"$work/loadgen.out" 2>&1 || true
}
load 5  # warm-up (and the counter past the start), not counted
touch "$work/go"
load "$seconds" "$work/load.json"
touch "$work/stop"
load 2  # a wake-up after `stop`, to end the count
python3 -c 'import json, sys; rows = json.load(open(sys.argv[1]))
print(sum(r["ok"] + r["errors"] for r in rows if r["target"] != "direct"))' \
  "$work/load.json" >"$work/requests"
kill "$server_pid" 2>/dev/null || true
wait "$counter_pid" || true
echo "touch_footprint: $mode, $(basename "$server_bin"), chat at $rate req/s for $seconds s"
cat "$work/result"
