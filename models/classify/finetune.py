"""Fine-tuning a routing classifier (ELECTRA discriminator / MLM encoder / random init) and scoring it.

Pieces, in the order ``denki finetune classify`` uses them:

* :mod:`models.classify.predict` — token ids, length-sorted batches with dynamic padding, batched logits;
* :func:`train_one_seed` — ``ElectraForSequenceClassification`` (``BertForSequenceClassification`` for a BERT
  bundle from ``denki import``: the class follows the bundle's ``config.json``); AdamW with layer-wise LR decay
  (official ELECTRA: 0.8), linear warmup + linear decay, optional class weights, bf16 autocast on CUDA, early stopping
  on dev macro-F1 (the best epoch's weights are kept);
* :func:`finetune` — several seeds, median-seed model kept, then the routing rule is fitted on dev
  (:mod:`models.classify.calibration`), saved in ``task.json`` of a ``classifier`` bundle, and the report is
  written (:mod:`models.classify.report`) next to a TF-IDF baseline.

Torch is imported at module level: ``serve/`` must use :mod:`models.classify.decision` /
:mod:`models.classify.evaluate`.
"""
from __future__ import annotations

import math
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from denki.models.bundle.format import resolve_bundle
from denki.models.classify.decision import HUMAN
from denki.models.classify.fusion import choose_fusion, fuse
from denki.models.classify.predict import autocast, collate, encode_texts, length_batches, predict_logits
from denki.models.io.errors import DenkiError
from denki.models.training.defaults import default_layer_decay, default_lr  # by encoder width, shared with QA
from denki.models.training.pretrain_health import warn_if_unlearned


#: ``--class-weights auto`` turns the balanced loss on when the most frequent training label has at least this many
#: times the examples of the rarest. Measured (experiments/cw): on jaquad-qtype
#: (ratio 141) it lifted the tiny MLM 40 % encoder's dev macro-F1 by 8.6 points, left random init level and moved
#: ELECTRA encoders within the noise (−2.8 to +3.0); on livedoor-title (ratio 2.1) it cost 0.4–1.4 points.
#: The threshold between the two measured ratios is a choice, not a measurement.
AUTO_BALANCE_RATIO = 10.0


#: A training set too small for 10 epochs to give the updates the defaults were measured with (10 epochs of the
#: experiment's 2,000 examples at batch 32 = 630 updates) gets more epochs, up to :data:`AUTO_MAX_EPOCHS`, and a
#: patience scaled with them. Measured (experiments/labels): from random init on 250 livedoor titles,
#: 10 epochs (80 updates) scored dev macro-F1 0.152 and 40 epochs (patience 10) 0.431.
AUTO_MIN_UPDATES = 630
AUTO_MAX_EPOCHS = 40


def default_schedule(n_train: int, batch_size: int) -> tuple[int, int]:
    """``(epochs, patience)`` when ``--epochs`` / ``--patience`` are not given: 10 / 3 from about 2,000 examples
    (batch 32) up, more epochs below so that a run makes ≥ :data:`AUTO_MIN_UPDATES` updates (at most
    :data:`AUTO_MAX_EPOCHS`), and a patience of 30 % of the epochs (≥ 3)."""
    steps_per_epoch = max(1, math.ceil(n_train / batch_size))
    epochs = min(AUTO_MAX_EPOCHS, max(10, math.ceil(AUTO_MIN_UPDATES / steps_per_epoch)))
    return epochs, max(3, math.ceil(0.3 * epochs))


def resolve_class_weights(mode: str, counts) -> tuple[str, float]:
    """``(none|balanced, max/min count ratio)`` for ``--class-weights MODE`` given the training label counts ``(K,)``;
    ``auto`` → balanced when the ratio ≥ :data:`AUTO_BALANCE_RATIO`."""
    counts = np.asarray(counts, dtype=np.float64)
    ratio = float(counts.max() / max(counts.min(), 1.0)) if counts.size else 1.0
    if mode == "auto":
        return ("balanced" if ratio >= AUTO_BALANCE_RATIO else "none"), ratio
    if mode not in ("none", "balanced"):
        raise DenkiError(f"--class-weights {mode!r}: choose none, balanced or auto")
    return mode, ratio


