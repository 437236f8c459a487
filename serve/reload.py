"""Model reloads without a dropped request: ``POST /admin/reload`` and SIGHUP (:class:`Reloader`).

A reload loads every served bundle again from the path given at start (re-resolved, so a symlink the operator
repointed is followed), checks it before it takes traffic (:func:`load_checked`: the manifest's sha256 of every
file, the task the server serves, and a run of the bundle's own parity sample that must agree with what the
bundle recorded), then swaps it in. The swap is one assignment per model (:class:`Loaded`): a micro-batch that
already started finishes on the old predictor, the next one runs on the new, and each answer's ``model_version``
is the version of the predictor that computed it (:func:`tag_version` / :func:`take_version`). A bundle that
fails any check is refused with its reason, and the old model keeps serving.

With several worker processes (``denki serve --workers N``) a reload that lands on one worker reaches all of them
through files in the server's state folder (:class:`ReloadBoard`): the worker that got the request loads and
checks first, then publishes a new *generation* with the resolved paths; every other worker watches the board
(a ``stat`` every :data:`WATCH_INTERVAL_S`), loads exactly those paths and reports its version; the first worker
answers once every live worker reports the generation, or with the errors that stopped them. A worker that the
supervisor restarts later loads the board's paths, so it serves the same version as the others. SIGHUP to the
supervisor is passed to one worker, which does the same (``serve.workers``); SIGHUP to a single-process server
reloads it.

Light to import: no web framework (the route lives in :mod:`serve.http_routes`).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from denki.models.bundle.format import MANIFEST, bundle_version
from denki.models.io.errors import DenkiError
from denki.models.io.fileio import atomic_write_json
from denki.models.registry.tasks import task_for

log = logging.getLogger("denki.http")

#: the environment variable naming the state folder of ``denki serve --workers N`` (set by the supervisor,
#: inherited by every worker): the reload board lives there, and a worker that cannot start leaves its reason
WORKER_STATE_ENV = "DENKI_SERVE_STATE_DIR"
#: key a model call adds to each result: the version of the predictor that computed it (removed by the routes)
VERSION_KEY = "_model_version"
#: how often a worker looks at the reload board (seconds)
WATCH_INTERVAL_S = 0.25
#: how long ``/admin/reload`` waits for every worker to report the new generation
WAIT_ALL_S = 120.0
#: parity-sample inputs run before a reloaded bundle takes traffic, and the share that must agree
CHECK_ITEMS = 16
CHECK_MIN_AGREEMENT = 0.8


@dataclass(frozen=True)
class Loaded:
    """One served model: the predictor, its version (``model_version``) and the bundle folder it came from
    (resolved: a symlink's target at load time)."""
    predictor: Any
    version: str
    path: str


def model_version(predictor) -> str:
    """The served bundle's version (``model_version`` of every answer): the first 12 hex characters of the sha256
    of its manifest.json; ``unknown`` for a predictor without a bundle directory."""
    d = getattr(predictor, "dir", None)
    if d is None or not os.path.isfile(os.path.join(str(d), MANIFEST)):
        return "unknown"
    return bundle_version(d)


def loaded(predictor) -> Loaded:
    """A predictor already loaded (at start) as a :class:`Loaded`."""
    d = getattr(predictor, "dir", None)
    return Loaded(predictor, model_version(predictor), str(Path(d).resolve()) if d is not None else "")


# ----------------------------------------------------------------------------------- the check before traffic
def load_checked(name: str, path: str, load_kw: dict) -> Loaded:
    """Load the bundle at ``path`` for the model served as ``name`` and check it before it takes traffic: every
    file's sha256 against the manifest (the predictor's own verification), the task kind, and the parity check
    (:func:`check_parity`). Raises :class:`DenkiError` naming the bundle and the reason."""
    from denki.serve.runtime import Predictor, resolve_onnx_bundle

    try:
        real = str(Path(resolve_onnx_bundle(path)).resolve())
        predictor = Predictor(real, **load_kw)
    except Exception as exc:  # noqa: BLE001 — whatever stops a new bundle from loading refuses it
        why = str(exc) if isinstance(exc, DenkiError) else f"{type(exc).__name__}: {exc}"
        raise DenkiError(f"{name} bundle {path}: refused: {why}") from None
    want = task_for(name)
    if predictor.task_spec is not want:
        raise DenkiError(f"{name} bundle {path}: refused: it is a {predictor.kind} bundle; this server serves "
                         f"{want.onnx_kind} as {name}")
    check_parity(predictor, f"{name} bundle {path}")
    return Loaded(predictor, model_version(predictor), real)


def check_parity(predictor, where: str, n: int = CHECK_ITEMS) -> dict:
    """Run up to ``n`` inputs of the bundle's parity_sample.json through the loaded predictor: every input must get
    a result with finite numbers, and where the task records expected outputs (:meth:`TaskSpec.serving_sample`),
    at least :data:`CHECK_MIN_AGREEMENT` of them must agree (:meth:`TaskSpec.serving_agrees`). Returns
    ``{"n", "agreement"}``; raises :class:`DenkiError` otherwise."""
    spec = predictor.task_spec
    sample_file = Path(predictor.dir) / "parity_sample.json"
    sample = json.loads(sample_file.read_text(encoding="utf-8")) if sample_file.is_file() else None
    inputs, expected = spec.serving_sample(sample, n) if sample else ([spec.request(spec.warmup_example())], None)
    try:
        results = predictor.predict(inputs)
    except Exception as exc:  # noqa: BLE001 — any failure of a new model refuses it
        raise DenkiError(f"{where}: refused: its parity sample fails to run ({type(exc).__name__}: {exc})") from None
    if len(results) != len(inputs) or not all(_finite(r) for r in results):
        raise DenkiError(f"{where}: refused: its parity sample gave missing or non-finite results")
    agreement = None
    if expected:
        agreement = sum(spec.serving_agrees(r, e) for r, e in zip(results, expected)) / len(expected)
        if agreement < CHECK_MIN_AGREEMENT:
            raise DenkiError(f"{where}: refused: it agrees with its own parity sample on {agreement:.0%} of "
                             f"{len(expected)} inputs (at least {CHECK_MIN_AGREEMENT:.0%} needed)")
    return {"n": len(inputs), "agreement": agreement}


def _finite(x) -> bool:
    if isinstance(x, float):
        return math.isfinite(x)
    if isinstance(x, dict):
        return all(_finite(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return all(_finite(v) for v in x)
    return True


# --------------------------------------------------------------------------------- versions with the results
def tag_version(results: list, version: str) -> list:
    """Mark each result (a dict) with the version of the predictor that computed it (the model call does this,
    in the same step that picked the predictor)."""
    for r in results:
        if isinstance(r, dict):
            r[VERSION_KEY] = version
    return results


def take_version(results: list, fallback: str) -> str:
    """Remove the version marks of a request's results; the version that answered (its first result's; a
    request split over two micro-batches around a swap reports the newer one)."""
    versions = [r.pop(VERSION_KEY) for r in results if isinstance(r, dict) and VERSION_KEY in r]
    return versions[-1] if versions else fallback


# ------------------------------------------------------------------------------------------------ the board
class ReloadBoard:
    """The files through which one worker's reload reaches the others, in the server's state folder:
    ``reload.json`` (``{"generation", "paths": {model: resolved folder}, "by": pid}``, written under a lock) and
    ``workers/PID.json`` (each worker's generation, versions and last error)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        (self.folder / "workers").mkdir(parents=True, exist_ok=True)
        self.file = self.folder / "reload.json"
        self._mtime = None

    def current(self) -> dict:
        """The last published reload (``{"generation": 0}`` before the first)."""
        try:
            return json.loads(self.file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"generation": 0, "paths": {}}

    def changed(self) -> bool:
        """Whether reload.json changed since the last look (a stat; cheap enough to poll)."""
        try:
            m = self.file.stat().st_mtime_ns
        except FileNotFoundError:
            return False
        if m == self._mtime:
            return False
        self._mtime = m
        return True

    def publish(self, paths: dict[str, str]) -> int:
        """Publish a new generation with the resolved bundle paths; returns its number."""
        import fcntl

        with open(self.folder / "reload.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            g = int(self.current().get("generation", 0)) + 1
            atomic_write_json(self.file, {"generation": g, "paths": paths, "by": os.getpid(), "at": time.time()})
        return g

    def report(self, generation: int, versions: dict[str, str], error: str | None = None) -> None:
        atomic_write_json(self.folder / "workers" / f"{os.getpid()}.json",
                          {"pid": os.getpid(), "generation": generation, "versions": versions, "error": error})

    def leave(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.folder / "workers" / f"{os.getpid()}.json").unlink()

    def workers(self) -> list[dict]:
        """The live workers' reports (a worker that died without leaving is dropped: its pid is gone)."""
        out = []
        for f in sorted((self.folder / "workers").glob("*.json")):
            try:
                rec = json.loads(f.read_text(encoding="utf-8"))
                os.kill(int(rec["pid"]), 0)
            except (ProcessLookupError, ValueError, KeyError):
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()
                continue
            except (FileNotFoundError, PermissionError, json.JSONDecodeError):
                continue
            out.append(rec)
        return out


def board_from_env() -> ReloadBoard | None:
    """The board of a worker of ``denki serve --workers N`` (its state folder), else None (one process)."""
    folder = os.environ.get(WORKER_STATE_ENV)
    return ReloadBoard(folder) if folder else None


def start_paths(sources: dict[str, str]) -> dict[str, str]:
    """The bundle paths a worker loads at start: the board's, when an earlier reload published some (a worker
    the supervisor restarts serves what the others serve), else the paths given at start."""
    board = board_from_env()
    published = board.current().get("paths", {}) if board else {}
    return {name: published.get(name, path) for name, path in sources.items()}


# --------------------------------------------------------------------------------------------- the reloader
class ReloadFailed(DenkiError):
    """A reload that did not take effect everywhere; ``status``: 409 refused (nothing changed) or 500 (some
    worker failed after the first had swapped); ``details``: per worker."""

    def __init__(self, message: str, status: int = 409, details: Any = None):
        super().__init__(message)
        self.status, self.details = status, details


class Reloader:
    """Reloads of one app's models. ``swap(name, loaded)`` is called to put a new model in service (the app
    updates its micro-batcher's model, versions and metrics); ``versions()``: model → the version serving now (the
    app's own record); ``sources``: model → the path given at start; ``load_kw``: the predictor settings (backend,
    device, threads)."""

    def __init__(self, sources: dict[str, str], load_kw: dict, swap, versions, board: ReloadBoard | None = None):
        self.sources, self.load_kw, self.swap, self.board = dict(sources), dict(load_kw), swap, board
        self._versions = versions
        self.generation = board.current().get("generation", 0) if board else 0
        self.last: dict | None = None
        self._lock = asyncio.Lock()
        self._watcher: asyncio.Task | None = None

    @property
    def versions(self) -> dict[str, str]:
        return dict(self._versions())

    # -------------------------------------------------------------- lifecycle (the app's lifespan)
    def start(self) -> None:
        if self.board is not None:
            self.board.report(self.generation, self.versions)
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        if self.board is not None:
            self.board.leave()

    # -------------------------------------------------------------- one reload
    async def reload(self) -> dict:
        """Load and check every bundle again from its start path, swap them in here, then (several workers) publish
        them and wait until every live worker serves them. Returns what now serves; raises :class:`ReloadFailed`."""
        async with self._lock:
            t0 = time.perf_counter()
            paths = {name: str(Path(src).resolve()) for name, src in self.sources.items()}
            new = await self._load_all(paths)  # refuses before anything changes
            self._swap_all(new)
            if self.board is None:
                return self._answer(t0, [{"pid": os.getpid(), "versions": self.versions, "error": None}])
            self.generation = self.board.publish({n: m.path for n, m in new.items()})
            self.board.report(self.generation, self.versions)
        workers = await self._wait_all(self.generation)
        return self._answer(t0, workers)

    async def _load_all(self, paths: dict[str, str]) -> dict[str, Loaded]:
        try:
            return {name: await asyncio.to_thread(load_checked, name, p, self.load_kw) for name, p in paths.items()}
        except DenkiError as exc:
            log.error("reload refused; the served models stay: %s", exc)
            raise ReloadFailed(str(exc), 409, {"serving": dict(self.versions)}) from None

    def _swap_all(self, new: dict[str, Loaded]) -> None:
        for name, m in new.items():
            old = self.versions.get(name)
            self.swap(name, m)
            log.info("reloaded %s: %s → %s (%s)", name, old, m.version, m.path)

    async def _wait_all(self, generation: int) -> list[dict]:
        deadline = time.monotonic() + WAIT_ALL_S
        while True:
            workers = self.board.workers()
            if all(w["generation"] >= generation for w in workers):
                break
            if time.monotonic() > deadline:
                late = [w["pid"] for w in workers if w["generation"] < generation]
                raise ReloadFailed(f"workers {late} did not report generation {generation} within {WAIT_ALL_S:g} s",
                                   500, workers)
            await asyncio.sleep(0.05)
        failed = [w for w in workers if w.get("error")]
        if failed:
            raise ReloadFailed("some workers refused the new bundles and keep serving the old ones: "
                               + "; ".join(f"pid {w['pid']}: {w['error']}" for w in failed), 500, workers)
        return workers

    def _answer(self, t0: float, workers: list[dict]) -> dict:
        self.last = {"generation": self.generation, "model_versions": dict(self.versions),
                     "workers": workers, "seconds": round(time.perf_counter() - t0, 3)}
        return self.last

    # -------------------------------------------------------------- the other workers
    async def _watch(self) -> None:
        """Follow the board: a generation published by another worker is loaded here (exactly its paths)."""
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            if not self.board.changed():
                continue
            cur = self.board.current()
            if int(cur.get("generation", 0)) <= self.generation:
                continue
            async with self._lock:
                await self._follow(cur)

    async def _follow(self, cur: dict) -> None:
        g = int(cur["generation"])
        if g <= self.generation:
            return
        error = None
        try:
            self._swap_all(await self._load_all({n: cur["paths"][n] for n in self.sources if n in cur["paths"]}))
        except ReloadFailed as exc:
            error = str(exc)
        self.generation = g
        self.board.report(g, self.versions, error)

    async def reload_logged(self) -> None:
        """SIGHUP: a reload whose outcome goes to the log."""
        try:
            r = await self.reload()
            log.info("SIGHUP reload: generation %d, %s in %.2f s", r["generation"], r["model_versions"], r["seconds"])
        except ReloadFailed as exc:
            log.error("SIGHUP reload failed: %s", exc)
