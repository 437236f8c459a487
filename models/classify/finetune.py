"""Fine-tuning a routing classifier (``denki finetune classify``): ELECTRA discriminator / MLM encoder / random init.

Pieces, in the order :func:`finetune` uses them:

* :mod:`models.classify.config` — the settings (:class:`FinetuneConfig`), the epoch schedule and class weights;
* :mod:`models.classify.model` — the encoder + classification head (:func:`build_model`) and one step's loss;
* :mod:`models.classify.train` — token ids (:func:`make_features`) and one seed's training loop
  (:func:`train_one_seed`: early stopping on dev macro-F1, the best epoch's weights kept); several seeds, the
  median-seed model kept;
* the TF-IDF model (:mod:`models.classify.baseline`: the baseline of every report and the lexical half of a fused
  router), then the routing rule fitted on dev (:mod:`models.classify.routing_rule`), saved in ``task.json`` of a
  ``classifier`` bundle, and the report (:mod:`models.classify.report`).

Torch is imported at module level: ``serve/`` must use :mod:`models.classify.decision` /
:mod:`models.classify.evaluate`.
"""
from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from denki.models.classify.config import (AUTO_BALANCE_RATIO, AUTO_MAX_EPOCHS, AUTO_MIN_UPDATES, FinetuneConfig,
                                          default_schedule, resolve_class_weights)
from denki.models.classify.decision import HUMAN
from denki.models.classify.fusion import fuse
from denki.models.classify.model import build_model
from denki.models.classify.predict import predict_logits
from denki.models.classify.routing_rule import FUSION_CHOICES, fit_routing_rule, fusion_report
from denki.models.classify.task import ROUTER
from denki.models.classify.train import make_features, train_one_seed
from denki.models.io.errors import DenkiError

__all__ = ["FinetuneConfig", "finetune", "default_schedule", "resolve_class_weights", "AUTO_BALANCE_RATIO",
           "AUTO_MIN_UPDATES", "AUTO_MAX_EPOCHS"]

#: labels a training or dev row may not have, and why (``denki serve --human-log`` rows keep the route, not a label)
FORBIDDEN_LABELS = {HUMAN: "'human' is the abstention route (the model was unsure and a person decided), not a "
                           "desk the model can learn: put the desk the person chose in this field, or drop the row"}


@dataclass
class _Parent:
    """Where the encoder comes from, as :func:`finetune` resolved it."""
    model: str | None                # the pretrained (or classifier) bundle; None for random init
    tokenizer_dir: str
    manifest: dict | None            # the bundle's manifest (None for random init)
    health_warning: str | None


@dataclass
class _Data:
    """The labelled rows: ``train`` / ``dev`` as :func:`models.io.records.read_labelled` reads them, the label list
    and the gold label indices ``(n,)``; ``enc_texts`` / ``enc_gold``: what the encoder trains on (the training rows,
    plus pseudo-labelled rows with ``--unlabelled``)."""
    train: object
    dev: object
    dev_path: str
    train_paths: list[str]
    n_train_total: int
    labels: list[str]
    train_gold: np.ndarray
    dev_gold: np.ndarray
    enc_texts: list[str] | None = None
    enc_gold: np.ndarray | None = None


