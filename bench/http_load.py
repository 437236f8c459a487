"""Loopback load test of `denki serve`: micro-batching on vs off (and auto), in one run.

A closed-loop Python client (httpx), one server worker by default (``--workers``): it compares batching modes
per replica. For overload, admission control and several workers, use bench/serve_load.py (a compiled load
generator, an open loop, the shed rate and the latency of admitted requests apart).

For each mode it starts `denki serve --classifier MODEL --batching MODE` on 127.0.0.1 (a free port; a
subprocess, so the client does not share the server's GIL), waits for /readyz, warms up, then N concurrent
clients send a fixed number of `POST /v1/classify` requests (texts taken round-robin from --data), and the server
is stopped with SIGTERM (graceful). It reports requests/s and p50/p95/p99 latency per mode, the mean batch size
the server saw (from /metrics) and the throughput ratio on/off. Bounded: only 127.0.0.1, a fixed request count,
and a time limit per mode (--timeout) after which the clients stop and the server is killed.

Where the time goes: the client and the server share the machine, so ``--server-cpus`` / ``--client-cpus`` pin
them to disjoint cores (``sched_setaffinity``), and each mode also reports, per request, the CPU time the server
process and the client process spent (``/proc/PID/stat``, ``getrusage``), the server's own time per request
(``denki_http_request_duration_seconds``) and the part of it spent in model calls (tokenize + ORT + decode,
``denki_inference_duration_seconds``, shared by the requests of a batch). The rest of the client's latency is
the client, the loopback socket and the event loops.

    python bench/http_load.py --model runs/quickstart/classifier-onnx --clients 8 --requests 400 --rounds 3 \
        --server-cpus 0 --client-cpus 1
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.batch_throughput import cpu_lines  # noqa: E402  (one CPU description for every benchmark)
HOST = "127.0.0.1"  # loopback only, by design


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _texts(path: str, field: str, n: int) -> list[str]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            t = json.loads(line).get(field)
            if isinstance(t, str) and t.strip():
                out.append(t)
            if len(out) >= n:
                break
    if not out:
        raise SystemExit(f"{path}: no texts in field {field!r}")
    return out


def _metric_sum_count(text: str, name: str) -> tuple[float, float]:
    s = c = 0.0
    for line in text.splitlines():
        if line.startswith(name + "_sum"):
            s += float(line.rsplit(" ", 1)[1])
        elif line.startswith(name + "_count"):
            c += float(line.rsplit(" ", 1)[1])
    return s, c


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))
    return xs[k]


def cpus(spec: str | None) -> set[int] | None:
    """``"0"`` / ``"0,1"`` / ``"0-3"`` → a CPU set (None = not pinned)."""
    if not spec:
        return None
    out: set[int] = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux ``/proc/PID/stat``; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def _self_cpu_s() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def _load(url: str, texts: list[str], clients: int, requests: int, per_request: int, deadline: float):
    import httpx

    lat: list[float] = []
    status: dict[int, int] = {}
    counter = {"next": 0}

    async def client(c: httpx.AsyncClient):
        while counter["next"] < requests and time.monotonic() < deadline:
            i = counter["next"]
            counter["next"] += 1
            body = {"texts": [texts[(i * per_request + j) % len(texts)] for j in range(per_request)]}
            t0 = time.perf_counter()
            try:
                r = await c.post(url + "/v1/classify", json=body)
                code = r.status_code
            except httpx.HTTPError:
                code = -1
            lat.append(time.perf_counter() - t0)
            status[code] = status.get(code, 0) + 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=30, limits=limits, trust_env=False) as c:
        t0 = time.perf_counter()
        await asyncio.gather(*[client(c) for _ in range(clients)])
        wall = time.perf_counter() - t0
    return lat, status, wall


def run_mode(args, mode: str, texts: list[str]) -> dict:
    import httpx

    port = _free_port()
    url = f"http://{HOST}:{port}"
    cmd = [sys.executable, "-m", "denki.app.cli", "serve", "--classifier", args.model, "--host", HOST, "--port", str(port),
           "--max-batch", str(args.max_batch), "--max-wait-ms", str(args.max_wait_ms),
           "--max-queue", str(max(2048, args.clients * args.texts_per_request * 2)), "--log-level", "warning",
           "--batching", mode, "--workers", str(args.workers)]
    if args.max_queue_ms is not None:
        cmd += ["--max-queue-ms", str(args.max_queue_ms)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", ORT_DISABLE_TELEMETRY="1",
               TOKENIZERS_PARALLELISM="false")
    server_cpus = cpus(args.server_cpus)
    proc = subprocess.Popen(cmd, cwd=REPO, env=env,
                            preexec_fn=(lambda: os.sched_setaffinity(0, server_cpus)) if server_cpus else None)
    try:
        t_ready = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"server exited with {proc.returncode}: {' '.join(cmd)}")
            try:
                if httpx.get(url + "/readyz", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > t_ready:
                raise SystemExit("server not ready after 120 s")
            time.sleep(0.1)
        deadline = time.monotonic() + args.timeout
        asyncio.run(_load(url, texts, args.clients, args.warmup, args.texts_per_request, deadline))  # warm-up
        before = httpx.get(url + "/metrics", trust_env=False).text
        cpu_srv0, cpu_cli0 = _proc_cpu_s(proc.pid), _self_cpu_s()
        lat, status, wall = asyncio.run(_load(url, texts, args.clients, args.requests, args.texts_per_request,
                                              deadline))
        cpu_srv1, cpu_cli1 = _proc_cpu_s(proc.pid), _self_cpu_s()
        after = httpx.get(url + "/metrics", trust_env=False).text
    finally:
        proc.send_signal(signal.SIGTERM)  # graceful: finishes in-flight requests
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    s0, c0 = _metric_sum_count(before, "denki_batch_size_items")
    s1, c1 = _metric_sum_count(after, "denki_batch_size_items")
    inf0, _ = _metric_sum_count(before, "denki_inference_duration_seconds")
    inf1, _ = _metric_sum_count(after, "denki_inference_duration_seconds")
    # /metrics polls and the warm-up also count as requests: take only /v1/classify's lines
    req0, rc0 = _metric_sum_count(_only(before, 'endpoint="/v1/classify"'), "denki_http_request_duration_seconds")
    req1, rc1 = _metric_sum_count(_only(after, 'endpoint="/v1/classify"'), "denki_http_request_duration_seconds")
    ok = status.get(200, 0)
    ms = [x * 1e3 for x in lat]
    n = max(1, len(lat))
    breakdown = {"server_ms_per_req": (req1 - req0) / max(1.0, rc1 - rc0) * 1e3,
                 "model_call_ms_per_req": (inf1 - inf0) / n * 1e3,
                 "model_call_ms_per_call": (inf1 - inf0) / max(1.0, c1 - c0) * 1e3,
                 "server_cpu_ms_per_req": (cpu_srv1 - cpu_srv0) / n * 1e3,
                 "client_cpu_ms_per_req": (cpu_cli1 - cpu_cli0) / n * 1e3}
    return {"mode": mode, "requests": len(lat), "ok": ok, "errors": len(lat) - ok,
            "status": {str(k): v for k, v in sorted(status.items())}, "wall_s": wall,
            "requests_per_s": ok / wall if wall > 0 else 0.0,
            "texts_per_s": ok * args.texts_per_request / wall if wall > 0 else 0.0,
            "p50_ms": _pct(ms, 50), "p95_ms": _pct(ms, 95), "p99_ms": _pct(ms, 99),
            "mean_ms": statistics.fmean(ms) if ms else float("nan"),
            "mean_batch_items": (s1 - s0) / (c1 - c0) if c1 > c0 else float("nan"),
            "model_calls": int(c1 - c0), "timed_out": len(lat) < args.requests, **breakdown}


def _only(metrics_text: str, label: str) -> str:
    return "\n".join(line for line in metrics_text.splitlines() if label in line)


BREAKDOWN = ("server_ms_per_req", "model_call_ms_per_req", "model_call_ms_per_call", "server_cpu_ms_per_req",
             "client_cpu_ms_per_req")


def summarize(res: list[dict]) -> dict[str, dict]:
    """Median over rounds, per mode (the machine is shared: single rounds are noisy)."""
    out = {}
    for mode in dict.fromkeys(r["mode"] for r in res):
        rs = [r for r in res if r["mode"] == mode]
        out[mode] = {k: statistics.median(r[k] for r in rs)
                     for k in ("requests_per_s", "p50_ms", "p95_ms", "p99_ms", "mean_batch_items", "mean_ms",
                               *BREAKDOWN)}
        out[mode].update(rounds=len(rs), errors=sum(r["errors"] for r in rs))
    return out


def to_markdown(res: list[dict], args) -> str:
    pin = (f"server pinned to CPU {args.server_cpus}, client to CPU {args.client_cpus}"
           if args.server_cpus or args.client_cpus else "client and server not pinned (they share the cores)")
    lines = [f"Loopback load test: {args.clients} clients × {args.requests} requests per round "
             f"({args.texts_per_request} text/request), {args.rounds} round(s) alternating the modes, model "
             f"`{args.model}`, max batch {args.max_batch}, max wait {args.max_wait_ms} ms; {pin}; "
             f"server threads {args.threads or 'default'}, workers {args.workers}, deadline "
             f"{args.max_queue_ms if args.max_queue_ms is not None else 'default'} ms.", "", *cpu_lines(), "",
             "| micro-batching | round | requests/s | p50 ms | p95 ms | p99 ms | mean batch | model calls | errors |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res:
        lines.append(f"| {r['mode']} | {r['round']} | {r['requests_per_s']:.1f} | {r['p50_ms']:.1f} | "
                     f"{r['p95_ms']:.1f} | {r['p99_ms']:.1f} | {r['mean_batch_items']:.1f} | {r['model_calls']} | "
                     f"{r['errors']} |")
    summ = summarize(res)
    for mode, m in summ.items():
        lines.append(f"| **{mode}** | median | **{m['requests_per_s']:.1f}** | {m['p50_ms']:.1f} | {m['p95_ms']:.1f} | "
                     f"{m['p99_ms']:.1f} | {m['mean_batch_items']:.1f} | | {m['errors']} |")
    lines += ["", "Where the time goes (medians over rounds, ms per request; model call = tokenize + ORT + decode, "
                  "shared by a batch's requests):", "",
              "| micro-batching | client latency (mean) | server time | of which model calls | model call (per call) "
              "| server CPU | client CPU |", "|---|---:|---:|---:|---:|---:|---:|"]
    for mode, m in summ.items():
        lines.append(f"| {mode} | {m['mean_ms']:.2f} | {m['server_ms_per_req']:.2f} | {m['model_call_ms_per_req']:.2f} "
                     f"| {m['model_call_ms_per_call']:.2f} | {m['server_cpu_ms_per_req']:.2f} | "
                     f"{m['client_cpu_ms_per_req']:.2f} |")
    if "on" in summ and "off" in summ and summ["off"]["requests_per_s"] > 0:
        on, off = summ["on"], summ["off"]
        lines += ["", f"Median throughput on/off: **{on['requests_per_s'] / off['requests_per_s']:.2f}×**; "
                      f"p99 on/off: {on['p99_ms'] / off['p99_ms']:.2f}×"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="runs/quickstart/classifier-onnx", help="ONNX classifier bundle")
    ap.add_argument("--data", default=str(REPO / "samples" / "routing_dev.jsonl"), help="JSONL with texts")
    ap.add_argument("--text-field", default="text")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients")
    ap.add_argument("--requests", type=int, default=400, help="requests per mode (all clients together)")
    ap.add_argument("--warmup", type=int, default=40, help="requests before measuring, per mode")
    ap.add_argument("--texts-per-request", type=int, default=1)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--max-wait-ms", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=None, help="server's onnxruntime intra-op threads")
    ap.add_argument("--workers", default="1", help="denki serve --workers (1: compare the modes per replica)")
    ap.add_argument("--max-queue-ms", type=float, default=None,
                    help="denki serve --max-queue-ms (default: the server's; 503s count as errors here)")
    ap.add_argument("--modes", default="off,on", help="order of the modes measured in each round (off, on, auto)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (each measures every mode once)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per mode before the clients stop")
    ap.add_argument("--server-cpus", default=None, help="pin the server to these CPUs (e.g. 0, or 0-1)")
    ap.add_argument("--client-cpus", default=None, help="pin this client process to these CPUs (e.g. 1)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--md", help="write the markdown table here")
    args = ap.parse_args()
    if not (1 <= args.clients <= 256 and 1 <= args.requests <= 100_000 and 1 <= args.rounds <= 20):
        raise SystemExit("--clients 1..256, --requests 1..100000, --rounds 1..20")
    if args.client_cpus:
        os.sched_setaffinity(0, cpus(args.client_cpus))
    texts = _texts(args.data, args.text_field, 2000)
    res = []
    for rnd in range(1, args.rounds + 1):
        for mode in args.modes.split(","):
            if mode.strip() not in ("off", "on", "auto"):
                raise SystemExit(f"--modes: {mode!r} is not off, on or auto")
            r = run_mode(args, mode.strip(), texts)
            r["round"] = rnd
            print(json.dumps(r), flush=True)
            res.append(r)
    md = to_markdown(res, args)
    print(md)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": res, "median": summarize(res)},
                                              indent=2) + "\n")
    if args.md:
        Path(args.md).write_text(md)


if __name__ == "__main__":
    main()
