"""`denki bench latency`: p50/p95/p99 latency and throughput of every way to run a classifier, in one process.

Rows: PyTorch eager fp32 (the same weights, from the parent bundle), ORT fp32, ORT O2, ORT int8 (and the
``int8-channel`` / ``int8-static`` variants when exported), CUDA fp16 (when
a GPU is usable), and what a user would otherwise write — optimum's ``ORTModelForSequenceClassification`` inside a
transformers ``pipeline`` on the same ``model.onnx``. Scenarios: batch 1 and batch 32, short (~32 tokens) and long
(128 tokens) inputs. Model rows time the model call on pre-tokenised, padded inputs; tokenisation is timed
separately; the two end-to-end rows (denki ``Predictor.classify`` vs the optimum pipeline) include tokenisation.
Backends are interleaved call by call (the machine is noisy) and warm-up calls are excluded.

Writes ``OUT/latency.json``, ``OUT/latency.md`` and ``OUT/latency.png``. Torch/optimum are imported inside.
This is the report for people; what the runtime's ``auto`` backend uses is ``denki bench pick``
(:mod:`serve.fastpath`), torch-free and restricted to the variants that passed their gate.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import numpy as np

from denki.models.bundle.format import read_manifest
from denki.models.bundle.onnx import CPU_VARIANTS
from denki.models.io.errors import DenkiError
from denki.models.io.fileio import atomic_write_json, atomic_write_text


def _texts(bundle: Path, texts_path: str | None, field: str) -> list[str]:
    if texts_path:
        p = Path(texts_path)
        if p.suffix in (".txt",) or p.name.endswith(".txt.gz"):
            from denki.models.io.textio import iter_lines

            return [t for _, t in iter_lines(p) if t.strip()]
        from denki.models.io.records import iter_records

        return [r[field] for _, r in iter_records(p) if isinstance(r.get(field), str) and r[field].strip()]
    sample = json.loads((bundle / "parity_sample.json").read_text(encoding="utf-8"))
    return sample["texts"]


def _inputs_of_length(tok, texts: list[str], n_tokens: int, count: int) -> list[str]:
    """Texts of about ``n_tokens`` tokens (with [CLS]/[SEP]): long texts are cut at that token's character
    offset, short ones concatenated — so every backend sees the same strings."""
    out, pool = [], list(texts)
    i = 0
    while len(out) < count:
        s = pool[i % len(pool)]
        j = i + 1
        while len(tok.encode(s, truncation=False)) < n_tokens and j < i + 50:
            s = s + "。" + pool[j % len(pool)]
            j += 1
        enc = tok.encode(s, truncation=False)
        if len(enc) > n_tokens:
            cut = enc.offsets[n_tokens - 2][1]  # keep n_tokens-2 content tokens
            s = s[:cut]
        out.append(s)
        i += 1
    return out


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, q))


#: (scenario name, tokens per input, batch size): short and long inputs, one request and a batch
SCENARIOS = [("short", 32, 1), ("short", 32, 32), ("long", 128, 1), ("long", 128, 32)]
TORCH_ROW = "PyTorch eager fp32"
DENKI_E2E_ROW = "denki Predictor.classify (end to end)"
OPTIMUM_ROW = "optimum ORTModel + pipeline (end to end)"


def bench_latency(model_dir: str, out_dir: str, *, texts: str | None = None, torch_model: str | None = None,
                  iterations: int = 60, batch_iterations: int = 12, threads: int | None = None,
                  progress: bool = True) -> dict:
    """Time every way to run the classifier bundle ``model_dir`` (see the module docstring) → the result dict, also
    written to ``out_dir`` as latency.json / latency.md / latency.png."""
    from tqdm.auto import tqdm

    from denki.models.registry.tasks import task_for
    from denki.serve.runtime import _cuda_usable, resolve_onnx_bundle

    bundle = resolve_onnx_bundle(model_dir)
    man = read_manifest(bundle)
    if man.get("kind") != task_for("classifier").onnx_kind:
        raise DenkiError(f"{bundle}: the latency benchmark takes an ONNX classifier bundle (got {man.get('kind')})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    backends = _onnx_predictors(bundle, threads)
    base = next(iter(backends.values()))
    tok, task = base.tokenizer, base.task
    raw = _texts(bundle, texts, task.get("text_field", "text"))
    if not raw:
        raise DenkiError("no texts to benchmark with")
    torch_m = _torch_model(torch_model or man.get("source", {}).get("parent", {}).get("path"), threads)
    pipe = _optimum_pipeline(bundle, task, threads)
    e2e = backends.get("ORT fp32", base)  # the denki end-to-end row

    rows: dict[str, dict] = {}
    tokenize_ms: dict[str, float] = {}
    total = sum(iterations if bs == 1 else batch_iterations for *_, bs in SCENARIOS)
    bar = tqdm(total=total, desc="bench latency", unit="round", disable=not progress)
    for name, n_tok, bs in SCENARIOS:
        n_iter = iterations if bs == 1 else batch_iterations
        strings = _inputs_of_length(tok, raw, n_tok, bs * (n_iter + 2))
        groups = [strings[i * bs:(i + 1) * bs] for i in range(n_iter + 2)]
        # pre-tokenised, padded inputs of the model rows: input_ids etc. (bs, n_tok) per call
        batches = [tok.pad([tok.encode(s, max_length=n_tok) for s in g]) for g in groups]
        tokenize_ms[f"{name} b{bs}"] = _tokenize_ms(tok, groups, n_tok)
        fns = _row_fns(batches, groups, n_tok, bs, backends, torch_m, e2e, pipe)
        for k, ts in _time_interleaved(fns, n_iter, bar).items():
            rows.setdefault(k, {})[f"{name} b{bs}"] = {
                "p50_ms": _pct(ts, 50), "p95_ms": _pct(ts, 95), "p99_ms": _pct(ts, 99),
                "throughput_seq_s": bs / statistics.median(ts), "n": len(ts)}
    bar.close()
    e2e.max_length = int(task.get("max_length") or 128)
    result = {"bundle": str(bundle), "rows": rows, "tokenize_ms_per_call": tokenize_ms, "ratios_p50": _ratios(rows),
              "int8_parity": man.get("metrics", {}).get("parity", {}).get("int8"), "threads": threads,
              "iterations": iterations, "batch_iterations": batch_iterations, "cuda": _cuda_usable(),
              "note": "model rows: pre-tokenised inputs; end-to-end rows include tokenisation"}
    atomic_write_json(out / "latency.json", result)
    atomic_write_text(out / "latency.md", to_markdown(result))
    _plot(result, out / "latency.png")
    return result


def _onnx_predictors(bundle: Path, threads: int | None) -> dict:
    """Row label → Predictor: every CPU variant the bundle holds (fp32, o2, and each int8 variant), then CUDA fp16
    (or fp32 when the bundle has no fp16) when a GPU is usable."""
    from denki.serve.runtime import Predictor, _cuda_usable

    backends = {}
    for b in CPU_VARIANTS:
        try:
            backends[f"ORT {b}"] = Predictor(bundle, backend=b, device="cpu", threads=threads)
        except DenkiError:
            pass
    if _cuda_usable():
        for b in ("fp16", "fp32"):
            try:
                backends[f"CUDA {b}"] = Predictor(bundle, backend=b, device="cuda")
                break
            except DenkiError:
                pass
    return backends


def _torch_model(parent: str | None, threads: int | None):
    """PyTorch eager on the same weights (the export's parent bundle, ELECTRA or BERT as its config.json says), or
    None when there is no such bundle."""
    if not (parent and Path(parent, "model.safetensors").is_file()):
        return None
    import torch
    from transformers import AutoModelForSequenceClassification

    torch_m = AutoModelForSequenceClassification.from_pretrained(parent, use_safetensors=True).eval()
    if threads:
        torch.set_num_threads(threads)
    return torch_m


def _optimum_pipeline(bundle: Path, task: dict, threads: int | None):
    """What a user would otherwise write: optimum's ORTModel inside a transformers pipeline on the same
    ``model.onnx`` (tokenisation included), or None when optimum is not installed (said, not fatal)."""
    try:
        import warnings

        from optimum.onnxruntime import ORTModelForSequenceClassification
        from transformers import AutoTokenizer, pipeline

        warnings.filterwarnings("ignore")
        import onnxruntime as ort

        so = ort.SessionOptions()
        if threads:  # the same thread budget as every other row
            so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        ort_m = ORTModelForSequenceClassification.from_pretrained(str(bundle), file_name="model.onnx",
                                                                  session_options=so)
        hf_tok = AutoTokenizer.from_pretrained(str(bundle))
        return pipeline("text-classification", model=ort_m, tokenizer=hf_tok, truncation=True,
                        max_length=int(task.get("max_length") or 128))
    except Exception as e:  # pragma: no cover - reported, not fatal
        print(f"bench: optimum pipeline unavailable: {e}")
        return None


def _tokenize_ms(tok, groups: list[list[str]], n_tok: int) -> float:
    """denki's tokenisation alone, ms per call (one call = one group of ``bs`` texts)."""
    t0 = time.perf_counter()
    for g in groups:
        [tok.encode(s, max_length=n_tok) for s in g]
    return (time.perf_counter() - t0) / len(groups) * 1e3


def _row_fns(batches: list[dict], groups: list[list[str]], n_tok: int, bs: int, backends: dict, torch_m, e2e,
             pipe) -> dict:
    """Row label → ``fn(i)`` running call ``i`` of one scenario. Model rows get the pre-tokenised ``batches[i]``;
    the end-to-end rows get the strings ``groups[i]``."""
    fns = {}
    if torch_m is not None:
        import torch

        def torch_run(i):
            with torch.no_grad():
                return torch_m(**{k: torch.from_numpy(v) for k, v in batches[i].items()}).logits

        fns[TORCH_ROW] = torch_run
    for label, p in backends.items():
        fns[label] = (lambda p: lambda i: p.run(batches[i]))(p)
    # end-to-end rows see the same token count as the model rows (not the bundle's own max_length)
    e2e.max_length = n_tok
    fns[DENKI_E2E_ROW] = lambda i: e2e.classify(groups[i], batch_size=bs)
    if pipe is not None:
        fns[OPTIMUM_ROW] = lambda i: pipe(groups[i], batch_size=bs, truncation=True, max_length=n_tok)
    return fns


def _time_interleaved(fns: dict, n_iter: int, bar) -> dict[str, list[float]]:
    """Row label → ``n_iter`` call times (s). Calls are interleaved, so every backend sees the same moment of
    machine noise; the first two calls of each are warm-up, not counted."""
    times = {k: [] for k in fns}
    for i in range(n_iter + 2):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn(i)
            if i >= 2:
                times[k].append(time.perf_counter() - t)
        if i >= 2:
            bar.update(1)
    return times


def _ratios(rows: dict) -> dict[str, float]:
    """p50 speed-ups per scenario: int8 over PyTorch eager, and denki end to end over the optimum pipeline."""
    ratios = {}
    for key in rows.get("ORT int8", {}):
        if TORCH_ROW in rows:
            ratios[f"int8 vs torch eager, {key}"] = rows[TORCH_ROW][key]["p50_ms"] / rows["ORT int8"][key]["p50_ms"]
        if OPTIMUM_ROW in rows:
            ratios[f"denki e2e vs optimum pipeline, {key}"] = (
                rows[OPTIMUM_ROW][key]["p50_ms"] / rows[DENKI_E2E_ROW][key]["p50_ms"])
    return ratios


def to_markdown(result: dict) -> str:
    keys = list(next(iter(result["rows"].values())).keys())
    lines = ["| backend | " + " | ".join(f"{k} p50 / p95 / p99 ms (seq/s)" for k in keys) + " |",
             "|---|" + "---|" * len(keys)]
    for name, r in result["rows"].items():
        cells = [f"{r[k]['p50_ms']:.2f} / {r[k]['p95_ms']:.2f} / {r[k]['p99_ms']:.2f} ({r[k]['throughput_seq_s']:.0f})"
                 for k in keys]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Tokenisation alone (denki, ms per call): " +
                 ", ".join(f"{k} {v:.2f}" for k, v in result["tokenize_ms_per_call"].items()))
    lines.append("")
    for k, v in result["ratios_p50"].items():
        lines.append(f"- {k}: **{v:.2f}×** (p50)")
    p = result.get("int8_parity") or {}
    if p.get("ran"):
        drop = p.get("metric_drop")
        lines.append(f"- int8 vs PyTorch on the bundle's dev sample: agreement {p['agreement']:.3f}" +
                     (f", accuracy drop {drop * 100:+.2f} points" if drop is not None else ""))
    return "\n".join(lines) + "\n"


def _plot(result: dict, path: Path) -> None:
    from denki.models.io.plotting import setup_matplotlib

    plt = setup_matplotlib()

    keys = list(next(iter(result["rows"].values())).keys())
    names = list(result["rows"])
    fig, ax = plt.subplots(figsize=(10, 4.5))
    w = 0.8 / len(names)
    for i, n in enumerate(names):
        ax.bar(np.arange(len(keys)) + i * w, [result["rows"][n][k]["p50_ms"] for k in keys], w, label=n)
    ax.set_xticks(np.arange(len(keys)) + 0.4 - w / 2, keys)
    ax.set_ylabel("p50 latency (ms, log)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    ax.set_title("denki latency by backend")
    fig.tight_layout()
    tmp = path.with_name(path.name + ".partial.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
