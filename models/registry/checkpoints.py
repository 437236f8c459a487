"""denki's shipped general checkpoints: named bundles with model cards, in the repository's ``checkpoints/`` folder
(a source tree or an editable install; a wheel does not carry them: :data:`WHERE_TO_GET`).

A checkpoint is an ordinary bundle directory (``manifest.json``, ``config.json``, ``model.safetensors``, the
tokenizer files; a pretrained ELECTRA also its ``generator/``) plus two files of its own:

* ``card.json`` — what ``denki checkpoints`` lists: at least ``name``, ``kind`` (``pretrained`` or a task's, e.g. ``qa``),
  ``description``, ``size``, ``parameters``, ``flops``, ``corpus``, ``licence``, ``dev_scores``, ``command``;
* ``README.md`` — the model card for people (corpus and sha256s, FLOPs, steps, the command, licence, scores);

and ``SHA256SUMS`` (``sha256  relative/path`` per line, every other file of the folder), which
``denki checkpoints --verify`` checks. Data, not code: any command that takes a bundle path also takes a checkpoint's
name (:func:`resolve_model_arg`). More folders of checkpoints: ``DENKI_CHECKPOINTS`` (``os.pathsep``-separated),
searched after the repository's own. Torch-free.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from denki.models.io.errors import DenkiError
from denki.models.io.fileio import sha256_file

#: the repository's own checkpoints (an editable install finds them beside the code)
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "checkpoints"
CARD = "card.json"
SUMS = "SHA256SUMS"


def checkpoint_kinds() -> tuple[str, ...]:
    """What a checkpoint can be: a PyTorch bundle, ``pretrained`` or a registered task's (never an ONNX bundle:
    export one from it)."""
    from denki.models.bundle.format import PRETRAINED
    from denki.models.registry.tasks import torch_kinds

    return (PRETRAINED, *torch_kinds())


def checkpoint_dirs() -> list[Path]:
    """The folders searched for checkpoints, in order: the repository's ``checkpoints/``, then ``DENKI_CHECKPOINTS``."""
    extra = [Path(p) for p in os.environ.get("DENKI_CHECKPOINTS", "").split(os.pathsep) if p]
    return [SHIPPED_DIR, *extra]


def read_card(folder: str | os.PathLike) -> dict:
    """A checkpoint folder's ``card.json`` with ``path`` (the folder) added; :class:`DenkiError` names the file and
    field that is wrong."""
    p = Path(folder) / CARD
    try:
        card = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise DenkiError(f"{p}: cannot read the checkpoint card ({e})") from None
    for key in ("name", "kind"):
        if not isinstance(card.get(key), str) or not card[key]:
            raise DenkiError(f"{p}: field {key!r} is missing or not a string")
    kinds = checkpoint_kinds()
    if card["kind"] not in kinds:
        raise DenkiError(f"{p}: field 'kind' is {card['kind']!r}, expected one of {', '.join(kinds)}")
    card["path"] = str(Path(folder))
    return card


def list_checkpoints() -> list[dict]:
    """Every checkpoint's card (with ``path``), in folder order then by name; the first of two with one name wins."""
    seen: dict[str, dict] = {}
    for base in checkpoint_dirs():
        if not base.is_dir():
            continue
        for folder in sorted(p for p in base.iterdir() if (p / CARD).is_file()):
            card = read_card(folder)
            seen.setdefault(card["name"], card)
    return list(seen.values())


def find_checkpoint(name: str) -> dict | None:
    """The card of the checkpoint called ``name``, or None."""
    return next((c for c in list_checkpoints() if c["name"] == name), None)


def resolve_model_arg(value: str | os.PathLike | None) -> str | os.PathLike | None:
    """``--model`` / ``--init-from`` values: an existing path stays as it is; a checkpoint's name becomes its folder;
    anything else is returned unchanged, so that the command's own "not found" error still names it."""
    if value is None or Path(value).exists():
        return value
    card = find_checkpoint(str(value))
    return card["path"] if card else value


def checkpoint_names() -> list[str]:
    return [c["name"] for c in list_checkpoints()]


#: where the shipped checkpoints live when an installed denki does not carry them
WHERE_TO_GET = ("an installed denki carries no checkpoints (20 MB of PyTorch weights, of no use to the torch-free "
                "runtime): they ship in the checkpoints/ folder of denki's repository — clone it and set "
                "DENKI_CHECKPOINTS=/path/to/denki/checkpoints")


def resolve_or_explain(value: str | os.PathLike, label: str) -> str | os.PathLike:
    """:func:`resolve_model_arg`, or a :class:`DenkiError` for a value that is neither an existing path nor a
    checkpoint's name: it lists the names, or says where to get the checkpoints when there are none (an installed
    wheel without ``DENKI_CHECKPOINTS``). ``label`` starts the message (the option and its value)."""
    resolved = resolve_model_arg(value)
    if Path(resolved).exists():
        return resolved
    names = checkpoint_names()
    where = ", ".join(names) if names else f"none here; {WHERE_TO_GET}"
    raise DenkiError(f"{label}: not found (neither a path nor a checkpoint name; checkpoints: {where})")


def write_sums(folder: str | os.PathLike) -> Path:
    """Write ``SHA256SUMS`` for every file under ``folder`` (itself excluded), sorted; returns its path."""
    from denki.models.io.fileio import atomic_write_text

    d = Path(folder)
    files = sorted(p for p in d.rglob("*") if p.is_file() and p.name != SUMS)
    lines = [f"{sha256_file(p)}  {p.relative_to(d).as_posix()}" for p in files]
    atomic_write_text(d / SUMS, "\n".join(lines) + "\n")
    return d / SUMS


def verify_checkpoint(card: dict) -> list[str]:
    """Problems of one checkpoint folder (empty: every file listed in ``SHA256SUMS`` matches, no file is unlisted,
    and the bundle's own manifest verifies)."""
    from denki.models.bundle.format import verify_bundle

    d = Path(card["path"])
    sums = d / SUMS
    if not sums.is_file():
        return [f"{sums}: missing"]
    problems, listed = [], set()
    for n, line in enumerate(sums.read_text(encoding="utf-8").splitlines(), 1):
        digest, _, rel = line.partition("  ")
        if not rel or len(digest) != 64:
            problems.append(f"{sums}, line {n}: expected 'SHA256  PATH'")
            continue
        listed.add(rel)
        p = d / rel
        if not p.is_file():
            problems.append(f"{d}: {rel} is listed but missing")
        elif sha256_file(p) != digest:
            problems.append(f"{d}: {rel} does not match its sha256 (modified or corrupt)")
    unlisted = sorted(p.relative_to(d).as_posix() for p in d.rglob("*")
                      if p.is_file() and p.name != SUMS and p.relative_to(d).as_posix() not in listed)
    problems += [f"{d}: {rel} is not listed in {SUMS}" for rel in unlisted]
    try:
        verify_bundle(d, kinds=(card["kind"],))
    except DenkiError as e:
        problems.append(str(e))
    return problems