def finetune(*, train_path: str | Sequence[str], dev_path: str, out_dir: str, model: str | None = None,
             init_random: str | None = None, tokenizer_dir: str | None = None, text_field: str = "text",
             label_field: str = "label", cfg: FinetuneConfig | None = None,
             target_precision: float | None = None, target_coverage: float | None = None,
             min_recall: dict[str, float] | None = None, skip_empty: bool = False,
             max_train_examples: int | None = None, baseline: bool = True, fusion: str = "auto",
             command: str | None = None, unlabelled: Sequence[str] | None = None,
             unlabelled_cap: int | None = None, scope_keep: float | None = None) -> dict:
    """Run ``denki finetune classify``; returns the report dict. Writes ``OUT/bundle`` (kind ``classifier``),
    ``OUT/report.json``, ``OUT/report.md`` and the PNGs.

    ``train_path``: one file, or several concatenated in order (e.g. the original training file and the rows of a
    ``denki serve --human-log`` file that people labelled); a row labelled ``human`` is refused in any of them.

    ``fusion``: ``auto`` ships the encoder fused with the TF-IDF model (:mod:`models.classify.fusion`) when the
    fused router's cross-fitted dev macro-F1 beats the encoder's alone, ``on`` always, ``off`` never.

    ``unlabelled``: files whose texts (labels never read) are pseudo-labelled by self-training the TF-IDF model
    (:mod:`models.classify.selftrain`); the encoder trains on train + at most ``unlabelled_cap`` pseudo rows per
    class (default :data:`selftrain.DEFAULT_ENCODER_CAP`), the TF-IDF half on train + all of them."""
    from denki.models.classify.evaluate import evaluate_logits
    from denki.models.classify.report import write_report
    from denki.models.text.tokenizer import JapaneseTokenizer
    from denki.models.training.loop import median_index

    cfg = cfg or FinetuneConfig()
    _check_settings(cfg, model, init_random, tokenizer_dir, target_precision, target_coverage, fusion, baseline)
    out = Path(out_dir)
    t_start = time.perf_counter()
    parent = _resolve_parent(model, tokenizer_dir, cfg)
    data = _read_data(train_path, dev_path, text_field, label_field, skip_empty, max_train_examples)
    min_recall = _check_labels(data, parent, cfg, dict(min_recall or {}), label_field)
    selftrain = _self_training(data, cfg, unlabelled, unlabelled_cap, text_field)
    cfg, requested = _resolve_schedule(cfg, data)  # a copy: the caller's config may serve another task

    tok = JapaneseTokenizer.load(parent.tokenizer_dir)
    train_ids, train_trunc = ([], 0) if cfg.epochs == 0 else make_features(tok, data.enc_texts, cfg,
                                                                           desc="tokenize train")
    dev_ids, dev_trunc = make_features(tok, data.dev.texts, cfg, desc="tokenize dev")
    make_model = partial(build_model, parent.model, cfg, labels=data.labels, vocab_size=tok.vocab_size,
                         random_size=init_random)
    runs = _train_seeds(make_model, train_ids, dev_ids, data, cfg, tok.pad_id)
    kept = median_index([r["macro_f1"] for r in runs])

    base, lexical, lex_logits, lex_probs = _fit_tfidf(data, selftrain) if baseline else (None, None, None, None)
    _save_dev_logits(out, runs, lex_logits, data.dev_gold)
    fusion_rep = fusion_report(fusion, runs, kept, lex_logits, data.dev_gold, data.labels)
    dev_logits = runs[kept]["dev_logits"].astype(np.float64)
    if fusion_rep is not None and fusion_rep["shipped"]:
        dev_logits = fuse(dev_logits, lex_logits, fusion_rep["mode"], fusion_rep["weight"])
    task, temperature_fit, offsets = fit_routing_rule(
        dev_logits, data.dev_gold, data.labels, max_length=cfg.max_length, text_field=text_field,
        label_field=label_field, target_precision=target_precision, target_coverage=target_coverage,
        min_recall=min_recall, fusion=fusion_rep, lex_logits=lex_logits, scope_keep=scope_keep)
    dev_eval = evaluate_logits(dev_logits, data.dev_gold, task, curves=True, lexical_logits=lex_logits)

    source = _save_classifier_bundle(out, make_model, runs[kept], data, parent, cfg, task, dev_eval, dev_ids,
                                     tok.pad_id, text_field, lexical, lex_probs, selftrain, command, init_random)
    _write_skipped_rows(out, data)
    report = _build_report(source, runs, kept, data, cfg, requested, dev_eval, task, (train_trunc, dev_trunc),
                           text_field, label_field)
    report.update({"min_recall_cost": _min_recall_cost(dev_logits, data, offsets, min_recall),
                   "baseline": base, "fusion": fusion_rep, "self_training": selftrain.report if selftrain else None,
                   "pretrained_health_warning": parent.health_warning, "temperature_fit": temperature_fit,
                   "training_seconds": float(sum(r["seconds"] for r in runs)),
                   "total_seconds": float(time.perf_counter() - t_start), "bundle": str(out / "bundle")})
    write_report(out, report)
    return report


