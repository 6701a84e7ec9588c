#!/bin/bash
# What the keeper's look at every rename costs (ADR-0134): renamebench
# unconfined, then under `nd7 run` in a project that is a git repository (its
# .git/config held, so every rename stops for the keeper) and in one that is
# not (no configuration held: the keeper lets each go on at once), alternating.
# Run as the account nd7 runs for (HOME its own), from the repository.
# usage: [PROFILE=debug] bench/renames.sh [CALLS] [ROUNDS]
set -euo pipefail
calls=${1:-20000}
rounds=${2:-3}
profile=${PROFILE:-release}
flag=$([ "$profile" = release ] && echo --release || true)
cargo build --quiet $flag --bin nd7 --bin nd7-exec
cargo build --quiet $flag --example renamebench
nd7=$PWD/target/$profile/nd7
bench=$PWD/target/$profile/examples/renamebench
repo=$(mktemp -d "${BENCH_DIR:-$HOME}/renamebench.XXXXXX")
plain=$(mktemp -d "${BENCH_DIR:-$HOME}/renamebench.XXXXXX")
trap 'rm -rf "$repo" "$plain"' EXIT
git -C "$repo" init -q
for _ in $(seq "$rounds"); do
  echo "unconfined:"; "$bench" "$calls" "$repo"
  echo "nd7 run, a repository:"; (cd "$repo" && "$nd7" run "$bench" "$calls" . 2>/dev/null)
  echo "nd7 run, no repository:"; (cd "$plain" && "$nd7" run "$bench" "$calls" . 2>/dev/null)
done
