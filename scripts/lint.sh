#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy) over ferry's own sources, using the compile database of a build
# (build/compile_commands.json; run scripts/build.sh first).
#   scripts/lint.sh                   every module source file (slow: minutes per core)
#   scripts/lint.sh --base main       only the .cpp files changed since the merge base with main
#   scripts/lint.sh FILE...           those files
#   scripts/lint.sh --module gguf ... the .cpp files under those module folders
# Prints the findings and a count per module; exits 1 when there is any finding. The compile
# database holds GCC's flags: clang is told not to warn about GCC-only warning names.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FERRY_BUILD_DIR:-build}
JOBS=${FERRY_JOBS:-$(nproc)}
TIDY=${CLANG_TIDY:-$(command -v clang-tidy || command -v clang-tidy-14 || true)}
MODULES="adapters api common config constrain gateway gguf ledger local_engine model_format model_tools policies
  replay tokenizer"

if [[ -z "$TIDY" ]]; then
  echo "lint: clang-tidy not found (apt-get install clang-tidy)" >&2
  exit 2
fi
if [[ ! -f "$BUILD_DIR/compile_commands.json" ]]; then
  echo "lint: no $BUILD_DIR/compile_commands.json; run scripts/build.sh first" >&2
  exit 2
fi

# The .cpp files the compile database knows, relative to the checkout, under the module folders.
in_database() {
  /usr/bin/python3 - "$BUILD_DIR/compile_commands.json" "$PWD" <<'PY'
import json, os, sys
root = sys.argv[2]
for entry in json.load(open(sys.argv[1])):
    path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    if path.startswith(root + "/"):
        print(os.path.relpath(path, root))
PY
}

files=()
if [[ $# -ge 2 && "$1" == "--base" ]]; then
  base=$(git merge-base HEAD "$2")
  mapfile -t changed < <( (git diff --name-only --diff-filter=d "$base" -- '*.cpp';
                           git ls-files --others --exclude-standard -- '*.cpp') | sort -u)
  known=$(in_database)
  for f in "${changed[@]}"; do
    grep -qxF "$f" <<<"$known" && files+=("$f")
  done
elif [[ $# -ge 1 && "$1" == "--module" ]]; then
  shift
  for m in "$@"; do
    mapfile -t -O "${#files[@]}" files < <(in_database | grep "^$m/" || true)
  done
elif [[ $# -ge 1 ]]; then
  files=("$@")
else
  pattern="^($(echo $MODULES | tr ' ' '|'))/"
  mapfile -t files < <(in_database | grep -E "$pattern")
fi

if [[ ${#files[@]} -eq 0 ]]; then
  echo "lint: no files to check"
  exit 0
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
printf '%s\n' "${files[@]}" |
  xargs -P "$JOBS" -n 1 "$TIDY" -p "$BUILD_DIR" --quiet \
    --extra-arg=-Wno-unknown-warning-option 2>/dev/null >"$out" || true
# A header's finding is reported once per file that includes it: keep each once.
findings=$(grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error):' "$out" | sort -u || true)
if [[ -n "$findings" ]]; then
  awk '!seen[$0]++' "$out" | grep -v '^[0-9]* warnings\? generated' || true
  echo "lint: findings per module:"
  sed -E "s#^$PWD/##; s#^([a-z_]+)/.*\[([a-z0-9.,-]+)\]\$#\1 \2#" <<<"$findings" |
    awk '{n[$1]++} END {for (m in n) printf "  %-14s %d\n", m, n[m]}' | sort
  echo "lint: $(wc -l <<<"$findings") finding(s) in ${#files[@]} file(s)"
  exit 1
fi
echo "lint: ${#files[@]} file(s), no findings"
