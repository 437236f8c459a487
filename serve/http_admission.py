"""The outermost ASGI layer of the HTTP API (:class:`ObserveAndLimit`): the API key (401 before anything else),
admission control before the body is read (503 + ``Retry-After`` when a model would not start a request within its
deadline), the request body limit (413), per-request metrics, and cancelling a request whose client disconnects.
No web framework: plain ASGI."""
import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from denki.serve.http_auth import OPEN_PATHS, ApiKeys
from denki.serve.http_metrics import Metrics
from denki.serve.microbatch import QueueFull, ShuttingDown

#: scope key holding ``time.monotonic()`` at the request's arrival (its deadline counts from there)
ARRIVED = "denki.arrived"


def error_body(status: int, code: str, message: str, details: Any = None) -> bytes:
    """denki's JSON error, ``{"error": {"code", "message", "details"}}``, as bytes (this layer's answers and the Ray
    front's, :mod:`serve.ray_front`)."""
    return json.dumps({"error": {"code": code, "message": message, "details": details}},
                      ensure_ascii=False).encode("utf-8")


def refusal(exc: Exception, retry_after_s: int) -> tuple[int, str, str, Any]:
    """The 503 answer (status, code, message, details) for a request admission control refused."""
    if isinstance(exc, ShuttingDown):
        return 503, "shutting_down", str(exc), None
    return 503, "overloaded", f"server busy ({exc}); retry after {retry_after_s} s", getattr(exc, "details", None)


