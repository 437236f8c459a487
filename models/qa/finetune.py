"""Extractive QA fine-tuning (``denki finetune qa``).

Model: ``transformers.ElectraForQuestionAnswering`` (a linear start/end head on every token) on top of a
``pretrained`` bundle's encoder (:mod:`models.qa.model`). Pipeline: :mod:`models.qa.data` (read + validate) →
:mod:`models.qa.train` (windows and targets, then AdamW, linear warmup/decay, one model per seed) → dev logits
(:mod:`models.qa.predict`) → :mod:`models.qa.postprocess` (numpy; the ONNX runtime reuses it) →
:mod:`models.qa.metrics` (char-level SQuAD 2.0 metrics, best-F1 null threshold). The median seed (by dev best F1)
is kept and written as a ``qa`` bundle whose ``task.json`` holds the tuned ``null_threshold`` and the windowing
settings, so every serving path applies the same decision rule; :mod:`models.qa.report` writes the report.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from denki.models.io.errors import DenkiError
from denki.models.qa.config import QAFinetuneConfig
from denki.models.qa.data import QAData, read_qa
from denki.models.qa.evaluate import THRESHOLD_AT, subsample
from denki.models.qa.features import QAFeatures
from denki.models.qa.metrics import squad_v2_metrics
from denki.models.qa.postprocess import apply_threshold
from denki.models.qa.predict import predict_results
from denki.models.qa.report import error_examples, golds_of, jsonable, write_report
from denki.models.qa.train import make_features, train_one_seed
from denki.models.qa.config import default_answerable_head
from denki.models.training.positions import POSITION_INITS, trained_positions
from denki.models.training.precision import resolve_precision

TASK_FORMAT = 1
PARITY_SAMPLE = "parity_sample.json"
PARITY_SAMPLE_SIZE = 100
#: how a kept model decides "no answer", by ``task.json`` ``null_rule`` (written there for people and exporters)
DECISIONS = {"cls": "no answer iff min_w(start[CLS]+end[CLS]) - best_span_score > null_threshold",
             "head": "no answer iff -max_w answerable_logit > null_threshold",
             "combined": "no answer iff (cls diff) - max_w answerable_logit > null_threshold"}


@dataclass
class _Source:
    """Where the encoder comes from, as :func:`finetune` resolved it."""
    model: str | None                # the pretrained (or qa) bundle; None for random init
    tokenizer_dir: str
    manifest: dict                   # the bundle's manifest, or {"init": "random", "size": …}
    health_warning: str | None
    head_by: str                     # "option" or "default": who chose cfg.answerable_head
    tile_from: int | None            # trained position rows to tile from (--position-init tile)


def finetune(*, train_path: str, dev_path: str, out_dir: str, model: str | None = None,
             init_random: str | None = None, tokenizer_dir: str | None = None,
             cfg: QAFinetuneConfig | None = None, strict: bool = False, max_train_examples: int | None = None,
             max_dev_examples: int | None = None) -> dict:
    """Run ``denki finetune qa``: fine-tune one model per seed of ``cfg.seeds`` from the pretrained bundle
    ``model`` (or, with ``init_random`` SIZE and ``tokenizer_dir``, from random init: the control), keep the median
    one, tune the null threshold on dev, write ``OUT/bundle`` (kind ``qa``), ``OUT/report.json``, ``OUT/report.md``
    and the PNGs. Returns the report dict.

    ``strict``: stop at the first bad question instead of skipping it; ``max_train_examples`` /
    ``max_dev_examples``: seeded random subsets of the questions (the first seed draws them)."""
    from denki.models.text.tokenizer import JapaneseTokenizer
    from denki.models.training.loop import pick_device

    cfg = cfg or QAFinetuneConfig()
    _check_settings(cfg)
    src = _resolve_source(model, init_random, tokenizer_dir, cfg)
    cfg = replace(cfg, answerable_head=_answerable_head(cfg, src))  # a copy: the caller's config stays as given
    device = pick_device(cfg.device)
    cfg = replace(cfg, precision=resolve_precision(cfg.precision, device.type, who="qa"))
    tok = JapaneseTokenizer.load(src.tokenizer_dir)
    train_data, dev_data = read_qa(train_path, strict=strict), read_qa(dev_path, strict=strict)
    train_ex = subsample(train_data.examples, max_train_examples, cfg.seeds[0])
    dev_ex = subsample(dev_data.examples, max_dev_examples, cfg.seeds[0])
    train_f = make_features(train_ex, tok, cfg, desc="qa: train windows")
    dev_f = make_features(dev_ex, tok, cfg, desc="qa: dev windows")
    if not len(train_f):
        raise DenkiError("no training window left after skipping (see the skipped questions)")

    runs, states = _train_seeds(src, tok, train_f, dev_f, cfg, device, init_random)
    kept = _keep_median_and_tune_threshold(runs, states, golds_of(dev_f.examples))
    kept["selective"] = _fit_selective(kept, golds_of(dev_f.examples), cfg, dev_path)

    settings = _settings(cfg, src, kept, device, init_random, max_train_examples, max_dev_examples)
    out = Path(out_dir)
    _save_qa_bundle(out, kept, src, cfg, settings, train_data, dev_data, dev_f, dev_path)
    report = _build_report(kept, runs, src, settings, train_data, dev_data, train_ex, dev_ex, train_f, dev_f)
    write_report(out, report, dev_f.examples, kept["results"])
    return report


# ------------------------------------------------------------------------------------------------- the steps
def _check_settings(cfg: QAFinetuneConfig) -> None:
    """Pin the torch thread count; refuse settings that cannot run, before any data is read."""
    import torch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if len(cfg.seeds) < 1:
        raise DenkiError("--seeds must be at least 1")
    if cfg.max_answer_length < 1:
        raise DenkiError("--max-answer-length must be at least 1")
    if cfg.target_precision is not None and not 0.0 < cfg.target_precision < 1.0:
        raise DenkiError(f"--target-precision must be between 0 and 1 (a share of right answers), "
                         f"not {cfg.target_precision}")
    if cfg.position_init not in POSITION_INITS:
        raise DenkiError(f"--position-init must be one of {', '.join(POSITION_INITS)}, not {cfg.position_init!r}")


def _resolve_source(model: str | None, init_random: str | None, tokenizer_dir: str | None,
                    cfg: QAFinetuneConfig) -> _Source:
    """The bundle to start from (a bundle, or a run directory holding it, as the router's fine-tuning takes) and
    its manifest, read early for a clear error on a non-bundle; or the random-init control."""
    from denki.models.bundle.format import check_model_source, read_manifest, resolve_bundle
    from denki.models.training.pretrain_health import warn_if_unlearned

    check_model_source(model, init_random, tokenizer_dir)
    if model is not None:
        model = str(resolve_bundle(model))
        manifest = read_manifest(model)
        health_warning = warn_if_unlearned(manifest)
        tokenizer_dir = model
    else:
        manifest, health_warning = {"init": "random", "size": init_random}, None
    return _Source(model=model, tokenizer_dir=tokenizer_dir, manifest=manifest, health_warning=health_warning,
                   head_by="option" if cfg.answerable_head is not None else "default",
                   tile_from=trained_positions(manifest) if cfg.position_init == "tile" else None)


def _answerable_head(cfg: QAFinetuneConfig, src: _Source) -> bool:
    """``cfg.answerable_head``, or (None) the default for the source (:func:`default_answerable_head`), said aloud
    when it is on."""
    if cfg.answerable_head is not None:
        return cfg.answerable_head
    on = default_answerable_head(src.manifest)
    if on:
        print("denki: training the answerable head (the default for an ELECTRA-pretrained bundle; "
              "--no-answerable-head to leave it out)", file=sys.stderr, flush=True)
    return on


def _train_seeds(src: _Source, tok, train_f: QAFeatures, dev_f: QAFeatures, cfg: QAFinetuneConfig, device,
                 init_random: str | None) -> tuple[list[dict], list[tuple]]:
    """One model per seed, each scored on dev → ``(runs, states)``: the seeds' infos (with their dev metrics) and
    ``(model on CPU, dev results under its chosen null rule)`` per seed."""
    from functools import partial

    from denki.models.qa.model import build_model

    make_model = partial(build_model, src.model, cfg, vocab_size=tok.vocab_size, random_size=init_random)
    golds = golds_of(dev_f.examples)
    runs, states = [], []
    for s in cfg.seeds:
        hook = partial(_epoch_score, dev_f=dev_f, tok=tok, cfg=cfg, golds=golds, seed=s) if cfg.eval_each_epoch else None
        m, info = train_one_seed(make_model, s, train_f, tok, cfg, device=device, tile_from=src.tile_from,
                                 on_epoch_end=hook)
        results = _score_on_dev(m, info, dev_f, tok, cfg, golds)
        if cfg.eval_each_epoch:
            info["epoch_scores"].append({"epoch": cfg.epochs, "step": info["steps"],
                                         **_metric_row(info["dev_metrics"], info["null_rule"])})
        runs.append(info)
        states.append((m.cpu(), results))
    return runs, states


def _epoch_score(model, epoch: int, *, dev_f: QAFeatures, tok, cfg: QAFinetuneConfig, golds: dict, seed: int) -> dict:
    """``--eval-each-epoch``: the dev scores of the model as it stands after ``epoch`` whole epochs (mid-schedule:
    the learning rate has not decayed to 0 yet, so it is the curve, not what a run of that many epochs would score)."""
    info = {"seed": seed}
    _score_on_dev(model, info, dev_f, tok, cfg, golds)
    row = _metric_row(info["dev_metrics"], info["null_rule"])
    print(f"qa: seed {seed} after epoch {epoch}: dev best F1 {row['best_f1']:.2f} (F1 at threshold 0 "
          f"{row['f1']:.2f}, HasAns {row['HasAns_f1']}, rule {row['null_rule']})", file=sys.stderr, flush=True)
    return row


def _metric_row(m: dict, rule: str) -> dict:
    """The figures of one dev scoring that the epoch curve keeps."""
    return {"best_f1": m["best_f1"], "f1": m["f1"], "exact": m["exact"], "HasAns_f1": m.get("HasAns_f1"),
            "NoAns_f1": m.get("NoAns_f1"), "null_rule": rule}


def _score_on_dev(model, info: dict, dev_f: QAFeatures, tok, cfg: QAFinetuneConfig, golds: dict) -> dict:
    """One set of dev predictions, scored under every available null rule (threshold 0 + best threshold); the rule
    with the best ``best_f1`` (ties → the first, plain [CLS]) goes into ``info``. Returns the dev results under
    it."""
    res = predict_results(model, dev_f, tok, n_best=cfg.n_best, max_answer_length=cfg.max_answer_length,
                          null_threshold=0.0, progress=cfg.progress, desc=f"qa: dev seed {info['seed']}")
    rules = ("cls", "head", "combined") if cfg.answerable_head else ("cls",)
    by_rule = {}
    for rule in rules:
        rr = dict(zip(res.keys(), apply_threshold(list(res.values()), 0.0, rule)))
        by_rule[rule] = (squad_v2_metrics(golds, rr, threshold_at=THRESHOLD_AT), rr)
    rule = max(rules, key=lambda r: by_rule[r][0]["best_f1"])
    info["null_rule"] = rule
    info["dev_metrics"] = by_rule[rule][0]
    info["dev_metrics_by_null_rule"] = {r: by_rule[r][0] for r in rules}
    return by_rule[rule][1]


def _keep_median_and_tune_threshold(runs: list[dict], states: list[tuple], golds: dict) -> dict:
    """Keep the median seed (by dev best F1) and its best-F1 null threshold → ``{run, model, null_rule,
    threshold, margin, near, results, metrics, metrics0}``: ``margin`` is the distance to the nearest dev score
    difference, ``near`` the dev questions within 0.1 of it (many near a small margin: int8 or other rounding can
    flip decisions); ``results`` / ``metrics`` at the tuned threshold, ``metrics0`` at threshold 0."""
    from denki.models.training.loop import median_index

    keep = median_index([r["dev_metrics"]["best_f1"] for r in runs])
    model, res0 = states[keep]
    thr = float(runs[keep]["dev_metrics"]["best_f1_thresh"])
    fin = np.array([r["null_score_diff"] for r in res0.values() if math.isfinite(r["null_score_diff"])])
    res_t = dict(zip(res0.keys(), apply_threshold(list(res0.values()), thr)))
    return {"run": runs[keep], "model": model, "null_rule": runs[keep]["null_rule"], "threshold": thr,
            "margin": float(np.abs(fin - thr).min()) if len(fin) else None,
            "near": int((np.abs(fin - thr) <= 0.1).sum()), "results": res_t,
            "metrics": squad_v2_metrics(golds, res_t, threshold_at=THRESHOLD_AT), "metrics0": runs[keep]["dev_metrics"]}


def _fit_selective(kept: dict, golds: dict, cfg: QAFinetuneConfig, dev_path: str) -> dict:
    """The confidence calibration (:func:`models.qa.selective.fit_confidence`) on the kept seed's dev answers at
    the tuned threshold, and with ``cfg.target_precision`` the abstention floor ``min_confidence`` → the
    ``task.json`` fields plus the dev coverage table (``report``; optimistic: fitted on the same questions)."""
    from denki.models.qa.selective import fit_confidence, fit_min_confidence, selective_report

    cal = fit_confidence(kept["results"], golds, kept["threshold"], fitted_on=str(dev_path))
    fields = {"confidence": cal}
    if cfg.target_precision is not None:
        chosen = fit_min_confidence(kept["results"], golds, cal, kept["threshold"], cfg.target_precision)
        fields.update(min_confidence=chosen["threshold"], target_precision=cfg.target_precision,
                      target_precision_reached=chosen["reached"])
        if not chosen["reached"]:
            print(f"denki: warning: no confidence floor reaches --target-precision {cfg.target_precision} on dev; "
                  f"stored the floor with the best precision ({chosen['precision']:.3f} at coverage "
                  f"{chosen['coverage']:.3f}); task.json target_precision_reached is false",
                  file=sys.stderr, flush=True)
    report = selective_report(kept["results"], golds, {"null_threshold": kept["threshold"], **fields})
    return {"task": fields, "report": report}


def _settings(cfg: QAFinetuneConfig, src: _Source, kept: dict, device, init_random: str | None,
              max_train_examples: int | None, max_dev_examples: int | None) -> dict:
    """The run's settings as the bundle's manifest and the report record them."""
    import torch

    return {"max_length": cfg.max_length, "doc_stride": cfg.doc_stride, "max_answer_length": cfg.max_answer_length,
            "n_best": cfg.n_best, "epochs": cfg.epochs, "target_precision": cfg.target_precision, "lr": kept["run"]["lr"], "batch_size": cfg.batch_size,
            "warmup_ratio": cfg.warmup_ratio, "weight_decay": cfg.weight_decay, "layer_decay": cfg.layer_decay,
            "seeds": len(cfg.seeds), "seed": cfg.seeds[0],
            "max_train_examples": max_train_examples, "max_dev_examples": max_dev_examples,
            "max_steps": cfg.max_steps, "answerable_head": cfg.answerable_head, "answerable_head_by": src.head_by,
            "init_random": init_random,
            "position_init": cfg.position_init, "pretrained_positions": src.tile_from, "device": str(device),
            "precision": cfg.precision, "torch_threads": torch.get_num_threads()}


def _save_qa_bundle(out: Path, kept: dict, src: _Source, cfg: QAFinetuneConfig, settings: dict, train_data: QAData,
                    dev_data: QAData, dev_f: QAFeatures, dev_path: str) -> None:
    """``OUT/bundle``: the kept model, ``task.json`` (the decision rule every serving path applies) and the parity
    sample (the first :data:`PARITY_SAMPLE_SIZE` dev questions' answers, for the ONNX export's gate)."""
    from denki.models.bundle.format import command_line
    from denki.models.bundle.pytorch import save_bundle

    task = {"task": "qa", "format": TASK_FORMAT, "null_threshold": kept["threshold"],
            "max_answer_length": cfg.max_answer_length, "max_length": cfg.max_length, "doc_stride": cfg.doc_stride,
            "n_best": cfg.n_best, "answerable_head": cfg.answerable_head, "null_rule": kept["null_rule"],
            "decision": DECISIONS[kept["null_rule"]],
            **kept["selective"]["task"],
            "threshold_tuned_on": str(dev_path), "metric_normalization": "NFKC, lower, drop Unicode P* + ASCII "
                                                                         "punctuation, drop whitespace; char-level F1"}
    parity = []
    for ex in dev_f.examples[:PARITY_SAMPLE_SIZE]:
        r = kept["results"][ex.id]
        parity.append({"id": ex.id, "question": ex.question, "context": ex.context,
                       "expected": {"answer": r["answer"], "start": r["start"], "end": r["end"],
                                    "has_answer": r["has_answer"], "null_score_diff": r["null_score_diff"],
                                    "score": r["score"]}})
    source = {"pretrained": str(src.model) if src.model else None,
              "pretrained_source": src.manifest.get("source", {}) if src.model else src.manifest,
              "train": train_data.summary(), "dev": dev_data.summary(), "command": command_line(),
              "seed": kept["run"]["seed"], "settings": settings}
    m_t, m_0 = kept["metrics"], kept["metrics0"]
    metrics = {k: m_t[k] for k in m_t} | {"threshold0_best_f1": m_0["best_f1"], "threshold0_f1": m_0["f1"]}
    save_bundle(kept["model"], src.tokenizer_dir, out / "bundle", "qa", source=jsonable(source),
                metrics=jsonable(metrics),
                extra_files={"task.json": task, PARITY_SAMPLE: {"format": 1, "examples": jsonable(parity)}})


def _build_report(kept: dict, runs: list[dict], src: _Source, settings: dict, train_data: QAData, dev_data: QAData,
                  train_ex: list, dev_ex: list, train_f: QAFeatures, dev_f: QAFeatures) -> dict:
    """The report dict (``report.json``; :func:`models.qa.report.write_report` renders it)."""
    from denki.models.bundle.format import command_line

    bf = [r["dev_metrics"]["best_f1"] for r in runs]
    return {"kind": "qa-finetune",
            "source": {"pretrained": str(src.model)} if src.model else src.manifest, "command": command_line(),
            "pretrained_health_warning": src.health_warning,
            "settings": settings, "null_threshold": kept["threshold"], "null_threshold_margin": kept["margin"],
            "dev_within_0_1_of_threshold": kept["near"], "null_rule": kept["null_rule"],
            "kept_seed": kept["run"]["seed"],
            "dev_metrics": kept["metrics"], "dev_metrics_threshold0": kept["metrics0"],
            "selective": kept["selective"]["report"],
            "best_f1_mean": float(np.mean(bf)), "best_f1_sd": float(np.std(bf, ddof=1)) if len(bf) > 1 else 0.0,
            "seeds": runs,
            "data": {"train": {**train_data.summary(), "examples": len(train_ex)},
                     "dev": {**dev_data.summary(), "examples": len(dev_ex)}},
            "features": {"train": train_f.stats, "dev": dev_f.stats},
            "skipped": {"train": train_data.skipped + train_f.skipped, "dev": dev_data.skipped + dev_f.skipped},
            "errors": error_examples(dev_f.examples, kept["results"])}


__all__ = ["QAFinetuneConfig", "finetune"]
