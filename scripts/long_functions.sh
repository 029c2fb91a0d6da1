#!/usr/bin/env bash
# Lists the functions longer than a limit (default 80 lines, first to last line) in ferry's own
# sources, longest first: "LINES FILE:LINE NAME". Lambdas count as part of their enclosing
# function; "[reason given]" marks one with a "Long for a reason" comment in the 4 lines above it.
# Uses Universal Ctags (apt-get install universal-ctags); not part of the test command.
#   scripts/long_functions.sh [--limit N] [PATH...]   (default: every module folder)
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=80
if [[ "${1:-}" == "--limit" ]]; then
  LIMIT=$2
  shift 2
fi
if (($# == 0)); then
  set -- adapters common config gateway gguf ledger local_engine model_format model_tools \
    policies replay tokenizer
fi
if ! command -v ctags >/dev/null || ! ctags --version | grep -q Universal; then
  echo "long_functions: Universal Ctags not found (apt-get install universal-ctags)" >&2
  exit 2
fi
# Generated tables are data, not functions to split.
find "$@" -name '*.cpp' -o -name '*.h' | grep -v '_table\.\|_data\.' | sort |
  xargs ctags --languages=C++ --kinds-C++=f --fields=+ne -o - |
  awk -F '\t' -v limit="$LIMIT" '
    $1 !~ /^__anon/ {
      line = ""; end = ""; scope = ""
      for (i = 4; i <= NF; ++i) {
        if ($i ~ /^line:/) line = substr($i, 6)
        else if ($i ~ /^end:/) end = substr($i, 5)
        else if ($i ~ /^(class|struct|namespace):/) { scope = $i; sub(/^[a-z]+:/, "", scope) }
      }
      if (line == "" || end == "") next
      n = end - line + 1
      name = scope == "" ? $1 : scope "::" $1
      sub(/^ferry::/, "", name)
      gsub(/__anon[0-9a-f]+::/, "", name)
      if (n > limit) printf "%5d %s:%s %s\n", n, $2, line, name
    }' | sort -rn |
  while read -r n at name; do
    file=${at%%:*} line=${at##*:}
    reason=""
    if sed -n "$((line > 4 ? line - 4 : 1)),$((line - 1))p" "$file" | grep -q "Long for a reason"; then
      reason=" [reason given]"
    fi
    printf '%5d %s %s%s\n' "$n" "$at" "$name" "$reason"
  done
