#!/usr/bin/env bash
# Reproduces the figures in docs/benchmarks.md. Needs hyperfine and b3sum
# (Debian: apt-get install hyperfine b3sum) and about 2 GB of disk.
# usage: bench/run.sh [WORKDIR]     (default: a new temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in hyperfine b3sum; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is missing (apt-get install $tool)" >&2; exit 2; }
done
cargo build --quiet --release --bins --examples
ND7=$PWD/target/release/nd7
EX=$PWD/target/release/examples
W=${1:-$(mktemp -d)}
mkdir -p "$W/state/nd7/sessions"
SESSIONS=$W/state/nd7/sessions
export XDG_STATE_HOME=$W/state
FIXTURE=tests/fixtures/claude-code-2.1.197/hook-payloads.ndjson
# A real PostToolUse payload (Bash, with its response), about 600 bytes.
payload_for() { sed -n 4p "$FIXTURE" | sed "s/4dc8a87d-d386-4e43-a1ee-15a0429dcdee/$1/g" > "$W/payload-$1.json"; }
count() { wc -l < "$SESSIONS/$1/events.ndjson"; }

echo "== machine"
echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
echo "$(cargo --version); $(hyperfine --version); $(b3sum --version)"
df -hT "$W" | tail -1

echo "== building logs"
for s in small big crowd; do payload_for "$s"; done
"$EX/make_log" "$SESSIONS" small 100 "$W/payload-small.json"
"$EX/make_log" "$SESSIONS" big 1000000 "$W/payload-big.json"
"$EX/make_log" "$SESSIONS" crowd 100000 "$W/payload-crowd.json"
ls -l "$SESSIONS"/big/events.ndjson

echo "== 1. nd7 record on a 100-entry vs a 1,000,000-entry session (ratio: big / small)"
"$EX/procbench" 1000 "$W/payload-small.json" "$ND7" record :: "<$W/payload-big.json" "$ND7" record

echo "== 2. nd7 record against a bare read-stdin-and-append process (ratio: nd7 / baseline)"
"$EX/procbench" 1000 "$W/payload-small.json" "$EX/baseline_append" "$W/baseline.ndjson" :: "$ND7" record

echo "== 3. nd7 verify against b3sum on the same 1,000,000-entry file"
F=$SESSIONS/big/events.ndjson
hyperfine -N --warmup 2 --runs 10 --export-csv "$W/verify.csv" \
  "b3sum --num-threads 1 $F" "b3sum $F" \
  "$ND7 verify --threads 1 big" "$ND7 verify --threads 2 big" >/dev/null
awk -F, -v bytes="$(stat -c %s "$F")" 'NR>1 {
  gsub(/"/, "", $1); t[NR-1]=$2; name[NR-1]=$1
} END {
  for (i = 1; i <= 4; i++) printf "%8.3f s  %6.0f MB/s  %s\n", t[i], bytes / t[i] / 1e6, name[i];
  printf "verify, 1 thread  / b3sum, 1 thread : %.2fx\n", t[1] / t[3];
  printf "verify, 2 threads / b3sum, 1 thread : %.2fx\n", t[1] / t[4];
  printf "verify, 2 threads / b3sum, 2 threads: %.2fx\n", t[2] / t[4];
}' "$W/verify.csv"

echo "== 4. 200 recorder processes at once onto one 100,000-entry session"
before=$(count crowd)
rm -f "$W"/rc.*
for i in $(seq 200); do
  ( "$ND7" record < "$W/payload-crowd.json" 2>>"$W/crowd.err"; echo $? > "$W/rc.$i" ) &
done
wait
nonzero=$(cat "$W"/rc.* | grep -cv '^0$' || true)
after=$(count crowd)
echo "exit statuses other than 0: $nonzero; entries $before -> $after (moved by $((after - before)))"
echo "stderr lines: $(wc -l < "$W/crowd.err")"
"$ND7" verify crowd | head -1
