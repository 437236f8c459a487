"""The table `denki quickstart` prints at the end, from ``OUT/summary.json`` (see :mod:`app.cmd_quickstart`)."""
from __future__ import annotations

from pathlib import Path

OBJECTIVE_NAMES = {"mlm": "MLM", "electra": "ELECTRA"}


def _deployed_row(r: dict) -> str:
    """The deployed router's summary row: fused or not, its honest dev estimate, and the ONNX figures."""
    fu = r.get("fusion") or {}
    what = r["deployed"] + (f" + TF-IDF fused, encoder weight {fu['weight']:.1f}" if fu.get("shipped") else "")
    est = (f"; cross-fitted macro-F1 {_num(fu['crossfit_macro_f1'], True)} (the fusion weight was chosen on dev)"
           if fu.get("shipped") else "")
    return (f"| deployed router ({what}; better dev macro-F1), ONNX {r['onnx_backend']} | "
            f"{_num(r['onnx'].get('accuracy'), True)} / {_num(r['onnx'].get('macro_f1'), True)}{est} |")


def _health(p: dict) -> str:
    """The pretraining health probe in the summary row (models/training/pretrain_health.py: the same test finetune uses)."""
    d = p.get("diagnostics") or {}
    if not d:
        return ""
    auc = d.get("disc_auc")  # ELECTRA only
    txt = "; probe: " + (f"disc AUC {auc:.2f}, " if isinstance(auc, (int, float)) else "") + \
        f"[CLS] spread {d.get('cls_spread', 0):.3f}"
    return txt + (" — NOT LEARNED: expect worse than random init" if p.get("health_warning") else " (learning)")


def _num(x, pct=False) -> str:
    if x is None:
        return "—"
    return f"{100 * x:.1f}" if pct else f"{x:.1f}"


def _out_of_scope_row(r: dict) -> str:
    """Where the deployed router sent the texts no tourist desk handles (summaries from before the rule: none)."""
    ex = r.get("out_of_scope_examples") or []
    if not ex:
        return "| texts no desk handles | (not measured in this summary) |"
    sent = sum(e["route"] == "human" for e in ex)
    shown = " · ".join(f"「{e['text'][:14]}」→ {'担当者' if e['route'] == 'human' else e['route']}" for e in ex)
    return f"| texts no desk handles → 担当者 | {sent} of {len(ex)}: {shown} |"


