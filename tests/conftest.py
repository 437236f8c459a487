"""Shared fixtures: the sample data, the shared data folder and a tiny tokenizer trained once per test session.

Core tests run on what ships in ``samples/`` (or on fixtures they generate); only *extended* tests (marked
``@pytest.mark.extended``), which add coverage on bigger or other real data, read ``../shared/data`` through
:func:`shared` and skip without it.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("DENKI_SHARED_DATA", REPO.parent / "shared" / "data"))
SAMPLES = REPO / "samples"
SAMPLE_CORPUS = SAMPLES / "corpus_ja.txt"  # = shared corpus_mini_ja.txt
SAMPLE_ROUTING_TRAIN = SAMPLES / "routing_train.jsonl"  # tourist-desk inquiries → 6 desks (JMultiWOZ)
SAMPLE_ROUTING_DEV = SAMPLES / "routing_dev.jsonl"
SAMPLE_QA_TRAIN = SAMPLES / "qa_train.jsonl"  # = shared qa_mini_train.jsonl (200 answerable + 100 not)
SAMPLE_QA_DEV = SAMPLES / "qa_dev.jsonl"  # = shared qa_mini_dev.jsonl (100 + 50)


def shared(name: str) -> Path:
    """Path of a file in ../shared/data; skips the test with a clear reason when it is missing."""
    p = SHARED_DATA / name
    if not p.exists():
        pytest.skip(f"shared data file missing: {p} (clone the repo beside ../shared or set DENKI_SHARED_DATA)")
    return p


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    """A 4,000-token tokenizer trained on the shipped sample corpus (≈1 s)."""
    from denki.models.text.tokenizer import train_tokenizer

    out = tmp_path_factory.mktemp("tok")
    train_tokenizer([SAMPLE_CORPUS], vocab_size=4000, limit_alphabet=1500, progress=False).save(out)
    return out


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_tokenizer_dir):
    from denki.models.text.tokenizer import JapaneseTokenizer

    return JapaneseTokenizer.load(tiny_tokenizer_dir)


#: tokenizer flavours of public checkpoints: MeCab dictionary × lower-casing (cl-tohoku v3 = unidic-lite cased,
#: bert-base-japanese-whole-word-masking and izumi-lab's ELECTRA = ipadic cased)
FLAVOURS = {
    "unidic-lite": {},
    "ipadic": {"mecab_dic": "ipadic"},
    "unidic-lite-lower": {"do_lower_case": True},
    "ipadic-lower": {"mecab_dic": "ipadic", "do_lower_case": True},
}


@pytest.fixture(scope="session")
def flavour_tokenizer_dirs(tmp_path_factory, tiny_tokenizer_dir) -> dict[str, Path]:
    """One 4,000-token tokenizer per :data:`FLAVOURS` entry, each trained with its own settings on the sample
    corpus (≈1 s each); ``unidic-lite`` is :func:`tiny_tokenizer_dir` itself."""
    from denki.models.text.settings import TokenizerSettings
    from denki.models.text.tokenizer import train_tokenizer

    out = {"unidic-lite": tiny_tokenizer_dir}
    for name, kw in FLAVOURS.items():
        if name not in out:
            d = tmp_path_factory.mktemp(f"tok-{name}")
            train_tokenizer([SAMPLE_CORPUS], vocab_size=4000, limit_alphabet=1500, settings=TokenizerSettings(**kw),
                            progress=False).save(d)
            out[name] = d
    return out


# ---------------------------------------------------------------- tiny fine-tuned bundles and their ONNX exports


def read_jsonl(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def routing_rows(n=60, per_label=None):
    """Rows of the shipped routing sample (``samples/routing_train.jsonl``), every label represented.

    ``per_label`` given: that many rows of each label (shuffled with ``Random(0)`` first), in label-interleaved
    order. Otherwise ``n`` rows taken round-robin over the labels, each label's rows in file order."""
    import random

    by_label: dict[str, list[dict]] = {}
    for r in read_jsonl(SAMPLE_ROUTING_TRAIN):
        by_label.setdefault(r["label"], []).append(r)
    if per_label is not None:
        rng = random.Random(0)
        for lab in sorted(by_label):
            rng.shuffle(by_label[lab])
        n = per_label * len(by_label)
    labels = sorted(by_label)
    out = []
    for i in range(max(len(v) for v in by_label.values())):
        out += [by_label[lab][i] for lab in labels if i < len(by_label[lab])]
    return out[:n]


def inquiry_rows(n=60):
    """Routing-sample rows as ``{"id", "title", "label"}``: the inquiry's subject line in ``title`` — not the
    default field name ``text``, so the serving tests check that the bundle's ``text_field`` is honoured."""
    return [{"id": r["id"], "title": r["text"], "label": r["label"]} for r in routing_rows(n)]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, deadline_s: float, alive, what: str = "server", poll_s: float = 0.2) -> None:
    """Poll ``url + "/readyz"`` until it answers 200; fail when ``deadline_s`` seconds pass (by the clock, not a
    count: a loaded 2-core machine starts servers slowly) or when ``alive()`` turns false (the server thread or
    process died; ``alive`` may raise with its own message, e.g. the process log)."""
    import time

    import httpx

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert alive(), f"{what} died before it became ready"
        assert time.monotonic() < deadline, f"{what} did not become ready within {deadline_s:.0f} s"
        time.sleep(poll_s)


