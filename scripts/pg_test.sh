#!/usr/bin/env bash
# A throw-away PostgreSQL 15 server for the tests (issue 18): `start DIR` runs initdb into
# DIR/data, starts the server on a free port of 127.0.0.1 (unix socket in DIR too) as an
# unprivileged user (postgres refuses to run as root: the `postgres` system user then, or the
# caller itself), creates the database `ferry_test` and writes the URL to DIR/url;
# `env DIR` prints `export FERRY_TEST_PG_URL=...`; `stop DIR` stops the server and removes DIR.
# Starting takes about two seconds. fsync and synchronous_commit stay on (the defaults), so
# bench figures taken against it are honest.
set -euo pipefail

cmd="${1:-}"
dir="${2:-}"
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: scripts/pg_test.sh start|env|stop DIR" >&2
  exit 2
fi

bindir=""
for candidate in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
  if [ -x "$candidate/pg_ctl" ]; then bindir="$candidate"; break; fi
done

case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac

# Runs a command as the unprivileged owner of the data directory, from / (the caller's directory,
# e.g. a clone under /root, may be closed to that user: psql and pg_ctl warn that they cannot
# change into it).
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

case "$cmd" in
  start)
    if [ -z "$bindir" ]; then
      echo "pg_test: PostgreSQL is not installed (scripts/setup.sh installs postgresql-15)" >&2
      exit 1
    fi
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
    chmod 700 "$dir"
    as_owner "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale \
      >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    port="$(free_port)"
    as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200" \
      start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    as_owner "$bindir/createdb" -h 127.0.0.1 -p "$port" -U postgres ferry_test
    echo "postgresql://postgres@127.0.0.1:$port/ferry_test" >"$dir/url"
    echo "pg_test: PostgreSQL on $(cat "$dir/url")"
    ;;
  env)
    echo "export FERRY_TEST_PG_URL=$(cat "$dir/url")"
    ;;
  stop)
    if [ -n "$bindir" ] && [ -d "$dir/data" ]; then
      as_owner "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
  *)
    echo "pg_test: unknown command '$cmd' (start|env|stop)" >&2
    exit 2
    ;;
esac
