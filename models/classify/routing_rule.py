"""Fitting the routing rule on dev (``task.json`` of a ``classifier`` bundle), in the order ``denki finetune
classify`` applies it: whether to ship the encoder fused with the TF-IDF model (:func:`fusion_report`), then on the
shipped logits temperature scaling, per-class offsets for ``--min-recall`` and the abstention threshold
(:func:`fit_routing_rule`, with :mod:`models.classify.calibration`), and the out-of-scope check on the TF-IDF
model's probabilities (:mod:`models.classify.scope`). Applying the rule is :mod:`models.classify.decision`'s job.

Torch-free.
"""
from __future__ import annotations

import sys

import numpy as np

from denki.models.classify.fusion import choose_fusion

FUSION_CHOICES = ("auto", "on", "off")


def fusion_report(mode: str, runs: list[dict], kept: int, lex_logits: np.ndarray | None,
                  gold: np.ndarray, labels: list[str]) -> dict | None:
    """The fusion section of the report (None without a TF-IDF model or with ``--fusion off``): the setting
    chosen on dev for the kept seed's logits (``runs[kept]``), its cross-fitted estimate, every seed's cross-fitted
    fused macro-F1 beside its encoder's, and ``shipped``: ``auto`` ships it when the cross-fitted fused macro-F1
    beats the encoder alone (and the chosen weight leaves the encoder < 1)."""
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


def fit_routing_rule(dev_logits: np.ndarray, dev_gold: np.ndarray, labels: list[str], *, max_length: int,
                     text_field: str, label_field: str, target_precision: float | None,
                     target_coverage: float | None, min_recall: dict[str, float], fusion: dict | None,
                     lex_logits: np.ndarray | None, scope_keep: float | None) -> tuple[dict, dict, np.ndarray]:
    """The ``task.json`` of the router from the shipped dev logits ``(n_dev, K)`` → ``(task, temperature_fit,
    offsets (K,))``. ``fusion``: the report's fusion section (its setting goes into the task when shipped);
    ``lex_logits``: the TF-IDF model's dev logits (None without one: then no out-of-scope check);
    ``scope_keep`` None → :data:`models.classify.scope.DEFAULT_KEEP`, 0 → no check."""
    from denki.models.classify.calibration import choose_threshold, fit_min_recall_offsets, fit_temperature_report
    from denki.models.classify.decision import softmax

    temperature_fit = fit_temperature_report(dev_logits, dev_gold)
    temperature = temperature_fit["temperature"]
    if temperature_fit["fallback"]:
        print(f"finetune classify: temperature scaling: {temperature_fit['fallback']}", file=sys.stderr)
    floors = {labels.index(lab): v for lab, v in min_recall.items()}
    offsets, reached = fit_min_recall_offsets(dev_logits, dev_gold, floors)
    idx = np.argmax(dev_logits + offsets[None, :], axis=1)
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
        "max_length": max_length,
        "text_field": text_field,
        "label_field": label_field,
        "abstention": thr,
        "min_recall": {lab: {"floor": v, "reached_on_dev": reached[labels.index(lab)],
                             "offset": float(offsets[labels.index(lab)])} for lab, v in min_recall.items()},
        "decision_rule": "label = argmax(logits + offsets); scores = softmax(logits / temperature); "
                         "score = scores[label]; route = human_label if score < threshold else label",
    }
    if fusion is not None and fusion["shipped"]:
        _add_fusion(task, fusion)
    _add_scope(task, lex_logits, scope_keep)
    return task, temperature_fit, offsets


def _add_fusion(task: dict, fusion: dict) -> None:
    """The shipped fusion setting: the runtime fuses the encoder's logits with the bundle's lexical model first."""
    from denki.models.classify.lexical import LEXICAL_FILE, LEXICAL_VOCAB

    task["fusion"] = {"mode": fusion["mode"], "weight": fusion["weight"],
                      "lexical": LEXICAL_FILE, "lexical_vocab": LEXICAL_VOCAB,
                      "crossfit_macro_f1": fusion["crossfit"]["macro_f1"],
                      "rule": "logits = fuse(encoder logits, lexical logits) (models/classify/fusion.py); "
                              "the decision rule applies to them"}


def _add_scope(task: dict, lex_logits: np.ndarray | None, scope_keep: float | None) -> None:
    """Out of scope → human (:mod:`models.classify.scope`): the TF-IDF model's threshold keeps ``scope_keep`` of
    dev routed."""
    from denki.models.classify.scope import DEFAULT_KEEP, fit_scope

    scope_keep = DEFAULT_KEEP if scope_keep is None else scope_keep
    if scope_keep and lex_logits is None:
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
