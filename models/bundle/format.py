"""The one bundle format every stage reads and writes (see ../shared/DESIGN.md, README "Layout").

A bundle is a directory: model files (``config.json`` + ``model.safetensors`` for PyTorch, ``model*.onnx`` for
ONNX), the tokenizer files, an optional ``task.json`` (decision rule shared by PyTorch and ONNX paths) and
``manifest.json``::

    {"format": 1, "kind": "pretrained|TASK|onnx-TASK", "created": ISO-8601,
     "files": {relative_path: sha256}, "source": {...provenance...}, "metrics": {...}, "versions": {...}}

:func:`verify_bundle` refuses a bundle whose files do not match the manifest. This module is torch-free.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import sys
from importlib import metadata
from pathlib import Path

from denki.models.io.errors import DenkiError
from denki.models.io.fileio import atomic_write_json, sha256_file

MANIFEST = "manifest.json"
TASK = "task.json"
#: what a bundle kind looks like: ``pretrained`` or a registered task's name, ``onnx-`` before it for ONNX bundles.
#: Which kinds exist is the task registry's business (:mod:`models.registry`); this layer only keeps typos out.
KIND_PATTERN = re.compile(r"[a-z][a-z0-9-]*")
#: an ONNX bundle's kind is its task's name after this prefix
ONNX_PREFIX = "onnx-"
#: the base encoder's bundle kind: not a task (no head), the starting point of every fine-tune
PRETRAINED = "pretrained"
#: the bundle format this denki writes and the newest it reads. A manifest without ``format`` is format 1 (every bundle
#: before the number existed). Raise it when a change would make an older denki misread a bundle; a runtime that
#: meets a newer format refuses it (:func:`read_manifest`) instead of guessing.
FORMAT = 1
_VERSIONED = ("denki", "torch", "transformers", "tokenizers", "fugashi", "unidic-lite", "ipadic", "onnx",
              "onnxruntime-gpu", "onnxruntime", "optimum", "optimum-onnx", "numpy")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def command_line() -> str:
    return " ".join([Path(sys.argv[0]).name] + sys.argv[1:])


def _bundle_files(directory: Path) -> list[str]:
    files = []
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name != MANIFEST and not p.name.endswith(".partial") and "__pycache__" not in p.parts:
            files.append(p.relative_to(directory).as_posix())
    return files


def write_manifest(directory: str | os.PathLike, kind: str, *, source: dict | None = None,
                   metrics: dict | None = None, extra: dict | None = None) -> dict:
    """Hash every file in ``directory`` and write ``manifest.json`` (atomically) last."""
    if not isinstance(kind, str) or not KIND_PATTERN.fullmatch(kind):
        raise ValueError(f"bad bundle kind {kind!r}: lowercase letters, digits and '-'")
    d = Path(directory)
    manifest = {
        "format": FORMAT,
        "kind": kind,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "files": {f: sha256_file(d / f) for f in _bundle_files(d)},
        "source": source or {},
        "metrics": metrics or {},
        "versions": package_versions(),
    }
    if extra:
        manifest.update(extra)
    atomic_write_json(d / MANIFEST, manifest)
    return manifest


def resolve_bundle(path: str | os.PathLike) -> Path:
    """A bundle directory, or a run directory holding it as ``bundle/`` (what `denki pretrain`, `denki finetune`
    write); accept either. Raises :class:`DenkiError` when neither holds a ``manifest.json``."""
    p = Path(path)
    if (p / MANIFEST).is_file():
        return p
    if (p / "bundle" / MANIFEST).is_file():
        return p / "bundle"
    if not p.exists():
        raise DenkiError(f"{p}: not found")
    raise DenkiError(f"{p}: not a denki bundle (no {MANIFEST} here or in {p / 'bundle'})" + _import_hint(p))


def check_model_source(model, init_random, tokenizer_dir) -> None:
    """The fine-tuners' two sources: ``--model BUNDLE``, or ``--init-random SIZE --tokenizer DIR`` (the control)."""
    if (model is None) == (init_random is None):
        raise DenkiError("give either --model BUNDLE or --init-random SIZE --tokenizer DIR")
    if init_random is not None and not tokenizer_dir:
        raise DenkiError("--init-random needs --tokenizer DIR (the vocabulary the random model will use)")