async def _disconnected(receive) -> None:
    """Return when the server reports ``http.disconnect`` (the client went away, or the response is complete)."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


class ObserveAndLimit:
    """Outermost ASGI layer: counts requests/latency/status per endpoint, refuses a request without a valid API key
    and what admission control refuses before reading the body, enforces the body limit, and cancels a request
    whose client disconnects.

    - *API key first* (``auth``, an :class:`~serve.http_auth.ApiKeys`; None: off): a request to any path but
      :data:`~serve.http_auth.OPEN_PATHS` without ``Authorization: Bearer KEY`` of an accepted key is answered
      401 (``unauthorized``, ``WWW-Authenticate: Bearer``) before anything else looks at it, unknown paths too.
    - *Admission next* (``admit(path, method)``, raising :class:`QueueFull` / :class:`ShuttingDown`): a request
      to an overloaded model is answered 503 before this layer reads its body or the app parses it, so shedding
      stays cheap when it matters most (the server may have buffered the bytes; nothing looks at
      them). The arrival time is stored in the scope (``ARRIVED``): the deadline counts from there.
    - *Body limit*: the body is read here, at most ``max_body_bytes`` of it (a larger Content-Length is refused
      before reading; a chunked body is refused as soon as it passes the limit), so memory per request stays
      bounded, then replayed to the app.
    - *Disconnect*: once the body is read, the server's ``receive`` is watched; an ``http.disconnect`` before the
      response is sent cancels the app's task, which drops the request's queued model work (counted as status
      499, error ``client_closed``)."""

    def __init__(self, app, metrics: Metrics, max_body_bytes: int, known_paths: set[str],
                 admit: Callable[[str, str], None] | None = None, retry_after_s: int = 1,
                 auth: ApiKeys | None = None, shed_delay_s: float = 0.0):
        self.app, self.metrics, self.max_body, self.known = app, metrics, int(max_body_bytes), known_paths
        self.admit, self.retry_after, self.auth = admit, int(retry_after_s), auth
        self.shed_delay_s = float(shed_delay_s)

    def _unauthorized(self, scope) -> bool:
        """Whether this request needs an API key it does not carry."""
        return (self.auth is not None and scope.get("path", "") not in OPEN_PATHS
                and not self.auth.allows(scope.get("headers", ())))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            if scope["type"] == "websocket" and self._unauthorized(scope):
                return await send({"type": "websocket.close", "code": 1008})  # before accept: HTTP 403
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        endpoint = path if path in self.known else "other"  # bounded label set, whatever clients send
        t0 = time.perf_counter()
        scope[ARRIVED] = time.monotonic()
        state = {"code": 500, "started": False}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                state["code"] = message["status"]
                state["started"] = True
            await send(message)

        self.metrics.request_started()
        try:
            if self._unauthorized(scope):
                self.metrics.observe_error(endpoint, "unauthorized")
                await self._send_json(send_wrapper, 401, error_body(
                    401, "unauthorized", "a valid API key is required: Authorization: Bearer KEY"),
                    [(b"www-authenticate", b"Bearer")])
                return
            refused = self._refused(path, scope.get("method", ""))
            if refused is not None:
                status, code, message, details = refused
                self.metrics.observe_error(endpoint, code)
                if code == "overloaded" and self.shed_delay_s > 0:
                    # hold the refusal: a client that resends at once is slowed to one try per hold, and the
                    # wait costs a timer, not CPU (the jitter keeps the resends from arriving in waves)
                    await asyncio.sleep(self.shed_delay_s * random.uniform(0.5, 1.0))
                await self._send_json(send_wrapper, status, error_body(status, code, message, details),
                                      [(b"retry-after", str(self.retry_after).encode())])
                return
            receive2 = await self._limited_body(scope, receive)
            if receive2 is None:
                self.metrics.observe_error(endpoint, "body_too_large")
                await self._send_json(send_wrapper, 413, error_body(
                    413, "body_too_large", f"request body exceeds {self.max_body:,} bytes"))
            elif receive2 is receive:  # GET and friends: nothing was read, nothing to watch
                await self.app(scope, receive, send_wrapper)
            elif await self._run_until_disconnect(scope, receive2, receive, send_wrapper, state):
                state["code"] = 499  # nginx's "client closed request": no response was sent
                self.metrics.observe_error(endpoint, "client_closed")
        finally:
            self.metrics.request_finished()
            self.metrics.observe_request(endpoint, scope.get("method", ""), state["code"], time.perf_counter() - t0)

    def _refused(self, path: str, method: str):
        """(status, code, message, details) when admission control refuses this request now, else None."""
        if self.admit is None:
            return None
        try:
            self.admit(path, method)
        except (QueueFull, ShuttingDown) as exc:
            return refusal(exc, self.retry_after)
        return None

    async def _run_until_disconnect(self, scope, app_receive, server_receive, send, state) -> bool:
        """Run the app; cancel it if the client disconnects before the response starts. True if cancelled."""
        app_task = asyncio.ensure_future(self.app(scope, app_receive, send))
        watcher = asyncio.ensure_future(_disconnected(server_receive))
        cancelled_by_us = False
        try:
            await asyncio.wait((app_task, watcher), return_when=asyncio.FIRST_COMPLETED)
            # the watcher also returns once the response is complete (the server then reports a disconnect)
            if not app_task.done() and not state["started"]:
                cancelled_by_us = True
                app_task.cancel()
            try:
                await app_task
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not cancelled_by_us or (task is not None and task.cancelling()):
                    raise  # we ourselves are being cancelled (server shutdown): pass it on
            return cancelled_by_us
        finally:
            watcher.cancel()
            if not app_task.done():
                app_task.cancel()

    async def _limited_body(self, scope, receive):
        if scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            return receive
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    if int(v) > self.max_body:
                        return None
                except ValueError:
                    pass
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                chunks = None
                disconnect = msg
                break
            body = msg.get("body", b"")
            size += len(body)
            if size > self.max_body:
                return None
            chunks.append(body)
            if not msg.get("more_body", False):
                break
        if chunks is None:
            async def gone():
                return disconnect
            return gone
        data = b"".join(chunks)
        sent = {"done": False}

        async def replay():
            if not sent["done"]:
                sent["done"] = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()  # later reads wait for the disconnect, as the app expects

        return replay

    @staticmethod
    async def _send_json(send, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()):
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()), *headers]})
        await send({"type": "http.response.body", "body": body})
