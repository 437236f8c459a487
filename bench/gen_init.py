"""How to start the generator of continued RTD pretraining when the checkpoint has none: ``copy`` (the
checkpoint's bottom layers, full width; denki's default) vs ``random`` (a fresh ¼-width generator, as a fresh run
builds it; only the embeddings from the checkpoint).

1. a tokenizer and a "general" tiny ELECTRA pretrained on ``--general`` (``--base-steps``), unless ``--base``
   gives a ``pretrained`` bundle;
2. from it, ``--steps`` of continued RTD on ``--domain`` once per ``--gen-inits`` (same seed, same data order);
3. per generator init: generator accuracy on the masked positions, replaced share, discriminator loss and recall
   over windows of steps (metrics.jsonl, logged every step), the probe AUC of the discriminator at each
   checkpoint, and the FLOPs per step — as JSON and a markdown table.

    python bench/gen_init.py --general ../shared/data/corpus_wiki_ja.txt.gz \\
        --domain ../shared/data/corpus_manpages_ja.txt.gz --max-lines 3000 --out runs/gen-init

Small and CPU-sized on purpose (it answers "does the generator give plausible replacements quickly", not
"which init gives the better encoder after a long run" — that needs the evidence run of docs/import.md).
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _subset(src: str, dest: Path, n: int) -> str:
    """The first ``n`` non-blank lines of ``src`` (.txt/.gz) → ``dest`` (so tokenising stays quick)."""
    if dest.is_file():
        return str(dest)
    opener = gzip.open if src.endswith(".gz") else open
    out = []
    with opener(src, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(line.rstrip("\n"))
            if len(out) >= n:
                break
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("\n".join(out) + "\n", encoding="utf-8")
    return str(dest)


def _windows(rows: list[dict], edges: list[int]) -> list[dict]:
    out = []
    for lo, hi in zip(edges, edges[1:]):
        part = [r for r in rows if lo < r["step"] <= hi]
        if not part:
            continue

        def mean(k):
            vals = [r[k] for r in part if r.get(k) is not None]
            return sum(vals) / len(vals) if vals else None

        out.append({"steps": f"{lo + 1}-{hi}", "gen_acc": mean("gen_acc"), "replace_rate": mean("replace_rate"),
                    "disc_loss": mean("disc_loss"), "disc_recall": mean("disc_recall")})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--general", required=True, help="general corpus (.txt/.gz) for the base encoder")
    ap.add_argument("--domain", required=True, help="domain corpus (.txt/.gz) for the continued runs")
    ap.add_argument("--max-lines", type=int, default=3000, help="lines taken from each corpus")
    ap.add_argument("--base", default=None, help="a pretrained bundle to start from instead of training one")
    ap.add_argument("--base-steps", type=int, default=120)
    ap.add_argument("--steps", type=int, default=40, help="continued RTD steps per generator init")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--gen-inits", default="copy,random")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)

    import torch

    from denki.models.text.tokenizer import train_tokenizer
    from denki.pretrain.runlog import read_metrics
    from denki.pretrain.train import PretrainConfig, run_pretrain

    torch.set_num_threads(a.threads)
    out = Path(a.out)
    general = _subset(a.general, out / "data" / "general.txt", a.max_lines)
    domain = _subset(a.domain, out / "data" / "domain.txt", a.max_lines)
    common = dict(batch_size=a.batch_size, seq_len=a.seq_len, device="cpu", progress=False, log_every=1,
                  cache_dir=str(out / "cache"))
    base = a.base
    if base is None:
        tok = out / "tokenizer"
        if not (tok / "vocab.txt").is_file():
            train_tokenizer([general, domain], 8000, progress=False).save(tok)
        s = run_pretrain(PretrainConfig(corpus=[general], tokenizer=str(tok), out=str(out / "base"), size="tiny",
                                        steps=a.base_steps, save_every=a.base_steps, **common))
        base = s["bundle"]
        print(f"base: {s['steps']} steps, {s['flops']:.3g} FLOPs, probe {s.get('diagnostics')}", flush=True)
    results = {}
    edges = [0, 5, 10, 20, 40, 80, 160, 320]
    edges = [e for e in edges if e < a.steps] + [a.steps]
    for gi in a.gen_inits.split(","):
        s = run_pretrain(PretrainConfig(corpus=[domain], tokenizer=None, out=str(out / f"cont-{gi}"),
                                        init_from=str(base), gen_init=gi, steps=a.steps,
                                        save_every=max(1, a.steps // 4), **common))
        rows = read_metrics(out / f"cont-{gi}")
        probes = [{"step": r["step"], "disc_auc": r.get("disc_auc")} for r in rows if "cls_spread" in r]
        results[gi] = {"flops_per_step": s["flops"] / s["steps"], "windows": _windows(rows, edges),
                       "probe": probes, "final": s["final"]}
        print(f"{gi}: {s['flops'] / s['steps']:.3g} FLOPs/step; probe AUC {probes}", flush=True)
    (out / "gen_init.json").write_text(json.dumps({"base": str(base), "args": vars(a), "results": results},
                                                  indent=1), encoding="utf-8")
    lines = ["| generator init | steps | gen acc | replaced | disc loss | disc recall |",
             "|---|---|---:|---:|---:|---:|"]
    for gi, r in results.items():
        for w in r["windows"]:
            f = (lambda v: "–" if v is None else f"{v:.3f}")
            lines.append(f"| {gi} | {w['steps']} | {f(w['gen_acc'])} | {f(w['replace_rate'])} | "
                         f"{f(w['disc_loss'])} | {f(w['disc_recall'])} |")
    lines.append("")
    for gi, r in results.items():
        lines.append(f"- {gi}: {r['flops_per_step']:.3g} FLOPs/step; probe disc AUC "
                     + ", ".join(f"step {p['step']}: {p['disc_auc']:.3f}" for p in r["probe"]))
    (out / "gen_init.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
