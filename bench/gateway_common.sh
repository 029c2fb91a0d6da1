# shellcheck shell=bash
# What gateway_bench.sh, full_callgrind.sh, full_threads.sh and nginx_callgrind.sh share
# (sourced by each).

# make_work_dir PREFIX: sets `work` (a new temporary directory) and `pids` (the processes the
# script starts); on exit the processes are stopped and the directory removed.
make_work_dir() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  pids=()
  trap cleanup_work EXIT
}
cleanup_work() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}

# bench_binaries: sets ferry_bin, upstream_bin and loadgen_bin, those of BUILD_DIR.
bench_binaries() {
  ferry_bin=$BUILD_DIR/gateway/ferry
  upstream_bin=$BUILD_DIR/tests/integration/ferry_test_upstream
  loadgen_bin=$BUILD_DIR/bench/ferry_loadgen
}

# start_upstream: starts BUILD_DIR's ferry_test_upstream (one of `pids`), sets upstream_url.
start_upstream() {
  "$upstream_bin" --listen 127.0.0.1:0 >"$work/upstream.out" 2>&1 &
  pids+=($!)
  upstream_url=$(wait_listening "$work/upstream.out" ferry_test_upstream)
}

# write_pass_config FILE UPSTREAM_URL: a one-loop pass-through ferry (no keys, policy or
# ledger; access log off) with the model `echo` on the upstream.
write_pass_config() {
  cat >"$1" <<EOF
server: { listen: 127.0.0.1:0, io_threads: 1 }
backends: [{ name: upstream, base_url: $2/v1, max_idle_connections: 64 }]
models: [{ name: echo, backend: upstream, upstream_model: echo }]
log: { access_log: off }
EOF
}

# write_nginx_config DIR UPSTREAM_URL PORT: DIR/nginx.conf, nginx as the reference reverse
# proxy (one worker, no master process, no access log, upstream keep-alive 64, responses not
# buffered) on 127.0.0.1:PORT in front of UPSTREAM_URL; its temporary files in DIR.
write_nginx_config() {
  cat >"$1/nginx.conf" <<EOF
worker_processes 1;
daemon off;
master_process off;
pid $1/nginx.pid;
error_log $1/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $1;
  proxy_temp_path $1;
  upstream up { server ${2#http://}; keepalive 64; }
  server {
    listen 127.0.0.1:$3;
    client_max_body_size 16m;
    client_body_buffer_size 64k;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
EOF
}

# free_port: a TCP port on 127.0.0.1 free at the moment.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_port PORT: waits (up to 5 s) until something accepts on 127.0.0.1:PORT.
wait_port() {
  for _ in $(seq 1 50); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

# wait_listening FILE NAME: prints the URL of the `listening on URL` line once it appears.
wait_listening() {
  for _ in $(seq 1 600); do
    if grep -q '^listening on ' "$1" 2>/dev/null; then
      grep -m1 '^listening on ' "$1" | sed 's/^listening on //'
      return 0
    fi
    sleep 0.1
  done
  echo "$2 did not start; its output:" >&2
  cat "$1" >&2
  return 1
}

# ferry-full's configuration: the whole accounting path as issue 17 defines it: the API key
# (stored as its SHA-256), an exact cl100k_base count, a 5-rule policy whose fifth rule
# decides, a hard team budget, a durable SQLite ledger row and the access log to a file.
#   write_ferry_full_config DIR UPSTREAM_URL SLOW_MS IO_THREADS API_KEY APPLY_MS
# writes DIR/policy.yaml and DIR/ferry.yaml (ledger and access log in DIR).
write_ferry_full_config() {
  local dir=$1 upstream_url=$2 slow_ms=$3 io_threads=$4 api_key=$5 apply_ms=$6
  cat >"$dir/policy.yaml" <<EOF
description: the accounting path's benchmark policy; the fifth rule decides
targets: { echo: echo, slow: stream-slow-$slow_ms }
models: [echo, stream-slow-$slow_ms]
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
  cat >"$dir/ferry.yaml" <<EOF
server:
  listen: 127.0.0.1:0
  io_threads: $io_threads
auth:
  keys:
    - id: bench
      sha256: $(printf %s "$api_key" | sha256sum | cut -d' ' -f1)
      team: bench
      project: loadgen
      role: app
backends:
  - name: upstream
    base_url: $upstream_url/v1
    max_idle_connections: 64
models:
  - name: echo
    backend: upstream
    upstream_model: echo
    tokenizer: cl100k_base
  - name: stream-slow-$slow_ms
    backend: upstream
    upstream_model: stream-slow-$slow_ms
    tokenizer: cl100k_base
log:
  access_log: $dir/access.log
policy:
  file: $dir/policy.yaml
  watch: false
ledger:
  path: $dir/ledger.db
  apply_ms: $apply_ms
  group_wait_us: ${BENCH_FULL_GROUP_WAIT_US:-1000}
prices:
  - model: echo
    effective_from: 2026-01-01
    input: 0.20
    output: 0.60
  - model: stream-slow-$slow_ms
    effective_from: 2026-01-01
    input: 0.20
    output: 0.60
budgets:
  - name: bench-monthly
    scope: team
    match: bench
    amount: 1000000000.00
    period: month
    mode: hard
EOF
}
