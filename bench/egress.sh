#!/usr/bin/env bash
# The cost of nd7's egress proxy (issue 31), each figure a ratio against a
# baseline measured in the same run, all on this machine's loopback:
#   1. a request's time (curl's time_total, median of N) to a local listener:
#      directly, outside nd7 run, vs through the proxy, inside nd7 run;
#   2. a 200 MB download's throughput, the same two ways;
#   3. nd7 run's start (nd7 run true), with the network namespace and proxy
#      vs without (ND7_FAULT=no-netns, a test build's knob: needs a debug
#      build or --features fault-injection).
# Needs curl and python3. Run as the account nd7 runs as.
# usage: bench/egress.sh [N]       (default N = 200; ND7=path/to/nd7 to skip the release build)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
for tool in curl python3; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is missing" >&2; exit 2; }
done
if [ -z "${ND7:-}" ]; then
  cargo build --quiet --release --features fault-injection --bins
  ND7=$PWD/target/release/nd7
fi
W=$(mktemp -d)
trap 'kill $server 2>/dev/null; rm -rf "$W"' EXIT
head -c 200000000 /dev/zero > "$W/big"
echo hi > "$W/small"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
(cd "$W" && exec python3 -m http.server --bind 127.0.0.1 "$port" >/dev/null 2>&1) &
server=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/small" >/dev/null && break; sleep 0.05; done
cat > "$W/probe.sh" <<EOF
#!/usr/bin/env bash
for i in \$(seq $N); do curl -s -o /dev/null -w '%{time_total}\n' http://localhost:$port/small; done > "\$1.small"
curl -s -o /dev/null -w '%{speed_download}\n' http://localhost:$port/big > "\$1.big"
EOF
chmod +x "$W/probe.sh"
median() { sort -g "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "== machine: $(nproc) cores, kernel $(uname -r)"
# Direct, outside nd7 run.
"$W/probe.sh" "$W/direct"
# Through the proxy: the listener allowed by a line added to ~/.nd7/grants
# for this run, then taken out again.
grants=$HOME/.nd7/grants
mkdir -p "$HOME/.nd7"
saved=$W/grants.saved
[ -e "$grants" ] && cp "$grants" "$saved"
restore() { if [ -e "$saved" ]; then cp "$saved" "$grants"; else rm -f "$grants"; fi; }
printf 'net localhost:%s\n' "$port" >> "$grants"
(cd "$W" && "$ND7" run ./probe.sh "$W/proxied" 2>/dev/null) || { restore; exit 1; }
restore
d=$(median "$W/direct.small"); p=$(median "$W/proxied.small")
echo "1. request time, median of $N: direct $(awk -v x="$d" 'BEGIN{printf "%.3f", x*1000}') ms, through the proxy $(awk -v x="$p" 'BEGIN{printf "%.3f", x*1000}') ms: +$(awk -v a="$p" -v b="$d" 'BEGIN{printf "%.3f", (a-b)*1000}') ms"
db=$(cat "$W/direct.big"); pb=$(cat "$W/proxied.big")
echo "2. 200 MB download: direct $(awk -v x="$db" 'BEGIN{printf "%.0f", x/1e6}') MB/s, through the proxy $(awk -v x="$pb" 'BEGIN{printf "%.0f", x/1e6}') MB/s: $(awk -v a="$pb" -v b="$db" 'BEGIN{printf "%.2f", a/b}')x"
cd "$W"
# 3. nd7 run's start, alternating with and without, 30 of each; medians.
for i in $(seq 30); do
  for mode in with without; do
    fault=; [ "$mode" = without ] && fault=no-netns
    t0=$(date +%s%N); ND7_FAULT=$fault "$ND7" run true 2>/dev/null; t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000 )) >> "$W/start.$mode"
  done
done
sw=$(median "$W/start.with"); so=$(median "$W/start.without")
echo "3. nd7 run true, median of 30: without egress $(awk -v x="$so" 'BEGIN{printf "%.1f", x/1000}') ms, with $(awk -v x="$sw" 'BEGIN{printf "%.1f", x/1000}') ms: $(awk -v a="$sw" -v b="$so" 'BEGIN{printf "%.2f", a/b}')x"
