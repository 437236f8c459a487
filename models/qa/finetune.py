"""Extractive QA fine-tuning and evaluation (``denki finetune qa`` / ``denki evaluate qa``).

Model: ``transformers.ElectraForQuestionAnswering`` (a linear start/end head on every token) on top of a
``pretrained`` bundle's encoder. Pipeline: :mod:`models.qa.data` (read + validate) → :mod:`models.qa.features`
(windows, targets) → train (AdamW, linear warmup/decay, one model per seed) → dev logits →
:mod:`models.qa.postprocess` (numpy; the ONNX runtime reuses it) → :mod:`models.qa.metrics` (char-level
SQuAD 2.0 metrics, best-F1 null threshold). The median seed (by dev best F1) is kept and written as a ``qa``
bundle whose ``task.json`` holds the tuned ``null_threshold`` and the windowing settings, so every serving path
applies the same decision rule.
"""
from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path

import numpy as np

from denki.models.io.errors import DenkiError
from denki.models.io.fileio import atomic_write_json, atomic_write_text
from denki.models.qa.data import QAData, QAExample, read_qa
from denki.models.qa.features import QAFeatures, build_features
from denki.models.qa.metrics import f1_vs_threshold, max_over_golds, squad_v2_metrics
from denki.models.qa.postprocess import NO_SPAN, apply_threshold, postprocess_predictions
from denki.models.training.defaults import default_answerable_head, default_lr
from denki.models.training.positions import POSITION_INITS, tile_positions, trained_positions

TASK_FORMAT = 1
PARITY_SAMPLE = "parity_sample.json"
PARITY_SAMPLE_SIZE = 100
# The stored null threshold sits in the middle of the gap between the two dev score differences around the best
# switch point, not on a dev question's own score (the official best_f1_thresh): decisions keep a margin, so the
# rounding differences of ONNX / another CPU / int8 do not flip them (docs/qa.md, "Null threshold").
THRESHOLD_AT = "midpoint"


