"""`denki ask` / :class:`denki.Asker`: the passage index plus the ONNX reader, one answer from a collection
(with the tiny untrained reader of the fixtures: this checks the plumbing and the decision, not quality)."""
from __future__ import annotations

import json

import pytest

from denki.app.cli import main
from denki.models.io.errors import DenkiError

from .conftest import REPO

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

    sq = {"data": []}
    for line in MANUAL_QA.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if not sq["data"] or sq["data"][-1]["title"] != r["title"]:
            sq["data"].append({"title": r["title"], "paragraphs": [{"context": r["context"], "qas": []}]})
        sq["data"][-1]["paragraphs"][0]["qas"].append(
            {"id": r["id"], "question": r["question"], "is_impossible": r["is_impossible"],
             "answers": [{"text": t, "answer_start": s} for t, s in zip(r["answers"]["text"],
                                                                         r["answers"]["answer_start"])]})
    data = tmp_path / "manual.json"
    data.write_text(json.dumps(sq, ensure_ascii=False), encoding="utf-8")
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
