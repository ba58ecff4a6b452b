#!/usr/bin/env bash
# Two (or more) builds of slipstream against each other over one emulated path, alternated
# run by run: a file from /dev/shm to /dev/shm through `slipstream netem` (1 Gbit/s each
# way, a one-BDP drop-tail queue). Prints, for every run, the packets the sender sent and
# retransmitted, the packets the emulator dropped on the way there (random loss and queue
# overflow), the packets the receiver got twice (retransmissions of packets that were not
# lost) and the goodput; then each build's medians. Needs root (network namespaces).
#
# usage: scripts/ab-netem.sh RTT_MS LOSS_PCT RUNS SIZE_MIB BUILD [BUILD...]
#   BUILD: a path to a slipstream binary, optionally NAME=PATH.
set -euo pipefail
rtt=$1 loss=$2 runs=$3 size=$4
shift 4
name=abnetem$$
dir=$(mktemp -d /dev/shm/ss-abnetem.XXXXXX)
cleanup() {
    "${bin:-true}" netem down "$name" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
head -c "${size}M" /dev/urandom >"$dir/in.bin"
mkdir "$dir/out"
for i in $(seq "$runs"); do
    for build in "$@"; do
        label=${build%%=*}
        bin=${build#*=}
        rm -f "$dir/out/in.bin" "$dir"/*.json
        "$bin" netem up "$name" --rate 1gbit --delay "$((rtt / 2))ms" --loss "$loss%" \
            --queue "$((125000 * rtt))" >/dev/null 2>"$dir/netem.err" || {
            cat "$dir/netem.err" >&2
            exit 1
        }
        ip netns exec "$name-b" "$bin" recv -q srt://:9000 "$dir/out/" --force \
            --stats-json "$dir/rx.json" >/dev/null 2>&1 &
        sleep 0.3
        ip netns exec "$name-a" "$bin" send -q "$dir/in.bin" srt://10.77.0.2:9000 \
            --stats-json "$dir/tx.json" >/dev/null 2>&1 || true
        wait || true
        "$bin" netem stats "$name" >"$dir/netem.txt"
        "$bin" netem down "$name" >/dev/null 2>&1
        python3 - "$dir" "$label" <<'EOF'
import json, os, sys
d, label = sys.argv[1:]
if not (os.path.exists(f"{d}/rx.json") and os.path.exists(f"{d}/tx.json")):
    print(f"{label} FAILED (an end wrote no statistics)")
    sys.exit()
rx, tx = json.load(open(f"{d}/rx.json")), json.load(open(f"{d}/tx.json"))
ab = next(l.split() for l in open(f"{d}/netem.txt") if l.startswith("a->b"))
dropped = int(ab[4]) + int(ab[5])
t, r = tx["connection"], rx["connection"]
print(f"{label} sent={t['pkts_sent']} retransmitted={t['pkts_retransmitted']} dropped={dropped} "
      f"received_twice={r['pkts_recv_dup']} gbit_per_s={rx['gbit_per_s']:.3f} "
      f"{'verified' if rx.get('verified') else 'UNVERIFIED'}")
EOF
    done
done | tee "$dir/runs.txt"
echo "medians:"
python3 "$(dirname "$0")/medians.py" "$dir/runs.txt"
