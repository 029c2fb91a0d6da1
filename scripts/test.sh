#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, checks that module dependencies point
# one way (docs/ARCHITECTURE.md) and that C++ files follow .clang-format (scripts/check_format.sh),
# builds, runs a short smoke pass of every fuzz target
# (scripts/fuzz.sh; FERRY_FUZZ_SECONDS per target, default 10; 0 skips it), then every ctest
# test (unit and integration tiers, and the conformance tests with the official openai client;
# last, so that ctest's summary closes the output). FERRY_LINT_BASE=main also runs clang-tidy
# over the .cpp files changed since that base (scripts/lint.sh; not by default: the whole tree
# takes far longer than the tests' budget). A throw-away PostgreSQL server (scripts/pg_test.sh)
# runs for the ctest pass; its URL is FERRY_TEST_PG_URL.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
/usr/bin/python3 scripts/check_includes.py
scripts/check_format.sh
scripts/build.sh
if [ -n "${FERRY_LINT_BASE:-}" ]; then scripts/lint.sh --base "$FERRY_LINT_BASE"; fi
if [ "${FERRY_FUZZ_SECONDS:-10}" != 0 ]; then scripts/fuzz.sh "${FERRY_FUZZ_SECONDS:-10}"; fi
# A throw-away PostgreSQL for the tests of the PostgreSQL ledger (scripts/pg_test.sh), stopped
# and removed on any exit.
pg_dir="$(mktemp -d /tmp/ferry-pg.XXXXXX)"
root="$(pwd)"
trap '"$root/scripts/pg_test.sh" stop "$pg_dir"' EXIT
scripts/pg_test.sh start "$pg_dir"
eval "$(scripts/pg_test.sh env "$pg_dir")"
cd "${FERRY_BUILD_DIR:-build}"
ctest --output-on-failure -j "${FERRY_JOBS:-$(nproc)}" --timeout 600 "$@"
