"""API keys of ``denki serve`` (:class:`ApiKeys`): ``--api-key-file FILE`` (one key per line) and/or the
environment variable :data:`API_KEY_ENV` (one key); a request authenticates with ``Authorization: Bearer KEY``.

The outer ASGI layer (:class:`~serve.http_admission.ObserveAndLimit`) asks :meth:`ApiKeys.allows` before it reads
a body or asks admission control, so an unauthenticated request costs a header scan and a few constant-time
comparisons. ``/healthz`` and ``/readyz`` (:data:`OPEN_PATHS`) stay open; with keys set every other path needs
one, unknown paths included (401, not 404: a path's existence is not told to strangers).

The file is re-read when it changes (its mtime, size or inode; looked at no more than once per
``stat_interval_s``), so keys rotate without a restart: add the new key, move the clients, remove the old one.
No key is ever logged or shown: the settings hold the file's path, ``/v1/models`` the number of keys.

Light to import (standard library only): the command line and the settings read it.
"""
from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Mapping

from denki.models.io.errors import DenkiError

log = logging.getLogger("denki.http")

#: the environment variable holding one API key (inherited by worker processes)
API_KEY_ENV = "DENKI_API_KEY"
#: paths open without a key: liveness and readiness (load balancers and orchestrators probe them)
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
#: how often (seconds) the key file's metadata is looked at, at most
STAT_INTERVAL_S = 1.0


def parse_keys(text: str, where: str) -> list[str]:
    """The keys of a key file's text: one per line, blank lines and ``#`` comment lines skipped, surrounding
    whitespace stripped. A key must be printable ASCII without spaces (what a Bearer header can carry); errors
    name the file and the line, never the key."""
    keys = []
    for n, line in enumerate(text.splitlines(), 1):
        k = line.strip()
        if not k or k.startswith("#"):
            continue
        if not k.isascii() or not k.isprintable() or any(c.isspace() for c in k):
            raise DenkiError(f"{where}, line {n}: an API key must be printable ASCII without spaces")
        keys.append(k)
    return list(dict.fromkeys(keys))


def read_key_file(path: str) -> list[str]:
    """The keys in ``path``; a clear :class:`DenkiError` naming the file when it cannot be read or holds none."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise DenkiError(f"--api-key-file {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DenkiError(f"--api-key-file {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    keys = parse_keys(text, f"--api-key-file {path}")
    if not keys:
        raise DenkiError(f"--api-key-file {path}: no key in it (one key per line; blank lines and # comments are "
                         f"skipped)")
    return keys


def check_key_file(path: str | os.PathLike) -> str:
    """``path`` made absolute (every worker and replica reads the same file), once it was read and holds a key."""
    p = os.path.abspath(os.fspath(path))
    read_key_file(p)
    return p


def env_key(environ: Mapping[str, str] | None = None) -> str | None:
    """The key of :data:`API_KEY_ENV` (None when unset or blank)."""
    v = (os.environ if environ is None else environ).get(API_KEY_ENV, "").strip()
    if not v:
        return None
    parse_keys(v, API_KEY_ENV)  # the same rules as a file's line
    return v


def keys_configured(api_key_file: str | None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether a server with these settings requires keys (for the start-up warnings)."""
    return bool(api_key_file) or env_key(environ) is not None


def _signature(st: os.stat_result) -> tuple:
    return st.st_mtime_ns, st.st_size, st.st_ino


