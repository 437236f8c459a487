"""The human log of ``denki serve --human-log FILE``: every text the classifier routes to the human label is
appended to FILE as one JSON line, ready to become training data once a person adds its ``label``::

    {"time": "2026-12-07T09:30:12.345+00:00", "model": "router-onnx", "id": "T-1042", "index": 0,
     "text": "…", "top": [{"label": "宿泊", "score": 0.41}, …], "route": "human"}

``time`` is UTC (ISO 8601); ``model`` the served bundle's directory name; ``id`` (with ``index``, the text's
position in the request) only when the request carried an ``X-Request-ID`` header; ``top`` the three most likely
labels by calibrated score; ``route`` the bundle's human label, and ``reason`` why, when the runtime gives one.
There is deliberately no ``label`` key: ``denki finetune classify`` refuses a row without one, so an unlabelled
row cannot slip into training.

Safe with several worker processes writing one file: the file is opened with ``O_APPEND | O_CREAT`` for each
request that has something to log (so a file rotated by renaming is followed, and a deleted one re-created, with
the process umask) and each record is one ``os.write`` of one whole line; the kernel appends each write at the
end of the file in one piece, so lines of different workers never interleave (a local filesystem: NFS does not
promise atomic appends). A failed write (disk full, permission) never fails the request: it is counted
(``on_error``, the server's ``denki_human_log_errors_total``) and logged as a warning once per process.

Standard library only (``serve/`` imports no torch).
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from denki.models.io.errors import DenkiError

log = logging.getLogger("denki.http")

#: labels per record, most likely first
TOP_K = 3
#: the longest request id kept (a header is client input)
MAX_ID_CHARS = 200
_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


def check_human_log_path(path: str | os.PathLike) -> str:
    """The absolute path of a human log, or a :class:`DenkiError` saying why it cannot be one (its folder does not
    exist, or it is a folder). Called at startup, before any worker starts."""
    p = Path(path).expanduser()
    if str(path).strip() == "":
        raise DenkiError("--human-log: empty path")
    p = Path(os.path.abspath(p))
    if not p.parent.is_dir():
        raise DenkiError(f"--human-log {path}: the folder {p.parent} does not exist (create it first)")
    if p.is_dir():
        raise DenkiError(f"--human-log {path}: is a folder; give a file name, e.g. {p / 'human.jsonl'}")
    return str(p)


def top_labels(scores: dict[str, float], k: int = TOP_K) -> list[dict]:
    """The ``k`` most likely labels as ``[{"label", "score"}]``, highest calibrated score first (ties by label)."""
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return [{"label": lab, "score": float(s)} for lab, s in ranked]


class HumanLog:
    """Appends human-routed texts to ``path`` (see the module docstring). ``model``: the name written in every
    record; ``human``: the route that means "a person decides"; ``on_error(n)``: called with the number of records
    a failure lost."""

    def __init__(self, path: str | os.PathLike, *, model: str, human: str = "human",
                 on_error: Callable[[int], None] | None = None):
        self.path = check_human_log_path(path)
        self.model, self.human, self.on_error = str(model), str(human), on_error
        self.errors = 0  # failed writes in this process
        self.written = 0  # records written by this process

    def records(self, texts: Sequence[str], results: Sequence[dict], request_id: str | None = None) -> list[dict]:
        """The log records of one request: one per text whose ``route`` is the human label."""
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
        out = []
        for i, (text, r) in enumerate(zip(texts, results)):
            if r.get("route") != self.human:
                continue
            rec = {"time": now, "model": self.model}
            if request_id:
                rec.update(id=request_id[:MAX_ID_CHARS], index=i)
            rec.update(text=text, top=top_labels(r.get("scores") or {r["label"]: r["score"]}), route=self.human)
            if r.get("reason"):  # why the router abstained, where the runtime says (e.g. low_confidence)
                rec["reason"] = r["reason"]
            out.append(rec)
        return out

    def log(self, texts: Sequence[str], results: Sequence[dict], request_id: str | None = None) -> int:
        """Append the request's human-routed texts; returns how many records were written. Never raises for an
        I/O failure (the user's request must not fail for the log's sake)."""
        recs = self.records(texts, results, request_id)
        if not recs:
            return 0
        lines = [(json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8") for r in recs]
        done = 0
        try:
            fd = os.open(self.path, _FLAGS, 0o666)  # the mode goes through the process umask
        except OSError as exc:
            self._failed(exc, len(lines))
            return 0
        try:
            for line in lines:
                try:
                    n = os.write(fd, line)  # one write per record: an O_APPEND write lands whole, at the end
                except OSError as exc:
                    self._failed(exc, len(lines) - done)
                    break
                if n != len(line):  # a short write (the disk filled up mid-line): end the broken line, stop
                    try:
                        os.write(fd, b"\n")
                    except OSError:
                        pass
                    self._failed(OSError(f"short write ({n} of {len(line)} bytes)"), len(lines) - done)
                    break
                done += 1
        finally:
            os.close(fd)
        self.written += done
        return done

    def _failed(self, exc: Exception, records: int) -> None:
        self.errors += records
        if self.on_error is not None:
            self.on_error(records)
        if self.errors == records:  # the first failure of this process: say so once, then only count
            log.warning("human log %s: cannot write (%s); the requests are answered as usual, the human-routed "
                        "texts are not logged (counted in denki_human_log_errors_total; further failures are "
                        "not logged again by this process)", self.path, exc)
