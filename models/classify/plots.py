"""PNG figures for the classifier report: confusion matrix, reliability diagram, coverage–accuracy curve.

matplotlib is imported inside each function with the non-interactive Agg backend; every file is written to a
temporary name and renamed."""
from __future__ import annotations

import os
from pathlib import Path


def _plt():
    from denki.models.io.plotting import setup_matplotlib  # Agg + a Japanese font: labels are often Japanese department names

    return setup_matplotlib()


def _save(fig, path) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.partial.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    os.replace(tmp, path)


def plot_confusion(cm: list[list[int]], labels: list[str], path, title: str = "confusion matrix (dev)") -> None:
    import numpy as np

    plt = _plt()
    cm = np.asarray(cm)
    k = len(labels)
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * k, 1.0 + 0.55 * k))
    row = cm.sum(axis=1, keepdims=True).clip(min=1)
    ax.imshow(cm / row, cmap="Blues", vmin=0, vmax=1)
    for i in range(k):
        for j in range(k):
            ax.text(j, i, str(cm[i, j]), ha="center", va="center", fontsize=8,
                    color="white" if cm[i, j] / row[i, 0] > 0.5 else "black")
    ax.set_xticks(range(k), labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(k), labels, fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    ax.set_title(title, fontsize=9)
    _save(fig, path)
    plt.close(fig)


def plot_reliability(before: list[dict], after: list[dict], path, *, ece_before: float, ece_after: float,
                     temperature: float) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=1, label="perfect calibration")
    for bins, name, c in ((before, f"T=1 (ECE {ece_before:.3f})", "tab:red"),
                          (after, f"T={temperature:.2f} (ECE {ece_after:.3f})", "tab:blue")):
        ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], marker="o", ms=3, color=c,
                label=name)
    ax.set_xlabel("confidence (score of the chosen label)")
    ax.set_ylabel("accuracy")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("reliability diagram (dev)", fontsize=9)
    _save(fig, path)
    plt.close(fig)


def plot_coverage(curve: dict, path, *, threshold_point: dict | None = None, baseline: dict | None = None) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    ax.plot(curve["coverage"], curve["accuracy"], color="tab:blue", label="fine-tuned model")
    if baseline is not None:
        ax.plot(baseline["coverage"], baseline["accuracy"], color="tab:grey", ls=":", label="TF-IDF + LR baseline")
    if threshold_point is not None:
        ax.scatter([threshold_point["coverage"]], [threshold_point["precision"]], color="tab:red", zorder=3,
                   label=f"chosen threshold {threshold_point['threshold']:.3f}")
    ax.set_xlabel("coverage (fraction not sent to a human)")
    ax.set_ylabel("accuracy on the covered part")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title("coverage–accuracy (dev)", fontsize=9)
    _save(fig, path)
    plt.close(fig)
