"""Plots show Japanese on any machine: ``setup_matplotlib()`` uses the font that ships with matplotlib-fontja
(no system font needed), and rendering Japanese titles, labels, ticks and legends raises no missing-glyph warning
(matplotlib warns ``Glyph … missing from font(s)``, and logs ``findfont: …`` when a family is not found).

The figures are drawn in a fresh interpreter (one for the module), as a user's first command would: in the test
process another import could already have set a font up."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, logging, sys, warnings
from pathlib import Path

out = Path(sys.argv[1])
JA = "経路ごとの確率 → 担当部署（≥ 0.5）"
LABELS = ["原因の確認", "料金・請求", "ログイン", "返品と交換", "その他"]


class Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def watched(fn):
    """messages (warnings of any category, font_manager log lines) while fn runs"""
    logger = logging.getLogger("matplotlib.font_manager")
    keep = Keep()
    logger.addHandler(keep)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    logger.removeHandler(keep)
    return [str(w.message) for w in caught] + keep.records


res = {}
res["setup"] = watched(lambda: globals().__setitem__("plt", __import__("denki.models.io.plotting", fromlist=["x"])
                                                     .setup_matplotlib()))
import matplotlib
from matplotlib import font_manager

res["family"] = list(matplotlib.rcParams["font.family"])
res["backend"] = matplotlib.get_backend()
res["font_file"] = font_manager.findfont(font_manager.FontProperties(family=[res["family"][0]]),
                                         fallback_to_default=False)


def figure():
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(range(len(LABELS)), [3, -1, 2, 5, -2], label="件数（差）")
    ax.set_xticks(range(len(LABELS)), LABELS, rotation=30)
    ax.set_title(JA)
    ax.set_xlabel("経路")
    ax.set_ylabel("差 − 基準")
    ax.legend()
    fig.suptitle("日本語の図・テスト")
    fig.savefig(out / "ja.png", dpi=60)
    plt.close(fig)


def report():
    from denki.models.classify.plots import plot_confusion, plot_coverage

    k = len(LABELS)
    plot_confusion([[5 if i == j else 1 for j in range(k)] for i in range(k)], LABELS, out / "cm.png",
                   title="混同行列（開発）")
    plot_coverage({"coverage": [0.2, 0.6, 1.0], "accuracy": [0.95, 0.9, 0.8]}, out / "cov.png",
                  threshold_point={"coverage": 0.6, "precision": 0.9, "threshold": 0.42})


def curves():
    from denki.pretrain.summary import plot_curves

    rows = [{"flops": f, "mlm_loss": 5.0 - i, "disc_loss": 0.6 - 0.1 * i, "gen_acc": 0.1 * i, "replace_rate": 0.1,
             "disc_precision": 0.3, "disc_recall": 0.2 + 0.05 * i, "disc_acc": 0.9, "disc_auc": 0.7}
            for i, f in enumerate((1e10, 2e10, 3e10))]
    plot_curves(rows, out / "curves.png", title="事前学習（ELECTRA, 小さいモデル）")


for name, fn in (("figure", figure), ("report", report), ("curves", curves)):
    res[name] = watched(fn)
from matplotlib_fontja import get_font_ttf_path  # last: importing it sets a font up by itself

res["packaged"] = get_font_ttf_path()
res["packaged_name"] = font_manager.FontProperties(fname=get_font_ttf_path()).get_name()
print(json.dumps(res, ensure_ascii=False))
'''


def _glyph_trouble(messages: list[str]) -> list[str]:
    return [m for m in messages if "glyph" in m.lower() or "missing from font" in m or "findfont" in m]


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    out = tmp_path_factory.mktemp("plots")
    r = subprocess.run([sys.executable, "-c", CHILD, str(out)], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), out


def test_the_japanese_font_is_the_packaged_one(drawn):
    res, _ = drawn
    assert res["family"][0] == res["packaged_name"], res["family"]
    assert res["font_file"] == res["packaged"], "a system font was chosen: plots would differ between machines"
    assert res["backend"].lower() == "agg"
    assert not _glyph_trouble(res["setup"])


def test_japanese_title_labels_ticks_render_without_glyph_warnings(drawn):
    res, out = drawn
    assert not _glyph_trouble(res["figure"]), "\n".join(res["figure"])
    assert (out / "ja.png").stat().st_size > 1000


def test_report_plots_render_japanese_without_glyph_warnings(drawn):
    """The plots the quickstart writes: the classifier report (Japanese route names), the pretraining curves."""
    res, out = drawn
    for part, files in (("report", ("cm.png", "cov.png")), ("curves", ("curves.png",))):
        assert not _glyph_trouble(res[part]), "\n".join(res[part])
        assert all((out / f).is_file() for f in files)
