#!/usr/bin/env python3
"""Merges per-rank Chrome traces (trace-rank<r>.json from k3-worker --trace-dir) into one file
that Perfetto / chrome://tracing shows as one timeline with a row per rank.

usage: merge_traces.py OUT.json TRACE.json [TRACE.json ...]
"""
import json
import sys


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    merged = []
    for path in argv[2:]:
        with open(path) as f:
            events = json.load(f)
        if not isinstance(events, list):
            print(f"{path}: not a Chrome trace event array", file=sys.stderr)
            return 1
        merged.extend(events)
    with open(argv[1], "w") as f:
        json.dump(merged, f)
    ranks = sorted({e.get("pid") for e in merged})
    print(f"{argv[1]}: {len(merged)} events from {len(argv) - 2} file(s), ranks {ranks}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
