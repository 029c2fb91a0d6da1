#!/usr/bin/env bash
# Installs what is needed, builds, and starts ferry: on its embedded default config (one
# in-process model, var/demo/model.gguf) or on the config given as the first argument.
# When the default config's model file is missing, a demo model is made with `ferry model
# synth` (random weights, real shapes and vocabulary), and this says so.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "run.sh: checking the packages ferry needs (scripts/setup.sh; installs only what is missing)" >&2
scripts/setup.sh
# Only the server binary: the tests are built by scripts/test.sh.
echo "run.sh: building build/gateway/ferry (scripts/build.sh; the first build takes several" \
     "minutes, later ones only recompile what changed)" >&2
started=$SECONDS
FERRY_BUILD_TARGETS=${FERRY_BUILD_TARGETS:-ferry} scripts/build.sh
echo "run.sh: built in $((SECONDS - started)) s" >&2
if [ $# -gt 0 ]; then
  echo "run.sh: starting ferry serve --config $1" >&2
  exec build/gateway/ferry serve --config "$1"
fi
model=var/demo/model.gguf
if [ ! -f "$model" ]; then
  echo "run.sh: no model at $model: making a demo model with 'ferry model synth'" \
       "(SmolLM2-360M shape, Q8_0, random weights: it answers with random text)." \
       "For real answers, see README.md, 'A real model'."
  mkdir -p var/demo
  build/gateway/ferry model synth --preset smollm2-360m --type Q8_0 --seed 1 "$model.part"
  mv "$model.part" "$model"
fi
echo "run.sh: starting ferry serve on the embedded default config ($model)" >&2
exec build/gateway/ferry serve
