"""The fast-path picker: which CPU variant of an ONNX bundle is fastest on *this* CPU, measured and recorded.

A bundle may hold several CPU variants that passed the export's parity gate (``fp32``, ``o2``, ``int8``,
``int8-channel``, ``int8-static``); which one is fastest depends on the CPU — int8 kernels gain most with VNNI,
per-channel scales or static QDQ cost differently on AVX2 and AVX-512 — and on onnxruntime's thread settings.
:func:`measure` times every passing variant (and, with several intra-op threads, spinning on and off) on the
bundle's own parity sample; :func:`record` keeps the result in ``BUNDLE/fastpath.json`` under this CPU's
fingerprint (:func:`cpu_fingerprint`); :func:`recorded_choice` is what ``Predictor(backend="auto")`` asks at load.

``fastpath.json`` is not listed in the manifest — ``verify_bundle`` checks only the files the manifest lists, so
writing it never breaks a bundle's sha256 check — and it cannot smuggle in a variant: every recorded candidate
carries the sha256 of the file it timed, and at load a candidate is used only if that file is still the one the
manifest lists and its parity gate passed. Writes are atomic (temporary file + rename; two machines recording
into one shared bundle at the same moment can lose one of the two entries, never corrupt the file). Torch-free.

Format (``"format": 1``)::

    {"format": 1, "records": {FINGERPRINT: {"cpu": {"machine", "model", "flags"},
                                            "by_threads": {"1" | "default" | "4" ...: ENTRY}}}}
    ENTRY = {"backend", "allow_spinning", "score_ms", "measured_at", "iterations", "batch_size", "load_average",
             "candidates": [{"backend", "allow_spinning", "b1_ms", "bN_ms", "score_ms", "sha256"}, ...]}

``candidates`` are sorted fastest first; ``score_ms`` is the geometric mean of the median model-call times at
batch 1 and batch ``batch_size`` (so neither scenario dominates).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from denki.models.bundle.format import read_task
from denki.models.bundle.onnx import CPU_VARIANTS, MODEL_FILES, cpuinfo_text, open_session, passed_gate
from denki.models.io.errors import DenkiError
from denki.models.io.fileio import atomic_write_json
from denki.models.registry.tasks import task_for

RECORD = "fastpath.json"
FORMAT = 1
#: CPU features that change which int8/float kernels onnxruntime (MLAS) uses; the rest of the flag list (security
#: mitigations, virtualisation bits) does not change speed and would split identical CPUs into many fingerprints
_SPEED_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "avx_vnni", "amx_bf16", "amx_int8", "amx_tile",
                # aarch64 ("Features" line): dot product, int8 matrix multiply, SVE, bf16
                "asimd", "asimddp", "i8mm", "sve", "sve2", "bf16")


def cpu_fingerprint(cpuinfo: str | None = None) -> dict:
    """``{"key", "machine", "model", "flags"}`` of this CPU: model name + the speed-relevant feature flags.

    Linux: from ``/proc/cpuinfo`` (``cpuinfo`` overrides it, for tests). Elsewhere there is no flag list without
    extra dependencies, so the key is the machine type + ``platform.processor()`` — coarser (two CPUs of one
    family may share it), which costs speed at worst: every candidate a record names passed its gate."""
    machine = platform.machine().lower() or "unknown"
    model, flags = None, []
    if cpuinfo is None:
        cpuinfo = cpuinfo_text() or ""
    for line in cpuinfo.splitlines():
        k, _, v = line.partition(":")
        k = k.strip().lower()
        if model is None and k in ("model name", "cpu model", "hardware"):
            model = " ".join(v.split())
        elif not flags and k in ("flags", "features"):
            have = set(v.split())
            flags = [f for f in _SPEED_FLAGS if f in have]
        if model is not None and flags:
            break
    model = model or platform.processor() or "unknown"
    return {"key": f"{machine} | {model} | {'+'.join(flags) or 'no flags'}", "machine": machine, "model": model,
            "flags": flags}


def threads_key(threads: int | None) -> str:
    """The record's key for an intra-op thread count: ``"default"`` for onnxruntime's own choice."""
    return str(int(threads)) if threads else "default"


# ------------------------------------------------------------------ reading the record
def read_record(bundle_dir: str | os.PathLike) -> dict | None:
    """The bundle's ``fastpath.json``, or ``None`` when there is none. A malformed file is an error (someone
    edited it): better said at load than silently ignored."""
    p = Path(bundle_dir) / RECORD
    if not p.is_file():
        return None
    try:
        rec = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DenkiError(f"{p}: invalid JSON ({e}); delete it or re-run `denki bench pick`") from None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT or not isinstance(rec.get("records"), dict):
        raise DenkiError(f"{p}: not a fast-path record of format {FORMAT}; delete it or re-run `denki bench pick`")
    return rec


def usable(candidate: dict, manifest: dict, available: dict) -> str | None:
    """``None`` if a recorded candidate may be used on this bundle now, else why not."""
    b = candidate.get("backend")
    if b not in CPU_VARIANTS or b not in available:
        return f"{b}: not in this bundle"
    if not passed_gate(manifest, b):
        return f"{b}: did not pass its parity gate"
    if candidate.get("sha256") != manifest.get("files", {}).get(MODEL_FILES[b]):
        return f"{b}: {MODEL_FILES[b]} changed since it was timed (re-exported?)"
    return None


WORKLOADS = ("mixed", "batch")


def recorded_choice(bundle_dir: str | os.PathLike, manifest: dict, available: dict, threads: int | None,
                    fingerprint: dict | None = None, workload: str = "mixed") -> tuple[dict | None, str]:
    """``(candidate, why)``: the fastest recorded candidate usable now for this CPU and thread count, or
    ``(None, why not)`` — then the caller applies its default rule.

    ``workload``: ``mixed`` (serving: the record's order, by ``score_ms``, the geometric mean of batch 1 and batch
    N) or ``batch`` (batch scoring, where every call is a full batch: by ``bN_ms`` alone — e.g. static QDQ int8 is
    the slowest int8 at batch 1 and the fastest at batch 32 on the development CPU)."""
    if workload not in WORKLOADS:
        raise DenkiError(f"unknown workload {workload!r}; choose {', '.join(WORKLOADS)}")
    rec = read_record(bundle_dir)
    if rec is None:
        return None, f"no {RECORD} in the bundle"
    fp = fingerprint or cpu_fingerprint()
    mine = rec["records"].get(fp["key"])
    if not mine:
        return None, f"no record for this CPU ({fp['key']})"
    entry = (mine.get("by_threads") or {}).get(threads_key(threads))
    if not entry:
        have = ", ".join(sorted(mine.get("by_threads") or {})) or "none"
        return None, f"no record for this CPU at threads={threads_key(threads)} (recorded: {have})"
    skipped = []
    cands = list(entry.get("candidates", []))
    if workload == "batch":  # stable: ties keep the record's order
        cands.sort(key=lambda c: c.get("bN_ms", float("inf")))
    for c in cands:
        why = usable(c, manifest, available)
        if why is None:
            note = f"; skipped {'; '.join(skipped)}" if skipped else ""
            figure = (f"{c['bN_ms']:.2f} ms at batch {entry.get('batch_size', '?')}" if workload == "batch"
                      else f"{c['score_ms']:.2f} ms")
            return c, (f"recorded fastest{' for batches' if workload == 'batch' else ''} on this CPU at "
                       f"threads={threads_key(threads)} ({figure}, {entry.get('measured_at', '?')}){note}")
        skipped.append(why)
    return None, "no recorded candidate is usable: " + "; ".join(skipped)


# ------------------------------------------------------------------ measuring
def _workload(bundle_dir: Path, tokenizer, kind: str, batch_size: int) -> dict[str, list[dict]]:
    """Padded input batches from the bundle's ``parity_sample.json``: ``"b1"`` one row each, ``"bN"`` rows of
    ``batch_size`` — the texts (or QA windows) at the bundle's own ``max_length``, as the runtime encodes them."""
    p = bundle_dir / "parity_sample.json"
    if not p.is_file():
        raise DenkiError(f"{bundle_dir}: no parity_sample.json to time the variants on")
    task_json = read_task(bundle_dir)
    task = task_for(kind)
    # the runtime's own encoding of the parity sample: 256 texts (a router), or the windows of 64 questions (QA)
    encs = task.sample_encodings(tokenizer, task.parity_data(bundle_dir, None, task_json, 256), task_json, 256)
    if not encs:
        raise DenkiError(f"{p}: no examples to time the variants on")
    singles = [tokenizer.pad([e]) for e in encs[:32]]
    pool = encs * (1 + batch_size // len(encs))  # a sample smaller than one batch: repeat it
    batches = [tokenizer.pad(pool[s:s + batch_size]) for s in range(0, len(pool) - batch_size + 1, batch_size)]
    return {"b1": singles, "bN": batches[:8]}


def _geomean(xs: list[float]) -> float:
    return float(np.exp(np.mean(np.log(xs))))


def measure(bundle_dir: str | os.PathLike, manifest: dict, tokenizer, *, threads: int | None = None,
            iterations: int = 20, batch_iterations: int = 5, batch_size: int = 32, spinning: bool = True,
            variants: list[str] | None = None) -> dict:
    """Time every CPU variant that passed its gate (× spinning on/off when ``threads`` is not 1 and ``spinning``);
    return an ENTRY of the record format (module docstring), candidates fastest first.

    Calls are interleaved candidate by candidate (a busy machine slows all of them alike), after one warm-up
    call each; the median of ``iterations`` batch-1 calls and ``batch_iterations`` batch-``batch_size`` calls."""
    d = Path(bundle_dir)
    names = [b for b in (variants or CPU_VARIANTS)
             if b in CPU_VARIANTS and (d / MODEL_FILES[b]).is_file() and passed_gate(manifest, b)]
    if not names:
        raise DenkiError(f"{d}: no CPU variant that passed its parity gate to time")
    spins = (True, False) if spinning and threads != 1 else (None,)
    sessions = {}
    for b in names:
        for s in spins:
            sess = open_session(d / MODEL_FILES[b], "cpu", threads, allow_spinning=s)[0]
            sessions[(b, s)] = (sess, [i.name for i in sess.get_inputs()])
    work = _workload(d, tokenizer, manifest["kind"], batch_size)
    times: dict = {k: {"b1": [], "bN": []} for k in sessions}
    for scen, n in (("b1", iterations), ("bN", batch_iterations)):
        batches = work[scen]
        for i in range(n + 1):
            batch = batches[i % len(batches)]
            for k, (sess, inputs) in sessions.items():
                feed = {x: batch[x] for x in inputs}
                t = time.perf_counter()
                sess.run(None, feed)
                if i:  # the first call of each (allocations, kernel selection) is not timed
                    times[k][scen].append((time.perf_counter() - t) * 1e3)
    files = manifest.get("files", {})
    cands = []
    for (b, s), ts in times.items():
        b1, bn = statistics.median(ts["b1"]), statistics.median(ts["bN"])
        cands.append({"backend": b, "allow_spinning": s, "b1_ms": round(b1, 4), "bN_ms": round(bn, 4),
                      "score_ms": round(_geomean([b1, bn]), 4), "sha256": files.get(MODEL_FILES[b])})
    cands.sort(key=lambda c: c["score_ms"])
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"backend": cands[0]["backend"], "allow_spinning": cands[0]["allow_spinning"],
            "score_ms": cands[0]["score_ms"],
            "measured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "iterations": iterations, "batch_iterations": batch_iterations, "batch_size": batch_size,
            # the machine's load while timing: a record made on a busy machine says so
            "load_average": [round(x, 2) for x in load] if load else None, "candidates": cands}


