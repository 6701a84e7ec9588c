#!/usr/bin/env bash
# Reproduces the vault figures in docs/benchmarks.md:
#  1. nd7 ship over a ~100 MB backlog against `zstd -3` alone on the same bytes
#     (same run, same file; ratio = zstd's time / ship's time, so ≥ 0.5 means
#     ship runs at least half as fast as compressing alone);
#  2. 50 machines shipping at once, into one vault on SQLite, and into two
#     nd7-vault processes sharing one PostgreSQL database (each machine enrolled
#     through one and shipping through the other): every batch stored once,
#     nothing lost, throughput, and the servers' p50/p99 time per batch
#     (ratio = PostgreSQL's figure / SQLite's, same run);
#  3. a session of SIZE_GB (default 5) GB shipped, then pulled back by
#     `nd7 admin pull`: peak RSS of the vault and of the client (ratio = peak
#     RSS / session bytes), and the pull's time against the ship's.
# Needs zstd, sqlite3, python3 and PostgreSQL (apt-get install zstd sqlite3
# python3 postgresql), and SIZE_GB * 2.5 GB of disk in WORKDIR.
# usage: [SIZE_GB=5] [PARTS="1 2 3"] bench/vault.sh [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in zstd sqlite3 python3; do
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

start_vault() { # $1 = database, $2 = its key, $3 = log, then serve's options; sets VPID, URL
  : > "$W/listen"   # the last server's line must not be read as this one's
  "$BIN/nd7-vault" serve --db "$1" --key "$2" --listen 127.0.0.1:0 "${@:4}" > "$W/listen" 2> "$3" &
  VPID=$!
  while ! grep -q listening "$W/listen" 2>/dev/null; do sleep 0.05; done
  URL=$(sed -n 's/^listening on //p' "$W/listen")
}
vault_key() { # $1 = database, $2 = key file; sets VKEY
  rm -f "$2"
  VKEY=$("$BIN/nd7-vault" key --db "$1" --key "$2")
}
org_setup() { # $1 = database, $2 = its key
  rm -rf "$W/org"; mkdir -p "$W/org"
  FP=$("$BIN/nd7" admin org-key --out "$W/org/org.key")
  REC=$("$BIN/nd7" admin age-key --out "$W/org/admin.age")
  "$BIN/nd7" admin sign-recipients --org-key "$W/org/org.key" --version 1 --vault-key "$VKEY" "$REC" > "$W/org/recipients"
  "$BIN/nd7-vault" recipients --db "$1" --key "$2" "$W/org/recipients" > /dev/null
}
enroll() { # $1 = state dir, $2 = the server
  XDG_STATE_HOME=$1 "$BIN/nd7" enroll "${2:-$URL}" --token "$("$BIN/nd7" admin enrol-token --org-key "$W/org/org.key" --recipients "$W/org/recipients")" --fingerprint "$FP" > /dev/null
}

echo "== machine"
echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
echo "$(cargo --version); $(zstd --version)"

part() { case " ${PARTS:-1 2 3} " in *" $1 "*) return 0 ;; esac; return 1; }

if part 1; then
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
  vault_key "$db" "$db.key"; start_vault "$db" "$db.key" "$db.log"; org_setup "$db" "$db.key"
  rm -rf "$W/one/nd7/vault" "$S/backlog/shipped" "$S/backlog/chain.key"
  rm -f "$S/backlog/receipt"
  enroll "$W/one"
  t2=$(now); XDG_STATE_HOME=$W/one "$BIN/nd7" ship > /dev/null 2>&1; t3=$(now)
  kill "$VPID"; wait "$VPID" 2>/dev/null || true
  awk -v z="$(sub "$t1" "$t0")" -v s="$(sub "$t3" "$t2")" -v b="$bytes" -v r="$round" \
    'BEGIN { printf "round %d: zstd -3 %.3f s (%.0f MB/s), nd7 ship %.3f s (%.0f MB/s): ship / zstd = %.2fx\n", r, z, b/z/1e6, s, b/s/1e6, z/s }'
done

fi

