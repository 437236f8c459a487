"""The front of ``denki serve --ray``: requests a dead replica held are resent to another one, never answered 500.

Ray Serve's proxy answers a request whose replica dies under it with 500 (measured: 17 of them when one of two
replicas was killed with SIGKILL at 200 requests/s; experiments/serve-faults). So the application's HTTP ingress is
a small front deployment (:func:`relay_with_retry`): it reads the request (up to the body limit), hands method,
path, headers and body to a model replica through a Ray deployment handle (the replica runs them through the very
same denki app in-process: :func:`asgi_request`), and returns that replica's answer as it is. When the replica
dies before answering (``ActorDiedError``, ``ActorUnavailableError``, ``ReplicaUnavailableError``), Ray's router
drops it and the front sends the request again, to another replica, up to :data:`RETRIES` times; after that the
answer is 503 + Retry-After, as for any overload. Every denki endpoint is safe to resend — a classification or an
answer has no side effect — except that a text routed to a person may be logged twice (``--human-log``) when the
replica died after logging it.

Light to import: standard library only at import time (Ray and Starlette are imported by the caller).
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

#: how many times a request whose replica died is resent, and the waits before each resend (seconds): the handle's
#: router learns of the death from the failed call or from Ray's controller, so the next try goes elsewhere
RETRIES = 4
BACKOFF_S = (0.05, 0.1, 0.2, 0.4)
#: exception class names meaning "the replica is gone, the request did not complete there" (Ray's, by name: this
#: module does not import Ray)
REPLICA_GONE = frozenset({"ActorDiedError", "RayActorError", "ActorUnavailableError", "ReplicaUnavailableError"})


def replica_gone(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) says the replica died or is unreachable."""
    seen = 0
    while exc is not None and seen < 5:
        if any(c.__name__ in REPLICA_GONE for c in type(exc).__mro__):
            return True
        exc, seen = exc.__cause__ or getattr(exc, "cause", None), seen + 1
    return False


def error_answer(status: int, code: str, message: str, retry_after_s: int | None = None):
    """(status, raw headers, body) of denki's JSON error (:func:`serve.http_admission.error_body`)."""
    from denki.serve.http_admission import error_body

    body = error_body(status, code, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after_s is not None:
        headers.append((b"retry-after", str(retry_after_s).encode()))
    return status, headers, body


async def relay_with_retry(call: Callable[[], Awaitable[tuple]], *, retries: int = RETRIES,
                           backoff_s: tuple = BACKOFF_S, retry_after_s: int = 1,
                           on_retry: Callable[[BaseException], None] | None = None):
    """``await call()`` → (status, headers, body); resent up to ``retries`` times (after ``backoff_s``) while the
    replica is gone, then a 503. Any other error propagates (the proxy answers it as it would have)."""
    for attempt in range(retries + 1):
        try:
            return await call()
        except Exception as exc:  # noqa: BLE001 — only a dead replica is retried
            if not replica_gone(exc):
                raise
            if on_retry is not None:
                on_retry(exc)
            if attempt < retries:
                await asyncio.sleep(backoff_s[min(attempt, len(backoff_s) - 1)])
    return error_answer(503, "replica_unavailable", f"the replica died {retries + 1} times in a row; retry after "
                        f"{retry_after_s} s", retry_after_s)


async def asgi_request(app, method: str, path: str, query: bytes, headers: list, body: bytes,
                       client: tuple | None = None) -> tuple[int, list, bytes]:
    """Run one HTTP request through the ASGI ``app`` in this process → (status, raw headers, body). The request's
    body is delivered at once; after the answer, ``receive`` reports the disconnect a server would."""
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query,
             "root_path": "", "headers": [(bytes(k), bytes(v)) for k, v in headers],
             "client": tuple(client) if client else None, "server": ("127.0.0.1", 0)}
    done = asyncio.Event()
    sent_body = False
    out = {"status": 500, "headers": [], "body": []}

    async def receive():
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"], out["headers"] = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            out["body"].append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    try:
        await app(scope, receive, send)
    finally:
        done.set()
    return out["status"], out["headers"], b"".join(out["body"])
