"""QA pieces without a model: reading/validation, windows and targets, numpy post-processing, metrics,
threshold tuning. Fast (no torch)."""
from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from .conftest import REPO, SAMPLE_QA_DEV, SAMPLE_QA_TRAIN
from denki.models.io.errors import InputError
from denki.models.qa.data import QAExample, read_qa
from denki.models.qa.features import answer_token_span, build_features
from denki.models.qa.metrics import (best_threshold, exact_score, f1_score, f1_vs_threshold, max_over_golds,
                               normalize_answer, squad_v2_metrics)
from denki.models.qa.postprocess import apply_threshold, postprocess_predictions, postprocess_question


def _jsonl(path, recs):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    return path


def _rec(qid, question="誰が書いた?", context="この本は夏目漱石が書いた。", text="夏目漱石", start=4):
    ans = {"text": [text], "answer_start": [start]} if text is not None else {"text": [], "answer_start": []}
    return {"id": qid, "question": question, "context": context, "answers": ans}


# ------------------------------------------------------------------------------------------- reading
def test_read_mini_files():
    tr = read_qa(SAMPLE_QA_TRAIN)
    dv = read_qa(SAMPLE_QA_DEV)
    assert tr.summary()["answerable"] == 200 and tr.summary()["unanswerable"] == 100 and not tr.skipped
    assert dv.summary()["examples"] == 150
    for ex in tr.examples:
        for text, start in ex.answers:
            assert ex.context[start:start + len(text)] == text