# ------------------------------------------------------------------------------------------------- the steps
def _check_settings(cfg: FinetuneConfig, model: str | None, init_random: str | None, tokenizer_dir: str | None,
                    target_precision: float | None, target_coverage: float | None, fusion: str,
                    baseline: bool) -> None:
    """Refuse settings that cannot run, before any data is read. ``--epochs 0`` trains nothing, so one seed is
    enough: ``cfg.seeds`` is cut to its first."""
    from denki.models.bundle.format import check_model_source

    check_model_source(model, init_random, tokenizer_dir)
    if target_precision is not None and target_coverage is not None:
        raise DenkiError("give --target-precision or --target-coverage, not both")
    for name, v in (("--target-precision", target_precision), ("--target-coverage", target_coverage)):
        if v is not None and not 0 < v <= 1:
            raise DenkiError(f"{name} must be in (0, 1], got {v}")
    if not cfg.seeds:
        raise DenkiError("--seeds must be at least 1")
    if fusion not in FUSION_CHOICES:
        raise DenkiError(f"--fusion {fusion!r}: choose one of {', '.join(FUSION_CHOICES)}")
    if fusion == "on" and not baseline:
        raise DenkiError("--fusion on needs the TF-IDF model: drop --no-baseline")
    if cfg.epochs is not None and cfg.epochs < 0:
        raise DenkiError("--epochs must be ≥ 0")
    if cfg.patience is not None and cfg.patience < 1:
        raise DenkiError("--patience must be ≥ 1")
    if cfg.epochs == 0:
        cfg.seeds = cfg.seeds[:1]  # nothing is trained: one pass over dev is enough


def _bundle_labels(bundle: str) -> list[str] | None:
    """The label list of a classifier bundle (``task.json``), or None."""
    from denki.models.bundle.format import read_task

    return read_task(bundle).get("labels")


def _resolve_parent(model: str | None, tokenizer_dir: str | None, cfg: FinetuneConfig) -> _Parent:
    """The bundle to start from (a bundle or a run directory holding it), its manifest read first for a clear
    error on a wrong path; or the random-init control (``model`` None)."""
    from denki.models.bundle.format import PRETRAINED, read_manifest, resolve_bundle
    from denki.models.training.pretrain_health import warn_if_unlearned

    refit_needs = "--epochs 0 (re-fit the routing rule only) needs a 'classifier' bundle as --model"
    if model is None:
        if cfg.epochs == 0:
            raise DenkiError(refit_needs)
        return _Parent(model=None, tokenizer_dir=tokenizer_dir, manifest=None, health_warning=None)
    model = str(resolve_bundle(model))
    manifest = read_manifest(model)
    if manifest.get("kind") not in (PRETRAINED, ROUTER.name):
        raise DenkiError(f"{model}: bundle kind is {manifest.get('kind')!r}; fine-tuning needs a 'pretrained' "
                         "(or 'classifier') PyTorch bundle")
    parent = _Parent(model=model, tokenizer_dir=model, manifest=manifest, health_warning=warn_if_unlearned(manifest))
    if cfg.epochs == 0 and (manifest.get("kind") != ROUTER.name or _bundle_labels(model) is None):
        raise DenkiError(refit_needs)
    return parent


def _subsample(data, n: int | None, seed: int = 0):
    """Keep ``n`` random examples (``Random(seed)``, original order kept)."""
    if n is None or n >= len(data):
        return data
    keep = sorted(random.Random(seed).sample(range(len(data)), n))
    data.texts = [data.texts[i] for i in keep]
    data.labels = [data.labels[i] for i in keep]
    data.lines = [data.lines[i] for i in keep]
    if data.files:
        data.files = [data.files[i] for i in keep]
    return data


