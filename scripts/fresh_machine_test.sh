#!/usr/bin/env bash
# The README's two commands on a fresh Debian 12: debootstraps a minimal bookworm into DIR, clones
# this repository's HEAD into it, runs `scripts/run.sh` there (it must answer a chat request on
# 127.0.0.1:8080; then it is stopped) and then `scripts/test.sh`, each inside DIR as the root of
# a new mount namespace (pivot_root, not chroot: the kernel refuses the user namespaces that
# codex's sandbox makes inside a chroot). CI runs on a fresh clone of a machine that already has
# the packages; this is the check that nothing was installed by hand. ~45 minutes (a cold build
# without ccache, the whole suite); needs root and the Debian mirror.
#   scripts/fresh_machine_test.sh DIR      (DIR must not exist; removed at the end unless KEEP=1)
# What the machine's network needs is copied from this host, as a fresh machine on it would have
# it: /etc/resolv.conf, the apt sources, extra CA certificates (/usr/local/share/ca-certificates;
# a TLS-intercepting egress proxy), npm's global config, NODE_EXTRA_CA_CERTS. Nothing else.
# Logs: DIR.run.log and DIR.test.log. Port 8080 must be free.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/fresh_machine_test.sh DIR}
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
[ -e "$dir" ] && { echo "fresh_machine_test: $dir exists" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "fresh_machine_test: needs root" >&2; exit 2; }
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
root="$dir/root"
mounts=(proc sys dev dev/pts dev/shm tmp)
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "$root/${mounts[$i]}" 2>/dev/null || true; done
  [ "${KEEP:-0}" = 1 ] && return
  # Never through a mount that is still there (the host's /dev or /proc bound into the root).
  if grep -q " $root/" /proc/mounts; then
    echo "fresh_machine_test: mounts remain under $root; not removing $dir" >&2
  else
    rm -rf --one-file-system "$dir"
  fi
}
trap cleanup EXIT

echo "fresh_machine_test: debootstrap bookworm (minbase) into $root"
mkdir -p "$dir"
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
debootstrap --variant=minbase bookworm "$root" "${mirror:-http://deb.debian.org/debian}" >"$dir.debootstrap.log"
cp /etc/resolv.conf "$root/etc/resolv.conf"
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/"
  rm -f "$root/etc/apt/sources.list"
fi
for f in /etc/npmrc /usr/etc/npmrc; do
  [ -f "$f" ] && mkdir -p "$root$(dirname "$f")" && cp "$f" "$root$f"
done
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin bash -c \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ca-certificates >/dev/null && update-ca-certificates >/dev/null'
fi
for m in proc sys dev dev/pts; do mount --bind "/$m" "$root/$m"; done
mount -t tmpfs tmpfs "$root/dev/shm"
mount -t tmpfs -o size=16g tmpfs "$root/tmp"
git clone -q . "$root/root/ferry"
git -C "$root/root/ferry" checkout -q "$(git rev-parse HEAD)"
echo "fresh_machine_test: clone of $(git rev-parse --short HEAD) in $root/root/ferry"

# Runs a command line in $root as the root of a new mount namespace.
# shellcheck disable=SC2016  # the inner script's own $1 and $2
inside() {
  unshare --mount --propagation private bash -c '
    set -e
    mount --rbind "$1" "$1"
    cd "$1"
    mkdir -p .oldroot
    pivot_root . .oldroot
    umount -l /.oldroot
    cd /
    exec /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      ${NODE_EXTRA_CA_CERTS:+NODE_EXTRA_CA_CERTS=$NODE_EXTRA_CA_CERTS} /bin/bash -c "$2"
  ' inside "$root" "$1"
}

echo "fresh_machine_test: scripts/run.sh (log $dir.run.log)"
# run.sh execs ferry: the pid it writes is the server's (one pid namespace with this host).
inside 'cd /root/ferry && { scripts/run.sh & echo $! >/tmp/run.pid; wait; }' >"$dir.run.log" 2>&1 &
run_pid=$!
for _ in $(seq 1 3600); do
  grep -q '^listening on' "$dir.run.log" && break
  kill -0 "$run_pid" 2>/dev/null || { echo "fresh_machine_test: run.sh ended before serving" >&2; exit 1; }
  sleep 1
done
answer=$(curl -s -m 60 http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"model":"default","messages":[{"role":"user","content":"Who made the heaven and the earth?"}],"seed":1}')
kill "$(cat "$root/tmp/run.pid")"
wait "$run_pid" || true
if ! grep -q '"finish_reason"' <<<"$answer"; then
  echo "fresh_machine_test: no chat answer from run.sh's ferry: $answer" >&2
  exit 1
fi
echo "fresh_machine_test: run.sh served a chat answer ($(grep -o 'run.sh: built in [0-9]* s' "$dir.run.log"))"

echo "fresh_machine_test: scripts/test.sh (log $dir.test.log)"
status=0
inside 'cd /root/ferry && scripts/test.sh' >"$dir.test.log" 2>&1 || status=$?
grep -E 'tests passed|The following tests FAILED' -A8 "$dir.test.log" | head -12
echo "fresh_machine_test: scripts/test.sh exit $status"
exit "$status"
