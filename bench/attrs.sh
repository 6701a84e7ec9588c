#!/bin/bash
# What the keeper's round trip costs a change of a file's mode or times
# (ADR-0094): attrbench unconfined, then under `nd7 run`, alternating, in a
# scratch project. Run as the account nd7 runs for (HOME its own), from the
# repository. usage: bench/attrs.sh [CALLS] [ROUNDS]
set -euo pipefail
calls=${1:-20000}
rounds=${2:-3}
cargo build --quiet --release --bin nd7 --bin nd7-exec
cargo build --quiet --release --example attrbench
nd7=$PWD/target/release/nd7
bench=$PWD/target/release/examples/attrbench
proj=$(mktemp -d "${BENCH_DIR:-$HOME}/attrbench.XXXXXX")
trap 'rm -rf "$proj"' EXIT
cd "$proj"
echo x > f
for _ in $(seq "$rounds"); do
  echo "unconfined:"; "$bench" "$calls" f
  echo "nd7 run:"; "$nd7" run "$bench" "$calls" f 2>/dev/null
done
