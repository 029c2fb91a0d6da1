#!/usr/bin/env bash
# The coroutine frames one pass-through chat request allocates, with the coroutine that
# allocates each: gdb stops at every operator new (asio's own frame recycling is off, see
# ARCHITECTURE "Coroutine frames stay under 1 KiB"), and the allocations whose caller is a
# coroutine's ramp (named from the `[clone .actor]` functions in the binary) are its frames. The
# allocators' fast paths end at 1 KiB (mimalloc's small objects, glibc's thread cache). Run
# after a change to a coroutine of the request path (gateway/connection.cpp, proxy.cpp,
# adapters/http_backend.cpp): each frame allocated per request should stay under 1 KiB.
# Needs gdb and objdump.
#   bench/coroutine_frames.sh   (FERRY_BUILD_DIR: the build, default build)
# Prints "<count> <bytes> <coroutine>" for three requests on two connections (a connection's
# own frame, serve_connection, is allocated once per connection).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FERRY_BUILD_DIR:-build}
# shellcheck source=bench/gateway_common.sh
source bench/gateway_common.sh
bench_binaries
make_work_dir ferry-frames
start_upstream
write_pass_config "$work/ferry.yaml" "$upstream_url"
"$ferry_bin" serve --config "$work/ferry.yaml" >"$work/ferry.out" 2>&1 &
ferry_pid=$!
pids+=("$ferry_pid")
ferry_url=$(wait_listening "$work/ferry.out" ferry)
body='{"model":"echo","messages":[{"role":"user","content":"hello there"}],"max_tokens":16}'
chat() { curl -s "$ferry_url/v1/chat/completions" -H 'content-type: application/json' -d "$body" >/dev/null; }
chat  # warm: the upstream connection, the first allocations
cat >"$work/gdb.cmd" <<'EOF2'
set pagination off
break operator new(unsigned long)
commands
silent
printf "SIZE %lu\n", $rdi
bt 4
continue
end
continue
EOF2
gdb -q -p "$ferry_pid" -batch -x "$work/gdb.cmd" >"$work/gdb.out" 2>&1 &
gdb_pid=$!
sleep 3
chat
python3 - "$ferry_url" "$body" <<'EOF2'
import http.client, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
conn = http.client.HTTPConnection(url.hostname, url.port)
for _ in range(2):  # two requests on one kept-alive connection
    conn.request("POST", "/v1/chat/completions", sys.argv[2], {"content-type": "application/json"})
    conn.getresponse().read()
EOF2
sleep 1
kill "$gdb_pid" 2>/dev/null || true
wait "$gdb_pid" 2>/dev/null || true
# The coroutines: each has an actor, `<coroutine>(<coroutine>(...)::_Z...Frame*) [clone .actor]`.
objdump -d --no-show-raw-insn -C "$ferry_bin" 2>/dev/null |
  grep -o '^[0-9a-f]* <.* \[clone \.actor\]>:$' | cut -d'<' -f2- >"$work/actors.txt"
python3 - "$work/gdb.out" "$work/actors.txt" <<'EOF2'
import collections, re, sys

def key(name):
    """A function's qualified name without its return type, template arguments or parameters."""
    name = name.replace("(anonymous namespace)", "{anon}")
    out, depth = [], 0
    for ch in name:
        if ch == "(" and depth == 0:
            break
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).split(" ")[-1]

coroutines = set(key(line) for line in open(sys.argv[2], errors="replace"))
counts = collections.Counter()
size = None
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("SIZE"):
        size, named = int(line.split()[1]), False
        continue
    m = re.match(r"#\d+\s+(?:0x[0-9a-f]+ in )?(.*?) \(", line)
    if not m or size is None or named:
        continue
    name = m.group(1)
    if "operator new" in name or name.startswith("mi_"):
        continue
    named = True  # the allocation's caller: a frame when it is a coroutine's ramp
    if key(name) in coroutines:
        counts[(size, name[:150])] += 1
for (size, name), n in sorted(counts.items(), key=lambda kv: -kv[0][0]):
    print(n, size, name)
EOF2