@dataclass
class FinetuneConfig:
    """Hyper-parameters of one fine-tuning run (all seeds share them)."""
    epochs: int | None = None        # None → default_schedule(len(train), batch_size): 10 from ~2,000 examples up
    lr: float | None = None          # None → default_lr(hidden): 1e-3 tiny, 3e-4 small, 1e-4 base
    batch_size: int = 32
    eval_batch_size: int = 128
    max_length: int = 128
    layer_decay: float | None = None  # None → default_layer_decay(hidden): 1.0 tiny, 0.8 (official ELECTRA) otherwise
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    patience: int | None = None      # epochs without dev macro-F1 gain before stopping; None → default_schedule
    class_weights: str = "auto"      # none | balanced | auto (resolve_class_weights)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    device: str = "auto"
    bf16: bool = True                # autocast on CUDA only
    progress: bool = True


# ----------------------------------------------------------------------------------------------- models
def make_model_factory(*, labels: list[str], bundle: str | None = None, random_size: str | None = None,
                       vocab_size: int | None = None):
    """A function ``seed → fresh …ForSequenceClassification`` from a bundle (``pretrained`` or ``classifier``;
    ELECTRA or BERT as its ``config.json`` says; the head is re-initialised when the label count differs) or an
    ``ElectraForSequenceClassification`` from random init."""
    from transformers import AutoModelForSequenceClassification, ElectraForSequenceClassification
    from transformers.utils import logging as hf_logging

    from denki.models.bundle.pytorch import load_model
    from denki.models.bundle.presets import electra_config
    from denki.models.training.loop import set_seed

    id2label = dict(enumerate(labels))
    label2id = {lab: i for i, lab in enumerate(labels)}

    def make(seed: int):
        set_seed(seed)  # the classifier head's init depends on it
        if random_size is not None:
            cfg = electra_config(random_size, vocab_size, num_labels=len(labels), id2label=id2label,
                                 label2id=label2id)
            return ElectraForSequenceClassification(cfg)
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # "some weights newly initialised" is expected for the head
        try:
            return load_model(bundle, AutoModelForSequenceClassification, kinds=("pretrained", "classifier"),
                              num_labels=len(labels), id2label=id2label, label2id=label2id,
                              ignore_mismatched_sizes=True)
        finally:
            hf_logging.set_verbosity(verbosity)

    return make


def _dev_macro_f1(logits: np.ndarray, gold: np.ndarray, labels: list[str]) -> dict:
    from denki.models.classify.metrics import classification_metrics

    m = classification_metrics(gold, logits.argmax(axis=1), labels)
    return {"accuracy": m["accuracy"], "macro_f1": m["macro_f1"]}