def _read_data(train_path: str | Sequence[str], dev_path: str, text_field: str, label_field: str,
               skip_empty: bool, max_train_examples: int | None) -> _Data:
    """Read the training file(s) (concatenated; the rows per file printed), subsample them, read dev, check the
    two label sets agree and map every label to its index."""
    from denki.models.io.records import check_label_sets, read_labelled, read_labelled_files

    train_paths = [str(train_path)] if isinstance(train_path, (str, os.PathLike)) else [str(p) for p in train_path]
    train = read_labelled_files(train_paths, text_field, label_field, skip_empty=skip_empty,
                                forbidden_labels=FORBIDDEN_LABELS)
    n_train_total = len(train)
    if len(train_paths) > 1:
        print("training data: " + ", ".join(f"{s['n']:,} rows from {s['path']}" for s in train.sources)
              + f" ({n_train_total:,} in all)", flush=True)
    train = _subsample(train, max_train_examples)
    dev = read_labelled(dev_path, text_field, label_field, skip_empty=skip_empty, forbidden_labels=FORBIDDEN_LABELS)
    labels = check_label_sets(train, dev, label_field)
    return _Data(train=train, dev=dev, dev_path=dev_path, train_paths=train_paths, n_train_total=n_train_total, labels=labels,
                 train_gold=None, dev_gold=None)


def _check_labels(data: _Data, parent: _Parent, cfg: FinetuneConfig, min_recall: dict[str, float],
                  label_field: str) -> dict:
    """``--epochs 0`` keeps the bundle's labels; every ``--min-recall`` label exists and its floor is in (0, 1].
    Then the gold label indices ``(n,)`` go into ``data``. Returns ``min_recall``."""
    from denki.models.classify.evaluate import label_indices

    labels, train, dev = data.labels, data.train, data.dev
    if cfg.epochs == 0 and _bundle_labels(parent.model) != labels:
        raise DenkiError(f"--epochs 0: the training labels {labels} differ from the bundle's "
                         f"{_bundle_labels(parent.model)}; fine-tune instead")
    for lab in min_recall:
        if lab not in labels:
            raise DenkiError(f"--min-recall names label {lab!r}, which is not in the training labels {labels}")
        if not 0 < min_recall[lab] <= 1:
            raise DenkiError(f"--min-recall {lab}={min_recall[lab]}: the floor must be in (0, 1]")
    data.train_gold = label_indices(train.labels, labels, train.path, train.lines, label_field)
    data.dev_gold = label_indices(dev.labels, labels, dev.path, dev.lines, label_field)
    data.enc_texts, data.enc_gold = train.texts, data.train_gold
    return min_recall


def _self_training(data: _Data, cfg: FinetuneConfig, unlabelled: Sequence[str] | None, cap: int | None,
                   text_field: str):
    """``--unlabelled``: pseudo-labelled rows (:mod:`models.classify.selftrain`) for the encoder and the TF-IDF
    half (dev untouched). The encoder's rows become the labelled rows, repeated to make half of them, plus the
    capped pseudo rows. Returns the :class:`~models.classify.selftrain.SelfTraining` or None."""
    if unlabelled and cfg.epochs == 0:
        raise DenkiError("--unlabelled needs training: drop --epochs 0")
    if not unlabelled:
        return None
    from denki.models.classify.selftrain import DEFAULT_ENCODER_CAP, self_train_files

    train = data.train
    selftrain = self_train_files(unlabelled, text_field, train.texts, data.train_gold, data.dev.texts, data.labels,
                                 cap=DEFAULT_ENCODER_CAP if cap is None else cap)
    r = selftrain.labelled_repeats  # the labelled rows repeated: half the encoder's rows (selftrain.LABELLED_SHARE)
    data.enc_texts = train.texts * r + selftrain.encoder_texts
    data.enc_gold = np.concatenate([np.tile(data.train_gold, r), selftrain.encoder_gold]).astype(data.train_gold.dtype)
    return selftrain


