#!/usr/bin/env bash
# What the hooks' door costs: `nd7 record` handing its payload to nd7 run
# (which appends it to the run's log) against `nd7 record` appending directly,
# and the same two for `nd7-record` (what the hooks setup and nd7 run wire
# start, ADR-0151), all started inside one nd7 run session, round-robin, so
# noise lands on all alike. The direct one writes a log under the project (writable there) and
# has ND7_RUN removed, so it does not look for the door (set, even empty, the
# variable sends a hook to the door).
# usage: bench/record.sh [WORKDIR] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --locked --release --bin nd7 --bin nd7-exec --bin nd7-record --example procbench
ND7=$PWD/target/release/nd7
REC=$PWD/target/release/nd7-record
PB=$PWD/target/release/examples/procbench
W=${1:-$(mktemp -d)}
RUNS=${2:-1000}
mkdir -p "$W"
W=$(cd "$W" && pwd -P)
# A real PostToolUse payload (Bash, with its response), about 600 bytes.
sed -n 4p tests/fixtures/claude-code-2.1.197/hook-payloads.ndjson > "$W/payload.json"
echo "== load: $(uptime)"
echo "== nd7 record, nd7-record: direct append against through nd7 run's door (ratio to the first)"
(cd "$W" && "$ND7" run "$PB" "$RUNS" "$W/payload.json" \
  -ND7_RUN= "XDG_STATE_HOME=$W/direct" "$ND7" record :: "$ND7" record \
  :: -ND7_RUN= "XDG_STATE_HOME=$W/direct-record" "$REC" :: "$REC")
echo "entries: direct $(cat "$W"/direct/nd7/sessions/*/events.ndjson | wc -l)," \
  "nd7-record direct $(cat "$W"/direct-record/nd7/sessions/*/events.ndjson | wc -l)," \
  "door $(grep -c intent:claude-code "${XDG_STATE_HOME:-$HOME/.local/state}"/nd7/sessions/"$(ls -t "${XDG_STATE_HOME:-$HOME/.local/state}"/nd7/sessions | grep '^run-' | head -1)"/events.ndjson)"
