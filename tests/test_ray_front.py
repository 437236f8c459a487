"""The front of `denki serve --ray` (serve/ray_front.py), without Ray: a request whose replica died is resent and
answered; after the retries a 503 with Retry-After; other errors are not retried; the in-process ASGI relay gives
the app's own answer (status, headers, body) byte for byte."""
import asyncio
import json

import pytest

from denki.serve.ray_front import asgi_request, relay_with_retry, replica_gone


class ActorDiedError(Exception):  # stands for Ray's, matched by name (ray_front imports no Ray)
    pass


class RayTaskError(Exception):
    pass


def test_replica_gone_by_name_and_through_causes():
    assert replica_gone(ActorDiedError())
    wrapped = RayTaskError("task failed")
    wrapped.__cause__ = ActorDiedError()
    assert replica_gone(wrapped)
    assert not replica_gone(ValueError("bad input"))


def test_a_request_whose_replica_died_is_resent_and_answered():
    calls, retried = [], []

    async def call():
        calls.append(1)
        if len(calls) < 3:
            raise ActorDiedError("replica killed")
        return 200, [(b"content-type", b"application/json")], b'{"ok": true}'

    out = asyncio.run(relay_with_retry(call, backoff_s=(0.0,), on_retry=retried.append))
    assert out[0] == 200 and len(calls) == 3 and len(retried) == 2


def test_after_the_retries_a_503_with_retry_after():
    async def call():
        raise ActorDiedError("gone")

    status, headers, body = asyncio.run(relay_with_retry(call, retries=2, backoff_s=(0.0,), retry_after_s=3))
    assert status == 503 and (b"retry-after", b"3") in headers
    assert json.loads(body)["error"]["code"] == "replica_unavailable"


def test_other_errors_are_not_retried():
    calls = []

    async def call():
        calls.append(1)
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        asyncio.run(relay_with_retry(call, backoff_s=(0.0,)))
    assert calls == [1]


def test_asgi_request_gives_the_apps_answer(cls_pred):
    """The relay runs a request through the real denki app: the same answer as the app over HTTP."""
    from fastapi.testclient import TestClient

    from denki.serve.http import create_app

    app = create_app(classifier=cls_pred)
    body = json.dumps({"texts": ["料金について"]}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    with TestClient(app) as c:  # runs the lifespan (the micro-batchers), as Ray does on a replica
        want = c.post("/v1/classify", content=body, headers={"content-type": "application/json"})
        status, out_headers, out = c.portal.call(asgi_request, app, "POST", "/v1/classify", b"", headers, body,
                                                 ("127.0.0.1", 1))
        missing = c.portal.call(asgi_request, app, "GET", "/nowhere", b"", [], b"", None)
    assert status == 200 and json.loads(out) == want.json()
    assert dict(out_headers)[b"content-type"] == b"application/json"
    assert missing[0] == 404 and json.loads(missing[2])["error"]["code"] == "not_found"
