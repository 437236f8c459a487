"""`denki ask` / :class:`denki.Asker`: the passage index plus the ONNX reader, one answer from a collection
(with the tiny untrained reader of the fixtures: this checks the plumbing and the decision, not quality)."""
from __future__ import annotations

import json

import pytest

from denki.app.cli import main
from denki.models.io.errors import DenkiError

from .conftest import REPO, manual_squad_file

MANUAL_QA = REPO / "samples" / "manual_qa.jsonl"


@pytest.fixture(scope="module")
def manual_index(tmp_path_factory):
    from denki.models.retrieval.index import PassageIndex

    out = tmp_path_factory.mktemp("ask") / "index"
    PassageIndex.build([f"{MANUAL_QA}:context"], out).close()
    return out


def test_asker_answers_from_the_most_answerable_passage(manual_index, onnx_qa):
    from denki import Asker

    a = Asker(manual_index, onnx_qa, k=3, backend="fp32", threads=1)
    r = a.ask("大浴場は何時まで使えますか?")
    assert len(r["passages"]) == 3 and [p["rank"] for p in r["passages"]] == [1, 2, 3]
    assert "大浴場" in a.index.passage(r["passages"][0]["id"]).text  # BM25 put the right paragraph first
    # the fixture's reader has null_threshold 1e6: it always answers, from the passage with the lowest difference
    assert r["has_answer"] and r["reason"] == "answer" and r["answer"]
    assert r["passage"][r["start"]:r["end"]] == r["answer"] and r["document"] == "manual_qa.jsonl"
    diffs = [p["null_score_diff"] for p in r["passages"]]
    assert r["null_score_diff"] == min(diffs) and r["retrieval_ms"] >= 0 and r["reader_ms"] > 0
    no = Asker(manual_index, onnx_qa, k=3, null_threshold=-1e9, backend="fp32", threads=1).ask("大浴場は何時まで?")
    assert not no["has_answer"] and no["answer"] == "" and no["reason"] == "no_answer" and no["start"] is None
    assert no["passage_id"] and no["span_answer"]  # the candidate it turned down, for a person to look at
    nothing = a.ask("量子コンピュータ")
    assert nothing["reason"] == "no_passage" and nothing["passages"] == [] and not nothing["has_answer"]
    with pytest.raises(DenkiError, match="empty"):
        a.ask("  ")
    with pytest.raises(DenkiError, match="k must be at least 1"):
        Asker(manual_index, onnx_qa, k=0)


