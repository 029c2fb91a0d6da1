#!/usr/bin/env bash
# Installs what is needed, builds, and starts ferry: on its embedded default config (one
# in-process model, the committed demo model models/ferry-demo-1m.gguf) or on the config given
# as the first argument. `scripts/run.sh --release [CONFIG]` builds and starts the
# profile-guided binary to deploy instead (scripts/build_release.sh: longer to build, less CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
if [ "${1:-}" = --release ]; then
  shift
  echo "run.sh: building the release binary (scripts/build_release.sh: packages, ferry" \
       "instrumented, a training load, ferry optimized)" >&2
  scripts/build_release.sh
  ferry=${FERRY_RELEASE_DIR:-build-release}/ferry
else
  echo "run.sh: checking the packages ferry needs (scripts/setup.sh; installs only what is missing)" >&2
  scripts/setup.sh
  # Only the server binary: the tests are built by scripts/test.sh.
  echo "run.sh: building build/gateway/ferry (scripts/build.sh; the first build takes several" \
       "minutes, later ones only recompile what changed)" >&2
  FERRY_BUILD_TARGETS=${FERRY_BUILD_TARGETS:-ferry} scripts/build.sh
  ferry=build/gateway/ferry
fi
echo "run.sh: built in $((SECONDS - started)) s" >&2
if [ $# -gt 0 ]; then
  echo "run.sh: starting ferry serve --config $1" >&2
  exec "$ferry" serve --config "$1"
fi
model=models/ferry-demo-1m.gguf
if [ ! -f "$model" ]; then
  echo "run.sh: the demo model $model is missing (it is part of the repository:" \
       "'git checkout -- $model' restores it; tools/train_demo retrains it)." \
       "A random-weights stand-in: build/gateway/ferry model synth --preset smollm2-360m" \
       "--type Q8_0 $model (it answers with random text)." >&2
  exit 1
fi
echo "run.sh: starting ferry serve on the embedded default config ($model)" >&2
exec "$ferry" serve