def _resolve_schedule(cfg: FinetuneConfig, data: _Data) -> tuple[FinetuneConfig, dict]:
    """A copy of ``cfg`` with the class weights, epochs and patience resolved for the encoder's training rows
    (printed when chosen by default) → ``(cfg, what was requested)``."""
    requested = {"class_weights_requested": cfg.class_weights, "epochs_requested": cfg.epochs,
                 "patience_requested": cfg.patience}
    n_labels = len(data.labels)
    resolved, label_ratio = resolve_class_weights(cfg.class_weights, np.bincount(data.enc_gold, minlength=n_labels))
    requested["label_count_ratio"] = label_ratio
    auto_epochs, auto_patience = default_schedule(len(data.enc_gold), cfg.batch_size)
    cfg = replace(cfg, class_weights=resolved,
                  epochs=auto_epochs if cfg.epochs is None else cfg.epochs,
                  patience=auto_patience if cfg.patience is None else cfg.patience)
    if cfg.epochs > 0 and (requested["epochs_requested"] is None or requested["patience_requested"] is None):
        print(f"schedule: up to {cfg.epochs} epochs, patience {cfg.patience} (defaults for {len(data.enc_gold):,} "
              f"training examples at batch {cfg.batch_size}: ≥ {AUTO_MIN_UPDATES} updates, at most "
              f"{AUTO_MAX_EPOCHS} epochs)", flush=True)
    if requested["class_weights_requested"] == "auto" and cfg.epochs > 0:
        print(f"class weights: {cfg.class_weights} (--class-weights auto; the most frequent label has "
              f"{label_ratio:.1f}× the rarest's training examples, balanced from {AUTO_BALANCE_RATIO:g}×)", flush=True)
    return cfg, requested


def _train_seeds(make_model, train_ids: list[np.ndarray], dev_ids: list[np.ndarray], data: _Data,
                 cfg: FinetuneConfig, pad_id: int) -> list[dict]:
    """One run per seed of ``cfg.seeds`` (:func:`train_one_seed`), each summed up in one line."""
    runs = []
    for seed in cfg.seeds:
        r = train_one_seed(make_model, seed, train_ids, data.enc_gold, dev_ids,
                           data.dev_gold, data.labels, cfg, pad_id=pad_id)
        runs.append(r)
        print(f"seed {seed}: dev macro-F1 {r['macro_f1']:.4f} accuracy {r['accuracy']:.4f} "
              f"(best epoch {r['best_epoch']}/{r['epochs_run']}, {r['seconds']:.0f}s)", flush=True)
    return runs


def _fit_tfidf(data: _Data, selftrain) -> tuple[dict, object, np.ndarray, np.ndarray]:
    """The TF-IDF model: the baseline beside every report (on the labelled rows) and the lexical half of a fused
    router and of the out-of-scope check (with self-training: on the labelled and all pseudo-labelled rows) →
    ``(baseline report, lexical model, its dev logits (n_dev, K), its dev probabilities (n_dev, K))``."""
    from denki.models.classify.baseline import tfidf_baseline

    train, dev = data.train, data.dev
    print("TF-IDF baseline …", flush=True)
    base = tfidf_baseline(train.texts, data.train_gold, dev.texts, data.dev_gold, data.labels,
                          keep_model=selftrain is None)
    lex = base if selftrain is None else tfidf_baseline(  # self-training: the lexical half sees the pseudo rows
        train.texts + selftrain.lexical_texts, np.concatenate([data.train_gold, selftrain.lexical_gold]),
        dev.texts, data.dev_gold, data.labels, keep_model=True)
    lexical, lex_probs = lex.pop("model"), lex.pop("dev_probs")
    lex_logits = lexical.logits(dev.texts)
    if selftrain is not None:
        selftrain.report["lexical_dev"] = {k: lex[k] for k in ("macro_f1", "accuracy")}
        print(f"TF-IDF on the labelled rows: dev macro-F1 {base['macro_f1']:.4f}; self-trained (the lexical "
              f"half): {lex['macro_f1']:.4f}", flush=True)
    return base, lexical, lex_logits, lex_probs


