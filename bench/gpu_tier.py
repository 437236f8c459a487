"""The GPU tier in one command (issue 15, item 5): ELECTRA-Small vs MLM-Small at equal FLOPs on a CUDA machine.

Steps (each a plain ``denki`` command, printed before it runs, so any step can be rerun by hand):

1. tokenizer — ``denki tokenizer train`` on the corpora (skipped with ``--tokenizer DIR``);
2. calibration — a 40-step ELECTRA pretraining run measures this machine's training FLOP/s; the budget is
   ``FLOP/s × --pretrain-seconds`` (the largest that fits the time given to each encoder), unless ``--budget``;
3. ``denki experiment electra-vs-mlm --jobs 6`` — ELECTRA and MLM at that budget (bf16 autocast on CUDA), pretrained
   side by side, and a random-init control; then all six fine-tuning runs at once on livedoor-title (macro-F1) and
   JaQuAD QA (F1) with ``--seeds`` seeds, dev scores. One small-model run used about 1 % of an H200 (the step time
   is per-step overhead, not arithmetic), so concurrent runs share the chip;
4. the PyTorch latency of the ELECTRA livedoor-title router (seed 0) on the device, fp32 and fp16;
5. ``denki export --fp16`` of that router behind the parity gate, and ``denki bench latency`` on it (ORT CUDA fp16
   rows where onnxruntime-gpu is installed).

Writes ``OUT/gpu_tier.json`` after every step (budget, FLOP/s, per-step wall times, the experiment's scores,
latency) and ``OUT/gpu_tier.md``. Sized from the first H200 run (experiments/gpu-tier-h200): calibration ~35 s,
pretraining ~``--pretrain-seconds`` (both at once), fine-tuning ~100–150 s (10,000 QA questions), latency and
export ~80 s, so the defaults aim at ~7 minutes. ``--dry-run`` runs the same chain on CPU at tiny size with a
5-second budget and small task subsets, to check that it works before GPU time is spent::

    python bench/gpu_tier.py --out runs/gpu-tier                    # on the CUDA machine
    python bench/gpu_tier.py --dry-run --tokenizer runs/tok8k --out runs/gpu-tier-dry   # CPU check
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from denki.models.io.fileio import atomic_write_json  # noqa: E402
from denki.pretrain.experiment.plan import budget_tag  # noqa: E402  (torch-free: only the stdlib and numpy)
from denki.pretrain.runlog import read_metrics  # noqa: E402


def sh(cmd: list[str], log: list[dict], name: str) -> float:
    """Run one denki step, echo it, record its wall time; stop the script on failure."""
    print(f"\n$ {shlex.join(cmd)}", flush=True)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    dt = time.perf_counter() - t
    log.append({"step": name, "seconds": round(dt, 1), "command": shlex.join(cmd)})
    print(f"[gpu-tier] {name}: {dt:.0f} s", flush=True)
    return dt


def torch_latency(router: Path, texts: list[str], device: str, iters: int = 50) -> dict:
    """p50/p95 ms of the fine-tuned router in PyTorch on ``device`` (fp32, and fp16 on CUDA), model call only on
    pre-tokenised inputs of 32 and 128 tokens, batch 1 and 32, CUDA-synchronised; two warm-up calls excluded.

    This is the CUDA latency row that needs no onnxruntime-gpu (whose wheel is too large to carry to a lent GPU
    machine); ``denki bench latency`` adds ORT CUDA rows itself where onnxruntime-gpu is installed."""
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification

    from denki.models.text.tokenizer import load_tokenizer
    from denki.serve.bench_latency import _inputs_of_length, _pct

    if (router / "bundle").is_dir():  # a fine-tuning run directory holds its bundle in bundle/
        router = router / "bundle"
    tok = load_tokenizer(router)
    dev = torch.device(device)
    base = AutoModelForSequenceClassification.from_pretrained(str(router), use_safetensors=True).eval().to(dev)
    dtypes = {"fp32": torch.float32} | ({"fp16": torch.float16} if dev.type == "cuda" else {})
    rows: dict[str, dict] = {}
    for dname, dt in dtypes.items():
        m = base.to(dt)
        for n_tok, bs in ((32, 1), (32, 32), (128, 1), (128, 32)):
            strings = _inputs_of_length(tok, texts, n_tok, bs * (iters + 2))
            batches = [tok.pad([tok.encode(s, max_length=n_tok) for s in strings[i * bs:(i + 1) * bs]])
                       for i in range(iters + 2)]
            batches = [{k: torch.from_numpy(v).to(dev) for k, v in b.items()} for b in batches]
            ts = []
            with torch.inference_mode():
                for i, b in enumerate(batches):
                    if dev.type == "cuda":
                        torch.cuda.synchronize()
                    t = time.perf_counter()
                    m(**b)
                    if dev.type == "cuda":
                        torch.cuda.synchronize()
                    if i >= 2:
                        ts.append(time.perf_counter() - t)
            rows.setdefault(f"PyTorch {dev.type} {dname}", {})[f"{'short' if n_tok == 32 else 'long'} b{bs}"] = {
                "p50_ms": _pct(ts, 50), "p95_ms": _pct(ts, 95), "throughput_seq_s": bs / float(np.median(ts)),
                "n": len(ts)}
    gpu = torch.cuda.get_device_name(0) if dev.type == "cuda" else None
    return {"device": str(dev), "gpu": gpu, "torch": torch.__version__, "rows": rows}


def _titles(data_dir: Path, n: int = 200) -> list[str]:
    import gzip

    with gzip.open(data_dir / "livedoor_dev.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["title"] for _, line in zip(range(n), f)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/gpu-tier")
    p.add_argument("--data-dir", default=os.environ.get("DENKI_SHARED_DATA", str(ROOT.parent / "shared" / "data")))
    p.add_argument("--tokenizer", default=None, help="existing tokenizer directory (else trained on the corpora)")
    p.add_argument("--mecab-dic", default="unidic_lite",
                   help="MeCab dictionary of a tokenizer trained here (ipadic: a 13 MB package, the one that fits "
                        "the 64 MiB a lent GPU machine receives; unidic-lite is 47 MB)")
    p.add_argument("--size", default="small")
    p.add_argument("--budget", type=float, default=None, help="pretraining FLOPs per encoder (default: calibrated)")
    p.add_argument("--pretrain-seconds", type=float, default=150.0, help="time per encoder the budget is sized to")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--max-train", type=int, default=None,
                   help="task train subsample (0 = all; default 10,000: livedoor-title whole (5,893 titles), "
                        "JaQuAD 10,000 of its 43,444 questions)")
    p.add_argument("--max-dev", type=int, default=0)
    p.add_argument("--epochs", type=float, default=None,
                   help="fine-tuning epochs (default: the fine-tuners' own: classify 10 with early stopping, QA 2)")
    p.add_argument("--jobs", type=int, default=6,
                   help="denki experiment --jobs: both pretraining runs side by side, then all fine-tuning runs "
                        "(3 encoders × 2 tasks) at once. On the H200 one small-model run used ~1 %% of the chip "
                        "(experiments/gpu-tier-h200), so they share it")
    p.add_argument("--device", default="cuda")
    p.add_argument("--cache-dir", default=None, help="token cache (default OUT/cache)")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny size, tiny budget, small subsets")
    a = p.parse_args(argv)
    if a.dry_run:
        a.device, a.size, a.pretrain_seconds, a.batch_size = "cpu", "tiny", 5.0, 16
        a.max_train, a.max_dev, a.epochs, a.jobs = a.max_train or 200, a.max_dev or 100, 1, min(a.jobs, 2)
    if a.max_train is None:
        a.max_train = 10000
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    d = Path(a.data_dir)
    corpus = [str(d / "corpus_manpages_ja.txt.gz"), str(d / "corpus_wiki_ja.txt.gz")]
    denki = [sys.executable, "-m", "denki.app.cli"]
    cache = a.cache_dir or str(out / "cache")
    log: list[dict] = []
    t0 = time.perf_counter()
    res: dict = {"device": a.device, "size": a.size, "steps": log}

    def save() -> None:
        """gpu_tier.json after every step: a run cut short by a time limit still leaves what it measured."""
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        atomic_write_json(out / "gpu_tier.json", res)

    tok = a.tokenizer or str(out / "tok")
    if not a.tokenizer and not (out / "tok" / "vocab.txt").is_file():
        sh(denki + ["tokenizer", "train", "--corpus", *corpus, "--vocab-size", "8000", "--mecab-dic", a.mecab_dic,
                    "--out", tok], log, "tokenizer")

    flops_per_s = None
    if a.budget is None:  # calibrate: 40 steps, then size the budget to the time given per encoder
        cal = out / "calibrate"
        sh(denki + ["pretrain", "--corpus", *corpus, "--tokenizer", tok, "--size", a.size, "--objective", "electra",
                    "--steps", "40", "--batch-size", str(a.batch_size), "--device", a.device, "--no-export",
                    "--cache-dir", cache, "--out", str(cal)], log, "calibrate")
        rows = read_metrics(cal)
        # steady state: drop the first rows (compilation, cache warm-up)
        r0, r1 = rows[len(rows) // 2], rows[-1]
        flops_per_s = (r1["flops"] - r0["flops"]) / max(1e-9, r1["wall_s"] - r0["wall_s"])
        a.budget = float(f"{flops_per_s * a.pretrain_seconds:.2g}")
        print(f"[gpu-tier] {flops_per_s:.3g} training FLOP/s → budget {a.budget:.2g} FLOPs per encoder", flush=True)
    res.update(budget_flops=a.budget, train_flops_per_s=flops_per_s)
    save()

    exp = out / "experiment"
    sh(denki + ["experiment", "electra-vs-mlm", "--corpus", *corpus, "--tokenizer", tok, "--size", a.size,
                "--flops-budgets", f"{a.budget:g}", "--tasks", "livedoor-title,jaquad-qa", "--seeds", str(a.seeds),
                "--data-dir", str(d), "--max-train", str(a.max_train), "--max-dev", str(a.max_dev),
                *(["--epochs", f"{a.epochs:g}"] if a.epochs else []), "--batch-size", str(a.batch_size),
                "--device", a.device, "--jobs", str(a.jobs),
                # CPU threads per job: the jobs share the machine's cores (on CUDA the CPU side only feeds the GPU)
                "--threads", str(max(1, (os.cpu_count() or 1) // max(1, a.jobs))), "--keep-finetuned",
                "--cache-dir", cache, "--no-progress", "--out", str(exp)],
       log, "experiment")
    res["experiment"] = json.loads((exp / "report.json").read_text(encoding="utf-8"))
    save()

    # From here on a failing step is recorded and the next one still runs: the scores above are the main result.
    router = exp / "finetune" / f"electra-{budget_tag(a.budget)}" / "livedoor-title" / "seed-0"
    try:
        t = time.perf_counter()
        res["torch_latency"] = torch_latency(router, _titles(d), a.device)
        log.append({"step": "torch latency", "seconds": round(time.perf_counter() - t, 1), "command": "(in process)"})
    except Exception as e:  # noqa: BLE001 - reported in gpu_tier.json, not fatal
        res["torch_latency_error"] = repr(e)
    save()
    onnx = out / "router-onnx"
    for name, cmd in (("export fp16", ["export", "--model", str(router), "--out", str(onnx), "--fp16"]),
                      ("latency", ["bench", "latency", "--model", str(onnx), "--out", str(out / "latency")])):
        try:
            sh(denki + cmd, log, name)
        except subprocess.CalledProcessError as e:
            res.setdefault("errors", {})[name] = f"exit {e.returncode}"
            break
        save()
    lat_json = out / "latency" / "latency.json"
    if lat_json.is_file():
        res["latency"] = json.loads(lat_json.read_text(encoding="utf-8"))
    save()

    md = [f"# GPU tier: {a.size}, {a.budget:.2g} FLOPs per encoder, device {a.device}", "",
          f"total {res['wall_s']:.0f} s; training FLOP/s {flops_per_s or float('nan'):.3g}", "",
          "| step | s | command |", "|---|---|---|"]
    md += [f"| {s['step']} | {s['seconds']} | `{s['command']}` |" for s in log]
    md += ["", (exp / "report.md").read_text(encoding="utf-8")]
    tl = res.get("torch_latency")
    if tl:
        md += ["", f"## PyTorch latency of the ELECTRA router on {tl['gpu'] or tl['device']} (torch {tl['torch']}; "
               "model call, p50 / p95 ms)", "", "| backend | short b1 | short b32 | long b1 | long b32 |",
               "|---|---|---|---|---|"]
        md += [f"| {k} | " + " | ".join(f"{c['p50_ms']:.2f} / {c['p95_ms']:.2f}" for c in r.values()) + " |"
               for k, r in tl["rows"].items()]
    if (out / "latency" / "latency.md").is_file():
        md += ["", (out / "latency" / "latency.md").read_text(encoding="utf-8")]
    for k, v in res.get("errors", {}).items():
        md += ["", f"**{k} failed** ({v}); see the log"]
    (out / "gpu_tier.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print(f"[gpu-tier] done in {res['wall_s']:.0f} s: {out / 'gpu_tier.md'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
