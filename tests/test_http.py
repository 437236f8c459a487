"""`denki serve`: the HTTP API (serve/http.py), the micro-batcher (serve/microbatch.py) and the command.

Endpoint tests run the ASGI app in process (TestClient / httpx ASGITransport); real uvicorn on 127.0.0.1 checks
graceful shutdown and that a client disconnect cancels queued work, and one test starts `denki serve --workers 2`
(one port, two processes, /metrics summed over both). Admission control: the deadline, the refusal on arrival from
the measured service rate (before the body is even parsed), `--batching auto`'s rule. The OpenAPI schema is fuzzed
with schemathesis: no input may cause a 5xx.
"""
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")

from denki.models.io.errors import DenkiError  # noqa: E402
from denki.serve.http import Metrics, ServerSettings, create_app  # noqa: E402
from denki.serve.microbatch import MicroBatcher, QueueFull, SharedBacklog, resolve_batching  # noqa: E402

from .conftest import free_port, serve_two_workers, wait_ready  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def client(cls_pred, qa_pred):
    from fastapi.testclient import TestClient

    app = create_app(classifier=cls_pred, qa=qa_pred, settings=ServerSettings(max_texts=8, max_text_chars=200,
                                                                              max_body_bytes=20_000, max_pairs=3))
    with TestClient(app) as c:
        yield c


class Gated:
    """Wraps a predictor; its model calls block until ``gate`` is set (to hold requests in flight)."""

    def __init__(self, p):
        self.p, self.kind, self.dir = p, p.kind, p.dir
        self.gate = threading.Event()
        self.entered = threading.Event()  # a model call is waiting at the gate
        self.calls: list[int] = []

    def describe(self):
        return "gated " + self.p.describe()

    def classify(self, texts, batch_size=32):
        self.entered.set()
        assert self.gate.wait(20), "test gate never opened"
        self.calls.append(len(texts))
        return self.p.classify(texts, batch_size=batch_size)


# ------------------------------------------------------------------------------------------------- endpoints
def test_classify_matches_predictor(client, cls_pred):
    texts = ["ログインできません", "料金の請求について", ""]
    r = client.post("/v1/classify", json={"texts": texts})
    assert r.status_code == 200, r.text
    got = r.json()["results"]
    want = cls_pred.classify(texts)
    assert [g["label"] for g in got] == [w["label"] for w in want]
    assert [g["route"] for g in got] == [w["route"] for w in want]
    for g, w in zip(got, want):
        assert g["score"] == pytest.approx(w["score"], abs=1e-6)
        assert set(g["scores"]) == set(w["scores"]) and sum(g["scores"].values()) == pytest.approx(1.0, abs=1e-4)


def test_answer_and_batch(client, qa_pred):
    q, ctx = "会議は何時から?", "定例会議は毎週月曜の10時から第二会議室で始まる。"
    r = client.post("/v1/answer", json={"question": q, "context": ctx})
    assert r.status_code == 200, r.text
    a = r.json()
    want = qa_pred.answer(q, ctx)
    assert a["answer"] == want["answer"] and a["has_answer"] == want["has_answer"]
    # selective answering's fields: this fixture's bundle has no calibration (confidence null), so it never abstains
    assert a["reason"] == want["reason"] == ("answer" if a["has_answer"] else "no_answer")
    assert a["confidence"] is None and a["abstained"] is False
    if a["has_answer"]:
        assert ctx[a["start"]:a["end"]] == a["answer"]
    rb = client.post("/v1/answer/batch", json={"items": [{"question": q, "context": ctx},
                                                         {"question": "場所は?", "context": ctx}]})
    assert rb.status_code == 200, rb.text
    res = rb.json()["results"]
    assert len(res) == 2 and res[0]["answer"] == a["answer"]
    assert res[1]["answer"] == qa_pred.answer("場所は?", ctx)["answer"]


@pytest.mark.parametrize("body,status,code", [
    ({"texts": []}, 422, "invalid_request"),
    ({"texts": ["a"] * 9}, 422, "too_many_items"),
    ({"texts": ["あ" * 201]}, 422, "invalid_request"),
    ({"texts": "not a list"}, 422, "invalid_request"),
    ({"texts": [1, 2]}, 422, "invalid_request"),
    ({"text": ["a"]}, 422, "invalid_request"),
])
def test_classify_limits(client, body, status, code):
    r = client.post("/v1/classify", json=body)
    assert r.status_code == status
    err = r.json()["error"]
    assert err["code"] == code and err["message"]


