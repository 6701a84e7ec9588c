#!/usr/bin/env bash
# Reproduces the vault figures in docs/benchmarks.md:
#  1. nd7 ship over a ~100 MB backlog against `zstd -3` alone on the same bytes
#     (same run, same file; ratio = zstd's time / ship's time, so ≥ 0.5 means
#     ship runs at least half as fast as compressing alone);
#  2. 50 machines shipping at once into one vault: every batch stored once,
#     nothing lost, and the server's p50/p99 time per batch request.
# Needs zstd and sqlite3 (apt-get install zstd sqlite3). usage: bench/vault.sh [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in zstd sqlite3; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is missing (apt-get install $tool)" >&2; exit 2; }
done
cargo build --quiet --release --features vault-server --bins --examples
BIN=$PWD/target/release
W=${1:-$(mktemp -d)}
mkdir -p "$W"
FIXTURE=tests/fixtures/claude-code-2.1.197/hook-payloads.ndjson
# Entries carry 2 KiB slices of real text (this repository's Rust sources,
# repeated), so they compress like file contents and command output.
find src tests bench -name '*.rs' -print0 | sort -z | xargs -0 cat > "$W/text.1"
for _ in $(seq 20); do cat "$W/text.1"; done > "$W/text"
now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }

start_vault() { # $1 = database; sets VPID, URL, VKEY
  rm -f "$1.key"
  VKEY=$("$BIN/nd7-vault" key --db "$1")
  : > "$W/listen"   # the last server's line must not be read as this one's
  "$BIN/nd7-vault" serve --db "$1" --listen 127.0.0.1:0 --workers "${2:-4}" > "$W/listen" 2> "$1.log" &
  VPID=$!
  while ! grep -q listening "$W/listen" 2>/dev/null; do sleep 0.05; done
  URL=$(sed -n 's/^listening on //p' "$W/listen")
}
org_setup() { # $1 = database
  rm -rf "$W/org"; mkdir -p "$W/org"
  FP=$("$BIN/nd7" admin org-key --out "$W/org/org.key")
  REC=$("$BIN/nd7" admin age-key --out "$W/org/admin.age")
  "$BIN/nd7" admin sign-recipients --org-key "$W/org/org.key" --version 1 --vault-key "$VKEY" "$REC" > "$W/org/recipients"
  "$BIN/nd7-vault" recipients --db "$1" "$W/org/recipients" > /dev/null
}
enroll() { # $1 = state dir
  XDG_STATE_HOME=$1 "$BIN/nd7" enroll "$URL" --token "$("$BIN/nd7" admin enrol-token --org-key "$W/org/org.key")" --fingerprint "$FP" > /dev/null
}

echo "== machine"
echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
echo "$(cargo --version); $(zstd --version)"

echo "== 1. nd7 ship (signing each batch), ~100 MB backlog, against zstd -3 on the same file"
S=$W/one/nd7/sessions
mkdir -p "$S"
sed -n 4p "$FIXTURE" | sed "s/4dc8a87d-d386-4e43-a1ee-15a0429dcdee/backlog/g" > "$W/payload.json"
"$BIN/examples/make_log" "$S" backlog 36000 "$W/payload.json" "$W/text"
F=$S/backlog/events.ndjson
bytes=$(stat -c %s "$F")
echo "backlog: $bytes bytes, $(wc -l < "$F") entries; zstd -3 ratio $(zstd -3 -c "$F" | wc -c | awk -v b="$bytes" '{printf "%.3f", $1 / b}')"
cat "$F" > /dev/null
for round in 1 2 3; do
  t0=$(now); zstd -3 -q -c "$F" > /dev/null; t1=$(now)
  db=$W/one-$round.db; rm -f "$db"*
  start_vault "$db"; org_setup "$db"
  rm -rf "$W/one/nd7/vault" "$S/backlog/shipped" "$S/backlog/chain.key"
  rm -f "$S/backlog/receipt"
  enroll "$W/one"
  t2=$(now); XDG_STATE_HOME=$W/one "$BIN/nd7" ship > /dev/null 2>&1; t3=$(now)
  kill "$VPID"; wait "$VPID" 2>/dev/null || true
  awk -v z="$(sub "$t1" "$t0")" -v s="$(sub "$t3" "$t2")" -v b="$bytes" -v r="$round" \
    'BEGIN { printf "round %d: zstd -3 %.3f s (%.0f MB/s), nd7 ship %.3f s (%.0f MB/s): ship / zstd = %.2fx\n", r, z, b/z/1e6, s, b/s/1e6, z/s }'
done

echo "== 2. 50 machines ship at once into one vault"
db=$W/fifty.db; rm -f "$db"*
start_vault "$db" 4; org_setup "$db"
for m in $(seq 50); do
  mkdir -p "$W/m$m/nd7/sessions"
  sed -n 4p "$FIXTURE" | sed "s/4dc8a87d-d386-4e43-a1ee-15a0429dcdee/s$m/g" > "$W/payload-$m.json"
  "$BIN/examples/make_log" "$W/m$m/nd7/sessions" "s$m" 1000 "$W/payload-$m.json" "$W/text.1"
  enroll "$W/m$m"
done
: > "$db.log"
rm -f "$W"/rc.*
pids=()
t0=$(now)
for m in $(seq 50); do
  ( XDG_STATE_HOME=$W/m$m "$BIN/nd7" ship > /dev/null 2>> "$W/fifty.err"; echo $? > "$W/rc.$m" ) &
  pids+=($!)
done
wait "${pids[@]}"
t1=$(now)
kill "$VPID"; wait "$VPID" 2>/dev/null || true
echo "wall time $(sub "$t1" "$t0") s; exit statuses other than 0: $(cat "$W"/rc.* | grep -cv '^0$' || true); stderr lines: $(wc -l < "$W/fifty.err" 2>/dev/null || echo 0)"
sqlite3 "$db" "SELECT COUNT(*) || ' entries stored (expected ' || (50 * 1000) || '), ' || COUNT(DISTINCT machine || session || seq) || ' distinct' FROM entries;"
sqlite3 "$db" "SELECT COUNT(*) || ' batches covering ' || SUM(last - first + 1) || ' entries' FROM batches;"
grep -a '^POST /v1/batches 200' "$db.log" | awk '{sub(/ms$/, "", $4); print $4}' | sort -n | awk '
  { t[NR] = $1 } END { printf "server time per stored batch (%d requests): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
    NR, t[int(NR * 0.5 + 0.5)], t[int(NR * 0.99 + 0.5)], t[NR] }'
grep -a '^GET /v1/head' "$db.log" | awk '{sub(/ms$/, "", $4); print $4}' | sort -n | awk '
  { t[NR] = $1 } END { printf "server time per head request (%d requests): p50 %.1f ms, p99 %.1f ms\n",
    NR, t[int(NR * 0.5 + 0.5)], t[int(NR * 0.99 + 0.5)] }'
