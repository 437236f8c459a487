"""Model reloads (issue 62): POST /admin/reload and SIGHUP swap a checked bundle in without dropping a request;
a broken, tampered or wrong-task bundle is refused and the old model keeps serving; with two workers a reload that
lands on one reaches both; every answer says which version computed it."""
import json
import os
import shutil
import signal
import sys
import threading
import time

import httpx
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from .conftest import serve_two_workers  # noqa: E402
from denki.models.bundle.format import copy_with_task, read_task  # noqa: E402
from denki.serve.http import ServerSettings, create_app  # noqa: E402
from denki.serve.reload import ReloadBoard, check_parity, load_checked, model_version  # noqa: E402
from denki.serve.runtime import Predictor  # noqa: E402

BODY = {"texts": ["料金について教えてください"]}


def _bundle_dir(onnx_out) -> str:
    return str(onnx_out / "bundle") if (onnx_out / "bundle").is_dir() else str(onnx_out)


@pytest.fixture()
def versions_ab(onnx_classifier, tmp_path):
    """Two real versions of one router (B: a copy with another routing threshold, manifest rewritten) and a
    symlink ``current`` pointing at A, as an operator would deploy them."""
    a = tmp_path / "router-a"
    shutil.copytree(_bundle_dir(onnx_classifier), a)
    task = read_task(a)
    copy_with_task(a, tmp_path / "router-b", {**task, "note": "version b"}, {"reload_test": {"from": "a"}})
    link = tmp_path / "current"
    link.symlink_to(a)
    return a, tmp_path / "router-b", link


def _repoint(link, target) -> None:
    tmp = link.with_name(link.name + ".new")
    tmp.symlink_to(target)
    os.replace(tmp, link)  # atomic, as `ln -sfn` is not


def _app(link, **kw):
    p = Predictor(str(link), backend="fp32", threads=1)
    return create_app(classifier=p, settings=ServerSettings(**kw), sources={"classifier": str(link)},
                      load_kw={"backend": "fp32", "threads": 1})


def test_reload_follows_the_symlink_and_every_answer_names_its_version(versions_ab, tmp_path):
    a, b, link = versions_ab
    va, vb = model_version(Predictor(a, threads=1)), model_version(Predictor(b, threads=1))
    assert va != vb
    app = _app(link, human_log=str(tmp_path / "human.jsonl"))
    assert app.state.human_log.model == "router-a"  # the version's folder, not the link's name
    with TestClient(app) as c:
        assert c.post("/v1/classify", json=BODY).json()["model_version"] == va
        r = c.post("/admin/reload")  # same target: reloads and stays on A
        assert r.status_code == 200 and r.json()["model_versions"] == {"classifier": va}, r.text
        _repoint(link, b)
        r = c.post("/admin/reload")
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["model_versions"] == {"classifier": vb} and out["workers"][0]["pid"] == os.getpid()
        assert c.post("/v1/classify", json=BODY).json()["model_version"] == vb
        models = c.get("/v1/models").json()
        assert models["model_versions"] == {"classifier": vb} and models["reload"]["last"]["model_versions"]
        metrics = c.get("/metrics").text
        assert f'denki_model_info{{model="classifier",version="{vb}"}} 1.0' in metrics
        assert f'denki_model_info{{model="classifier",version="{va}"}} 0.0' in metrics
        assert app.state.human_log.model == "router-b"  # the human log names the router that routes now


@pytest.mark.parametrize("damage", ["tampered", "wrong_task", "missing", "garbage_weights"])
def test_a_bad_bundle_is_refused_and_the_old_one_keeps_serving(versions_ab, onnx_qa, tmp_path, damage):
    a, b, link = versions_ab
    va = model_version(Predictor(a, threads=1))
    bad = tmp_path / "bad"
    if damage == "wrong_task":
        bad = onnx_qa
    elif damage == "tampered":  # a file changed after export: its sha256 no longer matches the manifest
        shutil.copytree(b, bad)
        with open(bad / "task.json", "a", encoding="utf-8") as f:
            f.write(" ")
    elif damage == "garbage_weights":  # a model file replaced and the manifest rewritten to match it
        shutil.copytree(b, bad)
        (bad / "model.onnx").write_bytes(b"not an onnx graph")
        copy_with_task(bad, tmp_path / "bad2", read_task(bad), {})
        bad = tmp_path / "bad2"
    with TestClient(_app(link)) as c:
        _repoint(link, bad)  # "missing": a target that does not exist
        r = c.post("/admin/reload")
        assert r.status_code == 409, r.text
        err = r.json()["error"]
        assert err["code"] == "reload_refused" and "refused" in err["message"], err
        assert err["details"] == {"serving": {"classifier": va}}
        ok = c.post("/v1/classify", json=BODY)
        assert ok.status_code == 200 and ok.json()["model_version"] == va


