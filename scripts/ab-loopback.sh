#!/usr/bin/env bash
# Two (or more) builds of slipstream against each other over loopback, alternated run by run:
# 1 GiB from /dev/shm to /dev/shm, each end under /usr/bin/time. Prints every run (the
# receiver's rate, each end's CPU seconds, the receive buffer it ended with and the full ACKs
# it sent) and each build's medians. The hand runs in docs/benchmarks.md are made this way.
#
# usage: scripts/ab-loopback.sh RUNS BUILD [BUILD...]
#   BUILD: a path to a slipstream binary, optionally NAME=PATH; environment for both of its
#   ends may follow after commas: NAME=PATH,VAR=VALUE,...
set -euo pipefail
runs=$1
shift
dir=$(mktemp -d /dev/shm/ss-ab.XXXXXX)
trap 'rm -rf "$dir"' EXIT
head -c 1G /dev/urandom >"$dir/in.bin"
mkdir "$dir/out"
port=47600
for i in $(seq "$runs"); do
    for build in "$@"; do
        IFS=, read -r -a parts <<<"$build"
        name=${parts[0]%%=*}
        bin=${parts[0]#*=}
        env=("${parts[@]:1}")
        port=$((port + 1))
        rm -f "$dir/out/in.bin" "$dir"/*.json
        # Memory this machine has not written lately costs the first writer several times
        # more (the host backs it on first touch): write and free an output's worth first.
        head -c 1200M /dev/zero >"$dir/scratch" && rm "$dir/scratch"
        env "${env[@]}" /usr/bin/time -f "%U %S" -o "$dir/rx.time" "$bin" recv -q \
            "srt://:$port" "$dir/out/" --force --stats-json "$dir/rx.json" >/dev/null 2>&1 &
        sleep 0.3
        env "${env[@]}" /usr/bin/time -f "%U %S" -o "$dir/tx.time" "$bin" send -q "$dir/in.bin" \
            "srt://127.0.0.1:$port" --stats-json "$dir/tx.json" >/dev/null 2>&1 || true
        wait || true
        python3 - "$dir" "$name" <<'EOF'
import json, os, sys
d, name = sys.argv[1:]
cpu = lambda f: [float(x) for x in open(f).read().split()[-2:]]
rx = json.load(open(f"{d}/rx.json")) if os.path.exists(f"{d}/rx.json") else None
r, t = cpu(f"{d}/rx.time"), cpu(f"{d}/tx.time")
if rx is None:
    print(f"{name} FAILED (the receiver wrote no statistics: it failed)")
else:
    c = rx["connection"]
    print(f"{name} gbit_per_s={rx['gbit_per_s']:.2f} recv_cpu_s={sum(r):.2f} "
          f"send_cpu_s={sum(t):.2f} cpu_s={sum(r) + sum(t):.2f} "
          f"rcv_buf_pkts={c['rcv_buf_cap_pkts']} full_acks={c['acks_sent']} "
          f"{'verified' if rx.get('verified') else 'UNVERIFIED'}")
EOF
    done
done | tee "$dir/runs.txt"
echo "medians:"
python3 "$(dirname "$0")/medians.py" "$dir/runs.txt"