def jsonable(x):
    """Replace non-finite floats (``inf`` = "no span at all") by ``None`` and numpy scalars by Python ones."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(float(x)) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def subsample(examples: list[QAExample], n: int | None, seed: int) -> list[QAExample]:
    """A seeded random subset of ``n`` examples in their original order (``None`` = all)."""
    if not n or n >= len(examples):
        return examples
    keep = sorted(random.Random(seed).sample(range(len(examples)), n))
    return [examples[i] for i in keep]


# ----------------------------------------------------------------------------------------------- model calls
def predict_logits(model, features: QAFeatures, tokenizer, *, batch_size: int = 64, device=None,
                   progress: bool = False, desc: str = "qa: predict"):
    """Start/end logits for every window → ``(start, end, answerable)``: two float32 arrays
    ``(n_windows, max_window_len)`` and, for a model with the answerable head, ``(n_windows,)`` (else ``None``).

    Windows are batched by length (less padding); positions past a window's length are left at 0 and never
    read by post-processing.
    """
    import torch
    from tqdm.auto import tqdm

    n = len(features)
    width = max((len(e) for e in features.encodings), default=1)
    starts = np.zeros((n, width), dtype=np.float32)
    ends = np.zeros((n, width), dtype=np.float32)
    answerable = None
    order = sorted(range(n), key=lambda w: len(features.encodings[w]))
    model.eval()
    dev = device or next(model.parameters()).device
    with torch.inference_mode():
        for b in tqdm(range(0, n, batch_size), desc=desc, unit=" batch", disable=not progress, mininterval=1.0):
            idx = order[b:b + batch_size]
            batch = tokenizer.pad([features.encodings[w] for w in idx])
            out = model(**{k: torch.from_numpy(v).to(dev) for k, v in batch.items()})
            s = out.start_logits.float().cpu().numpy()
            e = out.end_logits.float().cpu().numpy()
            a = getattr(out, "answerable_logits", None)
            if a is not None:
                if answerable is None:
                    answerable = np.zeros(n, dtype=np.float32)
                answerable[idx] = a.float().cpu().numpy()
            for r, w in enumerate(idx):
                L = len(features.encodings[w])
                starts[w, :L] = s[r, :L]
                ends[w, :L] = e[r, :L]
    return starts, ends, answerable


def predict_results(model, features: QAFeatures, tokenizer, *, n_best: int, max_answer_length: int,
                    null_threshold: float, null_rule: str = "cls", batch_size: int = 64, progress: bool = False,
                    desc: str = "qa: predict") -> dict[str, dict]:
    """``{qid: postprocess result}`` for every example of ``features``."""
    s, e, a = predict_logits(model, features, tokenizer, batch_size=batch_size, progress=progress, desc=desc)
    res = postprocess_predictions([ex.context for ex in features.examples], features.example_index, s, e,
                                  features.encodings, n_best=n_best, max_answer_length=max_answer_length,
                                  null_threshold=null_threshold, answerable_logits=a, null_rule=null_rule)
    return {ex.id: r for ex, r in zip(features.examples, res)}


def golds_of(examples: list[QAExample]) -> dict[str, list[str]]:
    return {ex.id: ex.answer_texts for ex in examples}


def train_one(bundle: str | Path, tokenizer, features: QAFeatures, *, seed: int, epochs: float, lr: float | None,
              batch_size: int, warmup_ratio: float = 0.1, weight_decay: float = 0.01, layer_decay: float = 1.0,
              device=None, progress: bool = False, max_steps: int | None = None, answerable_head: bool = False,
              random_size: str | None = None, tile_from: int | None = None):
    """Fine-tune a fresh ``ElectraForQuestionAnswering`` (``BertForQuestionAnswering`` for a BERT bundle; with
    ``answerable_head``, the subclasses in :mod:`models.qa.heads`) from ``bundle`` on ``features`` — or, with
    ``random_size``, an ELECTRA of that size from random init (``bundle`` is then only the tokenizer); returns
    ``(model, info)``. Loss = mean of start and end cross-entropy (transformers' head) [+ answerable BCE].
    ``lr`` None → the default for the encoder's width (:func:`models.training.defaults.default_lr`; in info).
    ``tile_from`` L: before training, copy the L trained position rows over the untrained ones
    (:func:`models.training.positions.tile_positions`; the number of rows copied is in info)."""
    import torch
    from tqdm.auto import tqdm
    from transformers.utils import logging as hf_logging

    from denki.models.bundle.pytorch import load_model
    from denki.models.training.loop import build_optimizer, set_seed, warmup_linear_schedule

    set_seed(seed)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "qa_outputs newly initialised" is expected, not news
    try:
        from denki.models.qa.heads import qa_model_class

        if random_size is not None:  # the control: the same architecture, no pretraining (init depends on seed)
            from denki.models.bundle.presets import electra_config

            model = qa_model_class(None, answerable_head)(electra_config(random_size, tokenizer.vocab_size))
        else:
            # a qa bundle too: a QA model (the shipped QA checkpoint) fine-tuned further on new question/passage pairs
            model = load_model(bundle, qa_model_class(bundle, answerable_head), kinds=("pretrained", "qa"))
    finally:
        hf_logging.set_verbosity(verbosity)
    tiled = tile_positions(model, tile_from) if tile_from else 0
    dev = device or torch.device("cpu")
    model.to(dev)
    n = len(features)
    steps_per_epoch = max(1, math.ceil(n / batch_size))
    total = max(1, int(round(steps_per_epoch * epochs)))
    if max_steps:
        total = min(total, max_steps)
    if lr is None:
        lr = default_lr(model.config.hidden_size)
    opt = build_optimizer(model, lr, weight_decay=weight_decay, layer_decay=layer_decay)
    sched = warmup_linear_schedule(opt, int(warmup_ratio * total), total)
    rng = np.random.default_rng(seed)
    sp = torch.from_numpy(features.start_positions)
    ep = torch.from_numpy(features.end_positions)
    model.train()
    step, losses, t0 = 0, [], time.time()
    bar = tqdm(total=total, desc=f"qa: train seed {seed}", unit=" step", disable=not progress, mininterval=1.0)
    while step < total:
        perm = rng.permutation(n)
        for b in range(0, n, batch_size):
            if step >= total:
                break
            idx = perm[b:b + batch_size]
            batch = tokenizer.pad([features.encodings[w] for w in idx])
            inputs = {k: torch.from_numpy(v).to(dev) for k, v in batch.items()}
            out = model(**inputs, start_positions=sp[idx].to(dev), end_positions=ep[idx].to(dev))
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append(out.loss.item())
            step += 1
            bar.update(1)
            if step % 20 == 0:
                bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
            if not progress and (step % max(1, total // 20) == 0 or step == total):
                # no bar (background jobs, logs): a plain line every 5 % of the steps instead
                print(f"qa: seed {seed} step {step}/{total}, loss {np.mean(losses[-20:]):.3f}, "
                      f"{time.time() - t0:.0f} s", flush=True)
    bar.close()
    info = {"seed": seed, "steps": step, "train_windows": n, "epochs": epochs, "lr": lr, "positions_tiled": tiled,
            "final_loss": float(np.mean(losses[-20:])), "train_seconds": round(time.time() - t0, 1)}
    return model, info


# ---------------------------------------------------------------------------------------------- reporting
def error_examples(examples: list[QAExample], results: dict[str, dict], k: int = 8) -> dict[str, list[dict]]:
    """Up to ``k`` of each error kind: wrong span, false no-answer, false answer."""
    out: dict[str, list[dict]] = {"wrong_span": [], "false_no_answer": [], "false_answer": []}
    for ex in examples:
        r = results[ex.id]
        em, f1 = max_over_golds(r["answer"], ex.answer_texts)
        if em:
            continue
        if ex.is_impossible:
            kind = "false_answer"
        elif not r["answer"]:
            kind = "false_no_answer"
        else:
            kind = "wrong_span"
        if len(out[kind]) >= k:
            continue
        a = r["start"] if r["start"] is not None else (ex.answers[0][1] if ex.answers else 0)
        out[kind].append({"id": ex.id, "question": ex.question, "gold": ex.answer_texts, "prediction": r["answer"],
                          "null_score_diff": r["null_score_diff"], "f1": round(100 * f1, 1),
                          "context_excerpt": ex.context[max(0, a - 40):a + 60]})
    return out


def plot_report(out_dir: Path, examples: list[QAExample], results: dict[str, dict], threshold: float) -> list[str]:
    """Two PNGs: histogram of ``null_score_diff`` for HasAns vs NoAns; overall F1 vs threshold."""
    from denki.models.io.plotting import setup_matplotlib

    plt = setup_matplotlib()

    has = [results[e.id]["null_score_diff"] for e in examples if not e.is_impossible]
    no = [results[e.id]["null_score_diff"] for e in examples if e.is_impossible]
    fin = [d for d in has + no if math.isfinite(d)]
    files = []
    if not fin:
        return files
    lo, hi = min(fin), max(fin)
    if hi <= lo:
        hi = lo + 1.0
    bins = np.linspace(lo, hi, 41)
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.hist([d for d in has if math.isfinite(d)], bins=bins, alpha=0.6, label=f"HasAns (n={len(has)})")
    ax.hist([d for d in no if math.isfinite(d)], bins=bins, alpha=0.6, label=f"NoAns (n={len(no)})")
    ax.axvline(threshold, color="k", ls="--", label=f"threshold {threshold:.3f}")
    ax.set_xlabel("null score − best span score  (> threshold ⇒ no answer)")
    ax.set_ylabel("questions")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "score_diff_hist.png", dpi=100)
    plt.close(fig)
    files.append("score_diff_hist.png")
    ts = np.linspace(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo), 121).tolist()
    golds = golds_of(examples)
    f1s = f1_vs_threshold(golds, results, ts)
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.plot(ts, f1s)
    ax.axvline(threshold, color="k", ls="--", label=f"chosen {threshold:.3f}")
    ax.set_xlabel("null threshold")
    ax.set_ylabel("dev F1 (%)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "f1_vs_threshold.png", dpi=100)
    plt.close(fig)
    files.append("f1_vs_threshold.png")
    return files


_METRIC_ROWS = ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "best_exact", "best_f1", "best_f1_thresh",
                "HasAns_span_exact", "HasAns_span_f1", "total", "HasAns_total", "NoAns_total")


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) >= 0.01 or v == 0 else f"{v:.4f}"
    return str(v)


def write_report(out_dir: Path, report: dict, examples: list[QAExample], results: dict[str, dict]) -> None:
    """``report.json`` + ``report.md`` (+ PNGs) in ``out_dir``."""
    thr = report["null_threshold"]
    images = plot_report(out_dir, examples, results, thr)
    report["images"] = images
    atomic_write_json(out_dir / "report.json", jsonable(report))
    m_t, m_0 = report["dev_metrics"], report["dev_metrics_threshold0"]
    lines = [f"# QA fine-tuning report — {out_dir.name}", "",
             (f"Pretrained bundle: `{report['source']['pretrained']}`  " if "pretrained" in report["source"] else
              f"Random init ({report['source']['size']}): the control, no pretraining  "),
             f"Train: `{report['data']['train']['path']}` ({report['data']['train']['examples']} questions used), "
             f"dev: `{report['data']['dev']['path']}` ({report['data']['dev']['examples']} questions)  ",
             f"Settings: {json.dumps(report['settings'], ensure_ascii=False)}", "",
             "## Dev metrics (kept seed)", "",
             "The null threshold is tuned on this same dev set (SQuAD 2.0 `best_f1_thresh`, placed in the middle of "
             "the gap between neighbouring score differences), so the tuned column is optimistic by construction; "
             "evaluate on another file for an unbiased number.", "",
             "| metric | threshold 0 (untuned, HF default) | tuned threshold |", "|---|---:|---:|"]
    for k in _METRIC_ROWS:
        lines.append(f"| {k} | {_fmt(m_0.get(k))} | {_fmt(m_t.get(k))} |")
    lines += ["", f"NoAns accuracy (= NoAns_exact) at the tuned threshold: {_fmt(m_t.get('NoAns_exact'))} %.  ",
              f"Chosen null threshold: **{thr:.4f}**, null rule `{report['null_rule']}` (stored in `task.json`); "
              f"margin to the nearest dev score difference {_fmt(report.get('null_threshold_margin'))}, "
              f"{_fmt(report.get('dev_within_0_1_of_threshold'))} of {m_t.get('total')} dev questions within 0.1 "
              "of it (a small margin with many questions near it means decisions flip under int8 or other "
              "rounding).",
              ""]
    kept = next(s for s in report["seeds"] if s["seed"] == report["kept_seed"])
    if len(kept.get("dev_metrics_by_null_rule", {})) > 1:
        lines += ["## Null rule: plain [CLS] score vs answerable head (kept seed, dev)", "",
                  "| rule | best_f1 | best_f1_thresh | f1 @ 0 | HasAns_f1 @ 0 | NoAns_exact @ 0 |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r, mm in kept["dev_metrics_by_null_rule"].items():
            lines.append(f"| {r} | {_fmt(mm['best_f1'])} | {_fmt(mm['best_f1_thresh'])} | {_fmt(mm['f1'])} | "
                         f"{_fmt(mm.get('HasAns_f1'))} | {_fmt(mm.get('NoAns_exact'))} |")
        lines.append("")
    if len(report["seeds"]) > 1:
        lines += ["## Seeds", "", "| seed | best_f1 | best_f1_thresh | HasAns_f1 | NoAns_exact | steps | train s |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for s in report["seeds"]:
            mm = s["dev_metrics"]
            lines.append(f"| {s['seed']} | {_fmt(mm['best_f1'])} | {_fmt(mm['best_f1_thresh'])} | "
                         f"{_fmt(mm.get('HasAns_f1'))} | {_fmt(mm.get('NoAns_exact'))} | {s['steps']} | "
                         f"{s['train_seconds']} |")
        lines += ["", f"Kept seed (median best_f1): {report['kept_seed']}; best_f1 mean ± sd over seeds: "
                      f"{report['best_f1_mean']:.2f} ± {report['best_f1_sd']:.2f}", ""]
    fs = report["features"]["train"]
    rt = fs["gold_span_roundtrip"]
    lines += ["## Data", "",
              f"- train windows: {fs['windows']} ({fs['windows_with_answer']} contain their answer); gold token spans "
              f"decoded from offsets: {rt['exact']} exact, {rt['superstring']} superstrings (a token straddles the "
              f"answer boundary), {rt['other']} other; answerable questions whose answer no window holds "
              f"whole: {fs['answerable_without_aligned_window']}",
              f"- skipped: train {len(report['skipped']['train'])}, dev {len(report['skipped']['dev'])} "
              "(listed in report.json `skipped`)", ""]
    for kind, title in (("wrong_span", "Wrong span"), ("false_no_answer", "False no-answer"),
                        ("false_answer", "False answer (question is unanswerable)")):
        errs = report["errors"][kind]
        lines += [f"## {title} ({len(errs)} shown)", ""]
        for e in errs:
            lines.append(f"- `{e['id']}` Q: {e['question']} — gold: {e['gold'] or '(none)'} — predicted: "
                         f"{e['prediction']!r} (diff {_fmt(e['null_score_diff'])})")
        lines.append("")
    for img in images:
        lines += [f"![{img}]({img})", ""]
    atomic_write_text(out_dir / "report.md", "\n".join(lines))


# ------------------------------------------------------------------------------------------------ commands
def finetune_qa(*, model: str | None = None, train: str, dev: str, out: str, max_length: int = 384,
                doc_stride: int = 128, max_answer_length: int = 30, seeds: int = 1, seed: int = 0,
                epochs: float = 2.0, lr: float | None = None,
                batch_size: int = 32, warmup_ratio: float = 0.1, weight_decay: float = 0.01,
                layer_decay: float = 1.0, n_best: int = 20, max_train_examples: int | None = None,
                max_dev_examples: int | None = None, max_steps: int | None = None, strict: bool = False,
                answerable_head: bool | None = None, device: str = "auto", threads: int | None = None,
                progress: bool = True, init_random: str | None = None, tokenizer_dir: str | None = None,
                position_init: str = "keep") -> dict:
    """Fine-tune ``seeds`` models from the pretrained bundle ``model`` (or, with ``init_random`` SIZE and
    ``tokenizer_dir``, from random init: the control), keep the median one, tune the null threshold on dev, write
    the bundle and its report. ``lr`` None → the default for the encoder's width (1e-3 tiny, 3e-4 small, 1e-4 base:
    :mod:`models.training.defaults`). ``answerable_head`` None → :func:`default_answerable_head` of the source
    (on for an ELECTRA-pretrained bundle). ``position_init`` "tile" copies the pretrained position rows over those
    pretraining never trained (:mod:`models.training.positions`); "keep" leaves them. Returns the report dict."""
    import torch

    from denki.models.bundle.format import check_model_source, command_line, read_manifest, resolve_bundle
    from denki.models.training.pretrain_health import warn_if_unlearned
    from denki.models.bundle.pytorch import save_bundle
    from denki.models.text.tokenizer import JapaneseTokenizer
    from denki.models.training.loop import median_index, pick_device

    if threads:
        torch.set_num_threads(threads)
    if seeds < 1:
        raise DenkiError("--seeds must be at least 1")
    if max_answer_length < 1:
        raise DenkiError("--max-answer-length must be at least 1")
    if position_init not in POSITION_INITS:
        raise DenkiError(f"--position-init must be one of {', '.join(POSITION_INITS)}, not {position_init!r}")
    check_model_source(model, init_random, tokenizer_dir)
    if model is not None:
        model = str(resolve_bundle(model))  # a bundle, or a run directory holding it (as the router's fine-tuning)
        src_manifest = read_manifest(model)  # also: a clear error for a non-bundle, early
        health_warning = warn_if_unlearned(src_manifest)
        tokenizer_dir = model
    else:
        src_manifest, health_warning = {"init": "random", "size": init_random}, None
    head_by = "option" if answerable_head is not None else "default"
    if answerable_head is None:
        answerable_head = default_answerable_head(src_manifest)
        if answerable_head:
            print("denki: training the answerable head (the default for an ELECTRA-pretrained bundle; "
                  "--no-answerable-head to leave it out)", file=sys.stderr, flush=True)
    tile_from = trained_positions(src_manifest) if position_init == "tile" else None
    dev_t = pick_device(device)
    tok = JapaneseTokenizer.load(tokenizer_dir)
    train_data: QAData = read_qa(train, strict=strict)
    dev_data: QAData = read_qa(dev, strict=strict)
    train_ex = subsample(train_data.examples, max_train_examples, seed)
    dev_ex = subsample(dev_data.examples, max_dev_examples, seed)
    train_f = build_features(train_ex, tok, max_length=max_length, doc_stride=doc_stride, progress=progress,
                             desc="qa: train windows")
    dev_f = build_features(dev_ex, tok, max_length=max_length, doc_stride=doc_stride, progress=progress,
                           desc="qa: dev windows")
    if not len(train_f):
        raise DenkiError("no training window left after skipping (see the skipped questions)")
    golds = golds_of(dev_f.examples)
    runs, states = [], []
    for k in range(seeds):
        s = seed + k
        m, info = train_one(tokenizer_dir, tok, train_f, seed=s, epochs=epochs, lr=lr, batch_size=batch_size,
                            warmup_ratio=warmup_ratio, weight_decay=weight_decay, layer_decay=layer_decay,
                            device=dev_t, progress=progress, max_steps=max_steps, answerable_head=answerable_head,
                            random_size=init_random, tile_from=tile_from)
        res = predict_results(m, dev_f, tok, n_best=n_best, max_answer_length=max_answer_length, null_threshold=0.0,
                              progress=progress, desc=f"qa: dev seed {s}")
        # one set of dev predictions, scored under every available null rule (threshold 0 + best threshold)
        rules = ("cls", "head", "combined") if answerable_head else ("cls",)
        by_rule = {}
        for rule in rules:
            rr = dict(zip(res.keys(), apply_threshold(list(res.values()), 0.0, rule)))
            by_rule[rule] = (squad_v2_metrics(golds, rr, threshold_at=THRESHOLD_AT), rr)
        rule = max(rules, key=lambda r: by_rule[r][0]["best_f1"])  # ties → the first (plain [CLS])
        info["null_rule"] = rule
        info["dev_metrics"] = by_rule[rule][0]
        info["dev_metrics_by_null_rule"] = {r: by_rule[r][0] for r in rules}
        runs.append(info)
        states.append((m.cpu(), by_rule[rule][1]))
    keep = median_index([r["dev_metrics"]["best_f1"] for r in runs])
    best_model, res0 = states[keep]
    null_rule = runs[keep]["null_rule"]
    thr = float(runs[keep]["dev_metrics"]["best_f1_thresh"])
    fin = np.array([r["null_score_diff"] for r in res0.values() if math.isfinite(r["null_score_diff"])])
    margin = float(np.abs(fin - thr).min()) if len(fin) else None
    near = int((np.abs(fin - thr) <= 0.1).sum())
    res_t = dict(zip(res0.keys(), apply_threshold(list(res0.values()), thr)))
    m_t = squad_v2_metrics(golds, res_t, threshold_at=THRESHOLD_AT)
    m_0 = runs[keep]["dev_metrics"]
    settings = {"max_length": max_length, "doc_stride": doc_stride, "max_answer_length": max_answer_length,
                "n_best": n_best, "epochs": epochs, "lr": runs[keep]["lr"], "batch_size": batch_size,
                "warmup_ratio": warmup_ratio, "weight_decay": weight_decay, "layer_decay": layer_decay,
                "seeds": seeds, "seed": seed,
                "max_train_examples": max_train_examples, "max_dev_examples": max_dev_examples,
                "max_steps": max_steps, "answerable_head": answerable_head, "answerable_head_by": head_by,
                "init_random": init_random,
                "position_init": position_init, "pretrained_positions": tile_from, "device": str(dev_t),
                "torch_threads": torch.get_num_threads()}
    task = {"task": "qa", "format": TASK_FORMAT, "null_threshold": thr, "max_answer_length": max_answer_length,
            "max_length": max_length, "doc_stride": doc_stride, "n_best": n_best,
            "answerable_head": answerable_head, "null_rule": null_rule,
            "decision": {"cls": "no answer iff min_w(start[CLS]+end[CLS]) - best_span_score > null_threshold",
                         "head": "no answer iff -max_w answerable_logit > null_threshold",
                         "combined": "no answer iff (cls diff) - max_w answerable_logit > null_threshold"}[null_rule],
            "threshold_tuned_on": str(dev), "metric_normalization": "NFKC, lower, drop Unicode P* + ASCII "
                                                                    "punctuation, drop whitespace; char-level F1"}
    parity = []
    for ex in dev_f.examples[:PARITY_SAMPLE_SIZE]:
        r = res_t[ex.id]
        parity.append({"id": ex.id, "question": ex.question, "context": ex.context,
                       "expected": {"answer": r["answer"], "start": r["start"], "end": r["end"],
                                    "has_answer": r["has_answer"], "null_score_diff": r["null_score_diff"],
                                    "score": r["score"]}})
    source = {"pretrained": str(model) if model else None,
              "pretrained_source": src_manifest.get("source", {}) if model else src_manifest,
              "train": train_data.summary(), "dev": dev_data.summary(), "command": command_line(),
              "seed": runs[keep]["seed"], "settings": settings}
    metrics = {k: m_t[k] for k in m_t} | {"threshold0_best_f1": m_0["best_f1"], "threshold0_f1": m_0["f1"]}
    out_p = Path(out)
    save_bundle(best_model, tokenizer_dir, out_p / "bundle", "qa", source=jsonable(source), metrics=jsonable(metrics),
                extra_files={"task.json": task, PARITY_SAMPLE: {"format": 1, "examples": jsonable(parity)}})
    bf = [r["dev_metrics"]["best_f1"] for r in runs]
    report = {"kind": "qa-finetune",
              "source": {"pretrained": str(model)} if model else src_manifest, "command": command_line(),
              "pretrained_health_warning": health_warning,
              "settings": settings, "null_threshold": thr, "null_threshold_margin": margin,
              "dev_within_0_1_of_threshold": near, "null_rule": null_rule, "kept_seed": runs[keep]["seed"],
              "dev_metrics": m_t, "dev_metrics_threshold0": m_0,
              "best_f1_mean": float(np.mean(bf)), "best_f1_sd": float(np.std(bf, ddof=1)) if len(bf) > 1 else 0.0,
              "seeds": runs,
              "data": {"train": {**train_data.summary(), "examples": len(train_ex)},
                       "dev": {**dev_data.summary(), "examples": len(dev_ex)}},
              "features": {"train": train_f.stats, "dev": dev_f.stats},
              "skipped": {"train": train_data.skipped + train_f.skipped, "dev": dev_data.skipped + dev_f.skipped},
              "errors": error_examples(dev_f.examples, res_t)}
    write_report(out_p, report, dev_f.examples, res_t)
    return report


def evaluate_qa(*, model: str, data: str, output_json: str | None = None, predictions: str | None = None,
                batch_size: int = 64, max_examples: int | None = None, strict: bool = False, device: str = "auto",
                threads: int | None = None, progress: bool = True) -> dict:
    """Score a ``qa`` bundle on a labelled file with the bundle's own threshold and windowing."""
    import torch

    from denki.models.bundle.format import read_task, resolve_bundle, verify_bundle
    from denki.models.bundle.pytorch import load_model
    from denki.models.text.tokenizer import JapaneseTokenizer
    from denki.models.training.loop import pick_device

    if threads:
        torch.set_num_threads(threads)
    model = resolve_bundle(model)
    verify_bundle(model, kinds=("qa",))  # kind and checksums first: a clearer error than "no task.json"
    task = read_task(model)
    if task.get("task") != "qa":
        raise DenkiError(f"{model}: task.json is missing or not a QA task")
    from denki.models.qa.heads import qa_model_class

    m = load_model(model, qa_model_class(model, task.get("answerable_head", False)), kinds=("qa",))
    m.to(pick_device(device))
    tok = JapaneseTokenizer.load(model)
    qd = read_qa(data, strict=strict)
    exs = subsample(qd.examples, max_examples, 0)
    feats = build_features(exs, tok, max_length=task["max_length"], doc_stride=task["doc_stride"],
                           progress=progress, desc="qa: windows")
    thr = float(task["null_threshold"])
    res = predict_results(m, feats, tok, n_best=task.get("n_best", 20), max_answer_length=task["max_answer_length"],
                          null_threshold=thr, null_rule=task.get("null_rule", "cls"), batch_size=batch_size,
                          progress=progress)
    metrics = squad_v2_metrics(golds_of(feats.examples), res, threshold_at=THRESHOLD_AT)
    metrics["null_threshold"] = thr
    metrics["null_rule"] = task.get("null_rule", "cls")
    out = {**metrics, "model": str(model), "data": str(data), "data_summary": qd.summary(),
           "max_examples": max_examples, "skipped": qd.skipped + feats.skipped}
    if output_json:
        atomic_write_json(output_json, jsonable(out))
    if predictions:
        atomic_write_json(predictions, {q: r["answer"] for q, r in res.items()})
    return jsonable(out)


__all__ = ["finetune_qa", "evaluate_qa", "predict_results", "predict_logits", "train_one", "NO_SPAN"]
