#!/usr/bin/env bash
# ferry's tokenizer against OpenAI's tiktoken (npm) on the same inputs, in the same run.
# Usage: bench/tokenizer_compare.sh [BUILD_DIR]   (needs tests/tokenizer/setup_refs.sh done)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
tests/tokenizer/setup_refs.sh
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
# Realistic: licences (English prose), C headers, Python, JSON, and gnupg's help in German,
# Russian, Greek, Japanese and Chinese (~0.4 MB).
cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 /usr/include/stdio.h \
    /usr/include/string.h /usr/lib/python3*/textwrap.py /usr/lib/python3*/json/*.py \
    tests/tokenizer/refs/package-lock.json /usr/share/gnupg/help.{de,ru,el,ja,zh_CN}.txt \
    2>/dev/null > "$data/realistic.txt"
# Pathological: random lowercase letters with no space (one pre-tokenizer piece): 20 KB for
# the side-by-side run (tiktoken is quadratic on it), 1 MB for ferry alone.
letters() {
  node -e 'let s="",x=12345;for(let i=0;i<+process.argv[1];i++){x=(x*1103515245+12345)%2147483648;s+=String.fromCharCode(97+x%26);}process.stdout.write(s)' "$1"
}
letters 20000 > "$data/pathological.txt"
letters 1000000 > "$data/pathological_1mb.txt"
# A ~2 KB chat: system prompt, three turns.
node -e '
const para = "The ferry leaves the harbour at seven, crosses the strait in forty minutes and returns at nine. ";
console.log(JSON.stringify({messages: [
  {role: "system", content: "You are a helpful travel assistant. Answer briefly and cite the timetable."},
  {role: "user", content: para.repeat(6) + "When is the last crossing?"},
  {role: "assistant", content: para.repeat(4)},
  {role: "user", content: para.repeat(6) + "And on Sundays?"}]}))' > "$data/chat.json"
ferry=$("$BUILD_DIR/bench/tokenizer_bench" "$data/realistic.txt" "$data/pathological.txt" "$data/chat.json" \
  tests/tokenizer/templates/llama3.jinja "$data/pathological_1mb.txt")
echo "$ferry"
tiktoken=$(node bench/tokenizer_tiktoken_bench.js "$data/realistic.txt" "$data/pathological.txt")
echo "$tiktoken"
# ferry against tiktoken, both measured above.
field_after() { awk -v enc="$2" -v word="$3" '$1 == "'"$1"'" && $2 == enc && /realistic/ {
  for (i = 1; i <= NF; i++) if ($i == word) { print $(i + 1); exit } }'; }
for enc in cl100k_base o200k_base; do
  fr=$(echo "$ferry" | field_after ferry "$enc" realistic)
  fp=$(echo "$ferry" | field_after ferry "$enc" pathological)
  ff=$(echo "$ferry" | awk -v enc="$enc" '$1 == "ferry" && $2 == enc && /fresh/ {
    for (i = 1; i <= NF; i++) if ($i == "fresh") { print $(i - 4); exit } }')
  tr=$(echo "$tiktoken" | field_after tiktoken "$enc" realistic)
  tp=$(echo "$tiktoken" | field_after tiktoken "$enc" pathological)
  awk -v enc="$enc" -v fr="$fr" -v ff="$ff" -v fp="$fp" -v tr="$tr" -v tp="$tp" 'BEGIN {
    printf "ferry/tiktoken %-11s realistic %.1fx (fresh thread %.1fx), pathological %.0fx\n", enc, fr / tr, ff / tr, fp / tp }'
done
