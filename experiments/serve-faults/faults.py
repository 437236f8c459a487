"""Faults under load for `denki serve` (issue 62): a retry storm, reloads every few seconds, SIGTERM, a worker
killed with SIGKILL. Each scenario starts `denki serve` (2 workers on CPUs 0-1 unless told otherwise), drives it
with bench/loadgen.c on loopback (every request recorded with its outcome) and does the fault while the load
runs; the result is a JSON and a markdown table that count everything sent and everything answered, by status.

    python experiments/serve-faults/faults.py capacity --classifier C          # closed loop, 16 connections
    python experiments/serve-faults/faults.py storm --classifier C --shed-delay-ms 250
    python experiments/serve-faults/faults.py reload --classifier C --rate-from OUT/capacity.json
    python experiments/serve-faults/faults.py sigterm --classifier C --rate-from OUT/capacity.json
    python experiments/serve-faults/faults.py kill-worker --classifier C --rate-from OUT/capacity.json

Outcomes (loadgen's records): an HTTP status, or ``reset`` (the request was sent and the connection closed before
any answer byte: lost), ``cut`` (the connection closed in the middle of an answer), ``timeout`` (no answer within
``--timeout-ms``: hanging), ``no_connection`` (refused while connecting: it never reached the server, a client may
resend it safely), ``not_sent`` (still in the client's backlog when the run ended).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench import serve_load as sl  # noqa: E402
from bench.http_load import cpus  # noqa: E402

OUTCOME = {-1: "reset", -2: "timeout", -3: "not_sent", -4: "cut", -5: "no_connection"}


# ------------------------------------------------------------------------------------------------ plumbing
def _args_for_server(a, extra: list[str]) -> argparse.Namespace:
    """What bench/serve_load.start_server reads."""
    return argparse.Namespace(workers=a.workers, batching="auto", classifier=a.classifier, qa=None,
                              max_queue_ms=None, threads=None, server_arg=extra, server_cpus=a.server_cpus)


def _requests(a, work: Path) -> Path:
    ns = argparse.Namespace(data=None, field="text", qa_data=str(REPO / "samples" / "qa_dev.jsonl"),
                            mix="classify=100", distinct_requests=4000, seed=0, max_text_chars=20_000)
    return sl.build_requests_file(ns, work / "faults-requests.txt")


class Load:
    """loadgen in the background (Popen), pinned to the client CPUs; ``t0``: monotonic time at its start."""

    def __init__(self, a, port: int, work: Path, *, rate: float, connections: int, duration: float, label: str):
        self.out = work / f"{label}.recs"
        binary = sl.compile_loadgen(work / "loadgen")
        cmd = [str(binary), "--host", sl.HOST, "--port", str(port), "--requests", str(_requests(a, work)),
               "--duration", str(duration), "--rate", str(rate), "--connections", str(connections),
               "--timeout-ms", str(a.timeout_ms), "--out", str(self.out)]
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=sl._pinned(cpus(a.client_cpus)))
        self.duration = duration

    def wait(self) -> tuple[dict, object]:
        out, err = self.proc.communicate(timeout=self.duration + 180)
        if self.proc.returncode != 0:
            raise SystemExit(f"loadgen failed ({self.proc.returncode}): {err.strip()}")
        return json.loads(out), sl.load_records(self.out)


def outcomes(recs) -> dict[str, int]:
    """Every request by outcome: HTTP status or OUTCOME name."""
    import numpy as np

    vals, counts = np.unique(recs["status"], return_counts=True)
    return {OUTCOME.get(int(v), str(int(v))): int(c) for v, c in zip(vals, counts)}


def summary(recs, duration: float) -> dict:
    import numpy as np

    st = recs["status"]
    answered = recs[st >= 0]
    ok = recs[st == 200]
    return {"sent": int((st != -3).sum()), "outcomes": outcomes(recs), "goodput_rps": round(len(ok) / duration, 1),
            "answered_rps": round(len(answered) / duration, 1),
            "admitted_ms": {"p50": sl._pct(ok["latency_ms"], 50), "p99": sl._pct(ok["latency_ms"], 99)},
            "all_answers_ms": {"p50": sl._pct(answered["latency_ms"], 50), "p99": sl._pct(answered["latency_ms"], 99)},
            "refusal_ms": {"p50": sl._pct(recs[st == 503]["latency_ms"], 50),
                           "p99": sl._pct(recs[st == 503]["latency_ms"], 99)},
            "lost": int(np.isin(st, [-1, -2, -4]).sum()), "5xx_not_503": int(((st >= 500) & (st != 503)).sum())}


def _post(port: int, path: str, timeout: float = 120.0) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://{sl.HOST}:{port}{path}", data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class Server:
    """`denki serve` on a free port (bench/serve_load.start_server), ready once every worker answered."""

    def __init__(self, a, extra: list[str]):
        self.port = sl.free_port()
        self.proc = sl.start_server(_args_for_server(a, extra), self.port)
        self.pids = sl.wait_all_workers(self.proc, self.port, sl.expected_workers(_args_for_server(a, extra)))

    def stop(self) -> int | None:
        return sl.stop_server(self.proc)


def _write(a, result: dict, md_rows: list[str]) -> None:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{a.label}.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    md = "\n".join([f"## {a.label}", "", f"`{' '.join(sys.argv)}`", "", *md_rows, ""])
    (out / f"{a.label}.md").write_text(md, encoding="utf-8")
    print(md)


def _table(cells: dict) -> list[str]:
    """A one-row markdown table: header → value."""
    return ["| " + " | ".join(cells) + " |", "|" + "---|" * len(cells),
            "| " + " | ".join(str(v) for v in cells.values()) + " |"]


def _rate(a) -> float:
    cap = json.loads(Path(a.rate_from).read_text(encoding="utf-8"))["summary"]["goodput_rps"]
    return round(cap * a.rate_factor, 1)


# ----------------------------------------------------------------------------------------------- scenarios
def closed_loop(a, connections: int, extra: list[str]) -> dict:
    work = Path(a.workdir)
    server = Server(a, extra)
    try:
        Load(a, server.port, work, rate=0, connections=connections, duration=a.warmup, label="warmup").wait()
        stats, recs = Load(a, server.port, work, rate=0, connections=connections, duration=a.duration,
                           label=a.label).wait()
    finally:
        rc = server.stop()
    return {"summary": summary(recs, a.duration), "loadgen": stats, "server_rc": rc, "server_args": extra}


def cmd_capacity(a) -> None:
    r = closed_loop(a, a.connections or 16, a.server_arg or [])
    s = r["summary"]
    _write(a, r, [f"capacity: {s['goodput_rps']} answers/s at {a.connections or 16} connections, admitted p99 "
                  f"{s['admitted_ms']['p99']} ms; outcomes {s['outcomes']}"])


def cmd_storm(a) -> None:
    extra = (a.server_arg or []) + ["--shed-delay-ms", str(a.shed_delay_ms)]
    r = closed_loop(a, a.connections or 256, extra)
    cap = json.loads(Path(a.rate_from).read_text(encoding="utf-8"))["summary"]["goodput_rps"] if a.rate_from else None
    s = r["summary"]
    r["capacity_rps"] = cap
    r["goodput_vs_capacity"] = round(s["goodput_rps"] / cap, 3) if cap else None
    _write(a, r, _table({"shed delay ms": f"{a.shed_delay_ms:g}", "connections": a.connections or 256,
                         "goodput 200/s": s["goodput_rps"], "× capacity": r["goodput_vs_capacity"],
                         "503/s": round(s["outcomes"].get("503", 0) / a.duration, 1),
                         "p99 all answers ms": s["all_answers_ms"]["p99"], "admitted p99 ms": s["admitted_ms"]["p99"],
                         "refusal p50 ms": s["refusal_ms"]["p50"], "outcomes": s["outcomes"]}))


def cmd_reload(a) -> None:
    """Open loop at --rate-factor × capacity; POST /admin/reload every --every s, the symlink flipped between two
    versions of the router each time (B: the same weights, another task.json note: another manifest)."""
    from denki.models.bundle.format import bundle_version, copy_with_task, read_task

    work = Path(a.workdir) / "reload-bundles"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    va, vb = work / "a", work / "b"
    shutil.copytree(a.classifier, va)
    copy_with_task(va, vb, {**read_task(va), "note": "version b"}, {"faults": {"from": "a"}})
    link = work / "current"
    link.symlink_to(va)
    a.classifier = str(link)
    rate = _rate(a)
    server = Server(a, a.server_arg or [])
    reloads, stop = [], threading.Event()

    def reload_loop(t0: float):
        target = vb
        while not stop.wait(a.every):
            tmp = link.with_name("current.new")
            tmp.symlink_to(target)
            os.replace(tmp, link)
            t = time.monotonic()
            code, body = _post(server.port, "/admin/reload")
            reloads.append({"t": round(t - t0, 2), "status": code, "seconds": round(time.monotonic() - t, 3),
                            "versions": body.get("model_versions"), "workers": len(body.get("workers", []))})
            target = va if target == vb else vb

    try:
        Load(a, server.port, Path(a.workdir), rate=0, connections=16, duration=a.warmup, label="warmup").wait()
        load = Load(a, server.port, Path(a.workdir), rate=rate, connections=768, duration=a.duration,
                    label=a.label)
        th = threading.Thread(target=reload_loop, args=(load.t0,), daemon=True)
        th.start()
        stats, recs = load.wait()
        stop.set()
        th.join(150)
    finally:
        rc = server.stop()
    s = summary(recs, a.duration)
    ok = [r for r in reloads if r["status"] == 200]
    r = {"summary": s, "loadgen": stats, "rate": rate, "reloads": reloads, "server_rc": rc,
         "versions": {"a": bundle_version(va), "b": bundle_version(vb)}}
    _write(a, r, _table({"load": f"{rate:g} req/s open loop, {a.duration:g} s",
                         "reloads (200 / all)": f"{len(ok)} / {len(reloads)}",
                         "reload s p50 / max": f"{_med([x['seconds'] for x in ok])} / "
                                               f"{max([x['seconds'] for x in ok], default=None)}",
                         "sent": s["sent"], "lost": s["lost"], "5xx ≠ 503": s["5xx_not_503"],
                         "admitted p99 ms": s["admitted_ms"]["p99"], "outcomes": s["outcomes"]}))


def _med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def cmd_sigterm(a) -> None:
    """Open loop at --rate-factor × capacity; SIGTERM to the supervisor --at seconds in; how long it took to exit
    and what every request got."""
    rate = _rate(a)
    server = Server(a, (a.server_arg or []) + ["--shutdown-timeout", str(a.shutdown_timeout)])
    Load(a, server.port, Path(a.workdir), rate=0, connections=16, duration=a.warmup, label="warmup").wait()
    load = Load(a, server.port, Path(a.workdir), rate=rate, connections=768, duration=a.duration, label=a.label)
    time.sleep(max(0.0, load.t0 + a.at - time.monotonic()))
    t_term = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    try:
        rc = server.proc.wait(a.shutdown_timeout + 60)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        rc = "killed after shutdown timeout + 60 s"
    exit_s = round(time.monotonic() - t_term, 3)
    stats, recs = load.wait()
    s = summary(recs, a.duration)
    before = recs[recs["t_send"] < a.at]
    r = {"summary": s, "loadgen": stats, "rate": rate, "sigterm_at_s": a.at, "exit_s": exit_s, "server_rc": rc,
         "outcomes_sent_before_sigterm": outcomes(before)}
    o = s["outcomes"]
    _write(a, r, _table({"load": f"{rate:g} req/s", "SIGTERM at": f"{a.at:g} s",
                         "exited after": f"{exit_s} s (rc {rc})",
                         "shutdown timeout": f"{a.shutdown_timeout:g} s", "sent": s["sent"], "cut": o.get("cut", 0),
                         "reset": o.get("reset", 0), "timeout": o.get("timeout", 0),
                         "no connection (never reached it)": o.get("no_connection", 0), "outcomes": o}))


def cmd_kill_worker(a) -> None:
    """Open loop at --rate-factor × capacity; SIGKILL one worker --at seconds in. The resets must be requests that
    were in flight at the kill (held by a worker), none may hang, and the supervisor starts a new worker."""
    import numpy as np

    rate = _rate(a)
    server = Server(a, a.server_arg or [])
    victim = server.pids[0]
    Load(a, server.port, Path(a.workdir), rate=0, connections=16, duration=a.warmup, label="warmup").wait()
    load = Load(a, server.port, Path(a.workdir), rate=rate, connections=768, duration=a.duration, label=a.label)
    time.sleep(max(0.0, load.t0 + a.at - time.monotonic()))
    t_kill = time.monotonic() - load.t0
    os.kill(victim, signal.SIGKILL)
    replaced_after = None
    while time.monotonic() - load.t0 < a.duration:
        pids = set()
        for _ in range(8):
            try:
                st, body = sl._get(server.port, "/readyz", 2)
                if st == 200:
                    pids.add(json.loads(body)["pid"])
            except Exception:  # noqa: BLE001 — probing while a worker restarts
                pass
        if len(pids - set(server.pids)) >= 1:
            replaced_after = round(time.monotonic() - load.t0 - t_kill, 2)
            break
        time.sleep(0.2)
    stats, recs = load.wait()
    rc = server.stop()
    s = summary(recs, a.duration)
    st, ts, lat = recs["status"], recs["t_send"], recs["latency_ms"] / 1e3
    failed = np.isin(st, [-1, -4])
    slack = 0.05  # the client's clock starts a few ms after t0
    in_flight = (ts >= 0) & (ts <= t_kill + slack) & (ts + lat >= t_kill - slack)
    r = {"summary": s, "loadgen": stats, "rate": rate, "killed_pid": victim, "kill_at_s": round(t_kill, 3),
         "replaced_after_s": replaced_after, "server_rc": rc,
         "in_flight_at_kill": int(in_flight.sum()), "resets": int(failed.sum()),
         "resets_of_requests_in_flight_at_kill": int((failed & in_flight).sum()),
         "resets_later": int((failed & ~in_flight).sum())}
    _write(a, r, _table({"load": f"{rate:g} req/s", "worker killed at": f"{t_kill:.1f} s",
                         "new worker ready after": f"{replaced_after} s",
                         "in flight at the kill (both workers)": r["in_flight_at_kill"], "resets / cut": r["resets"],
                         "of them in flight at the kill": r["resets_of_requests_in_flight_at_kill"],
                         "later": r["resets_later"], "hanging (timeouts)": s["outcomes"].get("timeout", 0),
                         "outcomes": s["outcomes"]}))


def _replica_pids() -> set[int]:
    r = subprocess.run(["pgrep", "-f", "ServeReplica"], capture_output=True, text=True)
    return {int(x) for x in r.stdout.split()}


class RayServer:
    """`denki serve --ray --num-replicas 2 --replica-cpus 1` on a free port, a private Ray instance in /tmp; ready
    once /readyz answers and both replica processes exist. Stopped with SIGTERM to its process group."""

    def __init__(self, a):
        import tempfile

        self.port = sl.free_port()
        self.temp = tempfile.mkdtemp(prefix="dk-ray-", dir="/tmp")
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", ORT_DISABLE_TELEMETRY="1", HF_HUB_OFFLINE="1")
        cmd = [sys.executable, "-m", "denki.app.cli", "serve", "--ray", "--classifier", a.classifier, "--port",
               str(self.port), "--num-replicas", "2", "--replica-cpus", "1", "--ray-temp-dir", self.temp,
               "--log-level", "warning", *(a.server_arg or [])]
        print("server:", " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, cwd=os.getcwd(), env=env, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t_end = time.monotonic() + 300
        while time.monotonic() < t_end:
            try:
                if sl._get(self.port, "/readyz", 2)[0] == 200 and len(_replica_pids()) >= 2:
                    return
            except OSError:
                pass
            time.sleep(1)
        self.stop()
        raise SystemExit("denki serve --ray did not become ready in 300 s")

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        if not os.environ.get("DENKI_KEEP_RAY_TEMP"):  # Ray's logs, for a closer look
            shutil.rmtree(self.temp, ignore_errors=True)


def cmd_ray_capacity(a) -> None:
    """`denki serve --ray` with 2 replicas: closed loop, --connections (16), what it answers per second."""
    server = RayServer(a)
    try:
        Load(a, server.port, Path(a.workdir), rate=0, connections=16, duration=a.warmup, label="warmup").wait()
        stats, recs = Load(a, server.port, Path(a.workdir), rate=0, connections=a.connections or 16,
                           duration=a.duration, label=a.label).wait()
    finally:
        server.stop()
    s = summary(recs, a.duration)
    _write(a, {"summary": s, "loadgen": stats, "code": _commit()},
           _table({"code": _commit(), "connections": a.connections or 16, "goodput 200/s": s["goodput_rps"],
                   "admitted p50 / p99 ms": f"{s['admitted_ms']['p50']} / {s['admitted_ms']['p99']}",
                   "outcomes": s["outcomes"]}))


def _commit() -> str:
    r = subprocess.run(["git", "log", "-1", "--format=%h"], capture_output=True, text=True, cwd=os.getcwd())
    return r.stdout.strip() or "?"


def cmd_ray_kill(a) -> None:
    """`denki serve --ray` with 2 replicas; open loop at --rate requests/s; SIGKILL one replica process --at seconds
    in. What the requests that replica held get, and when a new replica process starts."""
    server = RayServer(a)
    try:
        before = _replica_pids()
        Load(a, server.port, Path(a.workdir), rate=0, connections=16, duration=a.warmup, label="warmup").wait()
        load = Load(a, server.port, Path(a.workdir), rate=a.rate, connections=768, duration=a.duration,
                    label=a.label)
        time.sleep(max(0.0, load.t0 + a.at - time.monotonic()))
        t_kill = time.monotonic() - load.t0
        victim = sorted(before)[0]
        os.kill(victim, signal.SIGKILL)
        replaced_after = None
        while time.monotonic() - load.t0 < a.duration and replaced_after is None:
            if _replica_pids() - before:
                replaced_after = round(time.monotonic() - load.t0 - t_kill, 2)
            time.sleep(0.2)
        stats, recs = load.wait()
    finally:
        server.stop()
    s = summary(recs, a.duration)
    after = recs[(recs["t_send"] >= t_kill - 2) & (recs["t_send"] < t_kill + 2)]
    r = {"summary": s, "loadgen": stats, "rate": a.rate, "killed_pid": victim, "kill_at_s": round(t_kill, 3),
         "replica_process_started_after_s": replaced_after, "outcomes_around_the_kill": outcomes(after),
         "code": _commit()}
    _write(a, r, _table({"code": _commit(), "load": f"{a.rate:g} req/s, 2 replicas",
                         "replica killed at": f"{t_kill:.1f} s", "new replica process after": f"{replaced_after} s",
                         "sent": s["sent"], "lost": s["lost"], "5xx ≠ 503": s["5xx_not_503"],
                         "outcomes": s["outcomes"], "outcomes of requests sent ±2 s around the kill":
                         r["outcomes_around_the_kill"]}))


# ----------------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, fn in (("capacity", cmd_capacity), ("storm", cmd_storm), ("reload", cmd_reload),
                     ("sigterm", cmd_sigterm), ("kill-worker", cmd_kill_worker), ("ray-kill", cmd_ray_kill),
                     ("ray-capacity", cmd_ray_capacity)):
        p = sub.add_parser(name, help=(fn.__doc__ or name).split("\n")[0])
        p.set_defaults(func=fn)
        p.add_argument("--classifier", required=True, help="ONNX router bundle")
        p.add_argument("--workers", default="2")
        p.add_argument("--server-cpus", default="0-1")
        p.add_argument("--client-cpus", default="1")
        p.add_argument("--server-arg", action="append", help="one more `denki serve` argument (repeatable)")
        p.add_argument("--duration", type=float, default=30.0)
        p.add_argument("--warmup", type=float, default=5.0)
        p.add_argument("--connections", type=int, default=None, help="closed loop (capacity 16, storm 256)")
        p.add_argument("--rate-from", default=None, help="capacity.json: the open-loop rate is its goodput × factor")
        p.add_argument("--rate-factor", type=float, default=2.0)
        p.add_argument("--rate", type=float, default=200.0, help="ray-kill: open-loop requests/s")
        p.add_argument("--timeout-ms", type=int, default=30_000)
        p.add_argument("--shed-delay-ms", type=float, default=0.0, help="storm: denki serve --shed-delay-ms")
        p.add_argument("--every", type=float, default=5.0, help="reload: seconds between reloads")
        p.add_argument("--at", type=float, default=10.0, help="sigterm / kill-worker: seconds into the load")
        p.add_argument("--shutdown-timeout", type=float, default=30.0, help="sigterm: denki serve --shutdown-timeout")
        p.add_argument("--label", default=name)
        p.add_argument("--out", default=str(REPO / "experiments" / "serve-faults"))
        p.add_argument("--workdir", default=str(REPO / "runs" / "serve-faults"))
    a = ap.parse_args()
    Path(a.workdir).mkdir(parents=True, exist_ok=True)
    a.func(a)


if __name__ == "__main__":
    main()