def test_malformed_bodies(client):
    h = {"content-type": "application/json"}
    r = client.post("/v1/classify", content=b'{"texts": ["\\ud800"]}', headers=h)  # lone surrogate
    assert r.status_code == 422 and "surrogate" in r.json()["error"]["message"]
    r = client.post("/v1/classify", content=b"{not json", headers=h)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
    r = client.post("/v1/classify", content=b"x" * 30_000, headers=h)  # over max_body_bytes (Content-Length)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

    def chunks():  # no Content-Length: refused while streaming
        for _ in range(10):
            yield b"x" * 5_000

    r = client.post("/v1/classify", content=chunks(), headers=h)
    assert r.status_code == 413
    r = client.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_answer_limits(client):
    ok_ctx = "定例会議は毎週月曜の10時から始まる。"
    for body in ({"question": "   ", "context": ok_ctx}, {"question": "何時?", "context": ""},
                 {"question": "何時?"}, {"items": []}):
        r = client.post("/v1/answer", json=body)
        assert r.status_code == 422, body
    # blank as str.strip() sees it (U+001E is whitespace to Python, not to regex \s): rejected by the schema
    # itself, so a schema-valid request is never refused later (a schemathesis finding)
    r = client.post("/v1/answer", json={"question": "何時?", "context": "\x1e\x1f "})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", r.text
    # a question that leaves no room for the context: refused by the tokenizer → 422, not 500
    r = client.post("/v1/answer", json={"question": "会議" * 100, "context": ok_ctx})
    assert r.status_code == 422 and r.json()["error"]["code"] == "unprocessable", r.text
    r = client.post("/v1/answer/batch", json={"items": [{"question": "何時?", "context": ok_ctx}] * 4})
    assert r.status_code == 422 and r.json()["error"]["code"] == "too_many_items"  # 4 > max_pairs=3


def test_bad_request_in_a_merged_batch_fails_alone(qa_pred):
    """A refused question merged into a batch with good ones: only its own request gets the 422."""
    app = create_app(qa=qa_pred, settings=ServerSettings(batching="on", max_batch=8, max_wait_ms=300,
                                                         max_queue_ms=10_000))
    ctx = "定例会議は毎週月曜の10時から第二会議室で始まる。"
    bodies = [{"question": "何時?", "context": ctx}, {"question": "会議" * 100, "context": ctx},
              {"question": "どこ?", "context": ctx}]

    async def main():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
                return await asyncio.gather(*[c.post("/v1/answer", json=b) for b in bodies])

    rs = asyncio.run(main())
    assert [r.status_code for r in rs] == [200, 422, 200]
    assert rs[0].json()["answer"] == qa_pred.answer("何時?", ctx)["answer"]
    assert app.state.metrics.batch_requests["qa"].counts[2] == 1  # the three were merged into one batch (le=4)


