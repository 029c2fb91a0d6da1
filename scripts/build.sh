#!/usr/bin/env bash
# Configures and builds ferry (Release with debug info) into ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FERRY_BUILD_DIR:-build}
JOBS=${FERRY_JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Paths relative to the checkout, so clones and worktrees elsewhere share the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
cmake -S . -B "$BUILD_DIR" -G Ninja ${FERRY_CMAKE_ARGS:-} >/dev/null
# FERRY_BUILD_TARGETS="a b" builds only those targets (and what they need).
cmake --build "$BUILD_DIR" -j "$JOBS" ${FERRY_BUILD_TARGETS:+--target $FERRY_BUILD_TARGETS}
