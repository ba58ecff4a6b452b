#!/usr/bin/env bash
# 1 GiB file transfer over loopback: slipstream (portable datapath) against srt-file-transmit
# (libsrt, file mode), alternating in the same run, REPEAT times each. Prints one line per run
# and the medians: throughput (Gbit/s, wall clock of the sender) and CPU seconds per GB (user +
# system of sender and receiver together). Files live in /dev/shm so the disk is not measured.
#
# usage: scripts/bench-loopback.sh [SIZE_MIB=1024] [REPEAT=3]
# SLIPSTREAM_MSS=1500 forces slipstream to libsrt's packet size (by default it uses the path
# MTU the kernel reports: 64 KiB on loopback; libsrt is limited to 1500).
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-1024}
repeat=${2:-3}
bin=target/release/slipstream
cargo build --release --quiet
command -v srt-file-transmit >/dev/null || { echo "srt-file-transmit missing (apt-get install srt-tools)" >&2; exit 1; }

dir=$(mktemp -d /dev/shm/ss-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT
head -c $((size_mib << 20)) /dev/urandom > "$dir/in.bin"
bytes=$((size_mib << 20))
port=47000
mss_opt=${SLIPSTREAM_MSS:+--mss $SLIPSTREAM_MSS}

# run NAME RECV_CMD SEND_CMD -> prints "NAME gbit cpu_s_per_gb"
run() {
    local name=$1 recv=$2 send=$3
    rm -rf "$dir/out" && mkdir "$dir/out"
    port=$((port + 1))
    /usr/bin/time -f "%U %S" -o "$dir/recv.time" bash -c "${recv//PORT/$port}" >"$dir/recv.log" 2>&1 &
    local rpid=$!
    sleep 0.5
    local t0 t1
    t0=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o "$dir/send.time" bash -c "${send//PORT/$port}" >"$dir/send.log" 2>&1
    t1=$(date +%s.%N)
    wait $rpid
    cmp -s "$dir/in.bin" "$dir/out/in.bin" || { echo "$name: output differs!" >&2; tail "$dir/recv.log" "$dir/send.log" >&2; exit 1; }
    python3 - "$name" "$bytes" "$t0" "$t1" "$dir/send.time" "$dir/recv.time" <<'PY'
import sys
name, nbytes, t0, t1, st, rt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
cpu = sum(float(x) for f in (st, rt) for x in open(f).read().split()[-2:])
secs = t1 - t0
print(f"{name} {nbytes * 8 / secs / 1e9:.3f} {cpu / (nbytes / 1e9):.3f}")
PY
}

results=()
for i in $(seq "$repeat"); do
    r=$(run srt "srt-file-transmit -q srt://:PORT file://$dir/out/in.bin" "srt-file-transmit -q file://$dir/in.bin srt://127.0.0.1:PORT")
    echo "run $i: $r (Gbit/s, CPU s/GB)"; results+=("$r")
    r=$(run slipstream "$bin recv --quiet $mss_opt srt://:PORT $dir/out/" "$bin send --quiet $mss_opt $dir/in.bin srt://127.0.0.1:PORT")
    echo "run $i: $r (Gbit/s, CPU s/GB)"; results+=("$r")
done
printf '%s\n' "${results[@]}" | python3 -c '
import sys, statistics as st
rows = [l.split() for l in sys.stdin if l.strip()]
med = {n: (st.median(float(r[1]) for r in rows if r[0] == n), st.median(float(r[2]) for r in rows if r[0] == n)) for n in ("srt", "slipstream")}
for n, (g, c) in med.items():
    print(f"median {n:10s} {g:6.2f} Gbit/s  {c:6.2f} CPU s/GB")
ratio = med["slipstream"][0] / med["srt"][0]
print(f"ratio slipstream/srt throughput: {ratio:.2f}x")
'
