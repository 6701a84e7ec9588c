#!/usr/bin/env bash
# The vault under an anonymous flood (issue 34, ADR-0118), figures in
# docs/benchmarks.md. For each kind of flood of bench/flood.py (idle,
# keepalive, slowheader on plain HTTP; tlsstall on TLS), 20 loopback source
# addresses x 256 connections, reopened as soon as the vault closes one, are
# held against an `nd7-vault serve` with its default bounds (4096
# connections, 256 per peer, 1024 reserved); meanwhile 10 real `nd7 ship`
# runs (a new 20-entry session each) are timed. Baseline: 10 ships against
# the same vault with no flood, in the same run. Prints p50/p99 of each and
# the ratio flood p99 / baseline p99, and the vault's peak RSS.
# Needs python3 and openssl.
# usage: [PROFILE=release|debug] [KINDS="keepalive idle slowheader tlsstall"] bench/vault_flood.sh [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${PROFILE:-release}
if [ "$PROFILE" = release ]; then
  cargo build --quiet --release --features vault-server --bins --examples
else
  cargo build --quiet --features vault-server --bins --examples
fi
BIN=$PWD/target/$PROFILE
W=${1:-$(mktemp -d)}
mkdir -p "$W"
ulimit -n "$(ulimit -Hn)"
FIXTURE=tests/fixtures/claude-code-2.1.197/hook-payloads.ndjson
sed -n 4p "$FIXTURE" > "$W/payload.json"
now() { date +%s.%N; }

# A private CA and the vault's certificate for 127.0.0.1, signed by it.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=flood-ca \
  -keyout "$W/ca.key" -out "$W/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=vault \
  -keyout "$W/tls.key" -out "$W/tls.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > "$W/tls.ext"
openssl x509 -req -in "$W/tls.csr" -CA "$W/ca.pem" -CAkey "$W/ca.key" -CAcreateserial -days 2 \
  -extfile "$W/tls.ext" -out "$W/tls.pem" 2>/dev/null

start_vault() { # $1 = name, then serve's options; sets VPID, URL, PORT
  local db=$W/$1.db
  rm -f "$db"* "$W/$1.listen"
  VKEY=$("$BIN/nd7-vault" key --db "$db" --key "$db.key")
  "$BIN/nd7-vault" serve --db "$db" --key "$db.key" --listen 127.0.0.1:0 "${@:2}" > "$W/$1.listen" 2> "$W/$1.log" &
  VPID=$!
  while ! grep -q listening "$W/$1.listen" 2>/dev/null; do sleep 0.05; done
  URL=$(sed -n 's/^listening on //p' "$W/$1.listen")
  PORT=${URL##*:}
  mkdir -p "$W/org-$1"
  FP=$("$BIN/nd7" admin org-key --out "$W/org-$1/org.key")
  REC=$("$BIN/nd7" admin age-key --out "$W/org-$1/admin.age")
  "$BIN/nd7" admin sign-recipients --org-key "$W/org-$1/org.key" --version 1 --vault-key "$VKEY" "$REC" > "$W/org-$1/recipients"
  "$BIN/nd7-vault" recipients --db "$db" --key "$db.key" "$W/org-$1/recipients" > /dev/null
  local ca=()
  [ "${URL%%:*}" = https ] && ca=(--ca-cert "$W/ca.pem")
  XDG_STATE_HOME=$W/m-$1 "$BIN/nd7" enroll "$URL" "${ca[@]}" --fingerprint "$FP" \
    --token "$("$BIN/nd7" admin enrol-token --org-key "$W/org-$1/org.key" --recipients "$W/org-$1/recipients")" > /dev/null
}

N=0
ships() { # $1 = vault name; times 10 ships, prints "p50 p99" (seconds)
  local times=()
  for _ in $(seq 10); do
    N=$((N + 1))
    "$BIN/examples/make_log" "$W/m-$1/nd7/sessions" "flood-$N" 20 "$W/payload.json" > /dev/null
    local t0 t1
    t0=$(now)
    XDG_STATE_HOME=$W/m-$1 timeout 120 "$BIN/nd7" ship > /dev/null 2> "$W/ship.err" || { echo "ship failed: $(cat "$W/ship.err")" >&2; }
    t1=$(now)
    times+=("$(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.3f", a - b }')")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{ t[NR] = $1 } END { printf "%s %s\n", t[int((NR + 1) / 2)], t[NR] }'
}
hwm() { awk '/VmHWM/ { printf "%.0f MB", $2 / 1024 }' "/proc/$1/status"; }

echo "== machine"
echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), $PROFILE build"
echo "| vault | flood (20 addresses x 256) | held at the end, opened | ship p50 / p99 | baseline p50 / p99 | p99 ratio | vault peak RSS |"
for vault in plain tls; do
  if [ "$vault" = plain ]; then
    start_vault plain; kinds="keepalive idle slowheader"
  else
    start_vault tls --tls-cert "$W/tls.pem" --tls-key "$W/tls.key"; kinds=tlsstall
  fi
  for kind in $kinds; do
    case " ${KINDS:-keepalive idle slowheader tlsstall} " in *" $kind "*) ;; *) continue ;; esac
    read -r b50 b99 < <(ships "$vault")
    python3 bench/flood.py 127.0.0.1 "$PORT" "$kind" 20 256 > "$W/flood.out" &
    FPID=$!
    sleep 10
    read -r f50 f99 < <(ships "$vault")
    kill "$FPID"; wait "$FPID" || true
    ratio=$(awk -v a="$f99" -v b="$b99" 'BEGIN { printf "%.1f", a / b }')
    echo "| $vault | $kind | $(cat "$W/flood.out") | $f50 / $f99 s | $b50 / $b99 s | ${ratio}x | $(hwm "$VPID") |"
    sleep 2
  done
  grep -c "evicted" "$W/$vault.log" | sed "s/^/log lines of evictions ($vault): /"
  kill "$VPID"; wait "$VPID" 2>/dev/null || true
done
