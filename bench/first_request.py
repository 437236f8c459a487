"""The first request after a model loads, against warm ones: with the load-time warm-up (`Predictor(warmup=True)`,
the default) and without it, each in fresh processes pinned to one core.

Each round starts a fresh interpreter that loads the bundle, times its first ``classify`` (or ``answer``) on a text
it has not seen and then ``--n`` more on other texts, and prints first / median. The issue's goal: the first demo
request within 3× the median of 50 warm ones.

    python bench/first_request.py --model runs/quickstart/classifier-onnx --core 1 --rounds 5 --n 50
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.batch_throughput import cpu_lines  # noqa: E402

PROBE = r"""
import json, statistics, sys, time
from denki import Predictor
p = Predictor(sys.argv[1], warmup=sys.argv[2] == "1")
# every request a different text (words a tokenizer cache has not seen are part of a real first request)
places = ["京都", "奈良", "札幌", "那覇", "横浜", "神戸", "金沢", "仙台", "広島", "福岡", "函館", "松本", "熊本"]
asks = ["今夜泊まれるホテルを探しています", "駅までタクシーを呼んでください", "明日の天気を教えてください",
        "美味しいラーメン屋はありますか"]
texts = [f"{pl}で{a}" for a in asks for pl in places]
def call(i):
    t = time.perf_counter()
    if p.kind == "onnx-qa":
        p.answer(f"{places[i % len(places)]}店の営業時間は?", f"{places[i % len(places)]}店の営業時間は"
                 f"{9 + i % 3}時から18時までです。定休日は水曜日です。")
    else:
        p.classify([texts[i % len(texts)]])
    return (time.perf_counter() - t) * 1e3
first = call(0)
warm = [call(i) for i in range(1, int(sys.argv[3]) + 1)]
print(json.dumps({"first_ms": first, "warm_median_ms": statistics.median(warm), "warmup_ms": p.warmup_ms}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="an ONNX classifier or QA bundle")
    ap.add_argument("--core", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=5, help="fresh processes per setting")
    ap.add_argument("--n", type=int, default=50, help="warm requests after the first (≤ 51 distinct texts)")
    args = ap.parse_args()
    print("\n".join(cpu_lines()))
    print("| load-time warm-up | first request (ms, median of rounds) | warm median (ms) | first / warm |")
    print("|---|---:|---:|---:|")
    for on in ("0", "1"):
        rows = []
        for _ in range(args.rounds):
            r = subprocess.run(["taskset", "-c", str(args.core), sys.executable, "-c", PROBE, args.model, on,
                                str(args.n)], capture_output=True, text=True, check=True,
                               env={"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
            rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
        first = statistics.median(r["first_ms"] for r in rows)
        warm = statistics.median(r["warm_median_ms"] for r in rows)
        print(f"| {'on' if on == '1' else 'off'} | {first:.2f} | {warm:.2f} | {first / warm:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
