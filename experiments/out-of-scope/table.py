"""result.json → the README's table: per candidate, the shares sent to a human and the in-scope coverage kept,
and whether it meets the rule (README.md). `python experiments/out-of-scope/table.py`"""
import json
from pathlib import Path

r = json.loads((Path(__file__).parent / "result.json").read_text(encoding="utf-8"))["routers"]
lodo = [k for k in r if k.startswith("without-")]
print(f"| score (higher = in scope) | other-domain → human | left-out desk → human, mean of {len(lodo)} (range) "
      "| in-scope routed, with abstention: quickstart router / worst left-out router | AUROC other / left-out "
      "| meets the rule |")
print("|---|---:|---:|---:|---:|:---:|")
best = None
for cand, row in r["all"]["candidates"].items():
    left = [r[k]["candidates"][cand]["left-out desk → human"] for k in lodo]
    routed = [row["in-scope routed (with abstention)"]] + [r[k]["candidates"][cand]["in-scope routed (with abstention)"]
                                                           for k in lodo]
    au = sum(r[k]["candidates"][cand]["auroc"] for k in lodo) / len(lodo)
    other, mean_left = row["other-domain → human"], sum(left) / len(left)
    ok = other >= 0.8 and mean_left >= 0.5 and min(routed) >= 0.9
    key = (ok, (other + mean_left) / 2)
    best = max(best or (key, cand), (key, cand))
    print(f"| {cand} | {100 * other:.1f} % | {100 * mean_left:.1f} % ({100 * min(left):.0f}–{100 * max(left):.0f}) "
          f"| {100 * routed[0]:.1f} % / {100 * min(routed[1:]):.1f} % | {row['auroc']:.3f} / {au:.3f} "
          f"| {'yes' if ok else 'no'} |")
print(f"\nships by the rule: {best[1]}")
