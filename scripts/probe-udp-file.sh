#!/usr/bin/env bash
# The floor of a file transfer over UDP on loopback (scripts/probe-udp-file.c: no protocol,
# one thread each end, the XXH3-128 digest both ends) beside kernel TCP (this binary's
# sendfile peer), each end's CPU per GB apart: what slipstream's loopback figure is measured
# against in docs/benchmarks.md. Cases alternate run by run, REPEAT times; prints every run and
# each case's medians. Needs gcc and libxxhash-dev; run as root (64 MiB socket buffers).
#
# usage: scripts/probe-udp-file.sh [SIZE_MIB=1024] [REPEAT=5]
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-1024}
repeat=${2:-5}
cargo build --release --quiet
dir=$(mktemp -d /dev/shm/ss-probe.XXXXXX)
trap 'rm -rf "$dir"' EXIT
gcc -O2 -o "$dir/probe" scripts/probe-udp-file.c -lxxhash
head -c $((size_mib << 20)) /dev/urandom >"$dir/in.bin"
size=$((size_mib << 20))
port=47500

# Memory this machine has not written lately costs the first writer several times more
# (the host backs it on first touch): write and free an output's worth before each run.
warm() { head -c "$size" /dev/zero >"$dir/scratch"; rm -f "$dir/scratch" "$dir/out.bin"; }

# case NAME RECV_MODE SEND_MODE PAYLOAD
udp_case() {
    warm; port=$((port + 1))
    "$dir/probe" recv "$2" $port "$dir/out.bin" "$size" "$4" >"$dir/r.txt" &
    sleep 0.2
    "$dir/probe" send "$3" $port "$dir/in.bin" "$4" 512 >"$dir/s.txt"
    wait
    echo "$1 $(grep -o '[0-9.]* Gbit/s' "$dir/r.txt" | cut -d' ' -f1)" \
        "$(grep -o '[0-9.]* CPU' "$dir/r.txt" | cut -d' ' -f1)" \
        "$(grep -o '[0-9.]* CPU' "$dir/s.txt" | cut -d' ' -f1)"
}

tcp_case() {
    warm; port=$((port + 1))
    /usr/bin/time -f "%U %S" -o "$dir/rt" target/release/slipstream bench transfer --tcp-peer recv \
        $port "$dir/out.bin" &
    sleep 0.2
    /usr/bin/time -f "%U %S" -o "$dir/st" target/release/slipstream bench transfer --tcp-peer send \
        127.0.0.1:$port "$dir/in.bin" cubic >"$dir/tcp.json"
    wait
    python3 - "$dir" "$size" <<'EOF'
import json, sys
d, size = sys.argv[1], int(sys.argv[2])
secs = json.load(open(f"{d}/tcp.json"))["seconds"]
cpu = lambda f: sum(float(x) for x in open(f).read().split()[-2:]) / (size / 1e9)
print(f"tcp-cubic {size * 8 / secs / 1e9:.2f} {cpu(d + '/rt'):.3f} {cpu(d + '/st'):.3f}")
EOF
}

echo "case Gbit/s recv-CPU-s/GB send-CPU-s/GB"
for i in $(seq "$repeat"); do
    udp_case "udp-digest" buf copy 65483
    udp_case "udp-digest-nowrite" null copy 65483
    udp_case "udp-nodigest-send" buf copynohash 65483
    udp_case "udp-digest-mapped-out" map copy 65483
    udp_case "udp-digest-sendfile" buf splice 61440
    tcp_case
done | tee "$dir/all.txt"
echo "medians:"
python3 - "$dir/all.txt" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) == 4 and p[0] != "case":
        rows.setdefault(p[0], []).append([float(x) for x in p[1:]])
for name, r in rows.items():
    m = [statistics.median(c) for c in zip(*r)]
    print(f"{name:24} {m[0]:6.2f} Gbit/s  recv {m[1]:.3f}  send {m[2]:.3f}  total {m[1] + m[2]:.3f} CPU s/GB")
EOF
