#!/usr/bin/env bash
# What one hook costs: `nd7-record` (what the hooks `nd7 setup` and `nd7 run`
# wire run, ADR-0151) and `nd7 record` (what older hooks and an nd7 without
# nd7-record beside it run) against a bare C program that reads standard input
# and appends it as one line (bench/bare_append.c), whole processes,
# round-robin in one run so noise lands on all alike (bench/procbench.rs:
# medians, ratio to the C program). Target (issue 30, item 9): at most 1.5x.
# Then nd7-record's page faults (/usr/bin/time) and the dynamic loader's
# relocations (LD_DEBUG=statistics), beside nd7 record's.
# usage: [chrt -f 10] bench/hookpath.sh [WORKDIR] [RUNS]   (defaults: a new
# temporary directory, 2000). ND7=PATH measures that nd7 binary (and the
# nd7-record beside it) instead of building this tree's; ND7_BEFORE=PATH adds
# another nd7 (a build of main, say) as a further command, for a before/after
# in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
CC=${CC:-$(command -v cc || command -v gcc || true)}
[ -n "$CC" ] || { echo "bench: no C compiler (cc or gcc) for bench/bare_append.c" >&2; exit 2; }
if [ -z "${ND7:-}" ]; then
  cargo build --quiet --locked --release --bin nd7 --bin nd7-record
  ND7=$PWD/target/release/nd7
fi
RECORD=$(dirname "$ND7")/nd7-record
[ -x "$RECORD" ] || { echo "bench: no nd7-record beside $ND7" >&2; exit 2; }
cargo build --quiet --locked --release --example procbench --example baseline_append
PB=$PWD/target/release/examples/procbench
# The same append as the smallest Rust program (bench/baseline_append.rs): what
# any Rust process pays before nd7's size and work (its runtime, libgcc_s).
RUST=$PWD/target/release/examples/baseline_append
W=${1:-$(mktemp -d)}
RUNS=${2:-2000}
mkdir -p "$W"
W=$(cd "$W" && pwd -P)
"$CC" -O2 -o "$W/bare_append" bench/bare_append.c
# A real PostToolUse payload (Bash, with its response), about 600 bytes.
sed -n 4p tests/fixtures/claude-code-2.1.197/hook-payloads.ndjson > "$W/payload.json"
# A state directory of its own; ND7_RUN removed, so nd7 record appends
# directly (set, even empty, it sends the hook to nd7 run's door).
NEW=(-ND7_RUN= "XDG_STATE_HOME=$W/state" "$ND7" record)
BEFORE=()
if [ -n "${ND7_BEFORE:-}" ]; then
  BEFORE=(:: -ND7_RUN= "XDG_STATE_HOME=$W/state-before" "$ND7_BEFORE" record)
fi
# Each binary dropped from the page cache, so all are read back alike: how a
# file entered the cache (a linker's writes, cp's, readahead) changes its
# start by up to 0.2x (docs/benchmarks.md, 2026-12-06, ADR-0145).
python3 - "$W/bare_append" "$RUST" "$ND7" "$RECORD" ${ND7_BEFORE:+"$ND7_BEFORE"} <<'PY'
import os, sys
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)  # only clean pages leave the cache
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PY
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r); $("$CC" --version | head -1)"
echo "== load: $(uptime)"
echo "== bare C, smallest Rust, nd7 record, nd7-record: read stdin, append; $RUNS runs each (ratio to C)"
stat -c '%n: %s bytes' "$ND7" "$RECORD"
"$PB" "$RUNS" "$W/payload.json" "$W/bare_append" "$W/bare.ndjson" :: "$RUST" "$W/rust.ndjson" \
  :: "${NEW[@]}" :: -ND7_RUN= "XDG_STATE_HOME=$W/state-record" "$RECORD" "${BEFORE[@]}"
echo "entries: bare $(wc -l < "$W/bare.ndjson"), nd7 record $(cat "$W"/state/nd7/sessions/*/events.ndjson | wc -l), nd7-record $(cat "$W"/state-record/nd7/sessions/*/events.ndjson | wc -l)"
XDG_STATE_HOME=$W/state "$ND7" verify --all | sed -n 2p
XDG_STATE_HOME=$W/state-record "$ND7" verify --all | sed -n 2p
# What each start costs the kernel and the dynamic loader, one hook each
# (the files now in the page cache).
echo "== page faults (minor) and the loader's relocations, one hook"
measure() { # measure LABEL COMMAND...
  local label=$1 faults stats; shift
  faults=$(env -u ND7_RUN XDG_STATE_HOME="$W/state-faults" /usr/bin/time -f %R "$@" < "$W/payload.json" 2>&1 >/dev/null | tail -1)
  stats=$(env -u ND7_RUN XDG_STATE_HOME="$W/state-faults" LD_DEBUG=statistics "$@" < "$W/payload.json" 2>&1 >/dev/null)
  echo "$label: $faults minor faults; relocations: $(sed -n 's/.* number of relocations: *\([0-9]*\).*/\1/p' <<<"$stats" | head -1) symbol," \
    "$(sed -n 's/.*number of relative relocations: *\([0-9]*\).*/\1/p' <<<"$stats" | head -1) relative"
}
measure "bare C" "$W/bare_append" "$W/faults.ndjson"
measure "nd7 record" "$ND7" record
measure "nd7-record" "$RECORD"