@contextlib.contextmanager
def serve_two_workers(bundle, *extra_args):
    """``denki serve --classifier BUNDLE --workers 2 --backend fp32 --log-level warning EXTRA_ARGS…`` on a free
    port of 127.0.0.1, yielded once it is ready and both workers have answered ``/readyz`` (each with its pid; a
    fresh connection each time, so either worker may accept) or two minutes have passed: the caller asserts
    ``len(server.pids) == 2``. Yields a namespace ``proc``, ``port``, ``url``, ``pids``; on leaving, the server
    gets SIGTERM and ``server.out`` holds its output (stdout and stderr) once it has stopped."""
    import signal
    import subprocess
    import sys
    import time
    import types

    import httpx

    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    proc = subprocess.Popen([sys.executable, "-m", "denki.app.cli", "serve", "--classifier", str(bundle),
                             "--port", str(port), "--workers", "2", "--backend", "fp32", "--log-level", "warning",
                             *extra_args],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    server = types.SimpleNamespace(proc=proc, port=port, url=f"http://127.0.0.1:{port}", pids=set(), out="")
    try:
        wait_ready(server.url, 180, lambda: proc.poll() is None, "denki serve --workers 2", 0.2)
        t_end = time.monotonic() + 120
        while len(server.pids) < 2 and time.monotonic() < t_end:
            r = httpx.get(server.url + "/readyz", timeout=10)
            if r.status_code == 200:
                server.pids.add(r.json()["pid"])
            else:
                time.sleep(0.1)
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            server.out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            server.out, _ = proc.communicate()


def write_split(d, rows: list[dict], n_train: int) -> Path:
    """``rows[:n_train]`` → ``d/train.jsonl``, the rest → ``d/dev.jsonl``; returns ``d``."""
    d = Path(d)
    for name, part in (("train.jsonl", rows[:n_train]), ("dev.jsonl", rows[n_train:])):
        (d / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), encoding="utf-8")
    return d


@pytest.fixture(scope="session")
def classifier_bundle(tmp_path_factory, tiny_tokenizer_dir):
    """A tiny classifier bundle (random init, briefly trained so predictions differ between inputs)."""
    import torch
    from transformers import ElectraForSequenceClassification

    from denki.models.bundle.pytorch import save_bundle
    from denki.models.bundle.presets import electra_config
    from denki.models.text.tokenizer import JapaneseTokenizer

    rows = inquiry_rows()
    labels = sorted({r["label"] for r in rows})
    tok = JapaneseTokenizer.load(tiny_tokenizer_dir)
    cfg = electra_config("tiny", tok.vocab_size, num_labels=len(labels), id2label=dict(enumerate(labels)),
                         label2id={lab: i for i, lab in enumerate(labels)})
    torch.manual_seed(0)
    model = ElectraForSequenceClassification(cfg)
    batch = {k: torch.from_numpy(v) for k, v in tok.pad([tok.encode(r["title"], max_length=64) for r in rows]).items()}
    gold = torch.tensor([labels.index(r["label"]) for r in rows])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(15):  # a few steps: confident, input-dependent logits
        loss = model(**batch, labels=gold).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    task = {"task": "classify", "labels": labels, "human_label": "human", "temperature": 1.0, "threshold": 0.3,
            "offsets": [0.0] * len(labels), "max_length": 64, "text_field": "title", "label_field": "label"}
    out = tmp_path_factory.mktemp("cls") / "bundle"
    save_bundle(model, tiny_tokenizer_dir, out, "classifier", extra_files={
        "task.json": task, "parity_sample.json": {"texts": [r["title"] for r in rows],
                                                  "labels": [r["label"] for r in rows]}})
    return out


@pytest.fixture(scope="session")
def onnx_classifier(classifier_bundle, tmp_path_factory):
    from denki.models.export.onnx import export_bundle

    out = tmp_path_factory.mktemp("onnx") / "cls"
    export_bundle(classifier_bundle, out, optimize="O2", quantize="int8", fp16=True, min_agreement=0.8,
                  max_drop=0.1, progress=False)
    return out



#: texts no tourist desk handles (an IT help desk's, a news title, an encyclopedia question) and one it does
OUT_OF_SCOPE = ["ログインできません", "パスワードを忘れてしまいました。再設定の方法を教えてください",
                "日本代表、W杯予選で3連勝", "光合成で二酸化炭素から作られる物質は何か?"]
HOTEL_TONIGHT = "今夜泊まれるホテルを探しています。空いている宿はありますか?"


