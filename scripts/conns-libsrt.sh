#!/usr/bin/env bash
# Many callers against a libsrt listener, measured as `slipstream bench conns --pattern idle`
# measures slipstream's: connections set up per second (in the callers), resident memory per
# connection of the listening process (VmRSS growth from before the first caller to 1 s after
# the last connect returned, over the connections established), and the listening process's
# CPU (utime + stime) over 3 s with all of them connected and idle. Then the same N through
# `slipstream bench conns` for the comparison in the same run.
#
#   scripts/conns-libsrt.sh N        # prints one JSON line
#
# The callers are slipstream's (cli/examples/callers.rs: N connections, 64 connect calls at
# once, file mode = libsrt's transtype=file with the stream API). Two libsrt listeners:
#
# - "libsrt" (the top-level figures): a minimal C listener on libsrt (transtype=file,
#   backlog 1024) that accepts every caller and holds it, nothing more: the library's own
#   cost. Needs gcc and libsrt's headers (Debian: libsrt-gnutls-dev); skipped without them.
# - "srt_tunnel": the srt-tools `srt-tunnel srt://127.0.0.1:P tcp://127.0.0.1:Q`, which
#   opens a TCP connection per accepted caller (to a Python holder here) and runs two threads
#   per tunnel. As shipped in libsrt 1.5.1 it cannot hold idle callers: it sets a 1 s receive
#   timeout on its listening socket after the first accept, every later accepted socket
#   inherits it, and its reader treats the timeout as an error and closes the tunnel. Its
#   callers therefore send one byte per connection every 250 ms (--trickle, TRICKLE), so its CPU
#   is not idle CPU. Its listen backlog is hardcoded to 5: refused callers are retried
#   (--retries 50, counted in "retries"). Its memory excludes the kernel's TCP socket buffers
#   and the holder's (holder_rss_per_conn_kib).
#
# Environment: CALLERS, SLIPSTREAM (binaries; default target/release/...), LISTENERS (default
# "libsrt tunnel slipstream"), CONNECTORS (64), SETTLE (1 s), IDLE (3 s). Loopback only.
set -euo pipefail

N=${1:?usage: conns-libsrt.sh N}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CALLERS=${CALLERS:-$ROOT/target/release/examples/callers}
SLIPSTREAM=${SLIPSTREAM:-$ROOT/target/release/slipstream}
LISTENERS=${LISTENERS:-libsrt tunnel slipstream}
CONNECTORS=${CONNECTORS:-64}
SETTLE=${SETTLE:-1}
IDLE=${IDLE:-3}
TRICKLE=${TRICKLE:-250}
TICK=$(getconf CLK_TCK)
# Connections need a descriptor each in srt-tunnel and in the TCP holder.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

WORK=$(mktemp -d /tmp/conns-libsrt.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$CALLERS" ] || { echo "no $CALLERS: cargo build --release -p slipstream-cli --example callers" >&2; exit 1; }

free_port() { # a free loopback port for $1 (udp|tcp)
    python3 -c 'import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM if sys.argv[1]=="udp" else socket.SOCK_STREAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' "$1"
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
now_s() { date +%s.%N; }
threads() { ls "/proc/$1/task" | wc -l; }
fds() { ls "/proc/$1/fd" | wc -l; }

# Waits until file $1 has $2 lines, at most $3 seconds.
wait_lines() {
    local end=$((SECONDS + $3))
    while [ "$(wc -l <"$1" 2>/dev/null || echo 0)" -lt "$2" ]; do
        [ $SECONDS -lt $end ] || { echo "timed out waiting for $1" >&2; return 1; }
        sleep 0.1
    done
}

# measure NAME PID PORT HOLDER_PID [CALLER OPTIONS...]: runs the callers against
# 127.0.0.1:PORT, samples the listener PID; prints a JSON object.
measure() {
    local name=$1 pid=$2 port=$3 hpid=$4
    shift 4
    local out=$WORK/$name.callers base_rss base_fds hbase=0 h1=0 rss1 c1 t1 c2 t2 th
    sleep 0.3
    base_rss=$(rss_kib "$pid")
    base_fds=$(fds "$pid")
    [ "$hpid" = 0 ] || hbase=$(rss_kib "$hpid")
    local hold
    hold=$(python3 -c "print($SETTLE + $IDLE + 2)")
    : >"$out"
    "$CALLERS" "127.0.0.1:$port" "$N" file --connectors "$CONNECTORS" --hold "$hold" "$@" \
        >"$out" 2>"$WORK/$name.err" &
    local cpid=$!
    PIDS+=("$cpid")
    wait_lines "$out" 1 $((60 + N / 20))
    local est
    est=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["established"])' "$out")
    if [ "$name" = srt_tunnel ]; then
        # srt-tunnel accepts from libsrt's queue and then dials TCP: wait for its sockets.
        local end=$((SECONDS + 30))
        while [ "$(fds "$pid")" -lt $((base_fds + est)) ] && [ $SECONDS -lt $end ]; do sleep 0.1; done
    fi
    sleep "$SETTLE"
    rss1=$(rss_kib "$pid"); th=$(threads "$pid")
    [ "$hpid" = 0 ] || h1=$(rss_kib "$hpid")
    t1=$(now_s); c1=$(cpu_ticks "$pid")
    sleep "$IDLE"
    t2=$(now_s); c2=$(cpu_ticks "$pid")
    wait "$cpid" || true
    python3 - "$out" "$base_rss" "$rss1" "$c1" "$c2" "$t1" "$t2" "$TICK" "$th" "$hbase" "$h1" "$hpid" <<'EOF'
import json, sys
a = sys.argv
lines = [json.loads(l) for l in open(a[1]) if l.strip()]
first = lines[0]
held = lines[1] if len(lines) > 1 else {}
base, rss1, c1, c2, t1, t2, tick = int(a[2]), int(a[3]), int(a[4]), int(a[5]), float(a[6]), float(a[7]), int(a[8])
est = max(first["established"], 1)
r = {
    "setup_per_s": round(first["setup_per_s"], 1),
    "rss_per_conn_kib": round((rss1 - base) / est, 1),
    "idle_cpu_pct": round((c2 - c1) / tick / (t2 - t1) * 100, 2),
    "established": first["established"],
    "failed": first["failed"],
    "retries": first["retries"],
    "errors": first["errors"],
    "alive_after_idle": held.get("alive"),
    "closed_reasons": held.get("closed_reasons"),
    "rss_base_mib": round(base / 1024, 1),
    "rss_mib": round(rss1 / 1024, 1),
    "threads": int(a[9]),
}
if first.get("trickle_ms"):
    r["trickle_ms"] = first["trickle_ms"]
if a[12] != "0":
    r["holder_rss_per_conn_kib"] = round((int(a[11]) - int(a[10])) / est, 1)
print(json.dumps(r))
EOF
}

RESULTS=$WORK/results
: >"$RESULTS"

for l in $LISTENERS; do
    case $l in
    libsrt)
        if ! command -v gcc >/dev/null || ! pkg-config --exists srt 2>/dev/null; then
            echo "conns-libsrt: no gcc or libsrt headers (libsrt-gnutls-dev): libsrt listener skipped" >&2
            continue
        fi
        cat >"$WORK/listener.c" <<'EOF'
