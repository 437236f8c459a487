"""The Ray scale-out engine (optional extra ``denki[ray]``; skipped when Ray is not installed).

* ``denki serve --ray``: the CLI deploys the HTTP app on a private local Ray instance (its temp dir inside the
  test's), 2 replicas at half a CPU each; the app answers over loopback exactly as the local predictor does, and
  SIGTERM stops it cleanly.
* ``denki classify --engine ray``: a few thousand rows over several files with corrupt lines, on Ray Data with an
  actor pool; every record is accounted for (same reasons as the local engine), ids re-join, labels match.
"""
from __future__ import annotations

import csv
import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")

from denki.models.io.errors import DenkiError  # noqa: E402
from tests.conftest import free_port, inquiry_rows, wait_ready  # noqa: E402

RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "ORT_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1",
           "RAY_DEDUP_LOGS": "0"}


@pytest.fixture
def short_tmp(tmp_path_factory):
    """The Ray instance's temp dir, inside pytest's temporary tree when that path is short enough: Ray's Unix
    socket paths (TEMP/session_…/sockets/plasma_store) must stay under 107 bytes."""
    import shutil

    d = str(tmp_path_factory.mktemp("ray"))
    if len(d) > 40:
        d = tempfile.mkdtemp(prefix="dk-ray-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_serve_on_ray_answers_over_loopback_and_stops_on_sigterm(onnx_classifier, short_tmp, tmp_path):
    """With DENKI_API_KEY set: every replica refuses a request without the key (401), /readyz stays open, and
    /admin/reload answers 501; SIGHUP to `denki serve --ray` after the bundle's symlink was repointed makes every
    replica serve the new version (Ray's reconfigure, in place)."""
    import shutil

    from denki.models.bundle.format import bundle_version, copy_with_task, read_task
    from denki.serve.runtime import Predictor

    src = onnx_classifier / "bundle" if (onnx_classifier / "bundle").is_dir() else onnx_classifier
    shutil.copytree(src, tmp_path / "a")
    copy_with_task(tmp_path / "a", tmp_path / "b", {**read_task(tmp_path / "a"), "note": "b"}, {"test": {}})
    link = tmp_path / "current"
    link.symlink_to(tmp_path / "a")
    port = free_port()
    log = open(tmp_path / "serve.log", "w")
    cmd = [sys.executable, "-m", "denki.app.cli", "serve", "--ray", "--classifier", str(link),
           "--port", str(port), "--num-replicas", "2", "--replica-cpus", "0.5", "--ray-temp-dir", short_tmp,
           "--max-wait-ms", "5"]
    key = "ray-test-key-0123456789"
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, **RAY_ENV, "DENKI_API_KEY": key}, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {key}"}
    try:
        log_tail = lambda: (tmp_path / "serve.log").read_text(errors="replace")[-3000:]  # noqa: E731
        try:
            wait_ready(base, 240, lambda: proc.poll() is None, "denki serve --ray", 1.0)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{log_tail()}") from None
        texts = [r["title"] for r in inquiry_rows(24)]
        # several requests, so both replicas answer some; int8 quantises activations per call, so the local
        # reference scores the same 4-text batches
        pred = Predictor(onnx_classifier, threads=1)
        local, got = [], []
        for i in range(0, len(texts), 4):
            local += pred.classify(texts[i:i + 4])
            assert httpx.post(base + "/v1/classify", json={"texts": texts[i:i + 4]}, timeout=30).status_code == 401
            r = httpx.post(base + "/v1/classify", json={"texts": texts[i:i + 4]}, headers=auth, timeout=30)
            assert r.status_code == 200, r.text
            got += r.json()["results"]
        assert [g["label"] for g in got] == [x["label"] for x in local]
        assert [g["route"] for g in got] == [x["route"] for x in local]
        assert max(abs(g["score"] - x["score"]) for g, x in zip(got, local)) < 1e-4
        # the same limits and JSON errors as the single-machine server
        r = httpx.post(base + "/v1/classify", json={"texts": []}, headers=auth, timeout=30)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
        r = httpx.post(base + "/v1/classify", content=b"x" * (3 * 1024 * 1024),
                       headers={"content-type": "application/json", **auth}, timeout=30)
        assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
        assert httpx.get(base + "/metrics", timeout=30).status_code == 401
        assert "denki_http_requests_total" in httpx.get(base + "/metrics", headers=auth, timeout=30).text
        assert httpx.get(base + "/openapi.json", timeout=30).status_code == 401
        assert "/v1/classify" in httpx.get(base + "/openapi.json", headers=auth, timeout=30).json()["paths"]
        assert httpx.post(base + "/admin/reload", timeout=30).status_code == 401
        r = httpx.post(base + "/admin/reload", headers=auth, timeout=30)
        assert r.status_code == 501 and r.json()["error"]["code"] == "reload_unavailable", r.text
        va, vb = bundle_version(tmp_path / "a"), bundle_version(tmp_path / "b")
        assert r.json()["error"] and _versions(base, auth) == {va}
        (tmp_path / "next").symlink_to(tmp_path / "b")
        os.replace(tmp_path / "next", link)
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 120
        while _versions(base, auth) != {vb}:
            assert time.monotonic() < deadline, f"SIGHUP did not reach every replica\n{log_tail()}"
            time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
        text = (tmp_path / "serve.log").read_text(errors="replace")
        assert "ready at " + base in text and "stopping" in text and "reload generation 1 deployed" in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _versions(base: str, auth: dict, n: int = 8) -> set[str]:
    """The versions /v1/classify answers with over ``n`` requests (both replicas answer some)."""
    out = set()
    for _ in range(n):
        r = httpx.post(base + "/v1/classify", json={"texts": ["料金"]}, headers=auth, timeout=30)
        assert r.status_code == 200, r.text
        out.add(r.json()["model_version"])
    return out


