#!/usr/bin/env bash
# The cost of observing what ran (issue 32, ADR-0110): an exec-heavy workload
# under nd7 run with the exec observer and without it (ND7_FAULT=no-ptrace,
# a test build's knob, so both sides are the same debug build, dependencies
# optimised), alternating, and nd7-exec true against bash -c true with the
# observer on. ND7_BEFORE=path/to/an/older/nd7 (with its nd7-exec beside it)
# adds a third side, measured in the same rounds: the ratios before and after
# a change, from one run.
# usage: [ND7=…] [ND7_BEFORE=…] [ONLY=cargo] bench/effects.sh [WORKDIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --bins --examples
# ND7=path/to/nd7 measures another build (a release build with the
# fault-injection feature, which reads ND7_FAULT) in place of the debug one.
ND7=${ND7:-$PWD/target/debug/nd7}
BEFORE=${ND7_BEFORE:-}
EXEC=$(dirname "$ND7")/nd7-exec
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

# rounds NAME TIMER: ROUNDS rounds of TIMER for each side (not observed,
# observed, and ND7_BEFORE observed), in an order that turns each round so a
# drift lands on every side; prints each round and the medians.
rounds() {
  local name=$1 timer=$2 r a b c
  for r in $(seq "$ROUNDS"); do
    c=-
    case $((r % 3)) in
      1) a=$($timer "env ND7_FAULT=no-ptrace" "$ND7"); b=$($timer "" "$ND7"); [ -z "$BEFORE" ] || c=$($timer "" "$BEFORE") ;;
      2) b=$($timer "" "$ND7"); [ -z "$BEFORE" ] || c=$($timer "" "$BEFORE"); a=$($timer "env ND7_FAULT=no-ptrace" "$ND7") ;;
      0) [ -z "$BEFORE" ] || c=$($timer "" "$BEFORE"); a=$($timer "env ND7_FAULT=no-ptrace" "$ND7"); b=$($timer "" "$ND7") ;;
    esac
    echo "$a $b $c"
  done > "$W/$name.times"
  awk '{ printf "round %d: without %.2f s, with %.2f s, ratio %.3f", NR, $1, $2, $2/$1; if ($3 != "-") printf "; before %.2f s, ratio %.3f", $3, $3/$1; print "" }' "$W/$name.times"
  local off on before
  off=$(median 1 "$W/$name.times"); on=$(median 2 "$W/$name.times")
  awk -v off="$off" -v on="$on" 'BEGIN { printf "median: without %.2f s, with %.2f s, ratio %.3f\n", off, on, on/off }'
  if [ -n "$BEFORE" ]; then
    before=$(median 3 "$W/$name.times")
    awk -v off="$off" -v b="$before" 'BEGIN { printf "median before: %.2f s, ratio %.3f\n", b, b/off }'
  fi
}
median() { cut -d' ' -f"$1" "$2" | sort -n | awk '{ a[NR]=$1 } END { print a[int((NR+1)/2)] }'; }

timed() { { /usr/bin/time -f %e bash -c "cd '$P' && make -s clean && $1 '$2' run make -s -j2 >/dev/null 2>&1"; } 2>&1; }
# ONLY=cargo measures the cargo build alone (more rounds in the time).
if [ "${ONLY:-}" != cargo ]; then
  echo "== make -j2 of 200 C files under nd7 run: observed / not observed ($ROUNDS rounds)"
  rounds make timed
fi

# A small crate with no dependencies (20 modules), built offline with cargo's
# preset (its lock files).
C=$W/crate
mkdir -p "$C/src"
printf '[package]\nname = "small"\nversion = "0.1.0"\nedition = "2021"\n[dependencies]\n' > "$C/Cargo.toml"
for i in $(seq 20); do echo "pub fn f$i(x: u64) -> u64 { (0..x).map(|i| i * $i).sum() }" > "$C/src/m$i.rs"; done
for i in $(seq 20); do echo "pub mod m$i;"; done > "$C/src/lib.rs"
ctimed() { { /usr/bin/time -f %e bash -c "cd '$C' && rm -rf target && $1 '$2' run --preset cargo cargo build --offline -q >/dev/null 2>&1"; } 2>&1; }
echo "== cargo build of a small crate under nd7 run: observed / not observed ($ROUNDS rounds)"
rounds cargo ctimed

[ "${ONLY:-}" != cargo ] || exit 0
echo "== the log: bytes of effect:nd7 entries per exec, in one more observed run"
timed "" "$ND7" >/dev/null
last=$(ls -td "${XDG_STATE_HOME:-$HOME/.local/state}"/nd7/sessions/run-* | sed -n 1p)
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
