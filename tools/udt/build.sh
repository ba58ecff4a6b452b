#!/bin/sh
# Build udtperf against Debian's libudt-dev.
# Usage: tools/udt/build.sh OUT_PATH
# SPDX-License-Identifier: MIT OR Apache-2.0
set -eu

if [ "$#" -ne 1 ]; then
    echo "usage: $0 OUT_PATH" >&2
    exit 2
fi
OUT=$1
DIR=$(cd "$(dirname "$0")" && pwd)

if ! command -v g++ >/dev/null 2>&1; then
    echo "build.sh: g++ not found; install g++ and libudt-dev" >&2
    exit 1
fi
if [ ! -f /usr/include/udt/udt.h ]; then
    echo "build.sh: /usr/include/udt/udt.h not found; install g++ and libudt-dev" >&2
    exit 1
fi

exec g++ -O2 -std=c++17 -Wall -Wextra -o "$OUT" "$DIR/udtperf.cpp" -ludt -lpthread
