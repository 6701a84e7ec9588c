#!/usr/bin/env bash
# bench/session.sh under `perf trace` (scheduler events only: forks, execs,
# exits), then each phase of the sessions it played: under nd7 run, the
# start (to the version probe, the probe, to Claude Code's exec), Claude
# Code's life and the end (Claude Code's exit to nd7 run's). Needs perf and
# what bench/session.sh needs; root or kernel.perf_event_paranoid <= 1.
# usage: bench/session-phases.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --quiet --release --locked --features vault-server,self-update --test it --no-run
test=$(cargo test --release --locked --features vault-server,self-update --test it --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys; [print(m["executable"]) for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"] == "it"]')
trace=$(mktemp)
ND7_BENCH_ROUNDS=${1:-5} perf trace --no-syscalls -o "$trace" \
  -e sched:sched_process_fork,sched:sched_process_exec,sched:sched_process_exit -- \
  "$test" e2e::bench_whole_session_under_nd7_run_against_bare --ignored --nocapture --test-threads=1 2>&1 \
  | grep -E 'Claude Code|median|under nd7 run /'
python3 bench/session_phases.py "$trace"
rm -f "$trace"