def record(bundle_dir: str | os.PathLike, entry: dict, threads: int | None,
           fingerprint: dict | None = None) -> Path:
    """Store ``entry`` for this CPU and thread count in ``BUNDLE/fastpath.json`` (atomically; other CPUs' and
    other thread counts' entries are kept)."""
    p = Path(bundle_dir) / RECORD
    rec = read_record(bundle_dir) or {"format": FORMAT, "records": {}}
    fp = fingerprint or cpu_fingerprint()
    mine = rec["records"].setdefault(fp["key"], {"cpu": {k: fp[k] for k in ("machine", "model", "flags")},
                                                  "by_threads": {}})
    mine.setdefault("by_threads", {})[threads_key(threads)] = entry
    atomic_write_json(p, rec)
    return p


def format_entry(entry: dict, threads: int | None) -> str:
    """The candidates of one ENTRY as lines for the CLI, fastest first."""
    lines = [f"threads={threads_key(threads)} (batch 1 / batch {entry['batch_size']} median ms; score = "
             "geometric mean):"]
    for c in entry["candidates"]:
        spin = "" if c["allow_spinning"] is None else f" spinning {'on' if c['allow_spinning'] else 'off'}"
        lines.append(f"  {c['backend']:12s}{spin:13s} {c['b1_ms']:8.2f} / {c['bN_ms']:8.2f}  score {c['score_ms']:.2f}")
    return "\n".join(lines)
