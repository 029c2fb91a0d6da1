#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, builds, runs every ctest test
# (unit and integration tiers, and the conformance tests with the official openai client).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${FERRY_BUILD_DIR:-build}"
ctest --output-on-failure -j "${FERRY_JOBS:-$(nproc)}" --timeout 600 "$@"