def _save_dev_logits(out: Path, runs: list[dict], lex_logits: np.ndarray | None, gold: np.ndarray) -> None:
    """``OUT/dev_logits.npz``: every seed's encoder dev logits ``(n_dev, K)`` (``seed_<s>``), the TF-IDF model's
    (``lexical``) and the gold indices — so a fusion or calibration rule can be studied again without retraining."""
    import io

    from denki.models.io.fileio import atomic_write_bytes

    arrays = {f"seed_{r['seed']}": np.asarray(r["dev_logits"], dtype=np.float32) for r in runs}
    if lex_logits is not None:
        arrays["lexical"] = np.asarray(lex_logits, dtype=np.float32)
    buf = io.BytesIO()
    np.savez_compressed(buf, gold=np.asarray(gold), **arrays)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / "dev_logits.npz", buf.getvalue())


def _save_classifier_bundle(out: Path, make_model, chosen: dict, data: _Data, parent: _Parent, cfg: FinetuneConfig,
                            task: dict, dev_eval: dict, dev_ids: list[np.ndarray], pad_id: int, text_field: str,
                            lexical, lex_probs: np.ndarray | None, selftrain, command: str | None,
                            init_random: str | None) -> dict:
    """Rebuild the kept seed's model and save it as ``OUT/bundle`` (kind ``classifier``) with ``task.json``, the
    parity sample (200 dev texts and their fp32 CPU logits, for the ONNX export's gate) and, when the rule uses it,
    the TF-IDF model. Returns the bundle's ``source`` (provenance; the report repeats it)."""
    from denki.models.bundle.format import command_line
    from denki.models.bundle.pytorch import save_bundle
    from denki.models.io.fileio import sha256_file
    from denki.models.training.loop import pick_device

    net = make_model(seed=chosen["seed"])
    net.load_state_dict(chosen["state"])
    dev = data.dev
    sample = sorted(random.Random(0).sample(range(len(dev)), min(200, len(dev))))
    # reference logits for the ONNX parity gate: the saved weights, fp32 on CPU (no bf16 autocast)
    ref = predict_logits(net, [dev_ids[i] for i in sample], pad_id=pad_id, batch_size=cfg.eval_batch_size,
                         device=torch.device("cpu"), bf16=False, progress=False)
    parity = {"text_field": text_field, "max_length": cfg.max_length,
              "texts": [dev.texts[i] for i in sample], "labels": [dev.labels[i] for i in sample],
              "logits": [[float(v) for v in row] for row in ref],
              "note": "fp32 CPU PyTorch logits of the saved model at this max_length; for ONNX parity checks"}
    keep_lexical = bool(task.get("fusion")) or bool(task.get("scope"))
    if keep_lexical:  # scikit-learn's own probabilities: the export's gate checks the bundle's numpy copy
        parity["lexical_probs"] = [[float(v) for v in lex_probs[i]] for i in sample]
    m = parent.manifest
    train = data.train
    source = {
        "command": command or command_line(),
        "parent": ({"path": str(parent.model), "kind": m.get("kind"), "created": m.get("created"),
                    "source": m.get("source")} if m else {"init": "random", "size": init_random}),
        "train": {"path": train.path, "sha256": sha256_file(data.train_paths[0]) if len(data.train_paths) == 1 else None,
                  "n": len(train), "n_in_file": data.n_train_total,
                  "files": [{**s, "sha256": sha256_file(s["path"])} for s in train.sources]},
        "dev": {"path": str(data.dev_path), "sha256": sha256_file(data.dev_path), "n": len(dev)},
        **({"unlabelled": {"files": selftrain.report["files"], "encoder_rows": selftrain.report["encoder_rows"],
                           "lexical_rows": selftrain.report["lexical_rows"]}} if selftrain else {}),
        "seeds": list(cfg.seeds), "chosen_seed": chosen["seed"], "config": asdict(cfg),
        "device": str(pick_device(cfg.device)),
    }
    bundle_metrics = {k: dev_eval[k] for k in ("accuracy", "macro_f1", "ece", "ece_uncalibrated",
                                                "abstain_rate", "accuracy_non_abstained")}
    out.mkdir(parents=True, exist_ok=True)
    save_bundle(net, parent.tokenizer_dir, out / "bundle", "classifier", source=source, metrics=bundle_metrics,
                extra_files={"task.json": task, "parity_sample.json": parity},
                write_extra=lexical.save if keep_lexical else None)
    return source


