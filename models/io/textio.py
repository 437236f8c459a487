"""Reading user text files: plain or .gz, UTF-8, one item per line, with errors that name file and line."""
from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from pathlib import Path

from denki.models.io.errors import InputError


def open_binary(path: str | os.PathLike):
    """Open a file for binary reading, transparently decompressing ``.gz``."""
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path=str(path))
    if path.is_dir():
        raise InputError("is a directory, expected a file", path=str(path))
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for every line (1-based), without the line ending.

    Decoding is strict UTF-8 per line, so an invalid byte sequence raises :class:`InputError` naming the
    file and line instead of being replaced silently. A ``\\r\\n`` ending is treated as ``\\n``; a UTF-8 BOM
    on the first line is dropped.
    """
    with open_binary(path) as f:
        try:
            for lineno, raw in enumerate(f, start=1):
                if raw.endswith(b"\n"):
                    raw = raw[:-1]
                    if raw.endswith(b"\r"):
                        raw = raw[:-1]
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise InputError(
                        f"invalid UTF-8 at byte {e.start} of the line ({raw[e.start:e.start + 4]!r}); "
                        "convert the file to UTF-8 (e.g. `iconv -f CP932 -t UTF-8`)",
                        path=str(path), line=lineno,
                    ) from None
                yield lineno, text
        except (OSError, EOFError) as e:  # truncated or corrupt gzip
            raise InputError(f"cannot read file: {e}", path=str(path)) from None


def count_lines(path: str | os.PathLike) -> int:
    """Count lines quickly (for progress bars)."""
    n = 0
    with open_binary(path) as f:
        while block := f.read(1 << 20):
            n += block.count(b"\n")
    return n
