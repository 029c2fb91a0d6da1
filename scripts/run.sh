#!/usr/bin/env bash
# Installs what is needed, builds, and starts ferry: on its embedded default config (one
# in-process model, the committed demo model models/ferry-demo-1m.gguf) or on the config given
# as the first argument.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
if [ $# -gt 0 ]; then
  exec build/gateway/ferry serve --config "$1"
fi
model=models/ferry-demo-1m.gguf
if [ ! -f "$model" ]; then
  echo "run.sh: the demo model $model is missing (it is part of the repository:" \
       "'git checkout -- $model' restores it; tools/train_demo retrains it)." \
       "A random-weights stand-in: build/gateway/ferry model synth --preset smollm2-360m" \
       "--type Q8_0 $model (it answers with random text)." >&2
  exit 1
fi
exec build/gateway/ferry serve