def test_read_nested_squad_json_gz(tmp_path):
    obj = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [{
        "context": "この本は夏目漱石が書いた。",
        "qas": [{"id": "a", "question": "誰が書いた?", "answers": [{"text": "夏目漱石", "answer_start": 4}],
                 "is_impossible": False},
                {"id": "b", "question": "いつ?", "answers": [], "is_impossible": True}]}]}]}
    p = tmp_path / "x.squad2.json.gz"
    with gzip.open(p, "wt", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
    d = read_qa(p)
    assert [e.id for e in d.examples] == ["a", "b"]
    assert d.examples[0].answers == [("夏目漱石", 4)] and d.examples[1].is_impossible
    assert d.examples[0].title == "T"


def test_bad_answer_start_is_skipped_and_listed_or_strict_error(tmp_path):
    p = _jsonl(tmp_path / "bad.jsonl", [_rec("ok"), _rec("bad", start=5)])
    d = read_qa(p)
    assert [e.id for e in d.examples] == ["ok"]
    assert d.skipped[0]["id"] == "bad" and d.skipped[0]["reason"] == "answer_start_mismatch"
    assert "occurs at 4" in d.skipped[0]["detail"]
    assert d.summary()["skipped_by_reason"] == {"answer_start_mismatch": 1}
    with pytest.raises(InputError, match=r"bad.jsonl:2 \(field 'answer_start'\)"):
        read_qa(p, strict=True)


def test_empty_question_and_context_are_skipped(tmp_path):
    p = _jsonl(tmp_path / "e.jsonl", [_rec("ok"), _rec("q", question="  "), _rec("c", context="", text=None)])
    d = read_qa(p)
    assert {s["id"]: s["reason"] for s in d.skipped} == {"q": "empty_question", "c": "empty_context"}
    with pytest.raises(InputError, match="empty question"):
        read_qa(p, strict=True)


def test_duplicate_ids_are_an_error(tmp_path):
    p = _jsonl(tmp_path / "d.jsonl", [_rec("x"), _rec("y"), _rec("x")])
    with pytest.raises(InputError, match=r"d.jsonl:3 \(field 'id'\): duplicate question id 'x' \(first seen at line 1"):
        read_qa(p)


def test_invalid_json_line_and_missing_fields(tmp_path):
    p = tmp_path / "j.jsonl"
    p.write_text(json.dumps(_rec("a")) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"j.jsonl:2: invalid JSON"):
        read_qa(p)
    p2 = _jsonl(tmp_path / "m.jsonl", [{"id": "a", "context": "x"}])
    with pytest.raises(InputError, match=r"m.jsonl:1 \(field 'question'\)"):
        read_qa(p2)
    p3 = tmp_path / "n.json"
    p3.write_text('{"version": 1}', encoding="utf-8")
    with pytest.raises(InputError, match="not a SQuAD 2.0 file"):
        read_qa(p3)


def test_is_impossible_inconsistent_is_skipped(tmp_path):
    r1 = _rec("a")
    r1["is_impossible"] = True
    r2 = _rec("b", text=None)
    r2["is_impossible"] = False
    d = read_qa(_jsonl(tmp_path / "i.jsonl", [r1, r2, _rec("c")]))
    assert {s["id"]: s["reason"] for s in d.skipped} == {"a": "impossible_with_answers",
                                                          "b": "answerable_without_answers"}


# ------------------------------------------------------------------------------------- windows, targets
def test_question_longer_than_max_length_is_skipped(tiny_tokenizer):
    long_q = "東京の天気はどうですか" * 30
    exs = [QAExample("long", long_q, "東京は晴れです。", []), QAExample("ok", "天気は?", "東京は晴れです。", [("晴れ", 3)])]
    f = build_features(exs, tiny_tokenizer, max_length=64, doc_stride=16)
    assert [e.id for e in f.examples] == ["ok"]
    assert f.skipped[0]["id"] == "long" and f.skipped[0]["reason"] == "question_too_long"
    assert "max_length=64" in f.skipped[0]["detail"]


def test_windows_and_cls_targets(tiny_tokenizer):
    # a long context: only windows holding the whole answer target it, the others and the
    # unanswerable question target [CLS]
    filler = "これは説明のための文章です。" * 30
    context = filler + "答えは富士山です。" + filler
    a = context.index("富士山")
    exs = [QAExample("q1", "答えは何?", context, [("富士山", a)]), QAExample("q2", "答えは何?", context, [])]
    f = build_features(exs, tiny_tokenizer, max_length=64, doc_stride=16)
    w1 = [w for w in range(len(f)) if f.example_index[w] == 0]
    w2 = [w for w in range(len(f)) if f.example_index[w] == 1]
    assert len(w1) > 3 and len(w1) == len(w2)
    pos = [w for w in w1 if f.start_positions[w] > 0]
    assert 1 <= len(pos) <= 3  # overlapping windows may each hold it
    for w in pos:
        enc = f.encodings[w]
        s, e = f.start_positions[w], f.end_positions[w]
        assert enc.sequence_ids[s] == 1 and enc.sequence_ids[e] == 1
        assert context[enc.offsets[s][0]:enc.offsets[e][1]] == "富士山"
    assert all(f.start_positions[w] == 0 and f.end_positions[w] == 0 for w in w1 if w not in pos)
    assert all(f.start_positions[w] == 0 and f.end_positions[w] == 0 for w in w2)


def test_gold_span_roundtrip_on_qa_sample(tiny_tokenizer):
    """Every answerable question of samples/qa_train.jsonl (= ../shared's qa_mini_train) whose answer lies in a
    window decodes back to its answer (or a superstring, when a token straddles the boundary — counted and
    reported)."""
    d = read_qa(SAMPLE_QA_TRAIN)
    f = build_features(d.examples, tiny_tokenizer, max_length=192, doc_stride=64)
    rt = f.stats["gold_span_roundtrip"]
    assert rt["other"] == 0
    assert rt["exact"] + rt["superstring"] == f.stats["windows_with_answer"] > 0
    assert f.stats["answerable_without_aligned_window"] == 0
    print(f"\nqa_train sample round trip @192/64: {rt} over {f.stats['windows']} windows; "
          f"straddles e.g. {f.stats['straddle_examples'][:3]}")


def test_straddling_token_counts_as_inside():
    class Enc:  # a hand-made window: [CLS] q [SEP] "東京都" "庁" [SEP]
        sequence_ids = [None, 0, None, 1, 1, None]
        offsets = [(0, 0), (0, 1), (0, 0), (0, 3), (3, 4), (0, 0)]

    assert answer_token_span(Enc, 1, 3) == (3, 3)  # "京都" lies inside the token "東京都"
    assert answer_token_span(Enc, 2, 4) == (3, 4)
    assert answer_token_span(Enc, 3, 6) is None  # extends past the window


# -------------------------------------------------------------------------------- post-processing
def _window(seq_ids, offsets):
    class W:
        pass

    w = W()
    w.sequence_ids, w.offsets = seq_ids, offsets
    return w


CTX = "abcdefghij"
SEQ = [None, 0, None, 1, 1, 1, 1, 1, None]
OFF = [(0, 0), (0, 1), (0, 0), (0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (0, 0)]


def _logits(cls=0.0, **pos):
    x = np.full(len(SEQ), -5.0)
    x[0] = cls
    for k, v in pos.items():
        x[int(k[1:])] = v
    return x


def test_postprocess_best_span_and_null_decision():
    s = _logits(cls=1.0, p4=3.0, p1=9.0)  # p1 is a question token: never a start
    e = _logits(cls=1.0, p5=3.0, p8=9.0)  # p8 is [SEP]: never an end
    r = postprocess_question(s, e, [OFF], [SEQ], CTX)
    assert (r["answer"], r["start"], r["end"]) == ("cdef", 2, 6) and r["has_answer"]
    assert math.isclose(r["score"], 6.0) and math.isclose(r["null_score"], 2.0)
    assert math.isclose(r["null_score_diff"], -4.0)
    r2 = postprocess_question(s, e, [OFF], [SEQ], CTX, null_threshold=-4.5)
    assert r2["answer"] == "" and not r2["has_answer"] and r2["start"] is None and r2["span_answer"] == "cdef"
    assert apply_threshold([r2], -3.0)[0]["answer"] == "cdef"


def test_postprocess_end_before_start_and_max_answer_length():
    s = _logits(p6=5.0, p3=1.0)
    e = _logits(p4=5.0, p7=2.0)  # the best end (p4) is before the best start (p6): that pair is invalid
    r = postprocess_question(s, e, [OFF], [SEQ], CTX)
    assert r["answer"] == "ghij" and math.isclose(r["score"], 7.0)
    # p3..p7 (5 tokens) is the best span, but not at max_answer_length=4: p3..p4 (2 tokens) wins
    s2, e2 = _logits(p3=5.0, p6=1.0), _logits(p7=5.0, p4=1.5)
    assert postprocess_question(s2, e2, [OFF], [SEQ], CTX)["answer"] == "abcdefghij"
    assert postprocess_question(s2, e2, [OFF], [SEQ], CTX, max_answer_length=4)["answer"] == "abcd"
    r1 = postprocess_question(_logits(p3=5.0), _logits(p7=5.0), [OFF], [SEQ], CTX, max_answer_length=1)
    assert len(r1["answer"]) == 2  # one token only


def test_postprocess_n_best_limits_candidates():
    # the second-best start with the best end; with n_best=1 only the single best start/end are tried,
    # and they form an invalid pair → no span at all
    s = _logits(p7=10.0, p3=8.0)
    e = _logits(p4=10.0, p7=-1.0)
    r = postprocess_question(s, e, [OFF], [SEQ], CTX, n_best=1)
    assert r["span_start"] is None and r["null_score_diff"] == math.inf and r["answer"] == ""
    r2 = postprocess_question(s, e, [OFF], [SEQ], CTX, n_best=2, keep_nbest=3)
    assert r2["answer"] == "abcd" and len(r2["nbest"]) >= 2 and r2["nbest"][0]["text"] == "abcd"


def test_multi_window_min_null_and_best_span_across_windows():
    seq2 = [None, 0, None, 1, 1, None, 0, 0, 0]
    off2 = [(0, 0), (0, 1), (0, 0), (6, 8), (8, 10), (0, 0), (0, 0), (0, 0), (0, 0)]
    s = np.stack([_logits(cls=4.0, p3=2.0), _logits(cls=-1.0, p3=3.0)])
    e = np.stack([_logits(cls=4.0, p4=2.0), _logits(cls=-1.0, p4=3.0)])
    r = postprocess_question(s, e, [OFF, off2], [SEQ, seq2], CTX)
    assert math.isclose(r["null_score"], -2.0)  # min over windows, not the first window's
    assert r["answer"] == "ghij" and math.isclose(r["score"], 6.0) and math.isclose(r["null_score_diff"], -8.0)
    # batch API groups windows per question, whatever their order
    res = postprocess_predictions([CTX, CTX], np.array([1, 0, 1]), np.stack([s[0], s[0], s[1]]),
                                  np.stack([e[0], e[0], e[1]]),
                                  [_window(SEQ, OFF), _window(SEQ, OFF), _window(seq2, off2)])
    assert res[1]["answer"] == "ghij"
    assert res[0]["answer"] == "" and res[0]["span_answer"] == "abcd" and math.isclose(res[0]["null_score_diff"], 4.0)


@pytest.mark.parametrize("answer", ["ＡＢＣ㍿", "㍿", "①", "ＡＢＣ", "カブシキ"])
def test_answers_are_exact_substrings_of_the_original_context(tiny_tokenizer, answer):
    context = "本社はＡＢＣ㍿で、①番の工場はｶﾌﾞｼｷ通りにある。" if answer != "カブシキ" else "工場はカブシキ通りにある。"
    a = context.index(answer)
    enc = tiny_tokenizer.encode_windows("どこ?", context, max_length=64, stride=8)[0]
    span = answer_token_span(enc, a, a + len(answer))
    assert span is not None
    s, e = np.full(len(enc), -3.0), np.full(len(enc), -3.0)
    s[span[0]], e[span[1]] = 5.0, 5.0
    r = postprocess_question(s, e, [enc.offsets], [enc.sequence_ids], context)
    assert r["answer"] == answer and context[r["start"]:r["end"]] == answer


def test_null_rules_with_answerable_logits():
    s = np.stack([_logits(cls=1.0, p3=2.0), _logits(cls=3.0, p3=0.0)])
    e = np.stack([_logits(cls=1.0, p4=2.0), _logits(cls=3.0, p4=0.0)])
    kw = dict(answerable_logits=np.array([-1.0, 2.5]))
    r = postprocess_question(s, e, [OFF, OFF], [SEQ, SEQ], CTX, **kw)
    assert r["null_score_diffs"]["cls"] == pytest.approx(-2.0)  # min null 2 − span 4
    assert r["null_score_diffs"]["head"] == pytest.approx(-2.5)  # −max over windows
    assert r["null_score_diffs"]["combined"] == pytest.approx(-4.5)
    assert r["null_score_diff"] == pytest.approx(-2.0)  # default rule: plain [CLS]
    rh = postprocess_question(s, e, [OFF, OFF], [SEQ, SEQ], CTX, null_rule="head", null_threshold=-2.2, **kw)
    assert rh["null_score_diff"] == pytest.approx(-2.5) and rh["answer"] == "abcd"
    assert apply_threshold([rh], -2.2, "cls")[0]["answer"] == ""  # −2.0 > −2.2 under the plain rule
    with pytest.raises(ValueError):
        postprocess_question(s, e, [OFF, OFF], [SEQ, SEQ], CTX, null_rule="head")


def test_postprocess_module_is_torch_free():
    code = ("import sys; import denki.models.qa.postprocess, denki.models.qa.metrics, denki.models.qa.data, "
            "denki.models.qa.features; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# ----------------------------------------------------------------------------------------- metrics
def test_normalisation_examples():
    assert normalize_answer("「ＡＢＣ」株式会社。") == "abc株式会社"
    assert normalize_answer(" 1,000 円 ") == "1000円"
    assert normalize_answer("①") == "1"
    assert normalize_answer("㍿") == "株式会社"
    assert normalize_answer("ｶﾞｽ") == "ガス"
    assert normalize_answer("The Beatles!") == "thebeatles"  # articles are kept (Japanese answers)


def test_char_f1_em_and_max_over_references():
    assert exact_score("ＡＢＣ株式会社", "ABC㍿") == 1
    assert f1_score("東京都", "東京") == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
    assert f1_score("大阪", "東京") == 0.0
    assert f1_score("", "") == 1.0 and f1_score("東京", "") == 0.0
    em, f1 = max_over_golds("東京都庁", ["大阪", "東京都庁舎", "東京都庁"])
    assert em == 1 and f1 == 1.0
    em, f1 = max_over_golds("東京", ["大阪", "東京都"])
    assert em == 0 and f1 == pytest.approx(0.8)
    assert max_over_golds("", []) == (1, 1.0) and max_over_golds("x", []) == (0, 0.0)


def _four_questions():
    """2 answerable (span F1 1.0 and 0.5), 2 unanswerable (with spans): null diffs, span scores, has-answer, span."""
    na = {"a": -3.0, "b": 1.0, "c": -1.0, "d": 2.0}
    sc = {"a": 1.0, "b": 0.5, "c": 0.0, "d": 0.0}
    has = {"a": True, "b": True, "c": False, "d": False}
    return na, sc, has, dict.fromkeys(na, True)


def test_best_threshold_synthetic():
    # four questions: 2 answerable (span F1 1.0 and 0.5), 2 unanswerable (with spans)
    na, sc, has, nonempty = _four_questions()
    score, t = best_threshold(na, sc, nonempty, has)
    # answer only "a": 1 + 2 no-answers right = 3/4
    assert score == pytest.approx(75.0) and t == pytest.approx(-3.0)
    # the rule "no answer iff diff > t" reproduces that score
    got = sum((sc[q] if has[q] else 0) if not (na[q] > t) else (0 if has[q] else 1) for q in na)
    assert got == pytest.approx(3.0)
    # all unanswerable → answering nothing is best; threshold below every diff
    score, t = best_threshold(na, sc, nonempty, dict.fromkeys(na, False))
    assert score == 100.0 and t < -3.0
    # ties switch together
    score, t = best_threshold({"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 0.0}, {"a": True, "b": True},
                              {"a": True, "b": False})
    assert score == pytest.approx(50.0)


def test_squad_v2_metrics_keys_and_values():
    golds = {"a": ["東京"], "b": [], "c": ["大阪", "大阪府"], "d": []}
    res = {"a": {"answer": "東京", "span_answer": "東京", "span_start": 0, "null_score_diff": -2.0},
           "b": {"answer": "", "span_answer": "京都", "span_start": 0, "null_score_diff": 1.0},
           "c": {"answer": "", "span_answer": "大阪府", "span_start": 0, "null_score_diff": 0.5},
           "d": {"answer": "名古屋", "span_answer": "名古屋", "span_start": 0, "null_score_diff": -1.0}}
    m = squad_v2_metrics(golds, res)
    for k in ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_f1", "best_f1_thresh",
              "best_exact", "best_exact_thresh", "total"):
        assert k in m
    assert m["total"] == 4 and m["HasAns_exact"] == 50.0 and m["NoAns_exact"] == 50.0
    assert m["exact"] == 50.0
    assert m["HasAns_span_exact"] == 100.0  # both answerable questions have the right span, c was nulled
    # sweep: answer a (-2) → 3/4 right; + d (-1, wrong answer) → 2/4; + c (0.5) → 3/4 (no gain); + b → 2/4
    assert m["best_f1"] == pytest.approx(75.0) and m["best_f1_thresh"] == pytest.approx(-2.0)
    curve = f1_vs_threshold(golds, res, [m["best_f1_thresh"], -5.0])
    assert curve[0] == pytest.approx(m["best_f1"]) and curve[1] == pytest.approx(50.0)


# ---------------------------------------------------------------- issue 14: where the tuned threshold sits in its gap


def test_best_threshold_midpoint_same_score_with_margin():
    # the same four questions as test_best_threshold_synthetic: answering only "a" (-3.0) is best; the next diff is
    # "c" at -1.0, so every threshold in [-3, -1) scores 75%
    na, sc, has, nonempty = _four_questions()
    s_sample, t_sample = best_threshold(na, sc, nonempty, has)
    s_mid, t_mid = best_threshold(na, sc, nonempty, has, at="midpoint")
    assert t_sample == pytest.approx(-3.0)  # the official choice: on question a's own score (zero margin)
    assert s_mid == pytest.approx(s_sample) and t_mid == pytest.approx(-2.0)  # same score, 1.0 from both neighbours
    got = sum((sc[q] if has[q] else 0) if not (na[q] > t_mid) else (0 if has[q] else 1) for q in na)
    assert 100 * got / 4 == pytest.approx(s_mid)
    # answering nothing best: 1.0 below the lowest diff (both modes); answering everything best: 1.0 above the highest
    assert best_threshold(na, sc, nonempty, dict.fromkeys(na, False), at="midpoint") == (100.0, -4.0)
    assert best_threshold(na, dict.fromkeys(na, 1.0), nonempty, dict.fromkeys(na, True), at="midpoint") == \
        (100.0, 3.0)
    # a flat stretch (switching c changes nothing: empty span): the widest gap among equal scores wins
    na2 = {"a": 0.0, "c": 0.1, "e": 5.0}
    score, t = best_threshold(na2, {"a": 1.0, "c": 0.0, "e": 0.0}, {"a": True, "c": False, "e": True},
                              {"a": True, "c": False, "e": False}, at="midpoint")
    assert score == pytest.approx(100.0) and t == pytest.approx(2.55)  # between c (0.1) and e (5.0), not a/c
    with pytest.raises(ValueError):
        best_threshold(na, sc, nonempty, has, at="middle")


def test_best_threshold_on_a_collapsed_models_diffs_keeps_a_margin():
    """The quickstart's tiny QA model (issue 14): 150 dev diffs in a 0.09-wide cluster; F1 is best answering only
    the lowest question (a HasAns question whose span scores F1 0.085). The official rule put the threshold on that
    question's own diff, so a 1e-6 change flipped it; the midpoint keeps half the gap to the next question."""
    rng = np.random.default_rng(0)
    rest = np.sort(rng.uniform(11.470, 11.543, 149))
    na = {"q0": 11.455020666122437} | {f"q{i + 1}": float(d) for i, d in enumerate(rest)}
    has = {q: i < 100 for i, q in enumerate(na)}
    sc = {q: (0.085 if q == "q0" else 0.0) for q in na}
    nonempty = dict.fromkeys(na, True)
    s_off, t_off = best_threshold(na, sc, nonempty, has)
    s_mid, t_mid = best_threshold(na, sc, nonempty, has, at="midpoint")
    assert s_off == pytest.approx(s_mid) == pytest.approx(100 * (50 + 0.085) / 150)
    assert t_off == na["q0"]  # zero margin: any rounding (ONNX, another CPU) may flip q0
    margin = min(abs(d - t_mid) for d in na.values())
    assert margin == pytest.approx((rest[0] - na["q0"]) / 2) and margin > 1e-3
    # a perturbation smaller than the margin changes no decision; the same one flips q0 under the official rule
    for eps in (-2e-6, 2e-6):
        assert all((d + eps > t_mid) == (d > t_mid) for d in na.values())
    assert (na["q0"] + 2e-6 > t_off) != (na["q0"] > t_off)


def test_squad_v2_metrics_threshold_at_midpoint_reproduces_best_f1():
    golds = {"a": ["東京"], "b": [], "c": ["大阪", "大阪府"], "d": []}
    res = {q: {"answer": a, "span_answer": sp, "span_start": 0, "span_end": 2, "null_score_diff": d}
           for q, a, sp, d in (("a", "東京", "東京", -2.0), ("b", "", "京都", 1.0), ("c", "", "大阪府", 0.5),
                               ("d", "名古屋", "名古屋", -1.0))}
    off, mid = squad_v2_metrics(golds, res), squad_v2_metrics(golds, res, threshold_at="midpoint")
    assert off["best_f1"] == mid["best_f1"] and off["best_exact"] == mid["best_exact"]
    assert off["best_f1_thresh"] == pytest.approx(-2.0) and mid["best_f1_thresh"] == pytest.approx(-1.5)
    rr = dict(zip(res, apply_threshold(list(res.values()), mid["best_f1_thresh"])))
    assert squad_v2_metrics(golds, rr)["f1"] == pytest.approx(mid["best_f1"])
