"""`denki serve`: the HTTP API (FastAPI + uvicorn) over ONNX bundles: admission control, micro-batching where it
pays, one model per worker process on every core.

This module is the command line only: its options are the fields of :class:`~serve.serve_settings.ServeSettings`
(their defaults read from it), built once by :func:`serve_settings`; :func:`serve.workers.run_server` runs the
server from that one object.
"""
from __future__ import annotations

import argparse
import sys

from denki.models.bundle.onnx import MODEL_FILES

#: --backend choices of the commands that load a Predictor (`auto`: the recorded fastest on this CPU, else the
#: default rule; `fastest`: measured at load); `denki classify` uses them too
BACKENDS = ["auto", "fastest", *MODEL_FILES]

LOOPBACK = ("127.0.0.1", "localhost", "::1")

DESCRIPTION = (
    "Serve ONNX bundles over HTTP: POST /v1/classify, /v1/answer, /v1/answer/batch, /v1/ask (with --index); GET /healthz, /readyz, /metrics "
    "(Prometheus), /docs and /openapi.json. One model per worker process, a worker per core by default, behind one "
    "port. Latency is bounded by admission control: a request whose model call cannot start within --max-queue-ms "
    "is answered 503 + Retry-After (refused on arrival when the measured service rate already says so). Concurrent "
    "requests are merged into micro-batches where that pays (--batching auto). Binds 127.0.0.1 unless --host says "
    "otherwise; --api-key-file (or DENKI_API_KEY) requires a key on every path but /healthz and /readyz. "
    "Ctrl-C / SIGTERM finishes in-flight requests before exiting. POST /admin/reload or SIGHUP loads the bundles "
    "again from the paths given (a symlink you repoint), checks them and swaps them in every worker without "
    "dropping a request; a bundle that fails its checks is refused and the old one keeps serving (with --ray, SIGHUP "
    "only). With --ray the same app runs as Ray "
    "Serve replicas (local Ray instance, or --address of a cluster). docs/serving.md has the measurements behind "
    "the defaults.")


