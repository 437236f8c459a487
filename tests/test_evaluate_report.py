"""`denki evaluate classify` prints what a user acts on: the scored variant, a per-class table, the confusion
matrix and the most confident mistakes (with their line in the file), and writes them to --output-json."""
from __future__ import annotations

import json

import pytest

from .conftest import inquiry_rows

#: rows whose gold label the test changes, so that the tiny model surely gets some wrong
RELABELLED = (3, 17, 40)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rows = inquiry_rows()
    labels = sorted({r["label"] for r in rows})
    for i in RELABELLED:  # the next label in sorted order: a gold label the text does not fit
        rows[i] = {**rows[i], "label": labels[(labels.index(rows[i]["label"]) + 1) % len(labels)]}
    path = tmp_path_factory.mktemp("eval") / "dev.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path, rows


def _evaluate(model, data_path, tmp_path, capsys, *extra) -> tuple[dict, str]:
    from denki.app.cli import main

    out = tmp_path / "eval.json"
    assert main(["evaluate", "classify", "--model", str(model), "--data", str(data_path), "--output-json", str(out),
                 "--device", "cpu", "--no-progress", *extra]) == 0
    return json.loads(out.read_text(encoding="utf-8")), capsys.readouterr().out


def test_onnx_report_names_the_variant_and_lists_classes_matrix_and_mistakes(onnx_classifier, data, tmp_path,
                                                                            capsys):
    from denki.serve.runtime import Predictor

    data_path, rows = data
    r, printed = _evaluate(onnx_classifier, data_path, tmp_path, capsys, "--backend", "int8")
    lines = printed.splitlines()
    # the existing summary line comes first, unchanged
    assert lines[0].startswith(f"n {len(rows)}: accuracy {r['accuracy']:.4f}, macro-F1 {r['macro_f1']:.4f}")
    # which ONNX file was scored
    assert r["onnx_variant"] == "int8" and r["onnx_file"] == "model.int8.onnx"
    assert lines[1].startswith("scored: ONNX int8 (model.int8.onnx; ")
    # per-class table: one row per label with the JSON's figures
    labels = list(r["per_class"])
    assert labels == sorted({row["label"] for row in rows})
    for lab, m in r["per_class"].items():
        assert (f"| {lab} | {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} | {m['support']} |"
                in printed), lab
        assert m["support"] == sum(row["label"] == lab for row in rows)
    # the confusion matrix: rows are gold (they sum to the support), printed as in the JSON
    cm = r["confusion_matrix"]
    assert "confusion matrix (rows: gold, columns: predicted):" in printed
    assert "| gold \\ predicted | " + " | ".join(labels) + " |" in printed
    for lab, row in zip(labels, cm):
        assert sum(row) == r["per_class"][lab]["support"]
        assert f"| {lab} | " + " | ".join(str(c) for c in row) + " |" in printed
    n_wrong = len(rows) - sum(cm[i][i] for i in range(len(labels)))
    assert n_wrong >= 1
    # the mistakes, checked against the runtime's own decisions on the same variant: wrong desk before sent to a
    # person, the most confident first, at most 8, each with its line in the file (1-based: row i is line i + 1)
    p = Predictor(onnx_classifier, backend="int8", device="cpu")
    got = p.classify([row["title"] for row in rows])
    wrong = [i for i, (row, g) in enumerate(zip(rows, got)) if g["label"] != row["label"]]
    assert len(wrong) == n_wrong
    expected = sorted(wrong, key=lambda i: (got[i]["route"] == "human", -got[i]["score"], i))[:8]
    mis = r["misrouted"]
    assert [m["line"] for m in mis] == [i + 1 for i in expected]
    for m, i in zip(mis, expected):
        assert m["text"] == rows[i]["title"] and m["gold"] == rows[i]["label"]
        assert m["predicted"] == got[i]["label"] != m["gold"] and m["route"] == got[i]["route"]
        assert m["confidence"] == pytest.approx(got[i]["score"], abs=1e-4)
    assert f"misrouted ({len(mis)} of {n_wrong} wrong;" in printed
    for m in mis:
        shown = m["text"].replace("\n", " ")[:59]  # one line per mistake, long texts cut
        assert (f"- line {m['line']}: 「{shown}" in printed and
                f"gold {m['gold']} → predicted {m['predicted']} (confidence {m['confidence']:.2f})" in printed)
    # the relabelled rows are mistakes (unless the model happens to predict the new label)
    assert any(i in wrong for i in RELABELLED)


def test_default_backend_is_the_one_serving_uses_and_pytorch_says_so(onnx_classifier, classifier_bundle, data,
                                                                     tmp_path, capsys):
    from denki.serve.runtime import Predictor

    data_path, _ = data
    r, printed = _evaluate(onnx_classifier, data_path, tmp_path, capsys)
    served = Predictor(onnx_classifier, device="cpu")
    assert r["onnx_variant"] == served.backend and f"scored: ONNX {served.backend} (" in printed
    r, printed = _evaluate(classifier_bundle, data_path, tmp_path, capsys)
    assert "onnx_variant" not in r and printed.splitlines()[1] == "scored: PyTorch (model.safetensors)"
    assert "misrouted" in r and "per class" in printed
