#!/usr/bin/env bash
# The cost of a change to the sandbox, before and after in the same run:
# `nd7 run`'s start (until its program runs) and whole run, for both builds
# round-robin in one startbench, then the per-command exit (`nd7-exec true`
# and `git status` through it) inside a session of each build, alternating
# builds for several rounds so noise lands on both alike.
# usage: bench/startcompare.sh BASE_COMMIT [WORKDIR] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_COMMIT=${1:?usage: bench/startcompare.sh BASE_COMMIT [WORKDIR] [RUNS]}
W=${2:-$(mktemp -d)}
RUNS=${3:-300}
mkdir -p "$W"
: > "$W/empty"

cargo build --quiet --release --bins --examples
NEW=$PWD/target/release
PB=$NEW/examples/procbench
if [ ! -x "$W/base/target/release/nd7" ] || [ "$(cat "$W/base/commit" 2>/dev/null)" != "$BASE_COMMIT" ]; then
  rm -rf "$W/base" && mkdir -p "$W/base"
  git archive "$BASE_COMMIT" | tar -x -C "$W/base"
  (cd "$W/base" && cargo build --quiet --release --bins)
  echo "$BASE_COMMIT" > "$W/base/commit"
fi
OLD=$W/base/target/release

# The repository bench/exit.sh uses: about 5,000 files, twenty changed.
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
echo "base $BASE_COMMIT, new $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes'); repository: $(git -C "$REPO" ls-files | wc -l) files"

echo "== nd7 run: start and whole run, base, new, base again (ratio to the first)"
STAMP=$NEW/examples/stamp
# The base twice, around the new build. Each run of the first line follows a
# run of the same binary, as does no run of the other two: a start after the
# same binary is faster (its pages are warm), so compare the new build with
# the third line, or with the mean of the two.
(cd "$REPO" && "$NEW/examples/startbench" "$RUNS" "$OLD/nd7" run "$STAMP" :: "$NEW/nd7" run "$STAMP" \
  :: "$OLD/nd7" run "$STAMP")

echo "== inside a session of each build, alternating (ratio to bash -c true in the same session)"
for round in 1 2 3; do
  for build in base new; do
    dir=$OLD; [ $build = new ] && dir=$NEW
    echo "-- round $round, $build"
    (cd "$REPO" && "$dir/nd7" run "$PB" "$RUNS" "$W/empty" bash -c true :: "$dir/nd7-exec" true :: \
      "$dir/nd7-exec" 'git status --porcelain' 2>/dev/null)
  done
done
