#!/usr/bin/env bash
# Replays a stored Claude Code session (the hook payloads Claude Code 2.1.197 sent,
# kept in tests/fixtures) through
# `nd7 record`, verifies its chain, then shows verify catching a changed line.
# It records into a scratch state directory, not your own, unless you pass one.
# usage: scripts/demo.sh [STATE_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
ND7=${ND7:-$(command -v nd7 || echo "$HOME/.cargo/bin/nd7")}
[ -x "$ND7" ] || { echo "demo: nd7 is not installed (cargo install --locked --path .)" >&2; exit 2; }
export XDG_STATE_HOME=${1:-$(mktemp -d)}
FIXTURE=tests/fixtures/claude-code-2.1.197/hook-payloads.ndjson
SESSION=4dc8a87d-d386-4e43-a1ee-15a0429dcdee

echo "# recording $(wc -l < "$FIXTURE") hook payloads from Claude Code 2.1.197 into $XDG_STATE_HOME"
while IFS= read -r payload; do
  printf '%s\n' "$payload" | "$ND7" record
done < "$FIXTURE"
LOG=$XDG_STATE_HOME/nd7/sessions/$SESSION/events.ndjson

echo "# the log: seq, kind and event of each entry (nd7's own entries name their source)"
sed -E -e 's/^\{"seq":([0-9]+),.*"kind":"([a-z_]+)".*"hook_event_name":"([A-Za-z]+)".*/  \1  \2  \3/' \
  -e 's/^\{"seq":([0-9]+),.*"source":"([a-z]+:[a-z0-9-]+)","kind":"([a-z_]+)".*/  \1  \3  (\2)/' "$LOG"
echo "# (the fixture's transcript was written on another machine, so nd7 notes a transcript_gap: nothing to anchor)"

echo "# nd7 verify $SESSION"
"$ND7" verify "$SESSION"

echo "# change one byte of the model's output in a copy, and verify the copy"
COPY=$XDG_STATE_HOME/tampered-copy
mkdir -p "$COPY/$SESSION" && cp "$LOG" "$XDG_STATE_HOME/nd7/sessions/$SESSION/head" "$COPY/$SESSION/"
# The first entry that holds the model's output, wherever it falls in the log.
sed -i '0,/hello-from-model/s//hello-from-MODEL/' "$COPY/$SESSION/events.ndjson"
cmp -s "$LOG" "$COPY/$SESSION/events.ndjson" && { echo "demo: the copy was not changed" >&2; exit 1; }
if "$ND7" verify "$COPY/$SESSION"; then
  echo "demo: verify missed the change" >&2; exit 1
fi
echo "# verify refused the changed copy (exit 1), as it should"
