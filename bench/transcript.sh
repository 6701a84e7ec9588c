#!/usr/bin/env bash
# What anchoring Claude Code's transcript costs a hook (docs/benchmarks.md):
# nd7 record of a Stop hook whose transcript grew by 100 KB, on a 50 MB and a
# 0.5 MB transcript, against nd7 record of a hook that anchors nothing; and
# the first anchor of a whole 50 MB transcript, which SessionEnd's 1.5 s
# must cover. Needs about 600 MB of disk.
# usage: bench/transcript.sh [WORKDIR] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release --bins --examples
W=${1:-$(mktemp -d)}
RUNS=${2:-500}
mkdir -p "$W"
W=$(cd "$W" && pwd -P)
echo "== machine"
echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
df -hT "$W" | tail -1
echo "== anchoring hooks against a hook that anchors nothing ($RUNS runs each, round-robin)"
target/release/examples/transcript_bench "$PWD/target/release/nd7" "$RUNS" "$W"