def _import_hint(p: Path) -> str:
    if (p / "config.json").is_file():
        return f"; a transformers checkpoint? import it first: denki import --model {p} --out BUNDLE"
    return ""


def read_manifest(directory: str | os.PathLike) -> dict:
    d = Path(directory)
    if not d.is_dir():
        raise DenkiError(f"{d}: bundle directory not found")
    mpath = d / MANIFEST
    if not mpath.is_file():
        raise DenkiError(f"{d}: not a denki bundle (no {MANIFEST})" + _import_hint(d))
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DenkiError(f"{mpath}: invalid JSON ({e})") from None
    fmt = manifest.get("format", 1)
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 1:
        raise DenkiError(f"{mpath}: field 'format' is {fmt!r}, expected a positive integer")
    if fmt > FORMAT:
        raise DenkiError(f"{d}: bundle format {fmt} is newer than this denki reads (format {FORMAT}, denki "
                         f"{_own_version()}); upgrade denki (pip install -U denki) to load it")
    return manifest


#: hex characters of the manifest's sha256 that name a bundle's version (``model_version`` of the HTTP API)
VERSION_CHARS = 12


def bundle_version(directory: str | os.PathLike) -> str:
    """The bundle's version: the first :data:`VERSION_CHARS` hex characters of the sha256 of its ``manifest.json``
    (which lists every file's sha256, so any change to the bundle changes it)."""
    return sha256_file(Path(directory) / MANIFEST)[:VERSION_CHARS]


def _own_version() -> str:
    try:
        return metadata.version("denki")
    except metadata.PackageNotFoundError:
        return "from source"


def _kind_error(d: Path, kind, kinds: tuple[str, ...]) -> DenkiError:
    """A bundle of the wrong kind; the common mix-ups (PyTorch ↔ ONNX) say what to run instead."""
    if isinstance(kind, str) and f"onnx-{kind}" in kinds:
        return DenkiError(f"{d}: a PyTorch {kind} bundle; this takes an ONNX bundle — export it first: "
                          f"denki export --model {d} --out {d.name}-onnx")
    if isinstance(kind, str) and kind.startswith("onnx-") and kind[len("onnx-"):] in kinds:
        return DenkiError(f"{d}: an ONNX bundle ({kind}); this takes the PyTorch {kind[len('onnx-'):]} bundle it "
                          "was exported from")
    return DenkiError(f"{d}: bundle kind is {kind!r}, expected one of {list(kinds)}")


def verify_bundle(directory: str | os.PathLike, kinds: tuple[str, ...] | None = None) -> dict:
    """Check every file listed in the manifest exists and matches its sha256; return the manifest.

    Raises :class:`DenkiError` on a missing or modified file, or a bundle of an unexpected kind.
    """
    d = Path(directory)
    manifest = read_manifest(d)
    if kinds is not None and manifest.get("kind") not in kinds:
        raise _kind_error(d, manifest.get("kind"), kinds)
    for rel, digest in manifest.get("files", {}).items():
        p = d / rel
        if not p.is_file():
            raise DenkiError(f"{d}: file {rel} listed in the manifest is missing")
        if sha256_file(p) != digest:
            raise DenkiError(f"{d}: file {rel} does not match its sha256 in the manifest (modified or corrupt); "
                             "refusing to load it")
    return manifest


def read_task(directory: str | os.PathLike) -> dict:
    p = Path(directory) / TASK
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else {}


def copy_with_task(src: str | os.PathLike, out: str | os.PathLike, task: dict, provenance: dict[str, dict]) -> None:
    """A copy of the bundle ``src`` at ``out`` with ``task`` as its task.json and ``provenance`` added to the
    manifest's ``source`` (every file hashed again; built in ``OUT.partial``, then renamed): how ``denki calibrate``
    writes a calibrated bundle and leaves the source as it is."""
    import shutil

    from denki.models.io.fileio import replace_dir

    manifest = read_manifest(src)
    dest = Path(out)
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(MANIFEST, "__pycache__"))
    atomic_write_json(tmp / TASK, task)
    write_manifest(tmp, manifest["kind"], source={**manifest.get("source", {}), **provenance},
                   metrics=manifest.get("metrics", {}))
    replace_dir(tmp, dest)