#include <srt/srt.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* Accepts every caller on 127.0.0.1:PORT and holds it (never reads): libsrt's own cost. */
int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: listener PORT [BACKLOG]\n"); return 2; }
    int port = atoi(argv[1]), backlog = argc > 2 ? atoi(argv[2]) : 1024;
    srt_startup();
    srt_setloglevel(3); /* LOG_ERR */
    SRTSOCKET l = srt_create_socket();
    int tt = SRTT_FILE; /* as srt-tunnel: transtype=file (stream API, no TSBPD) */
    srt_setsockflag(l, SRTO_TRANSTYPE, &tt, sizeof tt);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (srt_bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || srt_listen(l, backlog) < 0) {
        fprintf(stderr, "listener: %s\n", srt_getlasterror_str());
        return 1;
    }
    for (;;) {
        struct sockaddr_storage peer;
        int len = sizeof peer;
        if (srt_accept(l, (struct sockaddr *)&peer, &len) == SRT_INVALID_SOCK) {
            fprintf(stderr, "listener: accept: %s\n", srt_getlasterror_str());
            return 1;
        }
    }
}
EOF
        # shellcheck disable=SC2046
        gcc -O2 -o "$WORK/listener" "$WORK/listener.c" $(pkg-config --cflags --libs srt)
        port=$(free_port udp)
        "$WORK/listener" "$port" 1024 &
        lpid=$!
        PIDS+=("$lpid")
        echo "conns-libsrt: libsrt listener, $N callers" >&2
        echo "libsrt $(measure libsrt "$lpid" "$port" 0)" >>"$RESULTS"
        kill "$lpid"
        ;;
    tunnel)
        tport=$(free_port tcp)
        cat >"$WORK/holder.py" <<'EOF'
import asyncio, sys
async def hold(r, w):
    try:
        while await r.read(65536):
            pass
    except Exception:
        pass
    w.close()
async def main():
    srv = await asyncio.start_server(hold, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    await srv.serve_forever()
asyncio.run(main())
EOF
        python3 "$WORK/holder.py" "$tport" &
        hpid=$!
        PIDS+=("$hpid")
        port=$(free_port udp)
        srt-tunnel "srt://127.0.0.1:$port" "tcp://127.0.0.1:$tport" >"$WORK/tunnel.log" 2>&1 &
        tpid=$!
        PIDS+=("$tpid")
        echo "conns-libsrt: srt-tunnel, $N callers" >&2
        echo "srt_tunnel $(measure srt_tunnel "$tpid" "$port" "$hpid" --retries 50 --trickle "$TRICKLE")" >>"$RESULTS"
        kill "$tpid" "$hpid"
        ;;
    slipstream)
        echo "conns-libsrt: slipstream bench conns, $N connections" >&2
        "$SLIPSTREAM" bench conns --n "$N" --pattern idle --connectors "$CONNECTORS" \
            --idle-secs "$IDLE" --json 2>"$WORK/slipstream.err" | tail -n 1 >"$WORK/slipstream.json"
        echo "slipstream $(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
keys = ("setup_per_s", "rss_per_conn_kib", "idle_cpu_pct", "established", "accepted",
    "connect_failed", "connections_lost", "server_rss_base_mib", "server_rss_mib")
print(json.dumps({k: round(r[k], 2) if isinstance(r[k], float) else r[k] for k in keys}))
' "$WORK/slipstream.json")" >>"$RESULTS"
        ;;
    *) echo "unknown listener $l" >&2; exit 1 ;;
    esac
done

python3 - "$RESULTS" "$N" <<'EOF'
import json, sys
res = {}
for line in open(sys.argv[1]):
    name, obj = line.split(" ", 1)
    res[name] = json.loads(obj)
out = {"n": int(sys.argv[2])}
top = res.pop("libsrt", None)
if top:
    out["listener"] = "libsrt 1.5 C listener (transtype=file)"
    for k in ("setup_per_s", "rss_per_conn_kib", "idle_cpu_pct"):
        out[k] = top.pop(k)
    out["libsrt"] = top
out.update(res)
print(json.dumps(out))
EOF
