"""Self-training on unlabelled texts (`denki finetune classify --unlabelled`, models/classify/selftrain.py): the
rounds keep the stated share of each predicted class, duplicates of train/dev texts are dropped, the unlabelled
file's label field is never read, and the CLI trains on the pseudo rows and reports them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from denki.app.cli import main
from .conftest import routing_rows

#: a label the readers would refuse (not a string): reading it at all would raise
UNREADABLE = {"not": "a label"}


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def few(tmp_path_factory):
    """5 labelled rows per desk (train), 5 more (dev), 40 per desk as an unlabelled file whose label field holds
    a value no reader accepts, plus 2 copies of a train text (one in full-width spaces), 1 of a dev text and 1
    repeat of an unlabelled text."""
    rows = routing_rows(per_label=50)  # label-interleaved: 6 desks per block of 6
    train, dev, pool = rows[:30], rows[30:60], rows[60:]
    unl = [{"id": r["id"], "text": r["text"], "label": UNREADABLE} for r in pool]
    unl += [{"text": train[0]["text"], "label": UNREADABLE}, {"text": "\u3000" + train[1]["text"] + " "},
            {"text": dev[0]["text"]}, {"text": pool[0]["text"]}, {"text": "  "}]
    d = tmp_path_factory.mktemp("few")
    return {"train": _jsonl(d / "train.jsonl", train), "dev": _jsonl(d / "dev.jsonl", dev),
            "unlabelled": _jsonl(d / "unlabelled.jsonl", unl), "n_pool": len(pool),
            "train_rows": train, "dev_rows": dev}


def test_self_training_rounds_duplicates_and_no_labels_read(few, capsys):
    from denki.models.classify.selftrain import ROUND_FRACTIONS, self_train_files

    labels = sorted({r["label"] for r in few["train_rows"]})
    gold = np.array([labels.index(r["label"]) for r in few["train_rows"]])
    st = self_train_files([few["unlabelled"]], "text", [r["text"] for r in few["train_rows"]], gold,
                          [r["text"] for r in few["dev_rows"]], labels, cap=10)
    rep = st.report
    assert rep["empty_rows"] == 1 and rep["dropped_equal_to_train_or_dev"] == 3 and rep["dropped_repeats"] == 1
    assert rep["pool"] == few["n_pool"] == 240
    assert [r["fraction"] for r in rep["rounds"]] == list(ROUND_FRACTIONS)
    for rd in rep["rounds"]:  # per predicted class, round(fraction × predicted) most confident texts
        want = {lab: int(round(rd["fraction"] * n)) for lab, n in rd["predicted_per_class"].items()}
        assert rd["kept_per_class"] == want and rd["kept"] == sum(want.values())
        assert sum(rd["predicted_per_class"].values()) == 240
    assert rep["kept"] == rep["rounds"][-1]["kept"] == len(st.lexical_texts) == len(st.lexical_gold)
    assert rep["kept_per_class"] == rep["rounds"][-1]["kept_per_class"]
    assert len(set(st.lexical_texts)) == len(st.lexical_texts)
    seen = {r["text"].strip() for r in few["train_rows"] + few["dev_rows"]}
    assert not seen & {t.strip() for t in st.lexical_texts}
    # the encoder's share: at most the cap per class, drawn from the kept rows
    assert all(n <= 10 for n in rep["encoder_per_class"].values()) and len(st.encoder_texts) == rep["encoder_rows"]
    assert set(st.encoder_texts) <= set(st.lexical_texts)
    # the pseudo labels are the model's, and it learned something from 5 rows per desk
    truth = {r["text"]: r["label"] for r in routing_rows(per_label=50)}
    acc = np.mean([truth[t] == labels[g] for t, g in zip(st.lexical_texts, st.lexical_gold)])
    assert acc > 1 / len(labels)
    assert "self-training: 240 unlabelled texts (4 duplicates of train/dev or repeats dropped, 1 empty)" in \
        capsys.readouterr().out


def test_self_train_keeps_each_rounds_share_of_a_separable_pool():
    from denki.models.classify.selftrain import self_train

    texts, gold = ["りんご りんご", "みかん みかん"], [0, 1]
    pool = [f"りんご {i}" for i in range(10)] + [f"みかん {i}" for i in range(20)]
    st = self_train(texts, gold, pool, 2, fractions=(0.3, 0.6, 0.9))
    assert [r["kept_per_class"] for r in st["rounds"]] == [[3, 6], [6, 12], [9, 18]]
    assert st["index"].tolist() == sorted(st["index"].tolist())
    assert [pool[i][:3] for i in st["index"]] == ["りんご" if g == 0 else "みかん" for g in st["gold"]]


@pytest.mark.parametrize("n_lab,n_pseudo,want", [(60, 1800, 30), (180, 1800, 10), (600, 1800, 3), (7000, 1800, 1),
                                                  (60, 0, 1), (61, 1800, 30)])
def test_labelled_repeats_make_half_the_encoders_rows(n_lab, n_pseudo, want):
    from denki.models.classify.selftrain import labelled_repeats

    r = labelled_repeats(n_lab, n_pseudo)
    assert r == want and r * n_lab >= n_pseudo and (r == 1 or (r - 1) * n_lab < n_pseudo)


def test_finetune_with_unlabelled_cli(few, tiny_tokenizer_dir, tmp_path, capsys):
    from denki.models.bundle.format import verify_bundle
    from denki.models.bundle.pytorch import random_init_bundle

    pre = tmp_path / "pre"
    random_init_bundle("tiny", tiny_tokenizer_dir, pre, seed=0)
    out = tmp_path / "run"
    rc = main(["finetune", "classify", "--model", str(pre), "--train", str(few["train"]),
               "--dev", str(few["dev"]), "--unlabelled", str(few["unlabelled"]), "--unlabelled-cap", "20",
               "--out", str(out), "--seeds", "1", "--epochs", "1", "--max-length", "64", "--threads", "1",
               "--no-progress"])
    assert rc == 0
    from denki.models.classify.selftrain import labelled_repeats

    stdout = capsys.readouterr().out
    rep = json.loads((out / "report.json").read_text(encoding="utf-8"))
    st = rep["self_training"]
    n_enc, r = st["encoder_rows"], st["labelled_repeats"]
    assert st["pool"] == 240 and st["encoder_cap_per_class"] == 20 and 0 < n_enc <= 120
    assert all(n <= 20 for n in st["encoder_per_class"].values())
    assert r == labelled_repeats(30, n_enc) > 1 and 30 * r >= n_enc  # labelled rows: at least half the encoder's
    assert "self-training: 240 unlabelled texts" in stdout
    assert f"encoder +{n_enc} rows (≤ 20 per class; labelled rows ×{r})" in stdout
    assert f"defaults for {30 * r + n_enc} training examples" in stdout  # the encoder trained on them
    assert len(st["rounds"]) == 3 and st["lexical_rows"] == st["kept"] >= n_enc
    assert st["lexical_dev"]["macro_f1"] >= 0 and rep["baseline"]["macro_f1"] >= 0
    assert rep["data"]["train"]["n"] == 30  # the labelled rows; the pseudo rows are reported apart
    manifest = verify_bundle(out / "bundle", kinds=("classifier",))
    assert manifest["source"]["unlabelled"]["encoder_rows"] == n_enc
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "Self-training on unlabelled texts" in md and "| 3 | 0.9 |" in md
    # without --unlabelled nothing changes: no section
    rc = main(["finetune", "classify", "--model", str(pre), "--train", str(few["train"]),
               "--dev", str(few["dev"]), "--out", str(tmp_path / "plain"), "--seeds", "1", "--epochs", "1",
               "--max-length", "64", "--threads", "1", "--no-progress", "--no-baseline"])
    assert rc == 0 and json.loads((tmp_path / "plain" / "report.json").read_text(encoding="utf-8"))["self_training"] is None