def _write_inputs(d):
    """Three files (JSONL, gzipped JSONL, CSV), 3,000+ records, with corrupt lines of every kind."""
    rows = inquiry_rows(60)
    d.mkdir()
    n_bad = 0
    with open(d / "part-a.jsonl", "wb") as f:
        for i in range(1500):
            r = rows[i % len(rows)]
            f.write(json.dumps({"id": f"a{i}", "title": r["title"]}, ensure_ascii=False).encode() + b"\n")
            if i % 300 == 5:
                f.write(b'{"title": "unterminated\n')
                f.write(b"\xff\xfe not utf-8\n")
                n_bad += 2
    with gzip.open(d / "part-b.jsonl.gz", "wb") as f:
        for i in range(1200):
            r = rows[i % len(rows)]
            f.write(json.dumps({"title": r["title"], "n": i}, ensure_ascii=False).encode() + b"\n")  # no id
            if i % 400 == 9:
                f.write(json.dumps({"title": ""}).encode() + b"\n")
                f.write(json.dumps({"other": 1}).encode() + b"\n")
                f.write(b"[1, 2]\n")
                n_bad += 3
    with open(d / "part-c.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "title", "label"])  # "label" clashes with an added column → denki_ prefix
        for i in range(600):
            r = rows[i % len(rows)]
            w.writerow([f"c{i}", r["title"] + ("\n改行" if i % 100 == 1 else ""), r["label"]])
            if i % 200 == 3:
                f.write("c-bad,too,many,fields\n")
                n_bad += 1
    return 1500 + 1200 + 600 + n_bad, n_bad


def test_classify_on_ray_data_accounts_for_every_row(onnx_classifier, short_tmp, tmp_path):
    from denki.serve.batch import classify_file
    from denki.serve.ray_batch import classify_files_ray

    n_in, n_bad = _write_inputs(tmp_path / "in")
    out = tmp_path / "out"
    r = classify_files_ray(onnx_classifier, str(tmp_path / "in" / "part-*"), out, batch_size=64, actors=2,
                           cpus_per_actor=0.5, temp_dir=short_tmp, progress=False)
    assert r["rows_in"] == n_in and r["rows_err"] == n_bad and r["rows_out"] == n_in - n_bad
    assert r["actors"] == 2 and (out / "summary.json").is_file()
    assert sorted(p.name for p in out.iterdir()) == [
        "part-a.jsonl", "part-a.jsonl.errors.jsonl", "part-b.jsonl.errors.jsonl", "part-b.jsonl.gz",
        "part-c.csv", "part-c.csv.errors.jsonl", "summary.json"]  # no partial files left

    # each file matches the single-machine engine: same rows, same labels, same error lines and reasons
    for name, local_out in (("part-a.jsonl", "a.jsonl"), ("part-b.jsonl.gz", "b.jsonl"), ("part-c.csv", "c.csv")):
        ref = tmp_path / "local" / local_out
        ref.parent.mkdir(exist_ok=True)
        loc = classify_file(onnx_classifier, tmp_path / "in" / name, ref, batch_size=64, progress=False)
        per = next(f for f in r["files"] if f["input"].endswith(name))
        assert (per["rows_out"], per["rows_err"]) == (loc["rows_out"], loc["rows_err"])
        ray_err = [json.loads(x) for x in (out / (name.removesuffix(".gz") + ".errors.jsonl")).read_text(
            encoding="utf-8").splitlines()]
        loc_err = [json.loads(x) for x in open(loc["errors"], encoding="utf-8")]
        assert [(e["line"], e["reason"]) for e in ray_err] == [(e["line"], e["reason"]) for e in loc_err]
        assert all(e["file"] == name and e["id"] == f"{name}:{e['line']}" for e in ray_err)
        if name.endswith(".csv"):
            got = list(csv.DictReader(open(out / name, encoding="utf-8", newline="")))
            want = list(csv.DictReader(open(ref, encoding="utf-8", newline="")))
            key = "denki_label"
            assert "label" in got[0] and got[0]["label"] != ""  # the input column is kept, not overwritten
        else:
            opener = gzip.open if name.endswith(".gz") else open
            got = [json.loads(x) for x in opener(out / name, "rt", encoding="utf-8")]
            want = [json.loads(x) for x in open(ref, encoding="utf-8")]
            key = "label"
        assert [g[key] for g in got] == [w[key] for w in want]  # input order kept
        ids = [g["id"] for g in got]
        assert len(set(ids)) == len(ids)
        if name.startswith("part-b"):  # no id in the records: FILE:LINE, which points back at the source line
            assert ids[0] == "part-b.jsonl.gz:1" and all(i.startswith("part-b.jsonl.gz:") for i in ids)
        else:
            assert ids[:2] == [f"{name[5]}0", f"{name[5]}1"]


def test_classify_engine_ray_cli_errors(onnx_classifier, tmp_path, capsys):
    from denki.app.cli import main
    from denki.serve.ray_batch import expand_inputs

    assert main(["classify", "--engine", "ray", "--model", str(onnx_classifier), "--input",
                 str(tmp_path / "nothing-*.jsonl"), "--output", str(tmp_path / "o")]) == 2
    assert "matches no file" in capsys.readouterr().err
    (tmp_path / "x.jsonl").write_text('{"title": "a"}\n', encoding="utf-8")
    assert main(["classify", "--engine", "ray", "--resume", "--model", str(onnx_classifier), "--input",
                 str(tmp_path / "x.jsonl"), "--output", str(tmp_path / "o")]) == 2
    assert "--resume is for --engine local" in capsys.readouterr().err
    assert main(["classify", "--engine", "ray", "--model", str(onnx_classifier), "--input",
                 str(tmp_path / "x.jsonl"), "--output", str(tmp_path)]) == 2
    assert "would replace it" in capsys.readouterr().err
    (tmp_path / "y.txt").write_text("a\n", encoding="utf-8")
    with pytest.raises(DenkiError, match="unknown file type"):
        expand_inputs(str(tmp_path / "y.txt"))


def test_ray_modules_stay_torch_free():
    """serve/ must not import torch at run time, Ray or not (the replicas and actors load only onnxruntime)."""
    code = ("import sys, denki.serve.ray_batch, denki.serve.ray_serve, denki.serve.ray_setup, ray.serve, ray.data; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **RAY_ENV})
    assert r.returncode == 0, r.stderr
