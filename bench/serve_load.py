"""Load test of `denki serve` under overload, with a compiled load generator (bench/loadgen.c) on loopback.

`run` starts `denki serve` on 127.0.0.1 (a subprocess on a free port, pinned to ``--server-cpus``), waits until
every worker answers /readyz, probes idle latency, warms up, then drives it with ``loadgen`` (pinned to
``--client-cpus``) for ``--duration`` seconds, samples the server's RSS (all its processes) every
``--rss-every`` seconds, probes recovery once the load stops (time to the first 200, then sequential requests
against the idle baseline), scrapes /metrics and stops the server with SIGTERM. The request mix is the issue's
(``--mix``, default 85 % valid /v1/classify of 1–8 titles, 5 % broken JSON, 5 % over-long texts, 5 % /v1/answer).

Load: ``--rate 0`` is a closed loop (``--connections`` clients, each sending as soon as it has its answer: the
saturation throughput, i.e. the capacity); ``--rate R`` an open loop at R requests/s, or ``--rate-from
FILE.json --rate-factor 2`` at twice the throughput measured in an earlier run. It reports goodput (200s/s),
p50/p99 of admitted requests, the shed rate and the time to reject (503s), 422s, connection errors, RSS over
time and recovery; `report` puts the runs of experiments/serve-load/run.sh beside the goals of the issue.

    cc -O2 -o runs/serve-load/loadgen bench/loadgen.c        # `run` compiles it itself when missing
    python bench/serve_load.py run --classifier C --qa Q --workers 1 --rate 0 --duration 30 \
        --server-cpus 0 --client-cpus 1 --label cap-w1 --json runs/serve-load/cap-w1.json
    python bench/serve_load.py report runs/serve-load

Bounded: loopback only (loadgen refuses any other address), a fixed duration, a hard timeout per run.
"""
from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.http_load import cpus  # noqa: E402  ("0", "0,1", "0-3" → a CPU set; one parser for both benches)

HOST = "127.0.0.1"  # loopback only, by design
LOADGEN_SRC = REPO / "bench" / "loadgen.c"
CLASSES = ("classify", "badjson", "toolong", "qa")  # class ids in the requests file = positions here
DEFAULT_MIX = "classify=85,badjson=5,toolong=5,qa=5"
#: loadgen's binary record (bench/loadgen.c, struct rec)
REC_FIELDS = [("t_due", "<f8"), ("t_send", "<f8"), ("latency_ms", "<f4"), ("wait_ms", "<f4"), ("status", "<i4"),
              ("cls", "<i4")]


# ---------------------------------------------------------------------------------------------- the request mix
def _read_jsonl(path: str) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def default_data() -> tuple[str, str]:
    """livedoor titles when ../shared/data has them (the issue's texts), else the shipped routing sample."""
    livedoor = REPO.parent / "shared" / "data" / "livedoor_dev.jsonl.gz"
    if livedoor.is_file():
        return str(livedoor), "title"
    return str(REPO / "samples" / "routing_dev.jsonl"), "text"


def parse_mix(spec: str) -> dict[str, float]:
    """``classify=85,badjson=5,...`` → shares summing to 1."""
    mix = {}
    for part in spec.split(","):
        name, _, share = part.partition("=")
        if name.strip() not in CLASSES:
            raise SystemExit(f"--mix: unknown class {name!r} (known: {', '.join(CLASSES)})")
        mix[name.strip()] = float(share)
    total = sum(mix.values())
    if total <= 0:
        raise SystemExit("--mix: the shares must add up to more than 0")
    return {k: v / total for k, v in mix.items()}


def _http_request(path: str, body: bytes) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode("ascii") + body