def test_health_ready_metrics_openapi(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    rd = client.get("/readyz")
    assert rd.status_code == 200 and set(rd.json()["models"]) == {"classifier", "qa"}
    client.post("/v1/classify", json={"texts": ["a", "b"]})
    m = client.get("/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    # the exposition, read back with prometheus_client's own parser (label order and number format are its own)
    from prometheus_client.parser import text_string_to_metric_families

    samples = [(smp.name, smp.labels, smp.value) for fam in text_string_to_metric_families(m.text)
               for smp in fam.samples]
    names = {n for n, _, _ in samples}

    def value(name: str, **labels) -> float:
        return next(v for n, lab, v in samples if n == name and lab == labels)

    assert value("denki_http_requests_total", endpoint="/v1/classify", method="POST", status="200") >= 1
    assert value("denki_http_errors_total", endpoint="/v1/classify", code="too_many_items") >= 1
    assert value("denki_batch_size_items_bucket", model="classifier", le="+Inf") >= 1
    assert {"denki_http_in_flight", "denki_queue_items"} <= names
    assert not [n for n in names if n.endswith("_created")]  # the same series as before prometheus_client
    # histogram buckets are cumulative and end at _count
    buckets = sorted((float(lab["le"]), v) for n, lab, v in samples
                     if n == "denki_http_request_duration_seconds_bucket" and lab["endpoint"] == "/v1/classify")
    counts = [v for _, v in buckets]
    assert len(counts) == 12 and counts == sorted(counts) and counts[-1] > 0
    assert value("denki_http_request_duration_seconds_count", endpoint="/v1/classify") == counts[-1]
    spec = client.get("/openapi.json").json()
    assert {"/v1/classify", "/v1/answer", "/v1/answer/batch", "/healthz", "/readyz", "/metrics"} <= set(spec["paths"])
    assert spec["paths"]["/v1/classify"]["post"]["requestBody"]["content"]["application/json"]
    assert client.get("/docs").status_code == 200


def _manifest_version(bundle_dir) -> str:
    import hashlib

    return hashlib.sha256((Path(bundle_dir) / "manifest.json").read_bytes()).hexdigest()[:12]


def test_model_version_on_every_answer(client, onnx_classifier, onnx_qa):
    """Every model endpoint's JSON answer carries the served bundle's version at its top level (the sha256 of its
    manifest.json, 12 hex characters), as /v1/models, the OpenAPI schema and /metrics (denki_model_info) do."""
    from prometheus_client.parser import text_string_to_metric_families

    want = {"classifier": _manifest_version(onnx_classifier), "qa": _manifest_version(onnx_qa)}
    assert want["classifier"] != want["qa"] and all(len(v) == 12 for v in want.values())
    ctx = "定例会議は毎週月曜の10時から始まる。"
    answers = {"classifier": [client.post("/v1/classify", json={"texts": ["ログインできません"]})],
               "qa": [client.post("/v1/answer", json={"question": "何時から?", "context": ctx}),
                      client.post("/v1/answer/batch", json={"items": [{"question": "何時から?", "context": ctx}]})]}
    for model, rs in answers.items():
        for r in rs:
            assert r.status_code == 200 and r.json()["model_version"] == want[model], r.text
    assert "model_version" not in answers["qa"][1].json()["results"][0]  # once per answer, at the top
    assert client.get("/v1/models").json()["model_versions"] == want
    spec = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("ClassifyResponse", "AnswerResponse", "AnswerBatchResponse"):
        assert "model_version" in spec[name]["required"], name
    text = client.get("/metrics").text
    info = {(s.labels["model"], s.labels["version"]): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "denki_model_info"}
    assert info == {(m, v): 1.0 for m, v in want.items()}


def test_classifier_only_server_has_no_qa_routes(cls_pred, qa_pred):
    from fastapi.testclient import TestClient

    with TestClient(create_app(classifier=cls_pred)) as c:
        assert c.post("/v1/answer", json={"question": "a", "context": "b"}).status_code == 404
    with pytest.raises(DenkiError):
        create_app()
    with pytest.raises(DenkiError, match="not an ONNX classifier"):
        create_app(classifier=qa_pred)


# ---------------------------------------------------------------------------------------------- micro-batching
async def _concurrent_classify(app, n: int, texts_per_request: int = 1) -> list[httpx.Response]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            return await asyncio.gather(*[
                c.post("/v1/classify", json={"texts": [f"問い合わせ {i}"] * texts_per_request}) for i in range(n)])


def test_microbatching_merges_concurrent_requests(cls_pred):
    on = create_app(classifier=cls_pred, settings=ServerSettings(batching="on", max_batch=8, max_wait_ms=200,
                                                                 max_queue_ms=10_000))
    rs = asyncio.run(_concurrent_classify(on, 16))
    assert all(r.status_code == 200 for r in rs)
    h = on.state.metrics.batch_requests["classifier"]
    assert h.count < 16 and h.sum == 16  # fewer model calls than requests
    items = on.state.metrics.batch_items["classifier"]
    assert sum(items.counts[len([b for b in items.buckets if b < 8]) + 1:]) == 0  # never more than max_batch
    # the same texts give the same answer whether batched or alone
    assert rs[3].json()["results"][0]["label"] == cls_pred.classify(["問い合わせ 3"])[0]["label"]

    off = create_app(classifier=cls_pred, settings=ServerSettings(batching=False, max_wait_ms=200,
                                                                  max_queue_ms=10_000))
    rs = asyncio.run(_concurrent_classify(off, 6))
    assert all(r.status_code == 200 for r in rs)
    h = off.state.metrics.batch_requests["classifier"]
    assert h.count == 6 and h.sum == 6  # one request, one model call


def test_backpressure_503_with_retry_after(cls_pred):
    gated = Gated(cls_pred)
    # the memory backstop alone (no deadline): two requests of 2 items fill max_queue=4
    app = create_app(classifier=gated, settings=ServerSettings(max_batch=2, max_wait_ms=0, max_queue=4,
                                                               max_queue_ms=None, retry_after_s=3))

    async def scenario():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
                held = [asyncio.create_task(c.post("/v1/classify", json={"texts": ["a", "b"]})) for _ in range(2)]
                await asyncio.sleep(0.3)  # both admitted: 4 items pending = max_queue
                r = await c.post("/v1/classify", json={"texts": ["c"]})
                gated.gate.set()
                return r, await asyncio.gather(*held)

    rejected, held = asyncio.run(scenario())
    assert rejected.status_code == 503 and rejected.headers["retry-after"] == "3"
    assert rejected.json()["error"]["code"] == "overloaded"
    assert rejected.json()["error"]["details"]["reason"] == "queue_full"
    assert [r.status_code for r in held] == [200, 200]


def _serve_in_thread(app):
    """Run ``app`` under uvicorn in a daemon thread on a free loopback port, once ready → ``(server, thread, port,
    url)``; the test stops it with ``server.should_exit = True``."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=10))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, 60, th.is_alive, poll_s=0.05)
    return server, th, port, url


def test_microbatcher_units():
    calls = []

    def fn(items):
        calls.append(list(items))
        if "bad" in items:
            raise DenkiError("bad item")
        return [x.upper() for x in items]

    async def main():
        b = MicroBatcher(fn, max_batch=4, max_wait_ms=100, max_queue=6)
        await b.start()
        res = await asyncio.gather(b.submit(["a", "b"]), b.submit(["c"]), b.submit(["d", "e"]),
                                   b.submit(["bad"]), return_exceptions=True)
        assert res[0] == ["A", "B"] and res[1] == ["C"] and res[2] == ["D", "E"]
        assert isinstance(res[3], DenkiError)  # only the bad request fails
        assert all(len(c) <= 4 for c in calls)  # requests are never split, batches never exceed max_batch
        assert b.pending == 0
        await b.close()
        with pytest.raises(Exception, match="shutting down"):
            await b.submit(["x"])

    asyncio.run(main())

    gate = threading.Event()

    async def full():
        b = MicroBatcher(lambda xs: gate.wait(10) and xs, max_batch=2, max_wait_ms=0, max_queue=3)
        await b.start()
        t = asyncio.create_task(b.submit(["a", "b", "c"]))
        await asyncio.sleep(0.05)
        with pytest.raises(QueueFull):
            await b.submit(["d"])
        gate.set()
        assert await t == ["a", "b", "c"]  # larger than max_batch: runs as a batch of its own
        await b.close()

    asyncio.run(full())


# -------------------------------------------------------------------------------------------- admission control
def test_deadline_sheds_a_request_that_cannot_start_in_time(cls_pred):
    """A request queued behind a model call that does not end is answered 503 at its deadline (not when the call
    ends); the one already running is not shed, whatever the clock says."""
    gated = Gated(cls_pred)
    app = create_app(classifier=gated, settings=ServerSettings(batching="off", max_queue_ms=150, retry_after_s=2))

    async def scenario():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
                running = asyncio.create_task(c.post("/v1/classify", json={"texts": ["a"]}))
                while not gated.entered.is_set():
                    await asyncio.sleep(0.01)
                t0 = time.monotonic()
                queued = await c.post("/v1/classify", json={"texts": ["b", "c"]})
                waited = time.monotonic() - t0
                pending_after = app.state.batchers["classifier"].pending
                gated.gate.set()
                return queued, waited, pending_after, await running

    queued, waited, pending_after, running = asyncio.run(scenario())
    assert queued.status_code == 503 and queued.headers["retry-after"] == "2"
    err = queued.json()["error"]
    assert err["code"] == "overloaded" and err["details"]["reason"] == "deadline", err
    assert 0.1 <= waited < 5.0  # answered at its deadline (150 ms; slack for a loaded machine), not never
    assert pending_after == 1  # its two texts left the queue; only the running request's one remains
    assert running.status_code == 200
    assert gated.calls == [1]  # the shed request never reached the model
    assert app.state.metrics.shed_count("classifier", "deadline") == 1
    assert app.state.metrics.queue_wait["classifier"].count == 1  # admitted requests' waits are recorded


@pytest.mark.parametrize("exc,held", [("overloaded", True), ("shutting_down", False)])
def test_an_overload_refusal_is_held_a_shutdown_refusal_is_not(exc, held):
    """The outer layer holds an overload 503 for shed_delay (× 0.5–1: a retry storm gets one try per hold per
    connection); a 503 because the server is stopping goes out at once."""
    from denki.serve.http_admission import ObserveAndLimit
    from denki.serve.microbatch import ShuttingDown

    async def never(scope, receive, send):  # the app behind: admission refuses before it is reached
        raise AssertionError("admitted")

    def admit(path, method):
        raise QueueFull("busy") if exc == "overloaded" else ShuttingDown("stopping")

    layer = ObserveAndLimit(never, Metrics(), 1024, {"/v1/classify"}, admit=admit, shed_delay_s=0.4)

    async def one():
        transport = httpx.ASGITransport(app=layer)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            t0 = time.monotonic()
            r = await c.post("/v1/classify", json={"texts": ["a"]})
            return r, time.monotonic() - t0

    r, took = asyncio.run(one())
    assert r.status_code == 503 and r.json()["error"]["code"] == exc and r.headers["retry-after"] == "1"
    assert (took >= 0.19) if held else (took < 0.19), took


def test_shed_delay_is_checked():
    with pytest.raises(DenkiError, match="shed_delay_ms must be 0–1000"):
        ServerSettings(shed_delay_ms=1500)
    assert ServerSettings().shed_delay_ms == 100  # experiments/serve-faults, rule 2


def test_refused_on_arrival_from_the_measured_rate():
    """Once model calls were measured, a request that would wait past the deadline is refused at once."""
    gate = threading.Event()
    per_item = {"s": 0.02}

    def fn(items):
        gate.wait(10)
        time.sleep(per_item["s"] * len(items))
        return list(items)

    async def main():
        shed = []
        b = MicroBatcher(fn, max_batch=4, max_wait_ms=0, max_queue=10_000, max_queue_ms=1000, enabled=False,
                         on_shed=shed.append)
        await b.start()
        gate.set()
        for _ in range(4):  # the first call is onnxruntime's warm-up and not counted
            await b.submit(["x"])
        spi = b.seconds_per_item
        assert spi is not None and spi >= 0.015
        gate.clear()
        per_item["s"] = 0.0
        running = asyncio.create_task(b.submit(["a"]))
        await asyncio.sleep(0.05)
        big = asyncio.create_task(b.submit(["q"] * 200))  # 200 items × ≥ 15 ms ≥ 3 s of queue ahead
        await asyncio.sleep(0.05)
        assert b.estimated_wait() > 1.0
        t0 = time.monotonic()
        with pytest.raises(QueueFull) as exc:
            await b.submit(["late"])
        assert time.monotonic() - t0 < 0.5  # refused at once, not after the 1 s deadline
        assert exc.value.reason == "estimate" and exc.value.details["estimated_wait_ms"] > 1000
        assert shed == ["estimate"]
        gate.set()
        await asyncio.gather(running, big, return_exceptions=True)
        await b.close()

    asyncio.run(main())


def test_shared_backlog_refuses_a_request_to_an_idle_model_while_the_cores_are_busy():
    """Batchers sharing a process's cores admit from the work queued for all of them: with the router's queue
    seconds deep, a QA request (its own queue empty) is refused on arrival too; alone it would be admitted."""
    gate = threading.Event()

    def slow(items):
        gate.wait(10)
        time.sleep(0.02 * len(items))
        return list(items)

    async def main():
        backlog = SharedBacklog()
        shed = []
        router = MicroBatcher(slow, max_batch=4, max_wait_ms=0, max_queue=10_000, max_queue_ms=1000, enabled=False,
                              backlog=backlog, name="router")
        qa = MicroBatcher(lambda xs: list(xs), max_batch=4, max_wait_ms=0, max_queue=10_000, max_queue_ms=1000,
                          enabled=False, backlog=backlog, name="qa", on_shed=shed.append)
        lone = MicroBatcher(lambda xs: list(xs), max_batch=4, max_wait_ms=0, max_queue=10_000, max_queue_ms=1000,
                            enabled=False, name="lone")  # the same model without the shared backlog
        for b in (router, qa, lone):
            await b.start()
        gate.set()
        for _ in range(4):  # measure the router's service time (the first call is not counted)
            await router.submit(["x"])
        gate.clear()
        running = asyncio.create_task(router.submit(["a"]))
        await asyncio.sleep(0.05)
        queued = asyncio.create_task(router.submit(["q"] * 200))  # ≥ 200 × 15 ms = 3 s of router work waits
        await asyncio.sleep(0.05)
        assert backlog.busy() and qa.estimated_wait() > 1.0 and lone.estimated_wait() == 0.0
        with pytest.raises(QueueFull) as exc:
            await qa.submit(["question"])
        assert exc.value.reason == "estimate" and shed == ["estimate"]
        assert await lone.submit(["question"]) == ["question"]
        gate.set()
        await asyncio.gather(running, queued, return_exceptions=True)
        assert not backlog.busy()
        assert await qa.submit(["question"]) == ["question"]  # the cores are free again: admitted
        for b in (router, qa, lone):
            await b.close()

    asyncio.run(main())


def test_late_arrival_is_refused_only_when_work_is_waiting():
    """A request that spent its whole deadline before reaching the queue (a slow upload, a stalled process) is
    served when the batcher is idle (its call starts at once) and refused when other work waits ahead of it."""
    gate = threading.Event()

    def fn(items):
        gate.wait(10)
        return list(items)

    async def main():
        shed = []
        b = MicroBatcher(fn, max_batch=4, max_wait_ms=0, max_queue=100, max_queue_ms=100, enabled=False,
                         on_shed=shed.append)
        await b.start()
        gate.set()
        assert await b.submit(["idle"], arrived=time.monotonic() - 1.0) == ["idle"]
        assert shed == []
        gate.clear()
        running = asyncio.create_task(b.submit(["a"]))
        await asyncio.sleep(0.05)
        with pytest.raises(QueueFull) as exc:
            await b.submit(["late"], arrived=time.monotonic() - 1.0)
        assert exc.value.reason == "deadline" and exc.value.details["waited_ms"] >= 1000
        assert shed == ["deadline"]
        gate.set()
        assert await running == ["a"]
        await b.close()

    asyncio.run(main())


def test_overloaded_model_refuses_before_parsing_the_body(cls_pred):
    """Admission runs before the body is read: a broken body to an overloaded model gets 503, not 422 (no JSON
    parsing, no tokenising for requests that are refused), while other endpoints still answer."""
    gated = Gated(cls_pred)
    app = create_app(classifier=gated, settings=ServerSettings(batching="off", max_queue_ms=5000))

    async def scenario():
        async with app.router.lifespan_context(app):
            b = app.state.batchers["classifier"]
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
                running = asyncio.create_task(c.post("/v1/classify", json={"texts": ["a"]}))
                while not gated.entered.is_set():
                    await asyncio.sleep(0.01)
                b._seconds_per_item = 10.0  # as if each item took 10 s: the running call alone exceeds 5 s
                refused = await c.post("/v1/classify", content=b"{not json",
                                       headers={"content-type": "application/json"})
                health = await c.get("/healthz")
                b._seconds_per_item = None
                gated.gate.set()
                return refused, health, await running

    refused, health, running = asyncio.run(scenario())
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["details"]["reason"] == "estimate"
    assert refused.headers["retry-after"] == "1"
    assert health.status_code == 200 and running.status_code == 200
    assert app.state.metrics.shed_count("classifier", "estimate") == 1


def _status_count(metrics: Metrics, endpoint: str, status: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(smp.value for fam in text_string_to_metric_families(metrics.render()) for smp in fam.samples
               if smp.name == "denki_http_requests_total" and smp.labels.get("endpoint") == endpoint
               and smp.labels.get("status") == status)


def test_client_disconnect_cancels_queued_work(cls_pred):
    """A client that hangs up while its request waits takes the work with it: the model never sees its texts, the
    queue is released at once, and the request is counted as 499."""
    import socket

    gated = Gated(cls_pred)
    app = create_app(classifier=gated, settings=ServerSettings(batching="off", max_queue_ms=30_000))
    server, th, port, url = _serve_in_thread(app)
    b = app.state.batchers["classifier"]
    try:
        result = {}
        held = threading.Thread(target=lambda: result.setdefault(
            "r", httpx.post(url + "/v1/classify", json={"texts": ["先に来た"]}, timeout=30)))
        held.start()
        assert gated.entered.wait(20)
        body = json.dumps({"texts": ["去る客", "去る客2"]}, ensure_ascii=False).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            t_end = time.monotonic() + 20
            while b.pending < 3 and time.monotonic() < t_end:  # 1 running + 2 queued
                time.sleep(0.01)
            assert b.pending == 3
        t_end = time.monotonic() + 20  # the socket is closed: the queued texts must go
        while b.pending != 1 and time.monotonic() < t_end:
            time.sleep(0.01)
        assert b.pending == 1
        t_end = time.monotonic() + 20
        while _status_count(app.state.metrics, "/v1/classify", "499") < 1 and time.monotonic() < t_end:
            time.sleep(0.01)
        assert _status_count(app.state.metrics, "/v1/classify", "499") == 1
        gated.gate.set()
        held.join(30)
        assert result["r"].status_code == 200
        time.sleep(0.2)
        assert gated.calls == [1]  # the departed client's two texts never reached the model
        assert b.pending == 0
    finally:
        gated.gate.set()
        server.should_exit = True
        th.join(20)


def _listening_sockets(port: int) -> int:
    """TCP sockets in LISTEN state on ``port`` (Linux /proc/net/tcp and tcp6)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[1].rsplit(":", 1)[1] == f"{port:04X}" and fields[3] == "0A":
                n += 1
    return n


def test_workers_refuse_a_taken_port_clearly():
    """With a socket per worker the parent binds the port first: a port another program holds ends `denki serve
    --workers 2` with one clear error before any worker starts; port 0 keeps uvicorn's shared socket."""
    import socket

    from denki.serve.workers import _run_workers, reuse_port_available

    assert not reuse_port_available("127.0.0.1", 0)
    if not reuse_port_available("127.0.0.1", 8080):
        pytest.skip("no SO_REUSEPORT here")
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with pytest.raises(DenkiError, match=f"cannot bind 127.0.0.1:{port}"):
            _run_workers("denki.serve.workers:worker_app", 2, dict(host="127.0.0.1", port=port, log_level="critical"))
    finally:
        holder.close()


def test_workers_share_one_port_and_sum_their_metrics(onnx_classifier):
    """`denki serve --workers 2`: two processes, each with its model, answer on one port; /metrics (from whichever
    worker answers) counts every request of both (prometheus_client multiprocess mode); SIGTERM stops all."""
    from prometheus_client.parser import text_string_to_metric_families

    with serve_two_workers(onnx_classifier) as server:
        port, url, pids = server.port, server.url, server.pids
        assert len(pids) == 2, f"only worker(s) {pids} answered"
        if sys.platform.startswith("linux"):  # a socket per worker (SO_REUSEPORT): the kernel spreads connections
            assert _listening_sockets(port) == 2
        models = httpx.get(url + "/v1/models", timeout=10).json()
        assert models["batching"]["classifier"].startswith("on (auto: CPU, 1 intra-op thread, no batching wait")
        n = 12
        for i in range(n):
            r = httpx.post(url + "/v1/classify", json={"texts": [f"問い合わせ {i}"]}, timeout=30)
            assert r.status_code == 200, r.text
        for _ in range(6):  # whichever worker answers the scrape, it reports both workers' requests
            text = httpx.get(url + "/metrics", timeout=10).text
            samples = [(smp.name, smp.labels, smp.value) for fam in text_string_to_metric_families(text)
                       for smp in fam.samples]
            ok = sum(v for name, lab, v in samples if name == "denki_http_requests_total"
                     and lab.get("endpoint") == "/v1/classify" and lab.get("status") == "200")
            assert ok == n, text
            assert any(name == "denki_queue_items" for name, _, _ in samples)
            calls = sum(v for name, lab, v in samples if name == "denki_batch_size_items_count")
            assert calls == n
    proc, out = server.proc, server.out
    assert proc.returncode == 0, out[-3000:]


def test_a_worker_that_cannot_load_stops_the_server(onnx_classifier):
    """A failure only a worker sees (a backend the bundle lacks) ends `denki serve --workers 2` with the reason,
    instead of uvicorn restarting the workers in a loop."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "denki.app.cli", "serve", "--classifier", str(onnx_classifier), "--port",
                        str(free_port()), "--workers", "2", "--backend", "o3", "--log-level", "critical"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "a worker could not start" in r.stderr and "o3" in r.stderr


# -------------------------------------------------------------------------------------- real server, shutdown
def test_graceful_shutdown_finishes_in_flight(cls_pred):
    gated = Gated(cls_pred)
    app = create_app(classifier=gated, settings=ServerSettings(max_wait_ms=0))
    server, th, port, url = _serve_in_thread(app)
    result = {}
    req = threading.Thread(target=lambda: result.setdefault(
        "r", httpx.post(url + "/v1/classify", json={"texts": ["終わるまで待つ"]}, timeout=20)))
    req.start()
    # the request is in flight once its model call waits at the gate (the in-flight gauge alone could still
    # count the last /readyz poll, whose response the client may get before the server's bookkeeping ends)
    assert gated.entered.wait(20)
    assert app.state.metrics.in_flight >= 1
    server.should_exit = True  # what SIGINT/SIGTERM do
    time.sleep(0.3)
    assert th.is_alive()  # still waiting for the in-flight request
    gated.gate.set()
    req.join(20)
    th.join(20)
    assert not th.is_alive()
    assert result["r"].status_code == 200 and len(result["r"].json()["results"]) == 1
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/healthz", timeout=1)


# ----------------------------------------------------------------------------------------------------- command
def test_cli_help_and_no_torch():
    code = ("import sys, denki.serve.http, denki.serve.microbatch, denki.app.cmd_serve; "
            "from denki.app.cli import build_parser; "
            "a = build_parser().parse_args(['serve', '--classifier', 'X', '--no-batching', '--max-batch', '4']); "
            "assert a.port == 8080 and a.host == '127.0.0.1' and a.no_batching and a.max_batch == 4; "
            "assert a.workers == 'auto' and a.batching == 'auto' and a.max_queue_ms == 250; "
            "b = build_parser().parse_args(['serve', '--qa', 'X', '--workers', '3', '--batching', 'on', "
            "'--max-queue-ms', '100']); "
            "assert b.workers == 3 and b.batching == 'on' and b.max_queue_ms == 100; "
            "from denki.app.cmd_serve import serve_settings; "
            "assert serve_settings(a).batching == 'off' and serve_settings(b).batching == 'on'; "
            "assert 'torch' not in sys.modules, 'serve.http imported torch'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    from denki.app.cli import main

    assert main(["serve"]) == 2  # no model: a clear error, not a traceback
    # several workers: the bundles are checked in the parent, before any worker starts
    assert main(["serve", "--classifier", "/nonexistent/bundle", "--workers", "2"]) == 2
    with pytest.raises(DenkiError, match="cannot exceed"):
        ServerSettings(max_text_chars=10**9)
    with pytest.raises(DenkiError, match="larger than max_wait_ms"):
        ServerSettings(max_wait_ms=300, max_queue_ms=250)
    with pytest.raises(SystemExit):
        from denki.app.cli import build_parser

        build_parser().parse_args(["serve", "--workers", "0"])


def test_workers_and_threads_defaults():
    """--workers auto: a worker per core on CPU, one on CUDA; threads divide the cores among the workers."""
    from denki.serve.workers import resolve_threads, resolve_workers

    assert resolve_workers("auto", "cpu", 2) == 2 and resolve_workers("auto", "cuda", 8) == 1
    assert resolve_workers(3, "cpu", 2) == 3
    assert resolve_threads(None, 2, 2) == 1 and resolve_threads(None, 2, 8) == 4 and resolve_threads(None, 4, 2) == 1
    assert resolve_threads(None, 1, 2) is None  # one worker: onnxruntime's own default, as before
    assert resolve_threads(3, 2, 2) == 3


def test_batching_auto_rule(cls_pred):
    """auto: on everywhere (measured to pay on CPU once nothing waits for company), with no batching wait on CPU
    and 2 ms on CUDA unless --max-wait-ms says otherwise; on/off are obeyed."""
    from denki.serve.microbatch import default_wait_ms

    for threads in (1, 4):
        on, why = resolve_batching("auto", "cpu", threads)
        assert on is True and "no batching wait" in why and "serve-load" in why
    assert resolve_batching("auto", "cuda", 1)[0] is True and "2 ms" in resolve_batching("auto", "cuda", 1)[1]
    assert resolve_batching("on", "cpu", 1)[0] is True and resolve_batching("off", "cuda", None)[0] is False
    assert default_wait_ms("cpu") == 0.0 and default_wait_ms("cuda") == 2.0
    assert ServerSettings(batching=True).batching == "on" and ServerSettings(batching=False).batching == "off"
    assert ServerSettings().batching == "auto" and ServerSettings().max_wait_ms is None
    with pytest.raises(DenkiError, match="auto, on or off"):
        ServerSettings(batching="sometimes")
    with pytest.raises(DenkiError, match="larger than max_wait_ms"):  # the deadline must exceed any default wait
        ServerSettings(max_queue_ms=1)
    from fastapi.testclient import TestClient

    app = create_app(classifier=cls_pred)  # cls_pred: CPU, threads=1
    assert app.state.batching["classifier"].startswith("on (auto")
    b = app.state.batchers["classifier"]
    assert b.enabled is True and b.max_wait == 0.0
    assert create_app(classifier=cls_pred, settings=ServerSettings(max_wait_ms=3)).state.batchers[
        "classifier"].max_wait == 0.003
    with TestClient(app) as c:
        m = c.get("/v1/models").json()
        assert m["batching"]["classifier"].startswith("on (auto") and m["settings"]["batching"] == "auto"
        assert m["settings"]["max_queue_ms"] == 250


# ------------------------------------------------------------------------------------------------ fuzzing
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_openapi_fuzz_no_5xx(cls_pred, qa_pred, mode):
    """Property-based fuzzing (schemathesis strategies driven by hypothesis) of every operation in the OpenAPI
    schema: schema-valid inputs (positive) and schema-violating ones (negative) must get a non-5xx answer that
    conforms to the documented responses. (Driven directly, not through schemathesis' pytest plugin.)"""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings

    app = create_app(classifier=cls_pred, qa=qa_pred,
                     settings=ServerSettings(max_texts=8, max_text_chars=300, max_context_chars=2000, max_pairs=3))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    gen = schemathesis.GenerationMode(mode)
    seen = set()
    for result in schema.get_all_operations():
        op = result.ok()
        if mode == "negative" and (op.method.upper() == "GET" or not len(op.body)):
            continue  # no parameters to violate (GETs, POST /admin/reload)

        @given(case=op.as_strategy(generation_mode=gen))
        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                  database=None)
        def check(case):
            response = case.call()
            assert response.status_code < 500, (case.path, case.body, response.text)
            if response.status_code >= 400:
                assert "error" in json.loads(response.text), response.text
            if mode == "positive":
                case.validate_response(response)
            seen.add((case.method, case.path, response.status_code))

        check()
    assert any(p == "/v1/classify" and st == (200 if mode == "positive" else 422) for _, p, st in seen), seen
