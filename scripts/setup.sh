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

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