def _write_skipped_rows(out: Path, data: _Data) -> None:
    """``OUT/skipped_rows.jsonl`` (``--skip-empty``): a row skipped from one of several training files names that
    file (its own "file" key comes last)."""
    import json

    from denki.models.io.fileio import atomic_write_text

    train, dev = data.train, data.dev
    if train.skipped or dev.skipped:
        rows = [{"file": train.path, **s} for s in train.skipped] + [{"file": dev.path, **s} for s in dev.skipped]
        atomic_write_text(out / "skipped_rows.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _min_recall_cost(dev_logits: np.ndarray, data: _Data, offsets: np.ndarray, min_recall: dict) -> dict | None:
    """What the ``--min-recall`` offsets cost the other classes on dev (None without ``--min-recall``)."""
    from denki.models.classify.calibration import offsets_cost

    return offsets_cost(dev_logits, data.dev_gold, offsets, data.labels) if min_recall else None


def _build_report(source: dict, runs: list[dict], kept: int, data: _Data, cfg: FinetuneConfig, requested: dict,
                  dev_eval: dict, task: dict, truncated: tuple[int, int], text_field: str, label_field: str) -> dict:
    """The report dict up to the task (``report.json``; :func:`models.classify.report.write_report` renders it and
    adds the verdict): the data, the settings as run, every seed and their spread, the kept model's dev evaluation."""
    from denki.models.training.loop import pick_device

    chosen, labels = runs[kept], data.labels
    seeds_f1 = [r["macro_f1"] for r in runs]
    seeds_acc = [r["accuracy"] for r in runs]
    return {
        "command": source["command"],
        "model": source["parent"],
        "labels": labels,
        "data": {"train": {**source["train"], "truncated": truncated[0], "skipped": len(data.train.skipped),
                           "label_counts": {lab: int((data.train_gold == i).sum()) for i, lab in enumerate(labels)}},
                 "dev": {**source["dev"], "truncated": truncated[1], "skipped": len(data.dev.skipped),
                         "label_counts": {lab: int((data.dev_gold == i).sum()) for i, lab in enumerate(labels)}},
                 "text_field": text_field, "label_field": label_field},
        "config": {**asdict(cfg), "lr": chosen["lr"], "layer_decay": chosen["layer_decay"],
                   "class_weights_requested": requested["class_weights_requested"],
                   "label_count_ratio": requested["label_count_ratio"],
                   "epochs_requested": requested["epochs_requested"],
                   "patience_requested": requested["patience_requested"]},
        "device": str(pick_device(cfg.device)),
        "seeds": [{k: r[k] for k in ("seed", "macro_f1", "accuracy", "best_epoch", "epochs_run", "seconds",
                                     "history")} for r in runs],
        "seed_summary": {"macro_f1_median": float(np.median(seeds_f1)), "macro_f1_min": float(min(seeds_f1)),
                         "macro_f1_max": float(max(seeds_f1)), "macro_f1_std": float(np.std(seeds_f1)),
                         "accuracy_median": float(np.median(seeds_acc)), "accuracy_min": float(min(seeds_acc)),
                         "accuracy_max": float(max(seeds_acc)), "chosen_seed": chosen["seed"]},
        "dev": dev_eval,
        "task": task,
    }
