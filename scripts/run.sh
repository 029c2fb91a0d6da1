#!/usr/bin/env bash
# Installs what is needed, builds, and starts ferry on its embedded default config
# (or on the config given as the first argument).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
if [ $# -gt 0 ]; then
  exec build/gateway/ferry serve --config "$1"
fi
exec build/gateway/ferry serve
