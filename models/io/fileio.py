"""Atomic writes (write to a temporary name in the same directory, then rename) and file hashing."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


def _file_mode() -> int:
    """The mode ``open()`` gives a new file under this process's umask (0o644 under the usual 0o022). The umask can
    only be read by setting it, so it is set back at once."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def temp_file_beside(path: Path) -> tuple[int, str]:
    """``mkstemp`` next to ``path`` (same file system, so the final rename is atomic), with the mode a plain
    ``open()`` would give: mkstemp's 0600 would keep a service running as another user from reading a bundle."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.fchmod(fd, _file_mode())
    return fd, tmp


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the complete new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_file_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj) -> None:
    atomic_write_text(path, json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=False) + "\n")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def replace_dir(tmp: str | os.PathLike, out: str | os.PathLike) -> None:
    """Move a fully written directory ``tmp`` to ``out``, replacing an existing ``out`` only at the very end
    (the old one is renamed aside first, so a crash never leaves a half-written directory under ``out``)."""
    import shutil

    tmp, out = Path(tmp), Path(out)
    if out.exists():
        old = out.with_name(out.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old)
    else:
        os.replace(tmp, out)