def train_one_seed(make_model, seed: int, train_ids: list[np.ndarray], train_gold: np.ndarray,
                   dev_ids: list[np.ndarray], dev_gold: np.ndarray, labels: list[str], cfg: FinetuneConfig,
                   *, pad_id: int = 0) -> dict:
    """Fine-tune one seed; return ``{seed, state (best epoch, CPU tensors), dev_logits, best_epoch, history,
    seconds, lr, accuracy, macro_f1}``."""
    from denki.models.training.loop import build_optimizer, pick_device, set_seed, warmup_linear_schedule

    device = pick_device(cfg.device)
    model = make_model(seed).to(device)
    set_seed(seed)
    lr = cfg.lr if cfg.lr is not None else default_lr(model.config.hidden_size)
    layer_decay = cfg.layer_decay if cfg.layer_decay is not None else default_layer_decay(model.config.hidden_size)
    opt = build_optimizer(model, lr, weight_decay=cfg.weight_decay, layer_decay=layer_decay,
                          num_layers=model.config.num_hidden_layers)
    steps_per_epoch = math.ceil(len(train_ids) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    sched = warmup_linear_schedule(opt, int(cfg.warmup_ratio * total), total)
    weight = None
    if cfg.class_weights == "balanced":
        counts = np.bincount(train_gold, minlength=len(labels)).astype(np.float64)
        w = len(train_gold) / (len(labels) * np.maximum(counts, 1))
        weight = torch.tensor(w, dtype=torch.float32, device=device)
    loss_fn = torch.nn.CrossEntropyLoss(weight=weight)
    gold_t = torch.from_numpy(np.asarray(train_gold, dtype=np.int64))
    rng = random.Random(seed)
    lengths = [len(x) for x in train_ids]
    best = {"macro_f1": -1.0}
    history, bad_epochs = [], 0
    t0 = time.perf_counter()
    if cfg.epochs == 0:  # re-fit the routing rule of an existing classifier: score dev once, no training
        dev_logits = predict_logits(model, dev_ids, pad_id=pad_id, batch_size=cfg.eval_batch_size, device=device,
                                    bf16=cfg.bf16, progress=cfg.progress, desc="dev")
        best = {**_dev_macro_f1(dev_logits, dev_gold, labels), "epoch": 0, "dev_logits": dev_logits,
                "state": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}}
    model.train()
    for epoch in range(1, cfg.epochs + 1):
        losses = []
        bar = tqdm(length_batches(lengths, cfg.batch_size, rng), desc=f"seed {seed} epoch {epoch}/{cfg.epochs}",
                   unit="batch", disable=not cfg.progress, leave=False, mininterval=1.0)
        for b in bar:
            batch = collate(train_ids, b, pad_id, device)
            with autocast(device, cfg.bf16):
                logits = model(**batch).logits
            loss = loss_fn(logits.float(), gold_t[b].to(device))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            if len(losses) % 20 == 0:
                bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
        dev_logits = predict_logits(model, dev_ids, pad_id=pad_id, batch_size=cfg.eval_batch_size, device=device,
                                    bf16=cfg.bf16, progress=cfg.progress, desc="dev")
        m = _dev_macro_f1(dev_logits, dev_gold, labels)
        history.append({"epoch": epoch, "train_loss": float(np.mean(losses)) if losses else None, **m})
        tqdm.write(f"seed {seed} epoch {epoch}: train loss {history[-1]['train_loss']:.4f}, dev macro-F1 "
                   f"{m['macro_f1']:.4f}, accuracy {m['accuracy']:.4f} ({time.perf_counter() - t0:.0f}s)")
        if m["macro_f1"] > best["macro_f1"]:
            best = {**m, "epoch": epoch, "dev_logits": dev_logits,
                    "state": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}}
            bad_epochs = 0
        else:
            bad_epochs += 1
            if bad_epochs >= cfg.patience:
                break
    seconds = time.perf_counter() - t0
    return {"seed": seed, "lr": lr, "layer_decay": layer_decay, "state": best["state"], "dev_logits": best["dev_logits"],
            "best_epoch": best["epoch"], "accuracy": best["accuracy"], "macro_f1": best["macro_f1"],
            "history": history, "seconds": seconds, "epochs_run": len(history)}


# ----------------------------------------------------------------------------------------------- the command
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


def _bundle_labels(bundle: str) -> list[str] | None:
    """The label list of a classifier bundle (``task.json``), or None."""
    from denki.models.bundle.format import read_task

    return read_task(bundle).get("labels")


FUSION_CHOICES = ("auto", "on", "off")


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


def _choose_fusion(mode: str, runs: list[dict], kept: int, lex_logits: np.ndarray | None,
                   gold: np.ndarray, labels: list[str]) -> dict | None:
    """The fusion section of the report (None without a TF-IDF model or with ``--fusion off``): the setting
    chosen on dev for the kept seed's logits (``runs[kept]``), its cross-fitted estimate, every seed's cross-fitted fused macro-F1
    beside its encoder's, and ``shipped``: ``auto`` ships it when the cross-fitted fused macro-F1 beats the
    encoder alone (and the chosen weight leaves the encoder < 1)."""
    if lex_logits is None or mode == "off":
        return None
    choices = [choose_fusion(r["dev_logits"].astype(np.float64), lex_logits, gold, labels) for r in runs]
    choice = choices[kept]
    per_seed = []
    for r, c in zip(runs, choices):
        per_seed.append({"seed": r["seed"], "encoder_macro_f1": c["encoder_macro_f1"],
                         "fused_crossfit_macro_f1": c["crossfit"]["macro_f1"], "mode": c["mode"],
                         "weight": c["weight"]})
    wins = choice["weight"] < 1.0 and choice["crossfit"]["macro_f1"] > choice["encoder_macro_f1"]
    shipped = mode == "on" or (mode == "auto" and wins)
    fused = [p["fused_crossfit_macro_f1"] for p in per_seed]
    print(f"fusion with TF-IDF: {choice['mode']} at encoder weight {choice['weight']:.1f}; cross-fitted dev "
          f"macro-F1 {choice['crossfit']['macro_f1']:.4f} vs encoder {choice['encoder_macro_f1']:.4f}, TF-IDF "
          f"{choice['lexical_macro_f1']:.4f} → {'fused router shipped' if shipped else 'encoder alone shipped'}"
          f" (--fusion {mode})", flush=True)
    return {**choice, "requested": mode, "shipped": bool(shipped), "wins_on_dev": bool(wins),
            "per_seed": per_seed, "fused_crossfit_median": float(np.median(fused)),
            "fused_crossfit_min": float(min(fused)), "fused_crossfit_max": float(max(fused))}


