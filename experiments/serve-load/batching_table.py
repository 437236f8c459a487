"""The table of experiments/serve-load/batching.sh: per connection count and mode, the median over rounds of the
answered requests/s (non-503) and of the admitted p50 / p99, with the throughput ratio to batching off.

    python experiments/serve-load/batching_table.py experiments/serve-load/batching
"""
from __future__ import annotations

import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

MODES = ("off", "on-wait2", "on-wait0")


def main(folder: str) -> None:
    runs = defaultdict(list)  # (mode, connections) → summaries
    for f in sorted(Path(folder).glob("*-c*-r*.json")):
        m = re.match(r"(.+)-c(\d+)-r(\d+)\.json$", f.name)
        if m:
            runs[(m.group(1), int(m.group(2)))].append(json.loads(f.read_text())["summary"])
    print("| connections | mode | rounds | answered req/s (median; each) | × off | admitted p50 ms | admitted p99 ms |")
    print("|---:|---|---:|---|---:|---:|---:|")
    for conn in sorted({c for _, c in runs}, reverse=True):
        base = statistics.median(s["answered_rps"] for s in runs.get(("off", conn), [])) if ("off", conn) in runs \
            else None
        for mode in MODES:
            ss = runs.get((mode, conn))
            if not ss:
                continue
            rps = [s["answered_rps"] for s in ss]
            med = statistics.median(rps)
            p50 = statistics.median(s["admitted_ms"]["p50"] for s in ss)
            p99 = statistics.median(s["admitted_ms"]["p99"] for s in ss)
            ratio = f"{med / base:.2f}×" if base else "–"
            print(f"| {conn} | {mode} | {len(ss)} | {med:.1f} ({', '.join(f'{x:.1f}' for x in rps)}) | {ratio} | "
                  f"{p50:.2f} | {p99:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "experiments/serve-load/batching")