def test_ask_cli_one_question_and_a_file(manual_index, onnx_qa, tmp_path, capsys):
    base = ["ask", "--index", str(manual_index), "--qa", str(onnx_qa), "--backend", "fp32", "--threads", "1"]
    assert main(base + ["--question", "コーヒーはいくらですか?", "--json", "-k", "2"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["question"] == "コーヒーはいくらですか?" and 1 <= len(r["passages"]) <= 2 and "has_answer" in r
    assert main(base + ["--question", "コーヒーはいくらですか?"]) == 0
    assert "retrieval" in capsys.readouterr().out
    qs = tmp_path / "q.jsonl"
    qs.write_text('{"id": "a", "question": "定休日はいつですか?"}\n{"id": "b", "question": ""}\nnot json\n',
                  encoding="utf-8")
    out = tmp_path / "answers.jsonl"
    assert main(base + ["--input", str(qs), "--output", str(out)]) == 0
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 3 and rows[0]["id"] == "a" and "answer" in rows[0]["denki_ask"]
    assert rows[1]["id"] == "b" and "empty" in rows[1]["reason"] and rows[2]["line"] == 3
    assert not list(tmp_path.glob(".answers.jsonl.*"))  # no partial file left
    assert main(base + ["--input", str(qs)]) != 0  # --input needs --output


def test_evaluate_ask_reports_recall_end_to_end_and_left_out_articles(onnx_qa, tmp_path, capsys):
    """The manual set as a SQuAD file (one article per manual): every figure of `denki evaluate ask`, and with two
    articles left out of the index, their questions counted apart."""
    from denki.models.retrieval.index import PassageIndex

    data = manual_squad_file(tmp_path)
    idx = tmp_path / "idx"
    PassageIndex.build([data], idx).close()
    out = tmp_path / "r.json"
    assert main(["evaluate", "ask", "--index", str(idx), "--qa", str(onnx_qa), "--data", str(data), "-k", "2",
                 "--output-json", str(out), "--threads", "1", "--no-progress"]) == 0
    r = json.loads(out.read_text(encoding="utf-8"))
    assert r["questions"] == 23 and r["recall_at"]["5"] == 1.0 and r["out_of_collection_questions"] == 0
    assert 0.0 <= r["HasAns_f1"] <= 100.0 and 0.0 <= r["gold_passage_HasAns_f1"] <= 100.0
    assert r["latency_ms"]["ask"]["p50"] > 0 and r["latency_ms"]["retrieval"]["p50"] > 0
    assert main(["evaluate", "ask", "--index", str(idx), "--qa", str(onnx_qa), "--data", str(data),
                 "--exclude-articles", "2", "--output-json", str(out), "--threads", "1", "--no-progress"]) == 0
    r2 = json.loads(out.read_text(encoding="utf-8"))
    assert len(r2["excluded_articles"]) == 2 and r2["questions"] + r2["out_of_collection_questions"] == 23
    # the fixture's reader always answers (threshold 1e6): a left-out question gets 回答なし only when no passage
    # left shares a word with it
    assert 0.0 <= r2["out_of_collection_no_answer"] < 1.0 and 0.0 <= r2["in_collection_no_answer"] <= 1.0
    assert len(PassageIndex(idx)) == 6  # the user's index is left whole (a copy lost the articles)
    # an index that lacks the file's articles is refused, naming the fix
    other = tmp_path / "other"
    PassageIndex.build([f"{MANUAL_QA}:context"], other).close()
    with pytest.raises(DenkiError, match="lacks 6 articles"):
        from denki.serve.evaluate_ask import evaluate_ask

        evaluate_ask(other, onnx_qa, data, threads=1, progress=False)


def test_http_ask_route_gives_what_the_asker_gives(manual_index, onnx_qa):
    """`denki serve --qa QA --index INDEX`: POST /v1/ask runs the reader through the QA micro-batcher and returns
    the Asker's answer; limits, k, the index in /v1/models; no route without --index; --index needs --qa."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from denki import Asker
    from denki.serve.http import ServerSettings, create_app
    from denki.serve.runtime import Predictor

    qa = Predictor(onnx_qa, backend="fp32", device="cpu", threads=1)
    app = create_app(qa=qa, settings=ServerSettings(index=str(manual_index), ask_k=3, max_text_chars=100))
    want = Asker(manual_index, qa, k=3).ask("大浴場は何時まで使えますか?")
    with TestClient(app) as c:
        r = c.post("/v1/ask", json={"question": "大浴場は何時まで使えますか?"})
        assert r.status_code == 200, r.text
        got = r.json()
        for key in ("answer", "has_answer", "reason", "document", "passage_id", "start", "end", "passage"):
            assert got[key] == want[key], key
        assert [p["id"] for p in got["passages"]] == [p["id"] for p in want["passages"]] and len(got["passages"]) == 3
        assert got["passage"][got["start"]:got["end"]] == got["answer"] and got["reader_ms"] > 0
        import hashlib  # the QA bundle's version, as every model endpoint gives it

        assert got["model_version"] == hashlib.sha256((onnx_qa / "manifest.json").read_bytes()).hexdigest()[:12]
        assert len(c.post("/v1/ask", json={"question": "大浴場は何時まで使えますか?", "k": 1}).json()["passages"]) == 1
        nothing = c.post("/v1/ask", json={"question": "量子コンピュータ"}).json()
        assert nothing["reason"] == "no_passage" and not nothing["has_answer"] and nothing["passages"] == []
        for body in ({"question": "  "}, {"question": "あ" * 101}, {"question": "a", "k": 0}, {"question": "a", "k": 21},
                     {"question": "a", "extra": 1}, {}):
            bad = c.post("/v1/ask", json=body)
            assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request", body
        models = c.get("/v1/models").json()["models"]
        assert models["index"]["passages"] == 6 and models["index"]["k"] == 3
        assert "/v1/ask" in c.get("/openapi.json").json()["paths"]
    with TestClient(create_app(qa=qa)) as c:
        assert c.post("/v1/ask", json={"question": "大浴場"}).status_code == 404
    with pytest.raises(DenkiError, match="needs --qa"):
        from denki.serve.serve_settings import ServeSettings

        ServeSettings(classifier=str(onnx_qa), index=str(manual_index)).check_index()


def test_fit_threshold_maximises_the_mixed_f1():
    from denki.serve.calibrate_ask import fit_threshold
    from denki.serve.evaluate_ask import mixed_f1

    in_rows = [(-3.0, 1.0), (-1.0, 1.0), (0.5, 0.0), (2.0, 1.0), (None, 0.0)]
    out = [-2.0, 1.0, 3.0, None]
    # answering up to 0.5: in 2/5 (0.4) · out 3/4 no answer → 0.67·0.4 + 0.33·0.75; up to 2.0: 0.6 and 2/4 (best)
    assert mixed_f1(in_rows, out, 0.5, 0.33) == pytest.approx(100 * (0.67 * 0.4 + 0.33 * 0.75))
    t, best = fit_threshold(in_rows, out, 0.33)
    grid = [float("-inf"), -3.0, -2.0, -1.0, 0.5, 1.0, 2.0, 3.0]
    assert best == pytest.approx(max(mixed_f1(in_rows, out, g, 0.33) for g in grid)) and t == 2.0
    assert fit_threshold(in_rows, out, 0.99)[0] < -2.0  # nearly all unanswerable: answer none a left-out one beats
    assert fit_threshold([(0.0, 1.0), (1.0, 0.0)], [5.0])[0] == 0.0  # a tie goes to the lower threshold
    assert mixed_f1([], out, 0.0) is None


def test_fit_threshold_agrees_with_scoring_every_candidate():
    """The sorted, cumulative fit gives what scoring every candidate threshold with mixed_f1 gives (random cases,
    ties and questions without a candidate included)."""
    import random

    from denki.serve.calibrate_ask import fit_threshold
    from denki.serve.evaluate_ask import mixed_f1

    rng = random.Random(0)
    for _ in range(100):
        in_rows = [(None if rng.random() < 0.1 else round(rng.gauss(0, 2), 1), rng.choice([0.0, 0.5, 1.0]))
                   for _ in range(rng.randint(1, 25))]
        out = [None if rng.random() < 0.1 else round(rng.gauss(1, 2), 1) for _ in range(rng.randint(1, 25))]
        grid = [float("-inf")] + sorted({d for d, _ in in_rows if d is not None} | {d for d in out if d is not None})
        scores = [mixed_f1(in_rows, out, g, 0.33) for g in grid]
        best = max(scores)
        t, m = fit_threshold(in_rows, out, 0.33)
        assert m == pytest.approx(best) and t == grid[next(i for i, v in enumerate(scores) if v >= best - 1e-9)]


def test_calibrate_ask_writes_a_bundle_the_asker_uses(onnx_qa, tmp_path, capsys):
    from denki import Asker
    from denki.models.bundle.format import verify_bundle
    from denki.models.retrieval.index import PassageIndex

    data = manual_squad_file(tmp_path)
    idx = tmp_path / "idx"
    PassageIndex.build([data], idx).close()
    out = tmp_path / "qa-ask"
    assert main(["calibrate", "ask", "--index", str(idx), "--qa", str(onnx_qa), "--data", str(data), "--out",
                 str(out), "--exclude-articles", "2", "-k", "2", "--threads", "1", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "ask_null_threshold" in printed and "mixed F1 at s = 0.33" in printed
    task = json.loads((out / "task.json").read_text(encoding="utf-8"))
    c = task["ask_calibration"]
    assert c["out_of_collection_questions"] > 0 and c["in_collection_questions"] + c["out_of_collection_questions"] == 23
    assert c["mixed_f1"] >= c["mixed_f1_at_reader_threshold"]  # the reader's own threshold is one of the candidates
    assert verify_bundle(out)["kind"] == "onnx-qa"  # a whole bundle: every file hashed again
    a = Asker(idx, out, k=2, backend="fp32", threads=1)
    assert a.threshold == task["ask_null_threshold"] != task["null_threshold"]
    assert Asker(idx, out, null_threshold=0.25, backend="fp32", threads=1).threshold == 0.25  # given wins
    assert main(["calibrate", "ask", "--index", str(idx), "--qa", str(onnx_qa), "--data", str(data), "--out",
                 str(tmp_path / "x"), "--exclude-articles", "0"]) != 0
    assert "--exclude-articles must be at least 1" in capsys.readouterr().err and not (tmp_path / "x").exists()
