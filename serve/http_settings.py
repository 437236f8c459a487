"""The knobs of the HTTP layer of ``denki serve`` (:class:`ServerSettings`), checked when built. Light to import
(no web framework, no prometheus_client): ``denki serve``'s command line reads its defaults."""
import os
from dataclasses import dataclass

from denki.models.io.errors import DenkiError
from denki.serve.http_auth import check_key_file
from denki.serve.asker import DEFAULT_K
from denki.serve.humanlog import check_human_log_path
from denki.serve.microbatch import DEFAULT_MAX_QUEUE_MS, DEFAULT_WAIT_MS, batching_mode
from denki.serve.runtime import MAX_CONTEXT_CHARS, MAX_TEXT_CHARS

#: the default hold of an overload refusal (ms; ServerSettings.shed_delay_ms): the smallest of 0 / 100 / 250 / 500 ms
#: that met both retry-storm goals (goodput 0.73× capacity, p99 279 ms; 0 ms: 0.27×; experiments/serve-faults)
SHED_DELAY_MS = 100.0
MAX_ASK_K = 20  # passages one /v1/ask question may ask the reader to read (each is up to a few reader windows)


@dataclass
class ServerSettings:
    """Knobs of the HTTP layer (``denki serve --help`` documents each one)."""
    batching: str = "auto"  # micro-batching: auto (serve.microbatch.BATCHING_RULE), on, off (True/False too)
    max_batch: int = 32  # items (texts / question-context pairs) per model call
    max_wait_ms: float | None = None  # how long the first request of a batch waits for company (None: by device)
    max_queue: int = 2048  # memory backstop: items waiting per model before 503 (latency is bounded by max_queue_ms)
    max_queue_ms: float | None = DEFAULT_MAX_QUEUE_MS  # deadline: a model call not started by then → 503 (None: off)
    max_texts: int = 64  # texts per /v1/classify request
    max_text_chars: int = MAX_TEXT_CHARS  # characters per text (and per question)
    max_pairs: int = 16  # question/context pairs per /v1/answer/batch request
    max_context_chars: int = MAX_CONTEXT_CHARS
    max_body_bytes: int = 2 * 1024 * 1024  # request body limit (413 beyond)
    retry_after_s: int = 1  # Retry-After on 503
    # an overload refusal (503) is held this long (× a random 0.5–1) before it is sent: a client that resends at
    # once on every 503 is slowed to one try per hold per connection (experiments/serve-faults, the retry storm)
    shed_delay_ms: float = SHED_DELAY_MS
    shutdown_timeout_s: float = 30.0  # finishing queued work at shutdown
    human_log: str | None = None  # JSONL file the human-routed texts are appended to (serve.humanlog; None: off)
    index: str | None = None  # passage index (denki index build) that POST /v1/ask asks with the QA model (None: off)
    ask_k: int = DEFAULT_K  # passages the reader reads per /v1/ask question unless the request says
    api_key_file: str | None = None  # API keys, one per line (serve.http_auth; re-read when it changes). None: off
    # DENKI_API_KEY was set where the server started: a process that lacks it refuses to start (never serves open)
    api_key_env: bool = False

    def __post_init__(self):
        self.batching = batching_mode(self.batching)
        if self.human_log is not None:
            self.human_log = check_human_log_path(self.human_log)  # absolute: workers and replicas agree
        if self.index is not None:
            self.index = os.path.abspath(self.index)  # likewise
        if self.api_key_file is not None:
            self.api_key_file = check_key_file(self.api_key_file)  # likewise; read once: a clear error now
        if not 1 <= int(self.ask_k) <= MAX_ASK_K:
            raise DenkiError(f"ask_k (passages read per question) must be 1–{MAX_ASK_K}, not {self.ask_k}")
        longest_wait = max(DEFAULT_WAIT_MS.values()) if self.max_wait_ms is None else float(self.max_wait_ms)
        if self.max_queue_ms is not None and not float(self.max_queue_ms) > longest_wait:
            raise DenkiError(f"max_queue_ms (the deadline, {self.max_queue_ms} ms) must be larger than max_wait_ms "
                             f"(the batching wait, {longest_wait:g} ms)")
        if self.max_text_chars > MAX_TEXT_CHARS or self.max_context_chars > MAX_CONTEXT_CHARS:
            raise DenkiError(f"character limits cannot exceed the runtime's ({MAX_TEXT_CHARS:,} per text, "
                             f"{MAX_CONTEXT_CHARS:,} per context)")
        for k in ("max_batch", "max_queue", "max_texts", "max_text_chars", "max_pairs", "max_context_chars",
                  "max_body_bytes"):
            if int(getattr(self, k)) < 1:
                raise DenkiError(f"{k} must be ≥ 1")
        if not 0 <= float(self.shed_delay_ms) <= 1000 * float(self.retry_after_s):
            raise DenkiError(f"shed_delay_ms must be 0–{1000 * self.retry_after_s:g} (at most Retry-After), not "
                             f"{self.shed_delay_ms}")
        if self.max_wait_ms is not None and self.max_wait_ms < 0:
            raise DenkiError("max_wait_ms must be ≥ 0")
