#!/usr/bin/env bash
# Gateway-added time to first token for the in-process engine (issue 5): for each streamed
# request, ferry's time from the request's arrival to the first byte it wrote to the client,
# minus the local backend's own time from its call to its first token (both measured inside
# ferry on the same clock and written to the access log as ttft_ms and backend_ttft_ms).
# Usage: bench/serving_ttft.sh [MODEL.gguf] [REQUESTS]   (default: a synthesized tiny model, 200)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FERRY_BUILD_DIR:-build}
ferry=$BUILD_DIR/gateway/ferry
n=${2:-200}
work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-ttft.XXXXXX")
trap 'kill "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
model=${1:-}
if [ -z "$model" ]; then
  model=$work/tiny.gguf
  "$ferry" model synth --preset tiny --ctx 4096 --type Q8_0 --seed 1 "$model" >/dev/null
fi
cat >"$work/ferry.yaml" <<EOT
server: { listen: 127.0.0.1:0, io_threads: 1 }
backends:
  - { name: cpu, kind: local, model: $model, threads: 1 }
models:
  - { name: m, backend: cpu }
log: { access_log: $work/access.log }
EOT
"$ferry" serve --config "$work/ferry.yaml" >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 1 100); do grep -q '^listening on ' "$work/out" 2>/dev/null && break; sleep 0.1; done
url=$(grep -m1 '^listening on ' "$work/out" | sed 's/^listening on http:\/\///')
python3 - "$url" "$n" <<'PY'
import http.client, json, sys
host, port = sys.argv[1].split(':')
n = int(sys.argv[2])
c = http.client.HTTPConnection(host, int(port))
for i in range(n):
    body = json.dumps({"model": "m", "stream": True, "max_tokens": 4, "temperature": 0,
                       "messages": [{"role": "user", "content": f"request {i}: say something"}]})
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
PY
kill -TERM "$pid"; wait "$pid" || true
python3 - "$work/access.log" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"backend_ttft_ms"' in l]
added = sorted(r["ttft_ms"] - r["backend_ttft_ms"] for r in rows)
ttft = sorted(r["ttft_ms"] for r in rows)
q = lambda v, p: v[min(len(v) - 1, int(p * len(v)))]
print(f"requests {len(rows)}: ttft p50 {q(ttft,.5):.3f} ms; gateway-added p50 {q(added,.5):.3f} ms, "
      f"p90 {q(added,.9):.3f} ms, max {added[-1]:.3f} ms")
PY
