#!/usr/bin/env bash
# Two builds of nd7 side by side, in one run: `nd7 run true` (a session's
# start and end) round-robin in one procbench, and the exit (`nd7-exec true`,
# `nd7-exec 'git status --porcelain'`) in sessions of each build taken in
# turn, so that load on a shared machine lands on both alike.
# usage: bench/exit-compare.sh BEFORE_DIR AFTER_DIR [WORKDIR] [RUNS] [ROUNDS]
#   each DIR holds nd7 and nd7-exec (for example a copy of target/release of
#   each commit); WORKDIR holds the git repository bench/exit.sh builds.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release --examples
PB=$PWD/target/release/examples/procbench
BEFORE=$1 AFTER=$2
W=${3:-$(mktemp -d)}
RUNS=${4:-300}
ROUNDS=${5:-3}
mkdir -p "$W"
: > "$W/empty"
REPO=$W/repo
if [ ! -d "$REPO/.git" ]; then
  mkdir -p "$REPO"
  src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/ | head -1)
  for d in "$src"*/; do
    [ "$(find "$REPO" -type f | wc -l)" -ge 5000 ] && break
    cp -r "$d" "$REPO/"
  done
  git -C "$REPO" init -q
  git -C "$REPO" add -A
  git -C "$REPO" -c user.name=bench -c user.email=bench@localhost commit -qm repo
  git -C "$REPO" ls-files '*.rs' > "$W/files"
  head -20 "$W/files" | while read -r f; do echo "// changed" >> "$REPO/$f"; done
fi
echo "== nd7 run true: before, after (ratio to before)"
(cd "$REPO" && "$PB" $((RUNS / 3)) "$W/empty" "$BEFORE/nd7" run true :: "$AFTER/nd7" run true)
for round in $(seq "$ROUNDS"); do
  for side in BEFORE AFTER; do
    dir=${!side}
    echo "== round $round, $side: nd7-exec true, nd7-exec git status (ratios to sh -c true, git status)"
    (cd "$REPO" && "$dir/nd7" run "$PB" "$RUNS" "$W/empty" sh -c true :: "$dir/nd7-exec" true)
    (cd "$REPO" && "$dir/nd7" run "$PB" $((RUNS / 5)) "$W/empty" git status --porcelain :: "$dir/nd7-exec" 'git status --porcelain')
  done
done
