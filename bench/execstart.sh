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
#
# The exit's work is `nd7 run`'s, so a before/after needs a session of each
# build: ND7_EXEC_BEFORE=DIR (a directory holding another build's `nd7` and
# `nd7-exec`, main's say), ND7_EXEC_MUSL=DIR (this branch's static musl
# build: `cargo build --release --target x86_64-unknown-linux-musl`, what
# the release archives ship) and ND7_EXEC_MUSL_BEFORE=DIR add sessions of
# those builds, each `nd7-exec` under its own `nd7 run`. The sessions take
# turns, ROUNDS times (default 3), so the machine's load falls on all alike;
# each session's ratios are to its own `bash -c true`.
# usage: [chrt -f 10] bench/execstart.sh [WORKDIR] [RUNS] [ROUNDS]
#   (defaults: a new temporary directory, 500 runs per session, 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
CC=${CC:-$(command -v cc || command -v gcc || true)}
[ -n "$CC" ] || { echo "bench: no C compiler (cc or gcc) for bench/two_starts.c" >&2; exit 2; }
cargo build --quiet --locked --release --bin nd7 --bin nd7-exec --example procbench
PB=$PWD/target/release/examples/procbench
W=${1:-$(mktemp -d)}
RUNS=${2:-500}
ROUNDS=${3:-3}
mkdir -p "$W"
W=$(cd "$W" && pwd -P)
: > "$W/empty"
"$CC" -O2 -static -o "$W/two_starts" bench/two_starts.c
# The same floor built on musl where musl-gcc is installed: glibc's static
# start asks the processor for its caches (`cpuid`, a trap to the hypervisor
# in a virtual machine), musl's does not.
MUSL_FLOOR=()
if command -v musl-gcc >/dev/null; then
  musl-gcc -O2 -static -o "$W/two_starts_musl" bench/two_starts.c
  MUSL_FLOOR=(:: "$W/two_starts_musl")
fi
# name=directory of an nd7 and its nd7-exec, in the order the sessions run.
BUILDS=("this=$PWD/target/release")
[ -n "${ND7_EXEC_BEFORE:-}" ] && BUILDS+=("before=$ND7_EXEC_BEFORE")
[ -n "${ND7_EXEC_MUSL:-}" ] && BUILDS+=("musl=$ND7_EXEC_MUSL")
[ -n "${ND7_EXEC_MUSL_BEFORE:-}" ] && BUILDS+=("musl-before=$ND7_EXEC_MUSL_BEFORE")
for build in "${BUILDS[@]}"; do
  dir=${build#*=}
  if [ ! -x "$dir/nd7" ] || [ ! -x "$dir/nd7-exec" ]; then echo "bench: $dir has no nd7 and nd7-exec" >&2; exit 2; fi
done
drop_cache() {
  python3 - "$@" <<'PY'
import os, sys
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)  # only clean pages leave the cache
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PY
}
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
echo "== each session: bash -c true, nd7-exec true, nd7-exec's start alone, two starts (glibc, then musl); $RUNS runs each (ratio to bash -c true)"
for round in $(seq "$ROUNDS"); do
  for build in "${BUILDS[@]}"; do
    name=${build%%=*}
    dir=${build#*=}
    drop_cache "$dir/nd7" "$dir/nd7-exec" "$W"/two_starts*
    echo "== round $round, $name ($dir), load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd "$W" && "$dir/nd7" run "$PB" "$RUNS" "$W/empty" bash -c true :: "$dir/nd7-exec" true \
      :: "$dir/nd7-exec" --help :: "$W/two_starts" "${MUSL_FLOOR[@]}") 2>&1 | grep 'µs'
  done
done
