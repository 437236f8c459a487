"""The pipelined batch engine of `denki classify` (serve/pipeline.py, serve/batch.py): threaded runs write the
same bytes as the sequential run, in input order, with every row accounted for; crashes resume exactly; the
queues bound memory; the output fast path formats exactly as the dict path; no torch at run time."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import threading
import time

import pytest

from denki.models.io.errors import DenkiError

from .conftest import REPO, inquiry_rows

N_BAD = 8


def _mixed_input(path, n=90):
    """JSONL mixing short and long texts (some truncated at the model's max_length), records whose fields clash
    with the added names, and every kind of bad row; returns ``(records in, ids of good rows, bad lines)``."""
    rows = inquiry_rows(60)
    good_ids, bad_lines = [], []
    lines: list[bytes] = []

    def add(raw: bytes, good_id=None):
        lines.append(raw)
        if good_id is None:
            bad_lines.append(len(lines))
        else:
            good_ids.append(good_id)

    for i in range(n):
        r = rows[i % len(rows)]
        title = r["title"] * (1 + (i * 7) % 9)  # 1–9 repetitions: lengths from a few tokens to past max_length
        rec = {"id": f"r{i}", "title": title, "n": i, "nested": {"k": [1, "二"]}}
        if i % 17 == 5:
            rec["label"] = "given"  # clash → denki_ prefix for this record
        if i % 29 == 8:
            rec["label"], rec["denki_label"] = "given", "old"  # clash with the prefixed name: the dict path
        add(json.dumps(rec, ensure_ascii=False).encode(), f"r{i}")
        if i % 11 == 3:
            k = len(bad_lines)
            bad = [b'{"title": "unterminated', b"\xff\xfe not utf-8", json.dumps({"id": "no-title"}).encode(),
                   json.dumps({"title": "  "}).encode(), b"[1, 2]", json.dumps({"title": 5}).encode(),
                   json.dumps({"title": "長" * 20_001}, ensure_ascii=False).encode(), b"null"][k % N_BAD]
            add(bad)
        if i == 40:
            lines.append(b"")  # a blank line is not a record
    path.write_bytes(b"\n".join(lines) + b"\n")
    return len(good_ids) + len(bad_lines), good_ids, bad_lines


def _run(onnx_classifier, inp, out, **kw):
    from denki.serve.batch import classify_file

    kw = {"batch_size": 4, "window": 12, "progress": False, **kw}
    return classify_file(onnx_classifier, inp, out, **kw)


def test_threaded_engine_writes_the_sequential_bytes_in_order(onnx_classifier, tmp_path):
    n_in, good_ids, bad_lines = _mixed_input(tmp_path / "in.jsonl")
    outs = {}
    for workers in (1, 2, 3):  # sequential reference; threaded, with 2 and 3 model calls side by side
        out = tmp_path / f"w{workers}.jsonl"
        r = _run(onnx_classifier, tmp_path / "in.jsonl", out, workers=workers)
        assert (r["workers"], r["ort_threads"], r["model_calls"]) == (workers, 1, workers)
        assert (r["rows_out"], r["rows_err"], r["rows_in"]) == (len(good_ids), len(bad_lines), n_in)
        outs[workers] = (out.read_bytes(), (tmp_path / f"w{workers}.jsonl.errors.jsonl").read_bytes())
        assert not list(tmp_path.glob(".*partial*"))  # partial and state files gone
    assert outs[2] == outs[1] and outs[3] == outs[1]  # byte for byte

    got = [json.loads(x) for x in outs[1][0].decode("utf-8").splitlines()]
    errs = [json.loads(x) for x in outs[1][1].decode("utf-8").splitlines()]
    assert [g["id"] for g in got] == good_ids  # input order, although batches were sorted by length
    assert [e["line"] for e in errs] == bad_lines  # errors name their physical line, in order
    reasons = " ".join(e["reason"] for e in errs)
    for word in ("malformed JSON", "not UTF-8", "missing field", "empty text", "JSON object", "not text",
                 "limit 20,000"):
        assert word in reasons
    for g in got:
        assert g["nested"] == {"k": [1, "二"]}  # input fields kept as they were
        p = "denki_" if "label" in g and g["label"] == "given" else ""
        assert g[p + "route"] in (g[p + "label"], "human") and 0 < g[p + "score"] <= 1
    clash = next(g for g in got if "denki_label" in g and g["label"] == "given" and g["id"] == "r8")
    assert list(clash)[:6] == ["id", "title", "n", "nested", "label", "denki_label"]  # replaced in place
    assert clash["denki_label"] != "old"


def test_engine_scores_match_the_predictor(onnx_classifier, tmp_path):
    """fp32 (no per-batch quantisation): each row gets what Predictor.classify gives that text alone."""
    from denki.serve.runtime import Predictor

    n_in, good_ids, _ = _mixed_input(tmp_path / "in.jsonl", n=40)
    _run(onnx_classifier, tmp_path / "in.jsonl", tmp_path / "o.jsonl", workers=2, backend="fp32")
    got = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text(encoding="utf-8").splitlines()]
    p = Predictor(onnx_classifier, backend="fp32", device="cpu")
    for g in got:
        ref = p.classify([g["title"]])[0]
        pre = "denki_" if g.get("label") == "given" else ""
        assert g[pre + "label"] == ref["label"] and g[pre + "route"] == ref["route"]
        assert abs(g[pre + "score"] - ref["score"]) < 1e-5


def test_output_fast_path_formats_like_scored_record():
    from denki.serve.batch_files import ADDED, output_prefix, scored_record
    from denki.serve.batch_files import Encoder as _Encoder

    labels, human = ["障害", "請求", 'quote"d'], "human"
    records = [{"id": 1, "text": "ログイン\nできない"}, {"text": "x", "label": "given"},
               {"text": "x", "label": "given", "denki_label": "old", "z": None}, {"text": "絵文字😀", "v": 1.5e-7},
               {"text": "t", "score": [1, {"a": "b"}], "route": True}]
    for k, score, hum in ((0, 0.123456789, False), (2, 1.0, True), (1, 3.3e-7, False)):
        for rec in records:
            enc = _Encoder("jsonl", "jsonl", None, "", labels, human)
            p = output_prefix(None, rec)
            res = {"label": labels[k], "score": round(score, 6), "route": human if hum else labels[k]}
            want = json.dumps(scored_record(rec, res, p), ensure_ascii=False) + "\n"
            assert enc.jsonl(enc.head(dict(rec)), k, score, hum) == want
    # CSV: the same row csv.writer would write from the dict path
    import io

    in_header = ["id", "label", "denki_label"]
    header = in_header + ["denki_" + a for a in ADDED]
    enc = _Encoder("csv", "csv", header, "denki_", labels, human)
    rec = {"id": "a,b", "label": 'x"y', "denki_label": "old"}
    res = {"label": labels[1], "score": 0.5, "route": labels[1]}
    ref = scored_record(rec, res, "denki_")
    want, got = io.StringIO(), io.StringIO()
    csv.writer(want).writerow(["" if ref.get(c) is None else ref.get(c) for c in header])
    csv.writer(got).writerow(enc.csv_row(enc.head(dict(rec)), 1, 0.5, False))
    assert got.getvalue() == want.getvalue()


@pytest.mark.parametrize("checkpoint_seconds", [0.0, 60.0])
def test_resume_after_a_crash_is_byte_identical(onnx_classifier, tmp_path, checkpoint_seconds):
    """Crash right after window 3 is written (before its checkpoint); resume; same bytes as an uninterrupted run.
    checkpoint_seconds 0: the state names window 2's end; 60: only the start-of-run state exists."""
    _mixed_input(tmp_path / "in.jsonl")
    full = tmp_path / "full.jsonl"
    _run(onnx_classifier, tmp_path / "in.jsonl", full, workers=2)
    out = tmp_path / "resumed.jsonl"
    with pytest.raises(KeyboardInterrupt):
        _run(onnx_classifier, tmp_path / "in.jsonl", out, workers=2, stop_after_windows=3,
             checkpoint_seconds=checkpoint_seconds)
    state = json.loads((tmp_path / ".resumed.jsonl.partial.state.json").read_text(encoding="utf-8"))
    assert (state["last_line"] > 1) == (checkpoint_seconds == 0)
    assert (tmp_path / ".resumed.jsonl.partial").stat().st_size > state["out_bytes"]  # written past the state
    assert not out.exists()
    with pytest.raises(DenkiError, match="--resume"):
        _run(onnx_classifier, tmp_path / "in.jsonl", out, workers=2)
    with pytest.raises(DenkiError, match="batch_size"):  # other batches would give other int8 scores
        _run(onnx_classifier, tmp_path / "in.jsonl", out, workers=2, batch_size=8, resume=True)
    r = _run(onnx_classifier, tmp_path / "in.jsonl", out, workers=1, resume=True)
    assert r["resumed_from_line"] == state["last_line"]
    assert out.read_bytes() == full.read_bytes()
    assert (tmp_path / "resumed.jsonl.errors.jsonl").read_bytes() == \
        (tmp_path / "full.jsonl.errors.jsonl").read_bytes()


def test_resume_after_a_hard_kill_is_byte_identical(onnx_classifier, tmp_path):
    """The process dies (os._exit: no finally blocks, Python's file buffers lost) mid-run; CSV in and out."""
    rows = inquiry_rows(60)
    with open(tmp_path / "in.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "title", "label"])  # "label" clashes: denki_label etc.
        for i in range(150):
            r = rows[i % len(rows)]
            w.writerow([f"c{i}", r["title"] * (1 + i % 4) + ("\n改行" if i % 13 == 1 else ""), r["label"]])
            if i % 37 == 3:
                f.write("c-bad,too,many,fields\n")
    full = tmp_path / "full.csv"
    _run(onnx_classifier, tmp_path / "in.csv", full, workers=2)
    out = tmp_path / "out.csv"
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); import denki.serve.batch as b\n"
            "b._simulated_crash = lambda: os._exit(3)\n"
            "b.classify_file(sys.argv[2], sys.argv[3], sys.argv[4], batch_size=4, window=12, workers=2,"
            " checkpoint_seconds=0, stop_after_windows=5, progress=False)\n")
    res = subprocess.run([sys.executable, "-c", code, str(REPO), str(onnx_classifier), str(tmp_path / "in.csv"),
                          str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 3, res.stderr[-2000:]
    assert not out.exists() and (tmp_path / ".out.csv.partial.state.json").is_file()
    r = _run(onnx_classifier, tmp_path / "in.csv", out, workers=2, resume=True)
    assert r["resumed_from_line"] > 1
    assert out.read_bytes() == full.read_bytes()
    assert (tmp_path / "out.csv.errors.jsonl").read_bytes() == (tmp_path / "full.csv.errors.jsonl").read_bytes()
    got = list(csv.DictReader(open(out, encoding="utf-8", newline="")))
    assert [g["id"] for g in got] == [f"c{i}" for i in range(150)] and "denki_label" in got[0]


def test_cli_workers_and_errors(onnx_classifier, tmp_path, capsys):
    from denki.app.cli import main

    n_in, good_ids, bad = _mixed_input(tmp_path / "in.jsonl", n=30)
    out = tmp_path / "o.jsonl"
    assert main(["classify", "--model", str(onnx_classifier), "--input", str(tmp_path / "in.jsonl"),
                 "--output", str(out), "--workers", "1", "--batch-size", "8", "--checkpoint-seconds", "0"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == len(good_ids)
    assert "1 workers" in capsys.readouterr().out
    assert main(["classify", "--model", str(onnx_classifier), "--input", str(tmp_path / "in.jsonl"),
                 "--output", str(tmp_path / "p.jsonl"), "--workers", "0"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- run_pipeline


def test_pipeline_order_errors_and_bounded_queues():
    from denki.serve.pipeline import run_pipeline

    produced, consumed = [0], []
    ahead = []

    def source():
        for i in range(200):
            produced[0] = i + 1
            yield i

    def slow_sink(x):
        ahead.append(produced[0] - len(consumed))  # items made but not yet consumed
        time.sleep(0.001)
        consumed.append(x)

    run_pipeline(source(), [lambda x: x * 2, lambda x: x + 1], slow_sink, threaded=True, maxsize=2)
    assert consumed == [2 * i + 1 for i in range(200)]
    # in flight at most: 2 queues ahead of each of 3 consumers (2 stages + sink), one item in each stage
    # thread, one just produced by the source, and the one the sink is taking
    assert max(ahead) <= 3 * 2 + 2 + 1 + 1

    seq = []
    run_pipeline(iter(range(50)), [lambda x: x * 2], seq.append, threaded=False)
    thr = []
    run_pipeline(iter(range(50)), [lambda x: x * 2], thr.append, threaded=True)
    assert seq == thr == [2 * i for i in range(50)]

    def bad_stage(x):
        if x == 7:
            raise ValueError("stage failed at 7")
        return x

    before = threading.active_count()
    got = []
    with pytest.raises(ValueError, match="at 7"):
        run_pipeline(iter(range(10_000)), [bad_stage], got.append, threaded=True)
    assert got == list(range(7)) and threading.active_count() == before  # every thread stopped

    def bad_sink(x):
        if x == 3:
            raise KeyboardInterrupt("stop")

    with pytest.raises(KeyboardInterrupt):
        run_pipeline(iter(range(10_000)), [lambda x: x], bad_sink, threaded=True)
    assert threading.active_count() == before


def test_classify_file_stays_torch_free(onnx_classifier, tmp_path):
    _mixed_input(tmp_path / "in.jsonl", n=20)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from denki.serve.batch import classify_file\n"
            "r = classify_file(sys.argv[2], sys.argv[3], sys.argv[4], workers=2, batch_size=4, progress=False)\n"
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]\n"
            "assert not bad, bad; print('ok', r['rows_in'])\n")
    res = subprocess.run([sys.executable, "-c", code, str(REPO), str(onnx_classifier), str(tmp_path / "in.jsonl"),
                          str(tmp_path / "o.jsonl")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("ok")
