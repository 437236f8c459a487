"""Collect issue 15's answerable-head QA runs (sessions 44 and 45) into experiments/anshead/report.md|json (dev scores).

Why: the tempered encoders (--gen-temperature 2 / 3) lose the QA goal on some fine-tuning seeds through the
answer / no-answer decision, not through their spans (experiments/gentemp1e14, experiments/posinit).
`denki finetune qa --answerable-head` trains ELECTRA's SQuAD 2.0 answerability classifier beside the span head
(models/qa/heads.py) and picks the null rule on dev. Runs (machine C, one thread each, two side by side):
    CORE=0 bash experiments/qa-cc1/run.sh electra-cc1-t2-2e14-ans-seed0 --model runs/hybrid/electra-cc1-t2-2e14/bundle --seed 0 --answerable-head
    CORE=1 bash experiments/qa-cc1/run.sh electra-cc1-t2-2e14-ans-seed1 --model runs/hybrid/electra-cc1-t2-2e14/bundle --seed 1 --answerable-head
    CORE=0 bash experiments/qa-cc1/run.sh electra-cc1-t2-2e14-ans-seed2 --model runs/hybrid/electra-cc1-t2-2e14/bundle --seed 2 --answerable-head
    CORE=1 bash experiments/qa-cc1/run.sh electra-cc1-lr1e3s2c-2e14-ans --model runs/hybrid/electra-cc1-lr1e3s2c-2e14/bundle --answerable-head
Session 45's confirmation runs (machine D: Intel Xeon, 2 cores, flags avx2 avx512f avx512_vnni avx512_bf16
avx512_fp16 amx_tile; one thread each, two side by side) re-pretrained T = 2's pretraining seeds 1 and 2 with the
commands of experiments/anshead/README.md (`… pretrain … --gen-temperature 2 --seed 1`) and fine-tuned them with
the head:
    CORE=0 bash experiments/qa-cc1/run.sh electra-cc1-t2s1-2e14-ans --model runs/hybrid/electra-cc1-t2s1-2e14/bundle --answerable-head
    CORE=1 bash experiments/qa-cc1/run.sh electra-cc1-t2s2d-2e14-ans --model runs/hybrid/electra-cc1-t2s2d-2e14/bundle --answerable-head
Reads runs/qa-cc1 where present and keeps copies here, so that the report regenerates without those runs:
    python experiments/anshead/summarize.py"""
import json
import shutil
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent
RUNS = DOCS.parent / "runs"


def report(name: str | None = None, kept: Path | None = None) -> dict | None:
    """runs/qa-cc1/NAME/report.json (copied here as qa-NAME.json), or an already kept copy; None if neither."""
    if name is not None:
        src, kept = RUNS / f"qa-cc1/{name}/report.json", HERE / f"qa-{name}.json"
        if src.is_file():
            shutil.copyfile(src, kept)
    return json.loads(kept.read_text(encoding="utf-8")) if kept.is_file() else None