def register(sub) -> None:
    from denki.serve.serve_settings import ServeSettings as D  # the defaults, one place

    p = sub.add_parser("serve", help="HTTP API (classify, answer, metrics) over ONNX bundles; 127.0.0.1 by default",
                       description=DESCRIPTION, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    _add_model_options(p, D)
    _add_process_options(p, D)
    _add_admission_options(p.add_argument_group("admission control and micro-batching"), D)
    _add_limit_options(p.add_argument_group("limits"), D)
    _add_ray_options(p.add_argument_group("scale-out on Ray Serve (optional extra: pip install 'denki[ray]')"), D)
    _add_log_options(p, D)
    p.set_defaults(func=cmd_serve)


def _add_model_options(p, D) -> None:
    """What is served, where it listens, and how the models run."""
    p.add_argument("--classifier", metavar="DIR", default=D.classifier,
                   help="ONNX classifier bundle (`denki export` output): serves POST /v1/classify")
    p.add_argument("--qa", metavar="DIR", default=D.qa,
                   help="ONNX QA bundle: serves POST /v1/answer and /v1/answer/batch")
    p.add_argument("--index", metavar="DIR", default=D.index,
                   help="passage index (`denki index build`) asked with the --qa model: serves POST /v1/ask "
                        "(retrieval + reader, docs/ask.md). Off by default")
    p.add_argument("--ask-k", type=int, default=D.ask_k, metavar="K",
                   help="passages the reader reads per /v1/ask question unless the request gives k (1–20). More "
                        "finds answers ranked lower (recall@5 0.97, @20 0.99 on dev) at about k× the reader's time")
    p.add_argument("--host", default=D.host,
                   help="address to bind. Keep the default behind a reverse proxy on this machine; 0.0.0.0 exposes "
                        "the API to the network: give it --api-key-file and a TLS proxy in front (docs/serving.md, "
                        "\"API keys and TLS\")")
    p.add_argument("--api-key-file", metavar="FILE", default=D.api_key_file,
                   help="require an API key: FILE holds the accepted keys, one per line (blank lines and # comments "
                        "skipped), re-read within a second when it changes, so keys rotate without a restart. "
                        "Clients send Authorization: Bearer KEY; without a valid one every path but /healthz and "
                        "/readyz answers 401. The environment variable DENKI_API_KEY adds one key (both may be "
                        "given). Off by default")
    p.add_argument("--port", type=int, default=D.port,
                   help="TCP port; change it when the port is taken or several servers share a machine")
    p.add_argument("--backend", default=D.backend, choices=BACKENDS,
                   help="which model file of the bundle runs. auto: the fastest variant `denki bench pick` recorded "
                        "for this CPU, else int8/o2/fp32; fastest: measured at load (slower start); name a file to "
                        "pin it (e.g. fp32 to match the exported model exactly)")
    p.add_argument("--device", default=D.device, choices=["auto", "cpu", "cuda"],
                   help="where onnxruntime runs: auto uses CUDA when onnxruntime can, else the CPU; cpu keeps a GPU "
                        "free for other work")


def _add_process_options(p, D) -> None:
    """Worker processes and onnxruntime threads."""
    p.add_argument("--workers", default=D.workers, type=_workers_arg, metavar="N|auto",
                   help="worker processes behind one port, each with its own copy of the models (uvicorn workers). "
                        "auto: one per core this process may use (its affinity mask) on CPU, 1 on CUDA. On CPU a "
                        "worker per core serves the most requests (measured; docs/serving.md, \"Workers: every "
                        "core\"): keep auto, lower it only to leave cores to other programs or when N copies of the "
                        "models do not fit in memory")
    p.add_argument("--threads", type=int, default=D.threads,
                   help="onnxruntime intra-op threads per model; default: the cores divided among the workers "
                        "(1 each with a worker per core), onnxruntime's own default with one worker. Raise it only "
                        "with fewer workers than cores, for long inputs whose single model call dominates")


def _add_admission_options(g, D) -> None:
    """The deadline and micro-batching (serve.microbatch)."""
    from denki.serve.microbatch import BATCHING_RULE

    g.add_argument("--max-queue-ms", type=float, default=D.max_queue_ms,
                   help="deadline: a request whose model call has not started this many ms after it arrived is "
                        "answered 503 + Retry-After; one that would wait longer by the measured service rate is "
                        "refused on arrival. Bounds p99 of admitted requests by about this plus one model call. "
                        "Lower it for callers with tight timeouts; raise it for long QA contexts whose single model "
                        "call approaches it")
    g.add_argument("--batching", default=D.batching, choices=["auto", "on", "off"],
                   help=f"micro-batching across requests. {BATCHING_RULE}. on/off force it (off: one request per "
                        f"model call, e.g. to compare)")
    g.add_argument("--no-batching", action="store_true", help="the same as --batching off (kept for old scripts)")
    g.add_argument("--max-batch", type=int, default=D.max_batch,
                   help="texts (or QA pairs) per model call; raise it (64-128) on CUDA, where a fuller batch shares "
                        "the fixed cost of a call")
    g.add_argument("--max-wait-ms", type=float, default=D.max_wait_ms,
                   help="with batching: how long the first request of a batch waits for others (default: 0 on CPU "
                        "— a batch is what queued while the previous call ran —, 2 on CUDA). Leave it unset on CPU, "
                        "where a wait costs throughput at light load; on CUDA 5-10 ms (well below --max-queue-ms) "
                        "fills batches under load")
    g.add_argument("--max-queue", type=int, default=D.max_queue,
                   help="memory backstop: texts/pairs waiting per model (per worker) before 503; the latency bound "
                        "is --max-queue-ms. Lower it only to cap memory")


def _add_limit_options(lim, D) -> None:
    """Per-request limits (422/413 beyond them) and uvicorn's per-worker limits."""
    lim.add_argument("--max-texts", type=int, default=D.max_texts,
                     help="texts per /v1/classify request; raise it for clients that send larger batches")
    lim.add_argument("--max-text-chars", type=int, default=D.max_text_chars,
                     help="characters per text or question; lower it to refuse documents sent by mistake")
    lim.add_argument("--max-pairs", type=int, default=D.max_pairs,
                     help="pairs per /v1/answer/batch request; raise it for clients that send larger batches")
    lim.add_argument("--max-context-chars", type=int, default=D.max_context_chars,
                     help="characters per QA context; lower it to bound the time one request can take")
    lim.add_argument("--max-body-bytes", type=int, default=D.max_body_bytes,
                     help="request body limit (413 beyond); raise it with the limits above")
    lim.add_argument("--max-connections", type=int, default=D.max_connections,
                     help="concurrent connections per worker before uvicorn answers 503; raise it behind a proxy "
                          "that keeps many idle connections open")
    lim.add_argument("--retry-after", type=int, default=D.retry_after,
                     help="Retry-After seconds on 503: how long clients are told to wait before retrying")
    lim.add_argument("--shed-delay-ms", type=float, default=D.shed_delay_ms,
                     help="hold an overload 503 this long (times a random 0.5–1) before sending it, so clients that "
                          "resend at once on every 503 cannot starve the answers (a retry storm); 0: at once")
    lim.add_argument("--shutdown-timeout", type=float, default=D.shutdown_timeout,
                     help="seconds to finish in-flight requests at shutdown; raise it if a deploy cuts off long "
                          "requests")


def _add_ray_options(r, D) -> None:
    """Scale-out on Ray Serve (serve.ray_serve)."""
    r.add_argument("--ray", action="store_true", default=D.ray,
                   help="deploy the same app through Ray Serve: replicas each hold the ONNX predictors. Use it to "
                        "spread one API over several machines or GPUs; on one machine --workers does the job")
    r.add_argument("--num-replicas", type=int, default=D.num_replicas, help="replicas (Ray actors) of the app")
    r.add_argument("--replica-cpus", type=float, default=D.replica_cpus,
                   help="CPUs reserved per replica (fractions allowed; also its onnxruntime threads, ≥1)")
    r.add_argument("--replica-gpus", type=float, default=D.replica_gpus,
                   help="GPUs per replica (e.g. 0.5 packs two replicas on one GPU; implies --device cuda)")
    r.add_argument("--ray-retry", action=argparse.BooleanOptionalAction, default=D.ray_retry,
                   help="a front deployment resends the requests a dying replica held to another one, so they are "
                        "answered instead of Ray's proxy answering them 500 (a replica killed under load: 17 × 500 "
                        "without, 0 with); it costs an extra hop per request (experiments/serve-faults)")
    r.add_argument("--address", default=D.address,
                   help="join an existing Ray cluster (auto, HOST:6379 or ray://HOST:10001) instead of starting a "
                        "private local instance; bundle paths must be readable on every node")
    r.add_argument("--ray-temp-dir", default=D.ray_temp_dir, metavar="DIR",
                   help="temp dir of the local Ray instance (default: a fresh /tmp/denki-ray-*)")
    r.add_argument("--detach", action="store_true", default=D.detach,
                   help="with --address: leave the application running on the cluster and return")


def _add_log_options(p, D) -> None:
    """The human log, uvicorn's HTTP parser and logging."""
    p.add_argument("--human-log", metavar="FILE", default=D.human_log,
                   help="append every text the classifier routes to the human label (担当者へ: the model was unsure) "
                        "to FILE as one JSON line: time (UTC), model, text, the top 3 labels with their calibrated "
                        "scores, route, and id when the request has an X-Request-ID header. Off by default. Use it "
                        "to close the loop: people add a \"label\" field to these rows and `denki finetune classify "
                        "--train ORIGINAL FILE ...` learns from them (docs/serving.md, \"The weekly retrain\"). "
                        "Safe with several --workers (one O_APPEND write per line); its folder must exist; a failed "
                        "write never fails the request (counted in denki_human_log_errors_total)")
    p.add_argument("--http", default=D.http, choices=["auto", "httptools", "h11"],
                   help="uvicorn's HTTP parser. auto: httptools (C; installed with denki) when importable, else h11 "
                        "(pure Python: every request, a 503 too, costs more CPU). Force h11 only to rule the parser "
                        "out when debugging")
    p.add_argument("--log-level", default=D.log_level, choices=["critical", "error", "warning", "info", "debug"],
                   help="server log verbosity: debug to troubleshoot, warning for quieter logs")
    p.add_argument("--access-log", action="store_true", default=D.access_log,
                   help="log every request (costs throughput); for debugging, or where no proxy logs requests")


def _workers_arg(value: str):
    """``auto`` or a positive integer."""
    if str(value).strip().lower() == "auto":
        return "auto"
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers takes a number or auto, not {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError("--workers must be ≥ 1")
    return n


def serve_settings(args):
    """The one :class:`~serve.serve_settings.ServeSettings` of this command line (each option is the field of the
    same name; ``--no-batching`` is ``--batching off``)."""
    import dataclasses

    from denki.serve.serve_settings import ServeSettings

    kw = {f.name: getattr(args, f.name) for f in dataclasses.fields(ServeSettings)}
    if getattr(args, "no_batching", False):
        kw["batching"] = "off"
    return ServeSettings(**kw)


def start_warnings(settings) -> list[str]:
    """What ``denki serve`` tells the user about where it listens before anything loads: binding a non-loopback
    address without API keys, or with keys over plain HTTP."""
    if settings.host in LOOPBACK:
        return []
    if not settings.keys_required():
        return [f"denki serve: binding {settings.host} without API keys — anyone who can reach it can use the API; "
                f"give --api-key-file FILE (or set DENKI_API_KEY) and put a TLS reverse proxy in front "
                f"(docs/serving.md, \"API keys and TLS\")"]
    return [f"denki serve: binding {settings.host} with API keys; this port speaks plain HTTP: put a TLS reverse "
            f"proxy in front so keys do not cross the network in clear (docs/serving.md, \"API keys and TLS\")"]


def cmd_serve(args) -> int:
    """The settings, the warnings a user should see before anything loads, then the server."""
    from denki.serve.workers import configure_logging, run_server

    settings = serve_settings(args)
    configure_logging(settings.log_level)
    settings = settings.with_checked_api_keys()  # a clear error now; the file's path absolute for the workers
    for line in start_warnings(settings):
        print(line, file=sys.stderr)
    settings.check_index()
    if settings.human_log:
        settings = settings.with_checked_human_log()  # a clear error now, before any load; the path absolute
        print(f"denki serve: human log on: texts routed to the human label are appended to {settings.human_log}"
              + (" (on every node running a replica: the folder must exist there)" if settings.ray else ""),
              file=sys.stderr)
    return run_server(settings)
