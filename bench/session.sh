#!/usr/bin/env bash
# A whole scripted session with the real Claude Code (from npm, against the
# tests' local Messages API): bare, with nd7 setup's hooks, and under nd7 run,
# round-robin. Needs what tests/it/e2e needs (npm, root or user namespaces).
# usage: bench/session.sh [ROUNDS]      (ND7_E2E_CLAUDE_VERSION picks the version)
set -euo pipefail
cd "$(dirname "$0")/.."
ND7_BENCH_ROUNDS=${1:-5} cargo test --quiet --release --features vault-server,self-update --test it \
  e2e::bench_whole_session_under_nd7_run_against_bare -- --ignored --nocapture --test-threads=1 2>&1 \
  | grep -E 'Claude Code|median|under nd7 run /'