#: labels a training or dev row may not have, and why (``denki serve --human-log`` rows keep the route, not a label)
FORBIDDEN_LABELS = {HUMAN: "'human' is the abstention route (the model was unsure and a person decided), not a "
                           "desk the model can learn: put the desk the person chose in this field, or drop the row"}


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
    from denki.models.bundle.format import check_model_source, command_line, read_manifest
    from denki.models.classify.calibration import (choose_threshold, fit_min_recall_offsets, fit_temperature_report,
                                                   offsets_cost)
    from denki.models.classify.evaluate import evaluate_logits, label_indices
    from denki.models.classify.report import write_report
    from denki.models.io.fileio import atomic_write_text, sha256_file
    from denki.models.io.records import check_label_sets, read_labelled, read_labelled_files
    from denki.models.text.tokenizer import JapaneseTokenizer
    from denki.models.training.loop import median_index, pick_device

    cfg = cfg or FinetuneConfig()
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
    out = Path(out_dir)
    t_start = time.perf_counter()
    parent = None
    health_warning = None
    if model is not None:
        model = str(resolve_bundle(model))
        parent = read_manifest(model)  # clear error for a wrong path before reading data
        if parent.get("kind") not in ("pretrained", "classifier"):
            raise DenkiError(f"{model}: bundle kind is {parent.get('kind')!r}; fine-tuning needs a 'pretrained' "
                             "(or 'classifier') PyTorch bundle")
        tokenizer_dir = model
        health_warning = warn_if_unlearned(parent)
        if cfg.epochs == 0:
            cfg_labels = _bundle_labels(model)
            if parent.get("kind") != "classifier" or cfg_labels is None:
                raise DenkiError("--epochs 0 (re-fit the routing rule only) needs a 'classifier' bundle as --model")
    elif cfg.epochs == 0:
        raise DenkiError("--epochs 0 (re-fit the routing rule only) needs a 'classifier' bundle as --model")

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
    if cfg.epochs == 0 and _bundle_labels(model) != labels:
        raise DenkiError(f"--epochs 0: the training labels {labels} differ from the bundle's "
                         f"{_bundle_labels(model)}; fine-tune instead")
    min_recall = dict(min_recall or {})
    for lab in min_recall:
        if lab not in labels:
            raise DenkiError(f"--min-recall names label {lab!r}, which is not in the training labels {labels}")
        if not 0 < min_recall[lab] <= 1:
            raise DenkiError(f"--min-recall {lab}={min_recall[lab]}: the floor must be in (0, 1]")
    train_gold = label_indices(train.labels, labels, train.path, train.lines, label_field)
    dev_gold = label_indices(dev.labels, labels, dev.path, dev.lines, label_field)
    selftrain = None  # --unlabelled: pseudo-labelled rows for the encoder and the TF-IDF half (dev untouched)
    enc_texts, enc_gold = train.texts, train_gold
    if unlabelled and cfg.epochs == 0:
        raise DenkiError("--unlabelled needs training: drop --epochs 0")
    if unlabelled:
        from denki.models.classify.selftrain import DEFAULT_ENCODER_CAP, self_train_files

        selftrain = self_train_files(unlabelled, text_field, train.texts, train_gold, dev.texts, labels,
                                     cap=DEFAULT_ENCODER_CAP if unlabelled_cap is None else unlabelled_cap)
        r = selftrain.labelled_repeats  # the labelled rows repeated: half the encoder's rows (selftrain.LABELLED_SHARE)
        enc_texts = train.texts * r + selftrain.encoder_texts
        enc_gold = np.concatenate([np.tile(train_gold, r), selftrain.encoder_gold]).astype(train_gold.dtype)
    requested_weights = cfg.class_weights
    resolved, label_ratio = resolve_class_weights(cfg.class_weights, np.bincount(enc_gold, minlength=len(labels)))
    epochs_requested, patience_requested = cfg.epochs, cfg.patience
    auto_epochs, auto_patience = default_schedule(len(enc_gold), cfg.batch_size)
    cfg = replace(cfg, class_weights=resolved,  # a copy: the caller's config may serve another task
                  epochs=auto_epochs if cfg.epochs is None else cfg.epochs,
                  patience=auto_patience if cfg.patience is None else cfg.patience)
    if cfg.epochs > 0 and (epochs_requested is None or patience_requested is None):
        print(f"schedule: up to {cfg.epochs} epochs, patience {cfg.patience} (defaults for {len(enc_gold):,} "
              f"training examples at batch {cfg.batch_size}: ≥ {AUTO_MIN_UPDATES} updates, at most "
              f"{AUTO_MAX_EPOCHS} epochs)", flush=True)
    if requested_weights == "auto" and cfg.epochs > 0:
        print(f"class weights: {cfg.class_weights} (--class-weights auto; the most frequent label has "
              f"{label_ratio:.1f}× the rarest's training examples, balanced from {AUTO_BALANCE_RATIO:g}×)", flush=True)

    tok = JapaneseTokenizer.load(tokenizer_dir)
    train_ids, train_trunc = ([], 0) if cfg.epochs == 0 else encode_texts(
        tok, enc_texts, cfg.max_length, progress=cfg.progress, desc="tokenize train")
    dev_ids, dev_trunc = encode_texts(tok, dev.texts, cfg.max_length, progress=cfg.progress, desc="tokenize dev")
    make_model = make_model_factory(labels=labels, bundle=model, random_size=init_random,
                                    vocab_size=tok.vocab_size)

    runs = []
    for seed in cfg.seeds:
        r = train_one_seed(make_model, seed, train_ids, enc_gold, dev_ids, dev_gold, labels, cfg,
                           pad_id=tok.pad_id)
        runs.append(r)
        print(f"seed {seed}: dev macro-F1 {r['macro_f1']:.4f} accuracy {r['accuracy']:.4f} "
              f"(best epoch {r['best_epoch']}/{r['epochs_run']}, {r['seconds']:.0f}s)", flush=True)
    k = median_index([r["macro_f1"] for r in runs])
    chosen = runs[k]
    enc_logits = chosen["dev_logits"].astype(np.float64)

    # the TF-IDF model (the baseline beside every report, and the lexical half of a fused router)
    base, lexical, lex_logits, lex_probs = None, None, None, None
    if baseline:
        from denki.models.classify.baseline import tfidf_baseline

        print("TF-IDF baseline …", flush=True)
        base = tfidf_baseline(train.texts, train_gold, dev.texts, dev_gold, labels, keep_model=selftrain is None)
        lex = base if selftrain is None else tfidf_baseline(  # self-training: the lexical half sees the pseudo rows
            train.texts + selftrain.lexical_texts, np.concatenate([train_gold, selftrain.lexical_gold]),
            dev.texts, dev_gold, labels, keep_model=True)
        lexical, lex_probs = lex.pop("model"), lex.pop("dev_probs")
        lex_logits = lexical.logits(dev.texts)
        if selftrain is not None:
            selftrain.report["lexical_dev"] = {k2: lex[k2] for k2 in ("macro_f1", "accuracy")}
            print(f"TF-IDF on the labelled rows: dev macro-F1 {base['macro_f1']:.4f}; self-trained (the lexical "
                  f"half): {lex['macro_f1']:.4f}", flush=True)
    _save_dev_logits(out, runs, lex_logits, dev_gold)
    fusion_report = _choose_fusion(fusion, runs, k, lex_logits, dev_gold, labels)
    ship = fusion_report is not None and fusion_report["shipped"]
    dev_logits = fuse(enc_logits, lex_logits, fusion_report["mode"], fusion_report["weight"]) if ship else enc_logits

    # routing rule, fitted on dev (see models.classify.calibration for the order)
    temperature_fit = fit_temperature_report(dev_logits, dev_gold)
    temperature = temperature_fit["temperature"]
    if temperature_fit["fallback"]:
        print(f"finetune classify: temperature scaling: {temperature_fit['fallback']}", file=sys.stderr)
    floors = {labels.index(lab): v for lab, v in min_recall.items()}
    offsets, reached = fit_min_recall_offsets(dev_logits, dev_gold, floors)
    idx = np.argmax(dev_logits + offsets[None, :], axis=1)
    from denki.models.classify.decision import softmax

    score = softmax(dev_logits / temperature, axis=1)[np.arange(len(idx)), idx]
    thr = choose_threshold(score, idx == dev_gold, target_precision=target_precision,
                           target_coverage=target_coverage)
    task = {
        "task": "classify",
        "labels": labels,
        "human_label": "human",
        "temperature": float(temperature),
        "threshold": float(thr["threshold"]),
        "offsets": [float(x) for x in offsets],
        "max_length": cfg.max_length,
        "text_field": text_field,
        "label_field": label_field,
        "abstention": thr,
        "min_recall": {lab: {"floor": v, "reached_on_dev": reached[labels.index(lab)],
                             "offset": float(offsets[labels.index(lab)])} for lab, v in min_recall.items()},
        "decision_rule": "label = argmax(logits + offsets); scores = softmax(logits / temperature); "
                         "score = scores[label]; route = human_label if score < threshold else label",
    }
    if ship:
        from denki.models.classify.lexical import LEXICAL_FILE, LEXICAL_VOCAB

        task["fusion"] = {"mode": fusion_report["mode"], "weight": fusion_report["weight"],
                          "lexical": LEXICAL_FILE, "lexical_vocab": LEXICAL_VOCAB,
                          "crossfit_macro_f1": fusion_report["crossfit"]["macro_f1"],
                          "rule": "logits = fuse(encoder logits, lexical logits) (models/classify/fusion.py); "
                                  "the decision rule applies to them"}
    # out of scope → human (models.classify.scope): the TF-IDF model's threshold keeps scope_keep of dev routed
    from denki.models.classify.scope import DEFAULT_KEEP, fit_scope

    scope_keep = DEFAULT_KEEP if scope_keep is None else scope_keep
    if scope_keep and lexical is None:
        print("finetune classify: no out-of-scope rule (--no-baseline: no TF-IDF model to build it on)",
              file=sys.stderr)
    elif scope_keep:
        from denki.models.classify.lexical import LEXICAL_FILE, LEXICAL_VOCAB

        task["scope"] = {**fit_scope({}, lex_logits, scope_keep), "lexical": LEXICAL_FILE,
                         "lexical_vocab": LEXICAL_VOCAB,
                         "rule": "route = human_label when max softmax(lexical logits) < threshold "
                                 "(models/classify/scope.py): the text fits no desk"}
        print(f"out of scope → {task['human_label']}: TF-IDF top probability < {task['scope']['threshold']:.3f} "
              f"(keeps {task['scope']['dev_kept']:.1%} of dev routed; --scope-keep {scope_keep:g})", flush=True)
    keep_lexical = ship or bool(task.get("scope"))
    dev_eval = evaluate_logits(dev_logits, dev_gold, task, curves=True, lexical_logits=lex_logits)

    # rebuild the chosen model and save it as a classifier bundle
    net = make_model(chosen["seed"])
    net.load_state_dict(chosen["state"])
    rng = random.Random(0)
    sample = sorted(rng.sample(range(len(dev)), min(200, len(dev))))
    # reference logits for the ONNX parity gate: the saved weights, fp32 on CPU (no bf16 autocast)
    ref = predict_logits(net, [dev_ids[i] for i in sample], pad_id=tok.pad_id, batch_size=cfg.eval_batch_size,
                         device=torch.device("cpu"), bf16=False, progress=False)
    parity = {"text_field": text_field, "max_length": cfg.max_length,
              "texts": [dev.texts[i] for i in sample], "labels": [dev.labels[i] for i in sample],
              "logits": [[float(v) for v in row] for row in ref],
              "note": "fp32 CPU PyTorch logits of the saved model at this max_length; for ONNX parity checks"}
    if keep_lexical:  # scikit-learn's own probabilities: the export's gate checks the bundle's numpy copy
        parity["lexical_probs"] = [[float(v) for v in lex_probs[i]] for i in sample]
    device_name = str(pick_device(cfg.device))
    source = {
        "command": command or command_line(),
        "parent": ({"path": str(model), "kind": parent.get("kind"), "created": parent.get("created"),
                    "source": parent.get("source")} if parent else {"init": "random", "size": init_random}),
        "train": {"path": train.path, "sha256": sha256_file(train_paths[0]) if len(train_paths) == 1 else None,
                  "n": len(train), "n_in_file": n_train_total,
                  "files": [{**s, "sha256": sha256_file(s["path"])} for s in train.sources]},
        "dev": {"path": str(dev_path), "sha256": sha256_file(dev_path), "n": len(dev)},
        **({"unlabelled": {"files": selftrain.report["files"], "encoder_rows": selftrain.report["encoder_rows"],
                           "lexical_rows": selftrain.report["lexical_rows"]}} if selftrain else {}),
        "seeds": list(cfg.seeds), "chosen_seed": chosen["seed"], "config": asdict(cfg), "device": device_name,
    }
    bundle_metrics = {k2: dev_eval[k2] for k2 in ("accuracy", "macro_f1", "ece", "ece_uncalibrated",
                                                  "abstain_rate", "accuracy_non_abstained")}
    from denki.models.bundle.pytorch import save_bundle

    out.mkdir(parents=True, exist_ok=True)
    save_bundle(net, tokenizer_dir, out / "bundle", "classifier", source=source, metrics=bundle_metrics,
                extra_files={"task.json": task, "parity_sample.json": parity},
                write_extra=lexical.save if keep_lexical else None)
    if train.skipped or dev.skipped:
        import json

        # a row skipped from one of several training files names that file (its own "file" key comes last)
        rows = [{"file": train.path, **s} for s in train.skipped] + [{"file": dev.path, **s} for s in dev.skipped]
        atomic_write_text(out / "skipped_rows.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


    seeds_f1 = [r["macro_f1"] for r in runs]
    seeds_acc = [r["accuracy"] for r in runs]
    report = {
        "command": source["command"],
        "model": source["parent"],
        "labels": labels,
        "data": {"train": {**source["train"], "truncated": train_trunc, "skipped": len(train.skipped),
                           "label_counts": {lab: int((train_gold == i).sum()) for i, lab in enumerate(labels)}},
                 "dev": {**source["dev"], "truncated": dev_trunc, "skipped": len(dev.skipped),
                         "label_counts": {lab: int((dev_gold == i).sum()) for i, lab in enumerate(labels)}},
                 "text_field": text_field, "label_field": label_field},
        "config": {**asdict(cfg), "lr": chosen["lr"], "layer_decay": chosen["layer_decay"],
                   "class_weights_requested": requested_weights, "label_count_ratio": label_ratio,
                   "epochs_requested": epochs_requested, "patience_requested": patience_requested},
        "device": device_name,
        "seeds": [{k2: r[k2] for k2 in ("seed", "macro_f1", "accuracy", "best_epoch", "epochs_run", "seconds",
                                        "history")} for r in runs],
        "seed_summary": {"macro_f1_median": float(np.median(seeds_f1)), "macro_f1_min": float(min(seeds_f1)),
                         "macro_f1_max": float(max(seeds_f1)), "macro_f1_std": float(np.std(seeds_f1)),
                         "accuracy_median": float(np.median(seeds_acc)), "accuracy_min": float(min(seeds_acc)),
                         "accuracy_max": float(max(seeds_acc)), "chosen_seed": chosen["seed"]},
        "dev": dev_eval,
        "task": task,
        "min_recall_cost": offsets_cost(dev_logits, dev_gold, offsets, labels) if min_recall else None,
        "baseline": base,
        "fusion": fusion_report,
        "self_training": selftrain.report if selftrain else None,
        "pretrained_health_warning": health_warning,
        "temperature_fit": temperature_fit,
        "training_seconds": float(sum(r["seconds"] for r in runs)),
        "total_seconds": float(time.perf_counter() - t_start),
        "bundle": str(out / "bundle"),
    }
    write_report(report, out)
    return report