@pytest.fixture(scope="session")
def inquiry_router(tiny_tokenizer_dir, tmp_path_factory):
    """A router fine-tuned the CLI's way on the shipped inquiry sample (random-init tiny, 1 epoch, fused with its
    TF-IDF model, out-of-scope rule by default), exported to ONNX (fp32 + O2 + int8): ``DIR/run`` and
    ``DIR/onnx``. Unlike :func:`onnx_classifier` it routes real inquiries (its TF-IDF half does)."""
    from denki.app.cli import main
    from denki.models.bundle.pytorch import random_init_bundle
    from denki.models.export.onnx import export_bundle

    tmp = tmp_path_factory.mktemp("inquiry_router")
    random_init_bundle("tiny", tiny_tokenizer_dir, tmp / "pre", seed=0)
    assert main(["finetune", "classify", "--model", str(tmp / "pre"), "--train", str(SAMPLE_ROUTING_TRAIN),
                 "--dev", str(SAMPLE_ROUTING_DEV), "--out", str(tmp / "run"), "--seeds", "1", "--epochs", "1",
                 "--max-length", "64", "--threads", "1", "--no-progress", "--fusion", "on"]) == 0
    export_bundle(tmp / "run" / "bundle", tmp / "onnx", optimize="O2", quantize="int8", min_agreement=0.8,
                  max_drop=0.1, progress=False)
    return tmp


@pytest.fixture(scope="session")
def qa_bundle(tmp_path_factory, tiny_tokenizer_dir):
    """A tiny QA bundle (random init, untrained) with task.json and a parity sample from samples/qa_dev.jsonl."""
    import torch
    from transformers import ElectraForQuestionAnswering

    from denki.models.bundle.pytorch import save_bundle
    from denki.models.bundle.presets import electra_config
    from denki.models.text.tokenizer import JapaneseTokenizer

    rows = read_jsonl(SAMPLE_QA_DEV)[:24]
    tok = JapaneseTokenizer.load(tiny_tokenizer_dir)
    torch.manual_seed(0)
    model = ElectraForQuestionAnswering(electra_config("tiny", tok.vocab_size)).eval()
    # null_threshold 1e6: this random model always answers, so the demo tests see a highlighted span
    task = {"task": "qa", "null_threshold": 1e6, "max_answer_length": 30, "max_length": 128, "doc_stride": 32,
            "n_best": 20}
    out = tmp_path_factory.mktemp("qa") / "bundle"
    save_bundle(model, tiny_tokenizer_dir, out, "qa", extra_files={
        "task.json": task,
        "parity_sample.json": {"format": 1, "examples": [{"id": r["id"], "question": r["question"],
                                                          "context": r["context"]} for r in rows]}})
    return out


@pytest.fixture(scope="session")
def onnx_qa(qa_bundle, tmp_path_factory):
    from denki.models.export.onnx import export_bundle

    out = tmp_path_factory.mktemp("onnx") / "qa"
    export_bundle(qa_bundle, out, optimize="O2", quantize="int8", min_agreement=0.0, max_drop=1.0, progress=False)
    return out


#: the shipped QA checkpoint: it answers the sample manual's questions (samples/manual.md)
SHIPPED_READER = "denki-electra-tiny-ja-qa"


@pytest.fixture(scope="session")
def shipped_qa_onnx(tmp_path_factory):
    """The shipped QA checkpoint exported as ``denki export --model denki-electra-tiny-ja-qa --optimize O2`` does
    (fp32 + O2; ≈30 s on an idle core); skips when it is not in checkpoints/."""
    from denki.models.export.onnx import export_bundle
    from denki.models.registry.checkpoints import list_checkpoints

    ck = next((c for c in list_checkpoints() if c.get("name") == SHIPPED_READER), None)
    if ck is None:
        pytest.skip(f"{SHIPPED_READER} not shipped in checkpoints/")
    out = tmp_path_factory.mktemp("shipped_qa") / "onnx"
    export_bundle(ck["path"], out, optimize="O2", progress=False)
    return out


def manual_squad_file(tmp_path: Path) -> Path:
    """samples/manual_qa.jsonl as a SQuAD 2.0 file at ``tmp_path/manual.json``, one article per manual (the
    retrieval and ask tests index its contexts and ask its questions)."""
    sq = {"data": []}
    for line in (REPO / "samples" / "manual_qa.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if not sq["data"] or sq["data"][-1]["title"] != r["title"]:
            sq["data"].append({"title": r["title"], "paragraphs": [{"context": r["context"], "qas": []}]})
        sq["data"][-1]["paragraphs"][0]["qas"].append(
            {"id": r["id"], "question": r["question"], "is_impossible": r["is_impossible"],
             "answers": [{"text": t, "answer_start": s} for t, s in zip(r["answers"]["text"],
                                                                         r["answers"]["answer_start"])]})
    path = tmp_path / "manual.json"
    path.write_text(json.dumps(sq, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def cls_pred(onnx_classifier):
    """The fixtures' ONNX classifier loaded once per test module (fp32, one thread)."""
    from denki.serve.runtime import Predictor

    return Predictor(onnx_classifier, backend="fp32", device="cpu", threads=1)


@pytest.fixture(scope="module")
def qa_pred(onnx_qa):
    """The fixtures' ONNX QA model loaded once per test module (fp32, one thread)."""
    from denki.serve.runtime import Predictor

    return Predictor(onnx_qa, backend="fp32", device="cpu", threads=1)
