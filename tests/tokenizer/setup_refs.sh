#!/usr/bin/env bash
# Installs the reference implementations the tokenizer conformance tests compare against
# (tiktoken, @anush008/tokenizers, @huggingface/jinja, node-llama-cpp), pinned by the
# package-lock.json beside this script, into tests/tokenizer/refs/node_modules.
# Idempotent: does nothing when node_modules was installed from the same lock file, by the same
# major version of Node.js.
# Needs node + npm (scripts/setup.sh installs them) and the npm registry.
set -euo pipefail
cd "$(dirname "$0")/refs"
# The lock file's hash and Node.js's major version: npm skips optional packages whose engines
# the running node does not meet (node-llama-cpp's prebuilt library needs 20), so a node_modules
# installed under another major is installed again.
want="$(sha256sum package-lock.json | cut -d' ' -f1) node $(node -p 'process.versions.node.split(".")[0]')"
if [ -f node_modules/.ferry-lock-sha256 ] && [ "$(cat node_modules/.ferry-lock-sha256)" = "$want" ]; then
  exit 0
fi
# node-llama-cpp ships prebuilt binaries as optional packages; nothing is built or downloaded
# by install scripts.
export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
echo "$want" > node_modules/.ferry-lock-sha256
