#!/usr/bin/env bash
# Two builds of nd7 side by side, round-robin in one run so that noise on a
# shared machine lands on both alike: `nd7 run` start (a session running
# `true`), and the per-command cost of the exit (a session running 20
# `nd7-exec true`, or 5 `git status` through nd7-exec, minus the start).
# usage: bench/compare.sh OLD_DIR NEW_DIR [WORKDIR] [RUNS]
#   OLD_DIR, NEW_DIR: directories each holding nd7 and nd7-exec (release builds)
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$(realpath "$1")
NEW=$(realpath "$2")
cargo build --quiet --release --example procbench
PB=$PWD/target/release/examples/procbench
W=${3:-$(mktemp -d)}
RUNS=${4:-40}
mkdir -p "$W"
: > "$W/empty"

# The same mid-sized repository as bench/exit.sh.
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
  git -C "$REPO" ls-files '*.rs' | head -20 | while read -r f; do echo "// changed" >> "$REPO/$f"; done
fi

loop() { echo "for i in \$(seq $2); do $1 >/dev/null; done"; }
cd "$REPO"
echo "== nd7 run true (start and end of a session)"
"$PB" "$RUNS" "$W/empty" "$OLD/nd7" run true :: "$NEW/nd7" run true
echo "== nd7 run with 20 x nd7-exec true"
"$PB" "$RUNS" "$W/empty" \
  "$OLD/nd7" run sh -c "$(loop "$OLD/nd7-exec true" 20)" :: \
  "$NEW/nd7" run sh -c "$(loop "$NEW/nd7-exec true" 20)"
echo "== nd7 run with 5 x git status through nd7-exec"
"$PB" "$((RUNS / 2))" "$W/empty" \
  "$OLD/nd7" run sh -c "$(loop "$OLD/nd7-exec 'git status --porcelain'" 5)" :: \
  "$NEW/nd7" run sh -c "$(loop "$NEW/nd7-exec 'git status --porcelain'" 5)"
