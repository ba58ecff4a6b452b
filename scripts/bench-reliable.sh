#!/usr/bin/env bash
# Reliable 1 GiB transfer over loopback: slipstream send/recv (file to file in /dev/shm,
# digest-verified end to end) against kernel TCP (iperf3, one stream, memory to memory and
# file to file with -F), alternating in the same run, REPEAT times each. Prints every run and
# the medians: throughput (Gbit/s) and CPU seconds per GB (user + system of sender and
# receiver processes together, from /usr/bin/time).
#
# Throughput: slipstream's is the sender's wall clock from start to the receiver's final
# acknowledgement (handshake, digest and close included); iperf3's is its own receiver-side
# figure (connection setup excluded), which favours TCP slightly.
#
# usage: scripts/bench-reliable.sh [SIZE_MIB=1024] [REPEAT=3]
# Extra slipstream options go in SLIPSTREAM_OPTS, e.g. "--datapath std" or "--mss 1500".
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-1024}
repeat=${2:-3}
bin=target/release/slipstream
cargo build --release --quiet
command -v iperf3 >/dev/null || { echo "iperf3 missing (apt-get install iperf3)" >&2; exit 1; }

dir=$(mktemp -d /dev/shm/ss-rel.XXXXXX)
trap 'rm -rf "$dir"' EXIT
head -c $((size_mib << 20)) /dev/urandom > "$dir/in.bin"
bytes=$((size_mib << 20))
port=48000
opts=${SLIPSTREAM_OPTS:-}

# CPU seconds (user + system) of both processes, from /usr/bin/time's two files.
cpu() { awk '{s += $1 + $2} END {print s}' "$dir/s.time" "$dir/r.time"; }

# slipstream: one run, prints "slipstream GBIT CPU_S_PER_GB"
run_slipstream() {
    rm -rf "$dir/out" && mkdir "$dir/out"
    port=$((port + 1))
    /usr/bin/time -f "%U %S" -o "$dir/r.time" $bin recv --quiet $opts "srt://:$port" "$dir/out/" >"$dir/r.log" 2>&1 &
    local rpid=$!
    sleep 0.3
    local t0 t1
    t0=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o "$dir/s.time" $bin send --quiet $opts "$dir/in.bin" "srt://127.0.0.1:$port" >"$dir/s.log" 2>&1
    t1=$(date +%s.%N)
    wait $rpid
    cmp -s "$dir/in.bin" "$dir/out/in.bin" || { echo "slipstream: output differs" >&2; cat "$dir/r.log" "$dir/s.log" >&2; exit 1; }
    python3 -c "import sys; b,t0,t1,c=map(float,sys.argv[1:]); print(f'slipstream {b*8/(t1-t0)/1e9:.3f} {c/(b/1e9):.3f}')" \
        "$bytes" "$t0" "$t1" "$(cpu)"
}

# iperf3: one run, prints "NAME GBIT CPU_S_PER_GB"; $1 = name, $2 = extra server args,
# $3 = extra client args
run_iperf3() {
    port=$((port + 1))
    rm -f "$dir/out.bin"
    /usr/bin/time -f "%U %S" -o "$dir/r.time" iperf3 -s -1 -p $port $2 >"$dir/r.log" 2>&1 &
    local rpid=$!
    sleep 0.3
    /usr/bin/time -f "%U %S" -o "$dir/s.time" iperf3 -c 127.0.0.1 -p $port -n "$bytes" -J $3 >"$dir/s.json" 2>"$dir/s.err"
    wait $rpid
    python3 -c "
import json, sys
d = json.load(open('$dir/s.json'))
bps = d['end']['sum_received']['bits_per_second']
b = float(sys.argv[2]); c = float(sys.argv[3])
print(f'{sys.argv[1]} {bps/1e9:.3f} {c/(b/1e9):.3f}')" "$1" "$bytes" "$(cpu)"
}

results=()
for i in $(seq "$repeat"); do
    r=$(run_iperf3 tcp-mem "" ""); echo "run $i: $r"; results+=("$r")
    r=$(run_iperf3 tcp-file "-F $dir/out.bin" "-F $dir/in.bin"); echo "run $i: $r"; results+=("$r")
    r=$(run_slipstream); echo "run $i: $r"; results+=("$r")
done
printf '%s\n' "${results[@]}" | python3 -c '
import sys, statistics as st
rows = [l.split() for l in sys.stdin if l.strip()]
names = []
for r in rows:
    if r[0] not in names:
        names.append(r[0])
med = {n: (st.median(float(r[1]) for r in rows if r[0] == n), st.median(float(r[2]) for r in rows if r[0] == n)) for n in names}
for n, (g, c) in med.items():
    print(f"median {n:10s} {g:6.2f} Gbit/s  {c:6.2f} CPU s/GB")
for n in ("tcp-mem", "tcp-file"):
    r = med["slipstream"][0] / med[n][0]
    print(f"ratio slipstream/{n} throughput: {r:.2f}x")
'
