"""The human route closes the loop: `denki serve --human-log FILE` appends every text routed to the human label as
a JSON line (serve/humanlog.py), and `denki finetune classify --train ORIGINAL LABELLED` takes those rows back once
people have added a label (several --train files; unlabelled and `human` rows refused with file:line).

Server tests run the app in process on a copy of the tiny exported router whose threshold forces abstention
(threshold 1.0: every text goes to a person); one starts `denki serve --workers 2` to check that the setting reaches
every worker and that their lines never interleave.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import multiprocessing
import os
import shutil
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")

from denki.app.cli import main  # noqa: E402
from denki.models.io.errors import DenkiError  # noqa: E402
from denki.serve.http import ServerSettings, create_app  # noqa: E402
from denki.serve.humanlog import HumanLog, top_labels  # noqa: E402
from denki.serve.runtime import Predictor  # noqa: E402

from .conftest import routing_rows, serve_two_workers  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TEXTS = ["ログインできません", "今夜泊まれるホテルはありますか?", "料金の請求について"]


def with_threshold(src: Path, dst: Path, threshold: float) -> Path:
    """A copy of the ONNX bundle ``src`` whose routing rule abstains below ``threshold`` (task.json edited, its
    sha256 in the manifest updated, so the copy still verifies)."""
    from denki.models.io.fileio import sha256_file

    shutil.copytree(src, dst)
    task = json.loads((dst / "task.json").read_text(encoding="utf-8"))
    task["threshold"] = threshold
    (dst / "task.json").write_text(json.dumps(task, ensure_ascii=False), encoding="utf-8")
    manifest = json.loads((dst / "manifest.json").read_text(encoding="utf-8"))
    manifest["files"]["task.json"] = sha256_file(dst / "task.json")
    (dst / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
    return dst


@pytest.fixture(scope="module")
def unsure_bundle(onnx_classifier, tmp_path_factory):
    """The tiny router with threshold 1.0: no calibrated score reaches it, so every text is routed to 'human'."""
    return with_threshold(onnx_classifier, tmp_path_factory.mktemp("unsure") / "unsure-router", 1.0)


@pytest.fixture(scope="module")
def unsure_pred(unsure_bundle):
    return Predictor(unsure_bundle, backend="fp32", device="cpu", threads=1)


def read_lines(path: Path) -> list[dict]:
    raw = path.read_bytes()
    assert raw == b"" or raw.endswith(b"\n")  # whole lines only
    return [json.loads(line) for line in raw.decode("utf-8").splitlines()]


# ------------------------------------------------------------------------------------------------- the server
def test_human_routed_texts_are_appended_one_line_each(unsure_pred, tmp_path):
    from fastapi.testclient import TestClient

    log_path = tmp_path / "human.jsonl"
    app = create_app(classifier=unsure_pred, settings=ServerSettings(human_log=str(log_path)))
    with TestClient(app) as c:
        r1 = c.post("/v1/classify", json={"texts": TEXTS}, headers={"X-Request-ID": "T-1042"})
        r2 = c.post("/v1/classify", json={"texts": ["予約を変更したい"]})
        assert r1.status_code == 200 and r2.status_code == 200, (r1.text, r2.text)
        assert c.get("/v1/models").json()["settings"]["human_log"] == str(log_path)
    results = r1.json()["results"] + r2.json()["results"]
    assert [r["route"] for r in results] == ["human"] * 4
    lines = read_lines(log_path)
    assert len(lines) == 4  # one line per human-routed text, the second request appended after the first
    assert [x["text"] for x in lines] == [*TEXTS, "予約を変更したい"]
    labels = set(unsure_pred.task["labels"])
    for rec, res in zip(lines, results):
        assert {"time", "model", "text", "top", "route"} <= set(rec) and "label" not in rec
        assert rec["route"] == "human" and rec["model"] == "unsure-router"
        when = dt.datetime.fromisoformat(rec["time"])
        assert when.utcoffset() == dt.timedelta(0)
        assert abs(dt.datetime.now(dt.timezone.utc) - when).total_seconds() < 600
        assert rec.get("reason") == (res.get("reason") or None)  # why it abstained, where the runtime says
        assert len(rec["top"]) == 3 and {t["label"] for t in rec["top"]} <= labels
        scores = [t["score"] for t in rec["top"]]
        assert scores == sorted(scores, reverse=True)
        assert rec["top"][0]["label"] == res["label"] and scores[0] == pytest.approx(res["score"])
        assert scores == pytest.approx(sorted(res["scores"].values(), reverse=True)[:3])
    assert [(x.get("id"), x.get("index")) for x in lines] == [("T-1042", 0), ("T-1042", 1), ("T-1042", 2),
                                                              (None, None)]


def test_routed_texts_are_not_logged(cls_pred, tmp_path):
    """Only the texts under the threshold are logged: with the threshold between the texts' scores, the confident
    ones are routed to their desk and leave no line."""
    from fastapi.testclient import TestClient

    texts = TEXTS + ["予約を変更したい", "タクシーを呼んでください"]
    scores = [r["score"] for r in cls_pred.classify(texts)]
    threshold = sorted(scores)[2]  # the two least confident abstain, the other three are routed
    pred = Predictor(cls_pred.dir, backend="fp32", device="cpu", threads=1)
    pred.task = {**pred.task, "threshold": threshold}
    log_path = tmp_path / "human.jsonl"
    with TestClient(create_app(classifier=pred, settings=ServerSettings(human_log=str(log_path)))) as c:
        res = c.post("/v1/classify", json={"texts": texts}).json()["results"]
    human = [t for t, r in zip(texts, res) if r["route"] == "human"]
    assert len(human) == 2 and sum(r["route"] != "human" for r in res) == 3
    assert [x["text"] for x in read_lines(log_path)] == human
    # never abstaining: nothing is written (the file is opened, and created, only for a human route)
    pred.task = {**pred.task, "threshold": 0.0}
    quiet = tmp_path / "quiet.jsonl"
    with TestClient(create_app(classifier=pred, settings=ServerSettings(human_log=str(quiet)))) as c:
        assert c.post("/v1/classify", json={"texts": texts}).status_code == 200
    assert not quiet.exists()


def test_a_failing_log_never_fails_the_request(unsure_pred, tmp_path, caplog):
    """The log path turns unwritable (here: a folder took its place — root ignores permissions): requests are
    answered as usual, every lost record is counted, and the warning is logged once."""
    from fastapi.testclient import TestClient
    from prometheus_client.parser import text_string_to_metric_families

    log_path = tmp_path / "human.jsonl"
    app = create_app(classifier=unsure_pred, settings=ServerSettings(human_log=str(log_path)))
    log_path.mkdir()
    with caplog.at_level(logging.WARNING, logger="denki.http"), TestClient(app) as c:
        for _ in range(2):
            r = c.post("/v1/classify", json={"texts": TEXTS[:2]})
            assert r.status_code == 200 and [x["route"] for x in r.json()["results"]] == ["human", "human"]
        metrics = c.get("/metrics").text
    assert app.state.metrics.human_log_errors == 4
    got = {smp.name: smp.value for fam in text_string_to_metric_families(metrics) for smp in fam.samples}
    assert got["denki_human_log_errors_total"] == 4
    warnings = [r for r in caplog.records if "human log" in r.getMessage()]
    assert len(warnings) == 1 and "cannot write" in warnings[0].getMessage()


def test_log_file_takes_the_process_umask(tmp_path):
    log = HumanLog(tmp_path / "h.jsonl", model="m")
    old = os.umask(0o027)
    try:
        assert log.log(["a"], [{"label": "x", "score": 0.4, "scores": {"x": 0.4, "y": 0.35, "z": 0.25},
                                "route": "human"}]) == 1
    finally:
        os.umask(old)
    assert (tmp_path / "h.jsonl").stat().st_mode & 0o777 == 0o640


def test_bad_human_log_path_is_a_clear_startup_error(onnx_classifier, tmp_path, capsys):
    with pytest.raises(DenkiError, match="does not exist"):
        ServerSettings(human_log=str(tmp_path / "missing" / "human.jsonl"))
    with pytest.raises(DenkiError, match="is a folder"):
        ServerSettings(human_log=str(tmp_path))
    assert main(["serve", "--classifier", str(onnx_classifier), "--human-log",
                 str(tmp_path / "missing" / "human.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["serve", "--qa", str(onnx_classifier), "--human-log", str(tmp_path / "h.jsonl")]) == 2
    assert "needs --classifier" in capsys.readouterr().err
    from denki.app.cli import build_parser

    assert build_parser().parse_args(["serve", "--classifier", "X"]).human_log is None  # off by default
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--human-log FILE" in help_text and "routes to the human label" in help_text
    assert "denki finetune classify --train ORIGINAL FILE" in help_text and "Off by default" in help_text


def _append_many(path: str, worker: int, n: int) -> None:
    log = HumanLog(path, model=f"w{worker}")
    text = f"{worker}" * 6000  # lines of ~6 KB: a torn or interleaved write would break the JSON
    for i in range(n):
        log.log([text], [{"label": "x", "score": 0.5, "scores": {"x": 0.5, "y": 0.5}, "route": "human"}], f"{i}")


def test_concurrent_processes_never_interleave_lines(tmp_path):
    path = str(tmp_path / "human.jsonl")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(path, w, 150)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = read_lines(Path(path))
    assert len(lines) == 600
    for rec in lines:
        assert rec["text"] == rec["model"][1:] * 6000
    for w in range(4):
        assert sorted(int(x["id"]) for x in lines if x["model"] == f"w{w}") == list(range(150))


def test_workers_all_write_the_human_log(unsure_bundle, tmp_path):
    """`denki serve --workers 2 --human-log F`: the path reaches both workers (through the worker arguments);
    every human-routed text of either worker is one whole line of F."""
    log_path = tmp_path / "human.jsonl"
    with serve_two_workers(unsure_bundle, "--human-log", str(log_path)) as server:
        url, pids = server.url, server.pids
        assert len(pids) == 2, f"only worker(s) {pids} answered"
        n = 10
        for i in range(n):  # fresh connections: the kernel spreads them over both workers
            r = httpx.post(url + "/v1/classify", json={"texts": [f"問い合わせ {i}", f"質問 {i}"]},
                           headers={"X-Request-ID": str(i)}, timeout=30)
            assert r.status_code == 200 and {x["route"] for x in r.json()["results"]} == {"human"}, r.text
    proc, out = server.proc, server.out
    assert proc.returncode == 0, out[-3000:]
    assert f"human log on: texts routed to the human label are appended to {log_path}" in out
    lines = read_lines(log_path)
    assert sorted((x["id"], x["index"], x["text"]) for x in lines) == sorted(
        (str(i), k, t) for i in range(n) for k, t in enumerate([f"問い合わせ {i}", f"質問 {i}"]))


# ------------------------------------------------------------------------------------------- the retrain side
FT = ["--seeds", "1", "--epochs", "1", "--max-length", "32", "--threads", "1", "--no-progress", "--no-baseline"]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def loop_data(tmp_path_factory):
    """original.jsonl (120 rows), dev.jsonl (60) and labelled_human.jsonl: 30 rows as `--human-log` writes them
    (HumanLog.records) with the "label" a person added."""
    d = tmp_path_factory.mktemp("loop")
    rows = routing_rows(per_label=35)
    labels = sorted({r["label"] for r in rows})
    original, dev, human = rows[:120], rows[120:180], rows[180:210]
    log = HumanLog(d / "human.jsonl", model="router-onnx")
    logged = []
    for r in human:
        scores = {lab: 1 / len(labels) for lab in labels}
        logged += log.records([r["text"]], [{"label": labels[0], "score": scores[labels[0]], "scores": scores,
                                             "route": "human"}])
    assert all("label" not in x for x in logged)
    _jsonl(d / "original.jsonl", original)
    _jsonl(d / "dev.jsonl", dev)
    _jsonl(d / "labelled_human.jsonl", [{**x, "label": r["label"]} for x, r in zip(logged, human)])
    return d


def test_finetune_takes_several_train_files(loop_data, tiny_tokenizer_dir, tmp_path, capsys):
    d = loop_data
    out = tmp_path / "router"
    rc = main(["finetune", "classify", "--init-random", "tiny", "--tokenizer", str(tiny_tokenizer_dir), "--train",
               str(d / "original.jsonl"), str(d / "labelled_human.jsonl"), "--dev", str(d / "dev.jsonl"),
               "--out", str(out), *FT])
    printed = capsys.readouterr().out
    assert rc == 0
    assert (f"training data: 120 rows from {d / 'original.jsonl'}, 30 rows from {d / 'labelled_human.jsonl'} "
            f"(150 in all)") in printed
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    train = report["data"]["train"]
    assert train["n"] == train["n_in_file"] == 150
    assert [(f["path"], f["n"]) for f in train["files"]] == [(str(d / "original.jsonl"), 120),
                                                            (str(d / "labelled_human.jsonl"), 30)]
    assert all(len(f["sha256"]) == 64 for f in train["files"])
    assert "human" not in report["labels"]
    assert "(of 150 in the 2 files)" in (out / "report.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("bad,where,needle", [
    ({"text": "まだ誰も見ていない"}, "labelled_human.jsonl:3 (field 'label')", "missing"),
    ({"text": "ラベルが空", "label": None}, "labelled_human.jsonl:3 (field 'label')", "expected a string label"),
    ({"text": "ラベルがリスト", "label": ["宿泊"]}, "labelled_human.jsonl:3 (field 'label')",
     "expected a string label"),
    ({"text": "人に回したまま", "label": "human"}, "labelled_human.jsonl:3 (field 'label')", "abstention route"),
])
def test_finetune_refuses_unlabelled_and_human_rows(loop_data, tiny_tokenizer_dir, tmp_path, capsys, bad, where,
                                                    needle):
    rows = [json.loads(x) for x in (loop_data / "labelled_human.jsonl").read_text(encoding="utf-8").splitlines()]
    rows[2] = {**{k: v for k, v in rows[2].items() if k != "label"}, **bad}
    labelled = _jsonl(tmp_path / "labelled_human.jsonl", rows)
    rc = main(["finetune", "classify", "--init-random", "tiny", "--tokenizer", str(tiny_tokenizer_dir), "--train",
               str(loop_data / "original.jsonl"), str(labelled), "--dev", str(loop_data / "dev.jsonl"),
               "--out", str(tmp_path / "o"), *FT])
    err = capsys.readouterr().err
    assert rc == 2 and where in err and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "o" / "bundle").exists()


def test_top_labels_order():
    assert top_labels({"a": 0.2, "b": 0.5, "c": 0.2, "d": 0.1}) == [
        {"label": "b", "score": 0.5}, {"label": "a", "score": 0.2}, {"label": "c", "score": 0.2}]