def test_check_parity_refuses_a_model_that_disagrees_with_its_sample(onnx_qa, tmp_path):
    """The QA check compares null-score differences with the ones the bundle recorded (fine-tuning writes PyTorch's
    answers into parity_sample.json; here the fp32 graph's stand in): its own figures pass, figures that do not
    belong to the model (shifted far) refuse it."""
    d = tmp_path / "qa"
    shutil.copytree(_bundle_dir(onnx_qa), d)
    sample = json.loads((d / "parity_sample.json").read_text(encoding="utf-8"))
    pred = Predictor(d, backend="fp32", threads=1)
    results = pred.predict([(e["question"], e["context"]) for e in sample["examples"]])

    def write(shift):
        for e, r in zip(sample["examples"], results):
            e["expected"] = {"null_score_diff": r["null_score_diff"] + shift}
        (d / "parity_sample.json").write_text(json.dumps(sample, ensure_ascii=False), encoding="utf-8")

    write(0.0)
    assert check_parity(pred, "qa") == {"n": 16, "agreement": 1.0}
    write(5.0)
    with pytest.raises(Exception, match="agrees with its own parity sample on 0% of 16"):
        check_parity(pred, "qa")


def test_a_batch_in_flight_finishes_on_the_old_model(versions_ab):
    """A reload during a model call: that call's answer comes from (and names) the old version; the next request
    gets the new one. The first call is held inside the model until the reload has swapped."""
    a, b, link = versions_ab
    app = _app(link, batching="off")
    served = app.state.served
    old = served.loaded["classifier"].predictor
    entered, release = threading.Event(), threading.Event()
    real = old.classify

    def held(texts, **kw):
        entered.set()
        assert release.wait(60)
        return real(texts, **kw)

    old.classify = held
    with TestClient(app) as c:
        va = served.versions["classifier"]
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", c.post("/v1/classify", json=BODY)))
        t.start()
        assert entered.wait(60)
        _repoint(link, b)
        r = c.post("/admin/reload")
        assert r.status_code == 200, r.text
        vb = r.json()["model_versions"]["classifier"]
        release.set()
        t.join(60)
        assert out["r"].status_code == 200 and out["r"].json()["model_version"] == va
        assert c.post("/v1/classify", json=BODY).json()["model_version"] == vb != va


def test_reload_without_keys_is_for_local_clients_only(versions_ab):
    a, b, link = versions_ab
    with TestClient(_app(link), client=("10.1.2.3", 5555)) as c:
        r = c.post("/admin/reload")
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"


def test_load_checked_names_the_bundle(tmp_path):
    with pytest.raises(Exception, match="classifier bundle .*nowhere.*refused"):
        load_checked("classifier", str(tmp_path / "nowhere"), {})


def test_board_drops_dead_workers(tmp_path):
    board = ReloadBoard(tmp_path)
    board.report(0, {"classifier": "x"})
    (tmp_path / "workers" / "999999999.json").write_text(json.dumps({"pid": 999999999, "generation": 0}))
    assert [w["pid"] for w in board.workers()] == [os.getpid()]
    assert board.publish({"classifier": "/b"}) == 1 and board.publish({"classifier": "/c"}) == 2
    assert board.current()["paths"] == {"classifier": "/c"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="two uvicorn workers: Linux CI")
def test_two_workers_reload_together_by_request_and_by_sighup(versions_ab):
    """`denki serve --workers 2` on a symlink: POST /admin/reload (landing on one worker) answers once both serve
    B; SIGHUP to the supervisor takes both back to A; a tampered target is refused and both keep A."""
    a, b, link = versions_ab
    va, vb = model_version(Predictor(a, threads=1)), model_version(Predictor(b, threads=1))
    with serve_two_workers(link) as server:
        assert len(server.pids) == 2, f"only worker(s) {server.pids} answered"
        _repoint(link, b)
        r = httpx.post(server.url + "/admin/reload", timeout=120)
        assert r.status_code == 200, r.text
        workers = r.json()["workers"]
        assert {w["pid"] for w in workers} == server.pids and {w["versions"]["classifier"] for w in workers} == {vb}
        assert _versions_seen(server) == {vb}
        _repoint(link, a)
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while _versions_seen(server) != {va}:
            assert time.monotonic() < deadline, "SIGHUP did not reach both workers"
            time.sleep(0.3)
        bad = link.with_name("bad")
        shutil.copytree(b, bad)
        (bad / "task.json").write_text("{}", encoding="utf-8")
        _repoint(link, bad)
        r = httpx.post(server.url + "/admin/reload", timeout=120)
        assert r.status_code == 409, r.text
        assert _versions_seen(server) == {va}
    assert server.proc.returncode == 0, server.out[-3000:]


def _versions_seen(server, n: int = 12) -> set[str]:
    """The versions answering /v1/classify over ``n`` fresh connections (both workers answer some)."""
    seen = set()
    for _ in range(n):
        r = httpx.post(server.url + "/v1/classify", json=BODY, timeout=30)
        assert r.status_code == 200, r.text
        seen.add(r.json()["model_version"])
    return seen