percentiles() { # stdin: server logs; $1 = label
  grep -ah '^POST /v1/batches 200' | awk '{sub(/ms$/, "", $4); print $4}' | sort -n | awk -v l="$1" '
    { t[NR] = $1 } END { printf "%s: server time per stored batch (%d requests): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
      l, NR, t[int(NR * 0.5 + 0.5)], t[int(NR * 0.99 + 0.5)], t[NR] }'
}
fifty() { # $1 = label, $2 = database, $3 = key, then the servers' URLs
  local label=$1 db=$2 key=$3; shift 3
  local urls=("$@") n=$#
  for m in $(seq 50); do
    rm -rf "$W/m$m"; mkdir -p "$W/m$m/nd7/sessions"
    sed -n 4p "$FIXTURE" | sed "s/4dc8a87d-d386-4e43-a1ee-15a0429dcdee/s$m/g" > "$W/payload-$m.json"
    "$BIN/examples/make_log" "$W/m$m/nd7/sessions" "s$m" 1000 "$W/payload-$m.json" "$W/text.1"
    enroll "$W/m$m" "${urls[$((m % n))]}"
    echo "${urls[$(((m + 1) % n))]}" > "$W/m$m/nd7/vault/server"
  done
  : > "$W/fifty.err"; rm -f "$W"/rc.*
  local pids=() t0 t1 bytes
  bytes=$(cat "$W"/m*/nd7/sessions/*/events.ndjson | wc -c)
  t0=$(now)
  for m in $(seq 50); do
    ( XDG_STATE_HOME=$W/m$m "$BIN/nd7" ship > /dev/null 2>> "$W/fifty.err"; echo $? > "$W/rc.$m" ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  t1=$(now)
  awk -v l="$label" -v w="$(sub "$t1" "$t0")" -v b="$bytes" -v bad="$(cat "$W"/rc.* | grep -cv '^0$' || true)" \
    -v e="$(wc -l < "$W/fifty.err")" 'BEGIN { printf "%s: wall time %.2f s, %.1f MB/s of log, %.0f entries/s; exit statuses other than 0: %d; stderr lines: %d\n",
      l, w, b / w / 1e6, 50000 / w, bad, e }'
}

if part 2; then
echo "== 2a. 50 machines ship at once into one vault on SQLite"
db=$W/fifty.db; rm -f "$db"*
vault_key "$db" "$db.key"; start_vault "$db" "$db.key" "$db.log" --entries-per-day 100000000; org_setup "$db" "$db.key"
fifty sqlite "$db" "$db.key" "$URL"
kill "$VPID"; wait "$VPID" 2>/dev/null || true
sqlite3 "$db" "SELECT 'sqlite: ' || COUNT(*) || ' entries stored (expected 50000), ' || COUNT(DISTINCT chain || ':' || seq) || ' distinct' FROM entries;"
sqlite3 "$db" "SELECT 'sqlite: ' || COUNT(*) || ' batches covering ' || SUM(last - first + 1) || ' entries' FROM batches;"
percentiles sqlite < "$db.log"

echo "== 2b. 50 machines ship at once through two vaults sharing one PostgreSQL database"
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$PGBIN/initdb" ] || { echo "bench: PostgreSQL is missing (apt-get install postgresql)" >&2; exit 2; }
PG=$(mktemp -d /tmp/nd7-bench-pg.XXXXXX); chmod 755 "$PG"
as_pg() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown nobody:nogroup "$PG"
as_pg "$PGBIN/initdb" --auth=trust --username=nd7 --no-sync -D "$PG/data" > /dev/null
as_pg "$PGBIN/pg_ctl" -D "$PG/data" -l "$PG/log" -o "-k $PG -c listen_addresses= -c max_connections=100" -w start > /dev/null
trap 'as_pg "$PGBIN/pg_ctl" -D "$PG/data" -m fast stop > /dev/null 2>&1; rm -rf "$PG"' EXIT
PGURL="postgresql:///postgres?host=$PG&user=nd7"
pgkey=$W/pg.key
vault_key "$PGURL" "$pgkey"; org_setup "$PGURL" "$pgkey"
start_vault "$PGURL" "$pgkey" "$W/pg1.log" --entries-per-day 100000000; P1=$VPID; U1=$URL
start_vault "$PGURL" "$pgkey" "$W/pg2.log" --entries-per-day 100000000; P2=$VPID; U2=$URL
fifty postgres "$PGURL" "$pgkey" "$U1" "$U2"
kill "$P1" "$P2"; wait "$P1" "$P2" 2>/dev/null || true
psql() { "$PGBIN/psql" -X -q -t -A -h "$PG" -U nd7 postgres -c "$1"; }
echo "postgres: $(psql "SELECT COUNT(*) || ' entries stored (expected 50000), ' || COUNT(DISTINCT (chain, seq)) || ' distinct' FROM entries")"
echo "postgres: $(psql "SELECT COUNT(*) || ' batches covering ' || SUM(last - first + 1) || ' entries' FROM batches")"
cat "$W/pg1.log" "$W/pg2.log" | percentiles "postgres (two servers)"

fi

if part 3; then
echo "== 3. a ${SIZE_GB:=5} GB session shipped, then pulled back with bounded memory"
rm -rf "$W"/m* "$W/one"
S=$W/big/nd7/sessions; mkdir -p "$S"
sed -n 4p "$FIXTURE" | sed "s/4dc8a87d-d386-4e43-a1ee-15a0429dcdee/big/g" > "$W/payload.json"
# make_log's entries are ~2.9 KiB each.
N=$(awk -v g="$SIZE_GB" 'BEGIN { printf "%d", g * 1e9 / 2930 }')
"$BIN/examples/make_log" "$S" big "$N" "$W/payload.json" "$W/text"
F=$S/big/events.ndjson; bytes=$(stat -c %s "$F")
db=$W/big.db; rm -f "$db"*
vault_key "$db" "$db.key"
start_vault "$db" "$db.key" "$db.log" --entries-per-day 100000000000 --bytes-per-day 1000000000000; org_setup "$db" "$db.key"
enroll "$W/big"
# Peak RSS of a child, from getrusage (ru_maxrss, KiB).
peak() { python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)' "$@"; }
t0=$(now); read -r ship_kib ship_rc < <(XDG_STATE_HOME=$W/big peak "$BIN/nd7" ship); t1=$(now)
T=$("$BIN/nd7-vault" read-token --db "$db")
rm -rf "$W/pulled"
t2=$(now)
read -r pull_kib pull_rc < <(peak "$BIN/nd7" admin pull "$URL" --read-token "$T" --identity "$W/org/admin.age" \
  --fingerprint "$FP" --machine "$(cat "$W/big/nd7/vault/machine.id")" --session big --out "$W/pulled")
t3=$(now)
vault_kib=$(awk '/^VmHWM/ { print $2 }' "/proc/$VPID/status")
kill "$VPID"; wait "$VPID" 2>/dev/null || true
cmp -s "$F" "$W/pulled/big/events.ndjson" && same=identical || same=DIFFERENT
awk -v b="$bytes" -v n="$N" -v db="$(stat -c %s "$db")" -v s="$(sub "$t1" "$t0")" -v p="$(sub "$t3" "$t2")" -v sk="$ship_kib" -v pk="$pull_kib" \
  -v vk="$vault_kib" -v sr="$ship_rc" -v pr="$pull_rc" -v same="$same" 'BEGIN {
  printf "session: %.2f GB, %d entries; stored as %.2f GB; ship exit %d in %.1f s, pull exit %d in %.1f s (pull / ship = %.2fx); pulled copy %s\n",
    b / 1e9, n, db / 1e9, sr, s, pr, p, p / s, same
  printf "peak RSS: vault %.0f MB, nd7 admin pull %.0f MB, nd7 ship %.0f MB; vault RSS / session = %.4f, pull RSS / session = %.4f\n",
    vk / 1024, pk / 1024, sk / 1024, vk * 1024 / b, pk * 1024 / b }'
rm -rf "$W/pulled" "$W/big" "$db"*
fi