T2S0 = "ELECTRA T = 2, pretraining seed 0 (machine C)"
T1S2 = "ELECTRA T = 1 (the default), pretraining seed 2"
T2S1, T2S2 = "ELECTRA T = 2, pretraining seed 1", "ELECTRA T = 2, pretraining seed 2"
ROWS = (  # (encoder, head, report)
    (T2S0, "no", lambda: report(kept=DOCS / "t3more/qa-electra-cc1-t2-2e14.json")),
    (T2S0, "no", lambda: report(kept=DOCS / "posinit/qa-electra-cc1-t2-2e14-seed1.json")),
    (T2S0, "no", lambda: report(kept=DOCS / "posinit/qa-electra-cc1-t2-2e14-seed2.json")),
    (T2S0, "**yes**", lambda: report("electra-cc1-t2-2e14-ans-seed0")),
    (T2S0, "**yes**", lambda: report("electra-cc1-t2-2e14-ans-seed1")),
    (T2S0, "**yes**", lambda: report("electra-cc1-t2-2e14-ans-seed2")),
    (T1S2 + " (machine B)", "no", lambda: report(kept=DOCS / "qa-cc1/electra-cc1-2e14-s2/report.json")),
    (T1S2 + " (machine C, tile)", "no", lambda: report(kept=DOCS / "posinit/qa-electra-cc1-lr1e3s2c-2e14-tile.json")),
    (T1S2 + " (machine C)", "**yes**", lambda: report("electra-cc1-lr1e3s2c-2e14-ans")),
    (T2S1 + " (machine C)", "no", lambda: report(kept=DOCS / "t3more/qa-electra-cc1-t2s1-2e14.json")),
    (T2S1 + " (re-pretrained, machine D)", "**yes**", lambda: report("electra-cc1-t2s1-2e14-ans")),
    (T2S2 + " (machine C)", "no", lambda: report(kept=DOCS / "t3more/qa-electra-cc1-t2s2c-2e14.json")),
    (T2S2 + " (machine C)", "no", lambda: report(kept=DOCS / "t3more/qa-electra-cc1-t2s2c-2e14-seed1.json")),
    (T2S2 + " (re-pretrained, machine D)", "**yes**", lambda: report("electra-cc1-t2s2d-2e14-ans")),
)


def main() -> None:
    out = ["| encoder (tiny, 2e14), QA 1 epoch | answerable head | QA seed | null rule (chosen on dev) | "
           "best F1 (threshold) | HasAns F1 | NoAns acc | HasAns span F1 | best F1 by rule: cls / head / combined | "
           "train s |", "|---|---|---|---|---:|---:|---:|---:|---|---:|"]
    js, groups = {}, {}
    for label, head, get in ROWS:
        r = get()
        if r is None:
            out.append(f"| {label} | {head} | — | — | — | — | — | — | — | — |")
            continue
        m, s = r["dev_metrics"], r["seeds"][0]
        assert bool(r["settings"].get("answerable_head")) == (head != "no"), (label, head)
        by_rule = s.get("dev_metrics_by_null_rule", {})
        rules = " / ".join(f"{by_rule[k]['best_f1']:.2f}" for k in ("cls", "head", "combined")) \
            if len(by_rule) > 1 else "–"
        out.append(f"| {label} | {head} | {s['seed']} | {r.get('null_rule', 'cls')} | {m['best_f1']:.2f} "
                   f"({m['best_f1_thresh']:.2f}) | {m['HasAns_f1']:.2f} | {m['NoAns_exact']:.2f} | "
                   f"{m['HasAns_span_f1']:.1f} | {rules} | {s['train_seconds']:.0f} |")
        key = f"{label}, head {head.strip('*')}, QA seed {s['seed']}"
        js[key] = {k: m[k] for k in ("best_f1", "HasAns_f1", "NoAns_exact", "HasAns_span_f1")}
        js[key]["null_rule"] = r.get("null_rule", "cls")
        if len(by_rule) > 1:
            js[key]["best_f1_by_rule"] = {k: v["best_f1"] for k, v in by_rule.items()}
        groups.setdefault((label, head), []).append((m["best_f1"], m["HasAns_f1"]))
    lines = ["## QA on the full jaquad_train (1 epoch, lr 1e-3, one thread; dev = jaquad_dev, threshold and null rule "
             "chosen on dev)", "", *out, ""]
    for (label, head), v in groups.items():
        if len(v) == 3:
            med = (statistics.median(f for f, _ in v), statistics.median(h for _, h in v))
            js[f"{label}, head {head.strip('*')}: median of 3 QA seeds"] = {"best_f1": med[0], "HasAns_f1": med[1]}
            lines.append(f"{label}, answerable head {head.strip('*')}: median of its 3 QA seeds F1 {med[0]:.2f}, "
                         f"HasAns F1 {med[1]:.2f}.")
    lines.append("")
    (HERE / "report.md").write_text("# The answerable head on the QA-fragile encoder (issue 15; dev scores)\n\n"
                                    + "\n".join(lines), encoding="utf-8")
    (HERE / "report.json").write_text(json.dumps(js, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
