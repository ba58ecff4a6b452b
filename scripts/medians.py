#!/usr/bin/env python3
"""Medians of the runs an A/B script printed, for each build.

Reads lines of the form `LABEL key=value key=value ...` (other words are ignored, and so
are lines without a numeric `key=value`) and prints, for each label in order of first
appearance, the median of every numeric key with its runs in brackets.

usage: scripts/medians.py FILE
"""
import statistics
import sys


def main(path):
    rows = {}
    for line in open(path):
        words = line.split()
        values = {}
        for w in words[1:]:
            key, eq, value = w.partition("=")
            if eq:
                try:
                    values[key] = float(value)
                except ValueError:
                    pass
        if words and values:
            label = rows.setdefault(words[0], {})
            for key, value in values.items():
                label.setdefault(key, []).append(value)
    for label, keys in rows.items():
        runs = max(len(v) for v in keys.values())
        parts = [
            f"{key} {statistics.median(v):g} [{', '.join(f'{x:g}' for x in v)}]"
            for key, v in keys.items()
        ]
        print(f"{label} ({runs} runs): " + "; ".join(parts))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1])
