"""The settings of one ``denki serve`` (:class:`ServeSettings`): the bundles, where to listen, the processes, the
HTTP layer's limits and the Ray Serve scale-out, in one object. ``app/cmd_serve.py`` builds it once from the
command line (each option is a field of the same name; its default is the field's default, so each default lives
here, or for the HTTP layer's knobs in :class:`~serve.http.ServerSettings`), :mod:`serve.workers` runs the server
from it, and every worker process rebuilds it from JSON (:meth:`ServeSettings.to_json`).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from denki.models.io.errors import DenkiError
from denki.serve.http_auth import check_key_file, env_key, keys_configured
from denki.serve.http_settings import ServerSettings

_HTTP = ServerSettings  # the HTTP layer's defaults (the class attributes of its fields)


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``denki serve`` needs (``denki serve --help`` says what each one does and when to change it)."""
    classifier: str | None = None  # ONNX classifier bundle
    qa: str | None = None  # ONNX QA bundle
    host: str = "127.0.0.1"
    port: int = 8080
    backend: str = "auto"  # auto, fastest or a model file of the bundle
    device: str = "auto"  # auto, cpu, cuda
    workers: int | str = "auto"  # worker processes, or auto (serve.workers.resolve_workers)
    threads: int | None = None  # onnxruntime intra-op threads per model (None: serve.workers.resolve_threads)
    # admission control and micro-batching (serve.http.ServerSettings)
    max_queue_ms: float | None = _HTTP.max_queue_ms
    batching: str = _HTTP.batching
    max_batch: int = _HTTP.max_batch
    max_wait_ms: float | None = _HTTP.max_wait_ms
    max_queue: int = _HTTP.max_queue
    # limits
    max_texts: int = _HTTP.max_texts
    max_text_chars: int = _HTTP.max_text_chars
    max_pairs: int = _HTTP.max_pairs
    max_context_chars: int = _HTTP.max_context_chars
    max_body_bytes: int = _HTTP.max_body_bytes
    max_connections: int = 1000  # uvicorn's limit_concurrency per worker
    retry_after: int = _HTTP.retry_after_s
    shed_delay_ms: float = _HTTP.shed_delay_ms
    shutdown_timeout: float = _HTTP.shutdown_timeout_s
    # scale-out on Ray Serve
    ray: bool = False
    num_replicas: int = 1
    replica_cpus: float = 1.0
    replica_gpus: float = 0.0
    ray_retry: bool = True  # a front resends the requests of a replica that died (serve.ray_front)
    address: str | None = None
    ray_temp_dir: str | None = None
    detach: bool = False
    # the human log, uvicorn and logging
    human_log: str | None = _HTTP.human_log
    # asking a passage index (POST /v1/ask)
    index: str | None = _HTTP.index
    ask_k: int = _HTTP.ask_k
    # API keys (serve.http_auth; DENKI_API_KEY too, from the environment)
    api_key_file: str | None = _HTTP.api_key_file
    http: str = "auto"  # uvicorn's HTTP parser: auto, httptools, h11
    log_level: str = "info"
    access_log: bool = False

    def server_settings(self) -> ServerSettings:
        """The HTTP layer's settings (raises :class:`DenkiError` on a wrong value, e.g. a deadline below the
        batching wait, or a human log whose folder does not exist)."""
        return ServerSettings(batching=self.batching, max_batch=self.max_batch, max_wait_ms=self.max_wait_ms,
                              max_queue=self.max_queue, max_queue_ms=self.max_queue_ms, max_texts=self.max_texts,
                              max_text_chars=self.max_text_chars, max_pairs=self.max_pairs,
                              max_context_chars=self.max_context_chars, max_body_bytes=self.max_body_bytes,
                              retry_after_s=self.retry_after, shed_delay_ms=self.shed_delay_ms,
                              shutdown_timeout_s=self.shutdown_timeout,
                              human_log=self.human_log, index=self.index, ask_k=self.ask_k,
                              api_key_file=self.api_key_file, api_key_env=env_key() is not None)

    def check_models(self) -> None:
        """At least one bundle is given."""
        if not self.classifier and not self.qa:
            raise DenkiError("give --classifier DIR and/or --qa DIR (ONNX bundles from `denki export`)")

    def check_index(self) -> None:
        """--index is asked with the QA model; a clear error now (before any load) when it cannot be."""
        if self.index and not self.qa:
            raise DenkiError("--index is asked with the QA model (POST /v1/ask): it needs --qa")
        if self.index:
            from denki.models.retrieval.index import read_index_manifest

            read_index_manifest(self.index)  # a missing or foreign folder is refused with the reason

    def check_human_log(self) -> None:
        """--human-log logs the classifier's human route: without --classifier it would log nothing."""
        if self.human_log and not self.classifier:
            raise DenkiError("--human-log records the classifier's human route: it needs --classifier")

    def with_checked_human_log(self) -> ServeSettings:
        """These settings with the human log's path made absolute, so every worker (and Ray replica) writes the
        same file; a clear error now when it cannot be used (no --classifier, its folder does not exist)."""
        self.check_human_log()
        return dataclasses.replace(self, human_log=self.server_settings().human_log)

    def with_checked_api_keys(self) -> ServeSettings:
        """These settings with the key file's path made absolute (every worker and Ray replica reads that file
        itself); a clear error now when it does not exist or holds no key, or when DENKI_API_KEY is malformed."""
        env_key()
        if not self.api_key_file:
            return self
        return dataclasses.replace(self, api_key_file=check_key_file(self.api_key_file))

    def keys_required(self) -> bool:
        """Whether requests need an API key (``--api-key-file`` or DENKI_API_KEY)."""
        return keys_configured(self.api_key_file)

    def to_json(self) -> str:
        """The settings as JSON, for the worker processes (:meth:`from_json`)."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServeSettings:
        return cls(**json.loads(text))