def _ask_row(a: dict | None) -> str:
    """What asking the sample manual gave: each question → its answer (and section), or 回答なし."""
    if not a:
        return "| asking the sample manual | not run (a summary from before the ask stage) |"
    said = " · ".join(f"「{r['question']}」→ " + (f"「{r['answer']}」 ({r['title']})" if r["has_answer"] else
                                                 f"回答なし ({r['reason']})") for r in a["questions"])
    ms = sorted(r["ms"] for r in a["questions"])[len(a["questions"]) // 2]
    return (f"| asking samples/manual.md ({a['passages']} passages, k={a['k']}; `denki ask`) | {said}; "
            f"median {ms:.0f} ms a question |")


def format_summary(s: dict, out: Path, seconds: float) -> str:
    f = _num

    r, q, p = s["routing"], s["qa"], s["pretrain"]
    fin = p.get("final") or {}
    obj = p.get("objective") or "electra"  # summaries written before --objective existed were ELECTRA
    name = OBJECTIVE_NAMES.get(obj, obj)
    mask = f", mask {100 * p['mask_prob']:.0f}%" if p.get("mask_prob") else ""
    learned = (f"generator accuracy {f(fin.get('gen_acc'), True)}%, disc P/R {f(fin.get('disc_precision'), True)}/"
               f"{f(fin.get('disc_recall'), True)}%" if obj != "mlm" else
               f"masked-token accuracy {f(fin.get('gen_acc'), True)}%")
    if p.get("init_from"):  # domain-adaptive: a shipped checkpoint continued on the sample
        stage = f"{p['init_from']} continued on the sample: {name}{mask}"
        source = f"{p['init_from']} + the sample"
        spent = (f"{p['flops'] / 1e12:.1f} TFLOPs on top of the checkpoint's "
                 f"{(p.get('init_flops') or 0) / 1e12:,.0f} TFLOPs")
    else:
        stage, source, spent = f"tiny {name}{mask}", f"tiny {name}", f"{p['flops'] / 1e12:.1f} TFLOPs"
    lines = [
        "",
        f"denki quickstart summary ({out}; pipeline {seconds / 60:.1f} min this run)",
        "",
        "| stage | result |",
        "|---|---|",
        f"| pretraining ({stage}) | {spent}, {p['steps']} steps, {p['tokens']:,} tokens, "
        f"{(p.get('wall_s') or 0) / 60:.1f} min; {learned}" + _health(p) + " |",
        f"| routing, dev accuracy / macro-F1 | from {source}: {f(r['pytorch'].get('accuracy'), True)} / "
        f"{f(r['pytorch'].get('macro_f1'), True)} · from random init: "
        f"{f(r['pytorch_random_init'].get('accuracy'), True)} / {f(r['pytorch_random_init'].get('macro_f1'), True)}"
        f" · TF-IDF baseline: {f(r['tfidf_baseline'].get('accuracy'), True)} / "
        f"{f(r['tfidf_baseline'].get('macro_f1'), True)} |",
        _deployed_row(r),
        f"| routing, abstain to 担当者 | {f(r['onnx'].get('abstain_rate'), True)}% of dev (out of scope: "
        f"{f(r.get('out_of_scope_rate'), True)}%); accuracy on the rest "
        f"{f(r['onnx'].get('accuracy_non_abstained'), True)}% |",
        _out_of_scope_row(r),
        f"| QA{' from ' + q['from'] if q.get('from') else ''}, dev EM / F1 (HasAns F1, NoAns acc) | "
        f"ONNX {q['onnx_backend']}: {f(q['onnx'].get('exact'))} / "
        f"{f(q['onnx'].get('f1'))} ({f(q['onnx'].get('HasAns_f1'))}, {f(q['onnx'].get('NoAns_exact'))}) · PyTorch: "
        f"{f(q['pytorch'].get('exact'))} / {f(q['pytorch'].get('f1'))} |",
        _ask_row(s.get("ask")),
        "| routing latency p50, batch 1 (ms) | " +
        ", ".join(f"{b} {v:.2f}" for b, v in s["latency_p50_ms_batch1"].items()) + " |",
    ]
    served = {"classifier": ("router", r["onnx_backend"]), "qa": ("QA", q["onnx_backend"])}
    for part, items in (s.get("left_out") or {}).items():
        name, backend = served[part]
        for lo in items:
            lines.append(f"| {name} ONNX {lo['variant']}: left out | failed its parity gate ({lo['reason']}); "
                         f"the {name} is served with ONNX {backend} instead |")
    deployed_f1 = r.get("deployed_macro_f1_estimate", r["onnx"].get("macro_f1"))
    tfidf_f1 = r["tfidf_baseline"].get("macro_f1")
    if deployed_f1 is not None and tfidf_f1 is not None and deployed_f1 > tfidf_f1:
        verdict = (f"The deployed router beats the TF-IDF baseline on this dev set ({f(deployed_f1, True)} vs "
                   f"{f(tfidf_f1, True)} macro-F1{', cross-fitted' if (r.get('fusion') or {}).get('shipped') else ''})")
    else:
        verdict = "Tiny model, tiny budget: the TF-IDF baseline wins here"
    lines += ["", f"{verdict}; docs/results.md has the figures of larger runs."]
    return "\n".join(lines)


def latency_p50(bundle: Path, texts: list[str], n: int = 40) -> dict:
    """p50 of single-request latency per CPU backend (a quick look; `denki bench latency` is the full one)."""
    import time

    import numpy as np

    from denki.models.bundle.onnx import MODEL_FILES
    from denki.serve.runtime import Predictor

    out = {}
    for b in ("fp32", "o2", "int8"):
        if not (bundle / MODEL_FILES[b]).is_file():
            continue
        p = Predictor(bundle, backend=b, device="cpu")
        p.classify(texts[:2])
        ts = []
        for t in (texts * 3)[:n]:
            t0 = time.perf_counter()
            p.classify([t])
            ts.append((time.perf_counter() - t0) * 1e3)
        out[b] = float(np.percentile(ts, 50))
    return out