class ApiKeys:
    """The API keys one app accepts: those of the key file (re-read when it changes) and of the environment.

    ``allows(headers)`` takes the ASGI headers of a request. Every key is compared with
    :func:`hmac.compare_digest` (constant time per key, and every key is compared, so the time does not say
    which one matched or how far). A key file that turns empty while the server runs leaves only the
    environment's key (if none, every request is refused: it fails closed); one that vanishes or cannot be
    read keeps the keys read last, with a warning in the log (a rotation writes a new file; a half-written
    one is read again once it changes)."""

    def __init__(self, path: str | None = None, extra: str | None = None, *, stat_interval_s: float | None = None):
        self.path = path
        self.stat_interval_s = float(STAT_INTERVAL_S if stat_interval_s is None else stat_interval_s)
        self._extra = [extra.encode("ascii")] if extra else []
        self._file_keys: list[bytes] = []
        self._sig: tuple | None = None
        self._checked = float("-inf")
        if path is not None:
            st = self._stat_or_raise(path)
            self._file_keys = [k.encode("ascii") for k in read_key_file(path)]
            self._sig = _signature(st)
            self._checked = time.monotonic()

    @classmethod
    def from_settings(cls, settings, environ: Mapping[str, str] | None = None) -> ApiKeys | None:
        """The keys of ``settings.api_key_file`` and of :data:`API_KEY_ENV`; None when neither is set. A server
        started with the variable set (``settings.api_key_env``) refuses to build without it, rather than serve
        without keys (a Ray replica on a node that lacks the variable)."""
        path = getattr(settings, "api_key_file", None)
        key = env_key(environ)
        if key is None and getattr(settings, "api_key_env", False):
            raise DenkiError(f"{API_KEY_ENV} was set where denki serve started, but not in this process's "
                             f"environment (pid {os.getpid()}): set it on every node, or use --api-key-file")
        if path is None and key is None:
            return None
        keys = cls(path, key)
        log.info("API keys on: %d key%s (%s); /healthz and /readyz stay open", len(keys), "s" * (len(keys) != 1),
                 " + ".join(x for x in (path and f"file {path}", key and API_KEY_ENV) if x))
        return keys

    @staticmethod
    def _stat_or_raise(path: str) -> os.stat_result:
        try:
            return os.stat(path)
        except OSError as exc:
            raise DenkiError(f"--api-key-file {path}: {exc.strerror or exc}") from None

    def __len__(self) -> int:
        self._refresh()
        return len(self._file_keys) + len(self._extra)

    def _refresh(self) -> None:
        """Re-read the key file if it changed since it was read (looked at once per ``stat_interval_s`` at most)."""
        if self.path is None:
            return
        now = time.monotonic()
        if now - self._checked < self.stat_interval_s:
            return
        self._checked = now
        try:
            sig = _signature(os.stat(self.path))
        except OSError as exc:
            if self._sig is not None:
                log.warning("--api-key-file %s: %s; keeping the %d key(s) read before", self.path,
                            exc.strerror or exc, len(self._file_keys))
                self._sig = None
            return
        if sig == self._sig:
            return
        self._sig = sig
        try:
            with open(self.path, encoding="utf-8") as f:
                keys = parse_keys(f.read(), f"--api-key-file {self.path}")
        except (OSError, UnicodeDecodeError, DenkiError) as exc:
            log.warning("--api-key-file %s: could not re-read it (%s); keeping the %d key(s) read before",
                        self.path, getattr(exc, "strerror", None) or exc, len(self._file_keys))
            return
        self._file_keys = [k.encode("ascii") for k in keys]
        log.info("--api-key-file %s re-read: %d key(s)%s", self.path, len(keys),
                 "" if keys or self._extra else "; no key left, every request is refused")

    def allows(self, headers) -> bool:
        """Whether the ASGI ``headers`` (``[(name, value)]``, lower-case byte names) carry ``Authorization:
        Bearer KEY`` with an accepted key."""
        token = bearer_token(headers)
        if token is None:
            return False
        self._refresh()
        ok = False
        for key in (*self._file_keys, *self._extra):
            ok |= hmac.compare_digest(token, key)
        return ok


def bearer_token(headers) -> bytes | None:
    """The token of the request's ``Authorization: Bearer TOKEN`` header (the scheme is case-insensitive, RFC
    7235), None when there is none or another scheme."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() != b"bearer":
                return None
            token = token.strip()
            return token or None
    return None
