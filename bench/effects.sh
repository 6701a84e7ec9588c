#!/usr/bin/env bash
# The cost of observing what ran (issue 32, ADR-0110): an exec-heavy workload
# under nd7 run with the exec observer and without it (ND7_FAULT=no-ptrace,
# a test build's knob, so both sides are the same debug build, dependencies
# optimised), alternating, and nd7-exec true against bash -c true with the
# observer on.
# usage: bench/effects.sh [WORKDIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --bins --examples
ND7=$PWD/target/debug/nd7
EXEC=$PWD/target/debug/nd7-exec
PB=$PWD/target/debug/examples/procbench
W=${1:-$(mktemp -d)}
ROUNDS=${2:-5}
mkdir -p "$W/proj"
: > "$W/empty"

# A 200-file C project: one small function per file, linked into one program.
P=$W/proj
for i in $(seq 200); do
  printf 'int f%d(int x) { int s = 0; for (int i = 0; i < x; i++) s += i * %d; return s; }\n' "$i" "$i" > "$P/f$i.c"
done
{ echo 'int main(void) { return 0; }'; } > "$P/main.c"
cat > "$P/Makefile" <<'MK'
SRCS := $(wildcard *.c)
OBJS := $(SRCS:.c=.o)
prog: $(OBJS)
	cc -o $@ $^
%.o: %.c
	cc -O1 -c -o $@ $<
clean:
	rm -f *.o prog
MK

echo "== make -j2 of 200 C files under nd7 run: observed / not observed (alternating, $ROUNDS rounds)"
timed() { { /usr/bin/time -f %e bash -c "cd '$P' && make -s clean && $1 '$ND7' run make -s -j2 >/dev/null 2>&1"; } 2>&1; }
for r in $(seq "$ROUNDS"); do
  # Which goes first alternates, so a drift lands on both.
  if [ $((r % 2)) = 1 ]; then a=$(timed "env ND7_FAULT=no-ptrace"); b=$(timed ""); else b=$(timed ""); a=$(timed "env ND7_FAULT=no-ptrace"); fi
  echo "$a $b"
done > "$W/make.times"
awk '{ printf "round %d: without %.2f s, with %.2f s, ratio %.3f\n", NR, $1, $2, $2/$1 }' "$W/make.times"
off=$(cut -d' ' -f1 "$W/make.times" | sort -n | awk '{ a[NR]=$1 } END { print a[int((NR+1)/2)] }')
on=$(cut -d' ' -f2 "$W/make.times" | sort -n | awk '{ a[NR]=$1 } END { print a[int((NR+1)/2)] }')
awk -v off="$off" -v on="$on" 'BEGIN { printf "median: without %.2f s, with %.2f s, ratio %.3f\n", off, on, on/off }'

echo "== the log: bytes of effect:nd7 entries per exec, in one more observed run"
timed "" >/dev/null
last=$(ls -td "${XDG_STATE_HOME:-$HOME/.local/state}"/nd7/sessions/run-* | head -1)
python3 - "$last/events.ndjson" <<'PY'
import json, sys
execs = size = 0
for line in open(sys.argv[1], "rb"):
    e = json.loads(line)
    if e["source"] == "effect:nd7":
        size += len(line)
        execs += len(e["body"].get("execs", []))
print(f"{execs} execs, {size} bytes of effect:nd7 entries, {size / max(execs, 1):.0f} bytes per exec")
PY

echo "== nd7-exec true against bash -c true, observed (ratio to bash -c true)"
(cd "$P" && "$ND7" run "$PB" 200 "$W/empty" bash -c true :: "$EXEC" true) 2>/dev/null
echo "== the same, not observed"
(cd "$P" && ND7_FAULT=no-ptrace "$ND7" run "$PB" 200 "$W/empty" bash -c true :: "$EXEC" true) 2>/dev/null
