#!/usr/bin/env bash
# What reading Codex's rollout costs `nd7 record --agent codex`, against
# `nd7 record` for Claude Code in the same run (docs/benchmarks.md).
# usage: bench/codex.sh [RUNS] [WORKDIR]   (default: 500, a new temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-500}
cargo build --quiet --release --bins --examples
ND7=$PWD/target/release/nd7
EX=$PWD/target/release/examples
W=${2:-$(mktemp -d)}
export XDG_STATE_HOME=$W/state
# The rollouts lie where Codex puts them (nd7 reads no other file), one day
# directory each, and are anchored in the chain at each anchoring hook.
export CODEX_HOME=$W/codex
F=tests/fixtures/codex-0.171.0
ID=01a22ef1-63ed-77e0-99ae-cbf4bcd01d2c

# Rollouts: the captured one, with its first line (session_meta) padded back to
# the ~40 KB Codex's base instructions take; the same after 50 MB of earlier
# turns; and one whose call is followed by 20 MB, past the 16 MiB bound.
python3 - "$F" "$W" <<'EOF'
import json, sys
fixture, w = sys.argv[1], sys.argv[2]
lines = open(f"{fixture}/rollout.jsonl").read().splitlines()
meta = json.loads(lines[0])
meta["payload"]["base_instructions"] = {"text": "x" * 40000}
lines[0] = json.dumps(meta, separators=(",", ":"))
pad = json.dumps({"type": "event_msg", "payload": {"type": "agent_message", "message": "y" * 10000}})
call = next(i for i, l in enumerate(lines) if '"call_id":"call_mock_1_0"' in l and '"function_call"' in l)
import os
days = {"small": "01", "long": "02", "beyond": "03"}
def path(name):
    d = days[name]
    return f"{w}/codex/sessions/2026/12/{d}/rollout-2026-12-{d}T00-11-41-{meta['payload']['id']}.jsonl"
def write(name, text_lines):
    os.makedirs(os.path.dirname(path(name)), exist_ok=True)
    open(path(name), "w").write("\n".join(text_lines) + "\n")
write("small", lines)
write("long", lines[:call] + [pad] * 5000 + lines[call:])
done = next(i for i, l in enumerate(lines) if '"item_completed"' in l and '"call_mock_1_0"' in l)
write("beyond", lines[:done + 1] + [pad] * 2000)
hooks = [json.loads(l) for l in open(f"{fixture}/session-hooks.ndjson")]
def payload(name, event, rollout, call=None):
    p = next(h for h in hooks if h["hook_event_name"] == event and (call is None or h.get("tool_use_id") == call))
    p = dict(p, transcript_path=path(rollout))
    open(f"{w}/{name}.json", "w").write(json.dumps(p))
payload("post-small", "PostToolUse", "small", "call_mock_1_0")
payload("post-long", "PostToolUse", "long", "call_mock_1_0")
payload("post-beyond", "PostToolUse", "beyond", "call_mock_1_0")
payload("start", "SessionStart", "small")
payload("end", "SessionEnd", "small")
EOF
sed -n 4p tests/fixtures/claude-code-2.1.197/hook-payloads.ndjson > "$W/claude-post.json"
ls -lR "$W/codex/sessions" | grep rollout

echo "== machine"
echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"

echo "== nd7 record: Claude Code's PostToolUse, then Codex's events (ratio to the first)"
"$EX/procbench" "$RUNS" "$W/claude-post.json" "$ND7" record \
  :: "<$W/post-small.json" "$ND7" record --agent codex \
  :: "<$W/post-long.json" "$ND7" record --agent codex \
  :: "<$W/post-beyond.json" "$ND7" record --agent codex \
  :: "<$W/start.json" "$ND7" record --agent codex \
  :: "<$W/end.json" "$ND7" record --agent codex

echo "== the rollouts' anchors: entries, and bytes anchored per file"
grep -h '"kind":"transcript_' "$XDG_STATE_HOME/nd7/sessions/$ID/events.ndjson" |
  python3 -c 'import json,sys,collections
kinds = collections.Counter(); top = {}
for l in sys.stdin:
    e = json.loads(l); kinds[e["kind"]] += 1
    if e["kind"] == "transcript_anchor": top[e["body"]["path"]] = e["body"]["bytes"]
print(dict(kinds)); [print(p, b) for p, b in top.items()]'

echo "== what was recorded for the failing call (each rollout)"
grep -h '"tool_result"' "$XDG_STATE_HOME/nd7/sessions/$ID/events.ndjson" |
  python3 -c 'import json,sys
seen = set()
for l in sys.stdin:
    o = json.loads(l)["body"]["outcome"]; k = json.dumps(o)
    if k not in seen: seen.add(k); print(k)'
