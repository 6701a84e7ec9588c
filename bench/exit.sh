#!/usr/bin/env bash
# The per-command cost of the sandbox's exit on Linux: a command run through
# nd7-exec (which asks the unconfined nd7 run to start it under the session's
# rules) against the same command started directly inside the floor. Both run
# in one nd7 run session, round-robin, so noise lands on both alike.
# usage: bench/exit.sh [WORKDIR] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release --bins --examples
ND7=$PWD/target/release/nd7
EXEC=$PWD/target/release/nd7-exec
PB=$PWD/target/release/examples/procbench
W=${1:-$(mktemp -d)}
RUNS=${2:-500}
mkdir -p "$W"
: > "$W/empty"

# A mid-sized repository: crate sources from the cargo registry, about 5,000
# files, committed, then twenty files changed.
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
echo "repository: $(git -C "$REPO" ls-files | wc -l) files, $(du -sh "$REPO" | cut -f1)"

echo "== nd7-exec true against sh -c true and bash -c true (ratio to sh -c true)"
(cd "$REPO" && "$ND7" run "$PB" "$RUNS" "$W/empty" sh -c true :: bash -c true :: "$EXEC" true)
echo "== git status through nd7-exec against git status (ratio to git status)"
(cd "$REPO" && "$ND7" run "$PB" $((RUNS / 5)) "$W/empty" git status --porcelain :: "$EXEC" 'git status --porcelain')
