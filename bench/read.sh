#!/usr/bin/env bash
# Reproduces the reading figures in docs/benchmarks.md: nd7 sessions over
# 10,000 sessions, nd7 show --json against jq on a 1,000,000-entry log, and
# nd7 search against ripgrep over about 1 GB of logs. Needs hyperfine, jq and
# ripgrep (Debian: apt-get install hyperfine jq ripgrep) and about 3 GB of disk.
# usage: bench/read.sh [WORKDIR]     (default: a new temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in hyperfine jq rg; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is missing" >&2; exit 2; }
done
cargo build --quiet --release --bins --examples
ND7=$PWD/target/release/nd7
EX=$PWD/target/release/examples
W=${1:-$(mktemp -d)}
FIXTURE=$PWD/tests/fixtures/claude-code-2.1.197/hook-payloads.ndjson
echo "== machine"
echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
echo "$(hyperfine --version); $(jq --version); $(rg --version | head -1)"

echo "== 1. nd7 sessions over 10,000 sessions (8 entries each)"
export XDG_STATE_HOME=$W/many
mkdir -p "$W/many/nd7/sessions"
[ -e "$W/many/nd7/sessions/.made" ] || { "$EX/make_sessions" "$W/many/nd7/sessions" 10000 "$FIXTURE"; touch "$W/many/nd7/sessions/.made"; }
hyperfine -N --runs 5 --prepare "rm -rf $W/many/nd7/index" \
  -n "nd7 sessions, no index yet (reads every log, writes the index)" "$ND7 sessions --no-pager" 2>&1 | grep -v '^ *$'
hyperfine -N --warmup 2 --runs 20 \
  -n "nd7 sessions (index built)" "$ND7 sessions --no-pager" \
  -n "nd7 sessions --json (index built)" "$ND7 sessions --json" \
  -n "find: stat every log" "find $W/many/nd7/sessions -name events.ndjson -printf '%s %T@\n'" 2>&1 | grep -v '^ *$'

echo "== 2. nd7 show --json against jq -c . on one 1,000,000-entry log"
export XDG_STATE_HOME=$W/big
mkdir -p "$W/big/nd7/sessions"
sed -n 4p "$FIXTURE" > "$W/payload.json"
[ -s "$W/big/nd7/sessions/big/events.ndjson" ] || "$EX/make_log" "$W/big/nd7/sessions" big 1000000 "$W/payload.json"
F=$W/big/nd7/sessions/big/events.ndjson
ls -l "$F"
hyperfine -N --warmup 1 --runs 3 \
  "$ND7 show --json big" "jq -c . $F" 2>&1 | grep -v '^ *$'

echo "== 3. nd7 search against rg over about 1 GB of logs"
export XDG_STATE_HOME=$W/text
S=$W/text/nd7/sessions
mkdir -p "$S"
find src tests docs -name '*.rs' -o -name '*.md' | sort | xargs cat > "$W/filler.txt"
if [ ! -e "$S/.made" ]; then
  for i in $(seq -w 1 400); do "$EX/make_log" "$S" "text-$i" 1000 "$W/payload.json" "$W/filler.txt"; done
  touch "$S/.made"
fi
du -sh --apparent-size "$S"
for pattern in 'fn verify_split' 'REWRITTEN-BY-HOOK'; do
  echo "-- pattern: $pattern ($(rg -c --no-filename "$pattern" "$S" | paste -sd+ | bc) matching lines)"
  hyperfine -N --output=pipe --warmup 1 --runs 5 \
    -n "nd7 search" "$ND7 search --json --no-pager '$pattern'" \
    -n "rg" "rg --no-messages '$pattern' $S" 2>&1 | grep -v '^ *$'
done
