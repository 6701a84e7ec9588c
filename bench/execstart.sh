#!/usr/bin/env bash
# What the exit costs a Bash command (issue 32: `nd7-exec true` at most 1.5x
# `bash -c true`, the exec observer on): inside one `nd7 run` session of a
# release build, round-robin (bench/procbench.rs: medians, ratio to the
# first), `bash -c true`, `nd7-exec true`, `nd7-exec --help` (its start and
# nothing else) and bench/two_starts.c (a static program that starts
# `bash -c true` and waits: the floor of any exit that is a process of its
# own). Each binary is dropped from the page cache first, so all are read
# back alike (how a file entered the cache changes its start by up to 0.2x,
# docs/benchmarks.md 2026-12-06).
# usage: [chrt -f 10] bench/execstart.sh [WORKDIR] [RUNS]   (defaults: a new
# temporary directory, 500). ND7_EXEC_BEFORE=PATH adds another nd7-exec (a
# build of main, say) for a before/after in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
CC=${CC:-$(command -v cc || command -v gcc || true)}
[ -n "$CC" ] || { echo "bench: no C compiler (cc or gcc) for bench/two_starts.c" >&2; exit 2; }
cargo build --quiet --locked --release --bin nd7 --bin nd7-exec --example procbench
ND7=$PWD/target/release/nd7
EXEC=$PWD/target/release/nd7-exec
PB=$PWD/target/release/examples/procbench
W=${1:-$(mktemp -d)}
RUNS=${2:-500}
mkdir -p "$W"
W=$(cd "$W" && pwd -P)
: > "$W/empty"
"$CC" -O2 -static -o "$W/two_starts" bench/two_starts.c
BEFORE=()
if [ -n "${ND7_EXEC_BEFORE:-}" ]; then
  BEFORE=(:: "$ND7_EXEC_BEFORE" true)
fi
python3 - "$ND7" "$EXEC" "$W/two_starts" ${ND7_EXEC_BEFORE:+"$ND7_EXEC_BEFORE"} <<'PY'
import os, sys
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)  # only clean pages leave the cache
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PY
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== inside nd7 run, observed: bash -c true, nd7-exec true, nd7-exec's start alone, two starts; $RUNS runs each (ratio to bash -c true)"
(cd "$W" && "$ND7" run "$PB" "$RUNS" "$W/empty" bash -c true :: "$EXEC" true :: "$EXEC" --help \
  :: "$W/two_starts" "${BEFORE[@]}") 2>&1 | grep 'µs'