def make_requests(texts: list[str], qa_pairs: list[tuple[str, str]], mix: dict[str, float], n: int, seed: int,
                  max_text_chars: int) -> list[tuple[int, bytes]]:
    """``n`` raw requests (class id, bytes) in a shuffled order whose class counts follow ``mix`` exactly."""
    rng = random.Random(seed)
    counts = {k: round(v * n) for k, v in mix.items()}
    out: list[tuple[int, bytes]] = []
    for name, count in counts.items():
        cid = CLASSES.index(name)
        for _ in range(count):
            if name == "classify":
                body = json.dumps({"texts": rng.sample(texts, rng.randint(1, min(8, len(texts))))},
                                  ensure_ascii=False).encode()
                out.append((cid, _http_request("/v1/classify", body)))
            elif name == "badjson":  # cut in the middle (at a character, so it stays UTF-8): malformed JSON, 422
                text = json.dumps({"texts": rng.sample(texts, 2)}, ensure_ascii=False)
                out.append((cid, _http_request("/v1/classify", text[: len(text) // 2].encode())))
            elif name == "toolong":  # one text a character over the limit (422)
                long = (rng.choice(texts) * (max_text_chars // 4 + 2))[: max_text_chars + 1]
                body = json.dumps({"texts": [long]}, ensure_ascii=False).encode()
                out.append((cid, _http_request("/v1/classify", body)))
            else:
                q, ctx = rng.choice(qa_pairs)
                body = json.dumps({"question": q, "context": ctx}, ensure_ascii=False).encode()
                out.append((cid, _http_request("/v1/answer", body)))
    rng.shuffle(out)
    return out


def write_requests(path: Path, reqs: list[tuple[int, bytes]]) -> None:
    """The requests file loadgen reads: ``<class> <length>\\n<bytes>\\n`` per request."""
    with open(path, "wb") as f:
        for cid, raw in reqs:
            f.write(f"{cid} {len(raw)}\n".encode("ascii") + raw + b"\n")


def build_requests_file(args, out: Path) -> Path:
    data, field = (args.data, args.field) if args.data else default_data()
    texts = [r[field] for r in _read_jsonl(data) if isinstance(r.get(field), str) and r[field].strip()]
    qa_pairs = [(r["question"], r["context"]) for r in _read_jsonl(args.qa_data)
                if r.get("question") and r.get("context")]
    if not texts or not qa_pairs:
        raise SystemExit(f"no texts in {data} ({field}) or no QA pairs in {args.qa_data}")
    reqs = make_requests(texts, qa_pairs, parse_mix(args.mix), args.distinct_requests, args.seed,
                         args.max_text_chars)
    write_requests(out, reqs)
    return out


# --------------------------------------------------------------------------------------------- processes, pins
def _pinned(cpuset: set[int] | None):
    return (lambda: os.sched_setaffinity(0, cpuset)) if cpuset else None


def compile_loadgen(out: Path) -> Path:
    """``cc -O2`` bench/loadgen.c into ``out`` unless an up-to-date binary is there."""
    if out.is_file() and out.stat().st_mtime >= LOADGEN_SRC.stat().st_mtime:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    cc = os.environ.get("CC", "cc")
    r = subprocess.run([cc, "-O2", "-o", str(out), str(LOADGEN_SRC)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"compiling {LOADGEN_SRC} failed (needs a C compiler: apt-get install gcc):\n{r.stderr}")
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _get(port: int, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def start_server(args, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "denki.app.cli", "serve", "--host", HOST, "--port", str(port),
           "--workers", str(args.workers), "--batching", args.batching, "--log-level", "warning"]
    cmd += ["--classifier", args.classifier] + (["--qa", args.qa] if args.qa else [])
    if args.max_queue_ms is not None:
        cmd += ["--max-queue-ms", str(args.max_queue_ms)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    cmd += args.server_arg or []
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", ORT_DISABLE_TELEMETRY="1",
               TOKENIZERS_PARALLELISM="false")
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    print("server:", " ".join(cmd), flush=True)
    return subprocess.Popen(cmd, cwd=REPO, env=env, preexec_fn=_pinned(cpus(args.server_cpus)))


def wait_all_workers(proc: subprocess.Popen, port: int, workers: int, timeout: float = 240) -> list[int]:
    """Poll /readyz (a fresh connection each time, so any worker may accept) until ``workers`` distinct worker
    pids answered, or 30 s after the first one did (``--workers auto`` may start fewer, e.g. one on CUDA)."""
    seen: set[int] = set()
    t_end = time.monotonic() + timeout
    first_at = None
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            status, body = _get(port, "/readyz", 2)
            if status == 200:
                seen.add(json.loads(body)["pid"])
                first_at = first_at or time.monotonic()
        except (OSError, http.client.HTTPException, ValueError, KeyError):
            pass
        if len(seen) >= workers or (first_at and time.monotonic() - first_at > 30):
            return sorted(seen)
        time.sleep(0.05)
    raise SystemExit(f"server not ready: {len(seen)} worker(s) answered within {timeout:.0f} s")


def expected_workers(args) -> int:
    """The worker count `denki serve` will start: as given, or for ``auto`` one per CPU it may use (CPU serving)."""
    if args.workers != "auto":
        return int(args.workers)
    pinned = cpus(args.server_cpus)
    return len(pinned) if pinned else (os.cpu_count() or 1)


def stop_server(proc: subprocess.Popen) -> int | None:
    """SIGTERM (graceful), then SIGKILL after 60 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


# ------------------------------------------------------------------------------------------------- RSS sampling
def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
        except OSError:
            pass
    return out


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class RssSampler(threading.Thread):
    """Samples the summed RSS of the server and all its descendants (workers) every ``every`` seconds."""

    def __init__(self, pid: int, every: float):
        super().__init__(daemon=True)
        self.pid, self.every, self.samples = pid, every, []
        self.t0 = time.monotonic()
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            pids = _descendants(self.pid)
            per = {p: _rss_kib(p) for p in pids}
            self.samples.append({"t": round(time.monotonic() - self.t0, 2),
                                 "rss_mib": round(sum(per.values()) / 1024, 1),
                                 "by_pid_mib": {str(p): round(v / 1024, 1) for p, v in per.items()}})
            self._halt.wait(self.every)

    def stop(self) -> list[dict]:
        self._halt.set()
        self.join(10)
        return self.samples


# ------------------------------------------------------------------------------------------------ probes, load
def _post_classify(port: int, text: str, timeout: float = 10.0) -> tuple[int, float]:
    body = json.dumps({"texts": [text]}, ensure_ascii=False).encode()
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    t0 = time.perf_counter()
    try:
        c.request("POST", "/v1/classify", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        return r.status, (time.perf_counter() - t0) * 1e3
    except (OSError, http.client.HTTPException):
        return -1, (time.perf_counter() - t0) * 1e3
    finally:
        c.close()


def sequential_probe(port: int, n: int = 50) -> dict:
    """``n`` sequential one-text classify requests (a fresh connection each): statuses and latency."""
    res = [_post_classify(port, f"復旧の確認 {i}") for i in range(n)]
    ms = sorted(x for _, x in res)
    return {"n": n, "ok": sum(s == 200 for s, _ in res), "p50_ms": round(ms[len(ms) // 2], 2),
            "max_ms": round(ms[-1], 2)}


def recovery_probe(port: int, limit_s: float = 60.0) -> dict:
    """Right after the load stops: time until a request is answered 200, then a sequential probe."""
    t0 = time.monotonic()
    first = None
    while time.monotonic() - t0 < limit_s:
        status, _ = _post_classify(port, "復旧の確認")
        if status == 200:
            first = time.monotonic() - t0
            break
        time.sleep(0.02)
    return {"first_200_after_s": None if first is None else round(first, 3), **sequential_probe(port)}


def run_loadgen(binary: Path, port: int, requests: Path, out: Path, *, duration: float, rate: float,
                connections: int, timeout_ms: int, client_cpus: str | None) -> dict:
    cmd = [str(binary), "--host", HOST, "--port", str(port), "--requests", str(requests), "--duration",
           str(duration), "--rate", str(rate), "--connections", str(connections), "--timeout-ms", str(timeout_ms),
           "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_pinned(cpus(client_cpus)),
                       timeout=duration + timeout_ms / 1e3 + 120)
    if r.returncode != 0:
        raise SystemExit(f"loadgen failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


# ------------------------------------------------------------------------------------------------- summaries
def load_records(path: Path):
    import numpy as np

    return np.fromfile(path, dtype=np.dtype(REC_FIELDS))


def _pct(values, q: float) -> float | None:
    import numpy as np

    return None if len(values) == 0 else round(float(np.percentile(values, q)), 2)


def summarize_records(recs, duration: float) -> dict:
    """Goodput, admitted latency, shed rate, time to reject, other outcomes — overall and per class."""
    import numpy as np

    st = recs["status"]
    sent = recs[st != -3]
    ok = recs[st == 200]
    shed = recs[st == 503]
    answered = recs[(st >= 0) & (st != 503)]
    out = {"requests": int(len(recs)), "sent": int(len(sent)), "duration_s": duration,
           "status": {str(int(s)): int(c) for s, c in zip(*np.unique(st, return_counts=True))},
           "goodput_rps": round(len(ok) / duration, 1), "answered_rps": round(len(answered) / duration, 1),
           "offered_rps": round(len(recs) / duration, 1),
           "shed_rate": round(len(shed) / max(1, len(sent)), 4),
           "admitted_ms": {q: _pct(ok["latency_ms"], p) for q, p in (("p50", 50), ("p90", 90), ("p99", 99),
                                                                      ("p99.9", 99.9), ("max", 100))},
           "admitted_from_due_ms": {"p50": _pct(ok["latency_ms"] + ok["wait_ms"], 50),
                                    "p99": _pct(ok["latency_ms"] + ok["wait_ms"], 99)},
           "reject_ms": {q: _pct(shed["latency_ms"], p) for q, p in (("p50", 50), ("p99", 99), ("max", 100))},
           "client_wait_ms": {"p50": _pct(sent["wait_ms"], 50), "p99": _pct(sent["wait_ms"], 99)}}
    out["by_class"] = {}
    for cid, name in enumerate(CLASSES):
        mine = recs[recs["cls"] == cid]
        if len(mine):
            out["by_class"][name] = {
                "n": int(len(mine)), "status": {str(int(s)): int(c) for s, c in
                                                zip(*np.unique(mine["status"], return_counts=True))},
                "p99_200_ms": _pct(mine[mine["status"] == 200]["latency_ms"], 99)}
    return out


def timeline(recs, bucket_s: float) -> list[dict]:
    """Per ``bucket_s`` window of send times: goodput/s, shed rate, p99 of admitted requests."""
    import numpy as np

    sent = recs[recs["status"] != -3]
    if not len(sent):
        return []
    out = []
    end = float(sent["t_send"].max())
    for a in np.arange(0.0, end + 1e-9, bucket_s):
        w = sent[(sent["t_send"] >= a) & (sent["t_send"] < a + bucket_s)]
        ok = w[w["status"] == 200]
        out.append({"t": round(float(a), 1), "goodput_rps": round(len(ok) / bucket_s, 1),
                    "shed_rate": round(float((w["status"] == 503).sum()) / max(1, len(w)), 4),
                    "p99_admitted_ms": _pct(ok["latency_ms"], 99)})
    return out


def rss_summary(samples: list[dict], t_load_start: float, t_load_end: float, warmup_s: float) -> dict:
    """RSS before the load, its peak, and growth during the load after ``warmup_s``: the median of the first
    minute after warm-up against that of the last minute of the load."""
    during = [s for s in samples if t_load_start + warmup_s <= s["t"] <= t_load_end]
    skipped = warmup_s
    if not during:  # a load shorter than the warm-up: the whole load, said so
        during, skipped = [s for s in samples if t_load_start <= s["t"] <= t_load_end], 0.0
    if not during:
        return {}
    first = [s["rss_mib"] for s in during if s["t"] <= during[0]["t"] + 60]
    last = [s["rss_mib"] for s in during if s["t"] >= during[-1]["t"] - 60]
    a, b = statistics.median(first), statistics.median(last)
    before = [s["rss_mib"] for s in samples if s["t"] < t_load_start]
    return {"before_mib": before[-1] if before else None, "peak_mib": max(s["rss_mib"] for s in samples),
            "after_warmup_mib": a, "end_mib": b, "growth": round(b / a - 1, 4) if a else None,
            "warmup_skipped_s": skipped, "processes": len(samples[-1]["by_pid_mib"])}


def read_metrics(text: str) -> dict:
    """The server's counters that matter here, summed over workers: sheds by model/reason, and the histograms of
    queue waits (admitted requests) and model calls (cumulative buckets, sum, count)."""
    from prometheus_client.parser import text_string_to_metric_families

    shed: dict[str, float] = {}
    hist: dict[str, dict] = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == "denki_shed_total":
                key = f"{smp.labels['model']}/{smp.labels['reason']}"
                shed[key] = shed.get(key, 0) + smp.value
            for base in ("denki_queue_wait_seconds", "denki_inference_duration_seconds"):
                if smp.name.startswith(base):
                    h = hist.setdefault(f"{base}/{smp.labels.get('model')}", {"buckets": {}, "sum": 0, "count": 0})
                    if smp.name.endswith("_bucket"):
                        le = float(smp.labels["le"])
                        h["buckets"][le] = h["buckets"].get(le, 0) + smp.value
                    elif smp.name.endswith("_sum"):
                        h["sum"] += smp.value
                    elif smp.name.endswith("_count"):
                        h["count"] += smp.value
    return {"shed": shed, "hist": hist}


def metrics_delta(before: dict, after: dict) -> dict:
    """What happened between two :func:`read_metrics` scrapes (the measured load, not the warm-up): sheds by
    reason; per histogram the count, the mean and the upper bound of the bucket holding the 99th percentile."""
    out = {"shed": {k: int(v - before["shed"].get(k, 0)) for k, v in after["shed"].items()
                    if v - before["shed"].get(k, 0)}}
    for key, h in after["hist"].items():
        b = before["hist"].get(key, {"buckets": {}, "sum": 0, "count": 0})
        count = h["count"] - b["count"]
        if count <= 0:
            continue
        buckets = sorted((le, c - b["buckets"].get(le, 0)) for le, c in h["buckets"].items())
        p99 = next((le for le, c in buckets if c >= 0.99 * count), None)
        out[key] = {"count": int(count), "mean_ms": round((h["sum"] - b["sum"]) / count * 1e3, 2),
                    "p99_bucket_le_ms": None if p99 is None else p99 * 1e3}
    return out


# --------------------------------------------------------------------------------------------------------- run
def _scrape(port: int) -> dict:
    status, body = _get(port, "/metrics", 30)
    if status != 200:
        raise SystemExit(f"/metrics answered {status}")
    return read_metrics(body.decode())


def resolve_rate(args) -> float:
    if args.rate_from:
        base = json.loads(Path(args.rate_from).read_text())["summary"]["answered_rps"]
        return round(base * args.rate_factor, 1)
    return float(args.rate)


def cmd_run(args) -> dict:
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    binary = compile_loadgen(Path(args.loadgen) if args.loadgen else work / "loadgen")
    reqfile = build_requests_file(args, work / f"{args.label}.requests")
    rate = resolve_rate(args)
    port = free_port()
    proc = start_server(args, port)
    result = {"label": args.label, "args": {k: v for k, v in vars(args).items() if k != "func"}, "rate": rate,
              "cpu": _cpu_line(), "load_before": os.getloadavg()}
    try:
        result["worker_pids"] = wait_all_workers(proc, port, expected_workers(args))
        result["idle_probe"] = sequential_probe(port)
        sampler = RssSampler(proc.pid, args.rss_every)
        sampler.start()
        if args.warmup > 0:  # closed loop, not recorded: onnxruntime and the estimators warm up
            warm = work / f"{args.label}.warmup.bin"
            run_loadgen(binary, port, reqfile, warm, duration=args.warmup, rate=0,
                        connections=min(args.connections, 16), timeout_ms=args.timeout_ms,
                        client_cpus=args.client_cpus)
            warm.unlink(missing_ok=True)
        t_load = time.monotonic() - sampler.t0
        before = _scrape(port)
        recfile = work / f"{args.label}.records.bin"
        result["loadgen"] = run_loadgen(binary, port, reqfile, recfile, duration=args.duration, rate=rate,
                                        connections=args.connections, timeout_ms=args.timeout_ms,
                                        client_cpus=args.client_cpus)
        t_end = time.monotonic() - sampler.t0
        after = _scrape(port)
        result["server_metrics"] = metrics_delta(before, after)
        result["recovery"] = recovery_probe(port)
        time.sleep(min(5.0, args.rss_every * 2))
        samples = sampler.stop()
        recs = load_records(recfile)
        result["summary"] = summarize_records(recs, args.duration)
        result["timeline"] = timeline(recs, args.bucket_s)
        result["rss"] = rss_summary(samples, t_load, t_end, args.rss_warmup_s)
        result["rss_samples"] = [{"t": s["t"], "rss_mib": s["rss_mib"]} for s in samples]
        if not args.keep_records:
            recfile.unlink(missing_ok=True)
    finally:
        result["server_exit"] = stop_server(proc)
        result["load_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(run_markdown(result), flush=True)
    return result


def _cpu_line() -> str:
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        model = "unknown CPU"
    return f"{model}, {os.cpu_count()} logical CPUs"


def run_markdown(r: dict) -> str:
    s, a = r["summary"], r["args"]
    mode = "closed loop" if not r["rate"] else f"open loop at {r['rate']:.0f} req/s"
    lines = [f"### {r['label']}: workers {a['workers']}, batching {a['batching']}, deadline "
             f"{a['max_queue_ms'] if a['max_queue_ms'] is not None else 'default'} ms, {mode}, {a['duration']:.0f} s",
             "", f"server CPUs {a['server_cpus'] or 'all'}, client CPUs {a['client_cpus'] or 'all'}; {r['cpu']}; "
             f"load {r['load_before'][0]:.2f} → {r['load_after'][0]:.2f}; loadgen CPU "
             f"{r['loadgen']['cpu_user_s'] + r['loadgen']['cpu_sys_s']:.1f} s", "",
             "| offered req/s | answered req/s (non-503) | goodput (200/s) | shed rate | admitted p50 / p99 / max ms "
             "| reject p50 / p99 ms | statuses | conn errors / timeouts / not sent |",
             "|---:|---:|---:|---:|---|---|---|---|",
             f"| {s['offered_rps']} | {s['answered_rps']} | {s['goodput_rps']} | {s['shed_rate']:.1%} | "
             f"{s['admitted_ms']['p50']} / {s['admitted_ms']['p99']} / {s['admitted_ms']['max']} | "
             f"{s['reject_ms']['p50']} / {s['reject_ms']['p99']} | {s['status']} | "
             f"{r['loadgen']['conn_errors']} / {r['loadgen']['timeouts']} / {r['loadgen']['not_sent']} |"]
    if not r["rate"] and s["shed_rate"] > 0.01:
        lines += ["", f"**Warning:** {s['shed_rate']:.1%} shed in a closed loop: {a['connections']} clients queue "
                      f"longer than the deadline, and the rejections cost capacity; measure capacity with fewer "
                      f"--connections."]
    rss = r.get("rss") or {}
    if rss:
        lines += ["", f"RSS (all server processes, {rss['processes']}): before {rss['before_mib']} MiB, peak "
                      f"{rss['peak_mib']} MiB, after warm-up {rss['after_warmup_mib']} → end {rss['end_mib']} MiB "
                      f"(growth {rss['growth']:+.1%})"]
    rec = r.get("recovery") or {}
    lines += ["", f"Recovery: first 200 after {rec.get('first_200_after_s')} s; then {rec.get('ok')}/{rec.get('n')} "
                  f"sequential requests 200, p50 {rec.get('p50_ms')} ms (idle before the load: "
                  f"{r['idle_probe']['p50_ms']} ms)", "",
              f"Server: {json.dumps(r.get('server_metrics'), ensure_ascii=False)}"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------------ report
def _load(folder: Path, label: str) -> dict | None:
    p = folder / f"{label}.json"
    return json.loads(p.read_text()) if p.is_file() else None


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if not a or not b else f"{a / b:.2f}x"


def cmd_report(args) -> str:
    """The goal table of experiments/serve-load from the runs of run.sh (labels fixed there)."""
    d = Path(args.folder)
    runs = {k: _load(d, k) for k in ("cap-w1", "cap-w1-all", "cap-wn", "batch-auto", "batch-on", "batch-off",
                                      "load-1x", "soak-2x")}
    rps = {k: (v or {}).get("summary", {}).get("answered_rps") for k, v in runs.items()}
    lines = ["| goal | measured | target |", "|---|---|---|"]
    soak, one = runs["soak-2x"], runs["load-1x"]
    if soak:
        s = soak["summary"]
        deadline = soak["args"]["max_queue_ms"] or 250
        metrics = soak.get("server_metrics") or {}
        per_class = "; ".join(f"{name} {c['p99_200_ms']}" for name, c in s["by_class"].items() if c["p99_200_ms"])
        calls = ", ".join(f"{m} ≤ {metrics.get(f'denki_inference_duration_seconds/{m}', {}).get('p99_bucket_le_ms')}"
                          for m in ("classifier", "qa"))
        lines.append(f"| p99 of admitted requests at 2x capacity | {s['admitted_ms']['p99']} ms (p50 "
                     f"{s['admitted_ms']['p50']}; by class {per_class}; shed {s['shed_rate']:.1%}, reject p50 / p99 "
                     f"{s['reject_ms']['p50']} / {s['reject_ms']['p99']} ms) | ≤ {deadline:g} ms + one model call "
                     f"(p99 bucket of a call, ms: {calls}) |")
    if soak and one:
        g2, g1 = soak["summary"]["goodput_rps"], one["summary"]["goodput_rps"]
        lines.append(f"| goodput at 2x vs at 1x capacity | {_ratio(g2, g1)} ({g2} vs {g1} 200/s) | ≥ 0.9 |")
    lines.append(f"| throughput, workers = cores vs 1 worker | {_ratio(rps['cap-wn'], rps['cap-w1-all'])} same pinning "
                 f"({rps['cap-wn']} vs {rps['cap-w1-all']} req/s); vs 1 worker alone on core 0: "
                 f"{_ratio(rps['cap-wn'], rps['cap-w1'])} | ≥ 1.6x |")
    best = max([x for x in (rps["batch-on"], rps["batch-off"]) if x] or [0]) or None
    lines.append(f"| default batching vs the better of on/off | {_ratio(rps['batch-auto'], best)} (auto "
                 f"{rps['batch-auto']}, on {rps['batch-on']}, off {rps['batch-off']} req/s) | ≥ 0.97x |")
    if soak and soak.get("rss"):
        r = soak["rss"]
        lines.append(f"| RSS over the soak | {r['after_warmup_mib']} → {r['end_mib']} MiB ({r['growth']:+.1%}, first "
                     f"{r['warmup_skipped_s']:g} s of load skipped), peak {r['peak_mib']} MiB | growth ≤ 5 % after "
                     f"warm-up |")
    if soak and soak.get("recovery"):
        rec = soak["recovery"]
        lines.append(f"| recovery after the soak | first 200 after {rec['first_200_after_s']} s; "
                     f"{rec['ok']}/{rec['n']} 200, p50 {rec['p50_ms']} ms (idle {soak['idle_probe']['p50_ms']} ms) "
                     f"| answers as before |")
    md = "\n".join(lines) + "\n"
    if args.md:
        Path(args.md).write_text(md)
    print(md)
    return md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one server configuration under one load")
    r.add_argument("--classifier", required=True, help="ONNX classifier bundle")
    r.add_argument("--qa", help="ONNX QA bundle (the mix's QA share needs it)")
    r.add_argument("--workers", default="auto", help="denki serve --workers")
    r.add_argument("--batching", default="auto", choices=["auto", "on", "off"])
    r.add_argument("--max-queue-ms", type=float, default=None, help="denki serve --max-queue-ms (default: its own)")
    r.add_argument("--threads", type=int, default=None)
    r.add_argument("--server-arg", action="append", help="one more `denki serve` argument (repeatable)")
    r.add_argument("--server-cpus", default=None, help="pin the server (and its workers) to these CPUs, e.g. 0")
    r.add_argument("--client-cpus", default=None, help="pin the load generator to these CPUs, e.g. 1")
    r.add_argument("--rate", type=float, default=0.0, help="requests/s (open loop); 0: closed loop")
    r.add_argument("--rate-from", default=None, help="JSON of an earlier run: rate = its answered req/s × factor")
    r.add_argument("--rate-factor", type=float, default=2.0)
    r.add_argument("--duration", type=float, default=30.0, help="seconds of load (after the warm-up)")
    r.add_argument("--warmup", type=float, default=5.0, help="seconds of closed-loop warm-up, not recorded")
    r.add_argument("--connections", type=int, default=64,
                   help="closed loop: clients; open loop: most connections open at once (opened on demand)")
    r.add_argument("--timeout-ms", type=int, default=30_000, help="a request unanswered this long is a timeout")
    r.add_argument("--data", default=None, help="JSONL(.gz) of texts (default: livedoor titles if present)")
    r.add_argument("--field", default="text", help="text field of --data")
    r.add_argument("--qa-data", default=str(REPO / "samples" / "qa_dev.jsonl"), help="JSONL with question/context")
    r.add_argument("--mix", default=DEFAULT_MIX, help="request mix: shares of classify, badjson, toolong, qa")
    r.add_argument("--distinct-requests", type=int, default=4000, help="requests generated (then cycled)")
    r.add_argument("--max-text-chars", type=int, default=20_000, help="the server's limit (toolong = this + 1)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--rss-every", type=float, default=5.0, help="seconds between RSS samples")
    r.add_argument("--rss-warmup-s", type=float, default=60.0, help="RSS growth is measured after this much load")
    r.add_argument("--bucket-s", type=float, default=10.0, help="timeline window (seconds)")
    r.add_argument("--label", default="run")
    r.add_argument("--workdir", default=str(REPO / "runs" / "serve-load"), help="requests, records, loadgen binary")
    r.add_argument("--loadgen", default=None, help="a loadgen binary (default: compiled into --workdir)")
    r.add_argument("--keep-records", action="store_true", help="keep the per-request records file")
    r.add_argument("--json", help="write the result here")
    r.set_defaults(func=cmd_run)
    rep = sub.add_parser("report", help="the goal table from a folder of run JSONs (experiments/serve-load)")
    rep.add_argument("folder")
    rep.add_argument("--md", help="write the table here")
    rep.set_defaults(func=cmd_report)
    args = ap.parse_args()
    if args.cmd == "run" and not (args.duration > 0 and args.duration <= 7200 and args.connections >= 1):
        raise SystemExit("--duration must be in (0, 7200] s and --connections ≥ 1")
    args.func(args)


if __name__ == "__main__":
    main()
