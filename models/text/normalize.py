"""NFKC normalisation that remembers where every normalised character came from.

The tokenizer works on NFKC text (as transformers' ``MecabTokenizer`` does), but QA answers and token offsets
must point into the ORIGINAL string. NFKC is not a per-character map: a base letter and its combining marks
compose (``か`` + U+3099 → ``が``), a half-width voiced mark joins the kana before it (``ｶﾞ`` → ``ガ``), and one
character can expand (``㍿`` → ``株式会社``, ``①`` → ``1``). So the original text is cut into *clusters* (a character
plus everything that may compose into it), each cluster is normalised alone, and every normalised character maps
back to its cluster's span. The concatenation is checked against NFKC of the whole text; if some exotic sequence
breaks cluster-locality, coarser clusters (whitespace-delimited runs, then the whole text) are used, so offsets
stay correct, only less precise.

Checkpoints that lower-case (``do_lower_case=True``) get :func:`normalize_with_alignment`: the same cluster
alignment for the composed map ``NFKC(per-character lower-case(text))`` — transformers lower-cases each character
on its own *before* NFKC (``PreTrainedTokenizer.tokenize``), and a character may grow (``İ`` → ``i̇``), so the
offsets need the alignment just as NFKC's expansions do. Without NFKC (``normalize_text=False`` in the
checkpoint's ``mecab_kwargs``) the map is the lower-casing alone.
"""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_RUNS = re.compile(r"\s+|\S+")


@lru_cache(maxsize=65536)
def _joins_previous(ch: str) -> bool:
    """True if ``ch`` can compose with the character before it under NFKC."""
    if unicodedata.combining(ch):
        return True
    n = unicodedata.normalize("NFKC", ch)
    if n and unicodedata.combining(n[0]):  # e.g. half-width ﾞ (U+FF9E) → U+3099
        return True
    cp = ord(ch)
    # Conjoining Hangul vowels/trailing consonants (combining class 0, yet they compose).
    return 0x1160 <= cp <= 0x11FF or 0xD7B0 <= cp <= 0xD7FF


def _cluster_spans(text: str) -> list[tuple[int, int]]:
    spans = []
    i, n = 0, len(text)
    while i < n:
        j = i + 1
        while j < n and _joins_previous(text[j]):
            j += 1
        spans.append((i, j))
        i = j
    return spans


def _nfkc(s: str) -> str:
    return unicodedata.normalize("NFKC", s)


def lower_chars(text: str) -> str:
    """Lower-case every character on its own, as transformers' ``PreTrainedTokenizer.tokenize`` does for
    ``do_lower_case`` tokenizers (``re.sub("(.+?)", lower)``: one character per match). Differs from
    ``str.lower`` only for Σ, which ``str.lower`` turns into the final ς at a word end."""
    return text.lower() if "\u03a3" not in text else "".join([c.lower() for c in text])


def _align(text: str, spans: list[tuple[int, int]], target: str, fn=_nfkc):
    starts: list[int] = []
    ends: list[int] = []
    parts = []
    for a, b in spans:
        orig = text[a:b]
        piece = fn(orig)
        parts.append(piece)
        if piece == orig:  # unchanged cluster (e.g. s + U+033A): each character maps to itself, exactly
            starts.extend(range(a, b))
            ends.extend(range(a + 1, b + 1))
            continue
        k = len(piece)
        starts.extend([a] * k)
        ends.extend([b] * k)
    if "".join(parts) != target:
        return None
    return starts, ends


def nfkc_with_alignment(text: str) -> tuple[str, list[int] | None, list[int] | None]:
    """NFKC-normalise ``text`` and map each normalised character back to the original.

    Returns ``(norm, starts, ends)``: normalised character ``i`` came from ``text[starts[i]:ends[i]]``.
    ``starts``/``ends`` are ``None`` when the text is already NFKC (the identity map; the common case, kept
    cheap). Linear in ``len(text)``.
    """
    if unicodedata.is_normalized("NFKC", text):
        return text, None, None
    return _aligned(text, unicodedata.normalize("NFKC", text), _nfkc)


def _aligned(text: str, norm: str, fn):
    for spans in (
        _cluster_spans(text),
        [m.span() for m in _RUNS.finditer(text)],
        [(0, len(text))],
    ):
        aligned = _align(text, spans, norm, fn)
        if aligned is not None:
            return norm, aligned[0], aligned[1]
    raise AssertionError("unreachable: the whole text is one cluster")  # pragma: no cover


def _lower_nfkc(s: str) -> str:
    return unicodedata.normalize("NFKC", lower_chars(s))


def normalize_with_alignment(text: str, *, nfkc: bool = True, lower: bool = False
                             ) -> tuple[str, list[int] | None, list[int] | None]:
    """:func:`nfkc_with_alignment` generalised to a checkpoint's settings: ``NFKC(lower_chars(text))`` with
    ``lower``, ``lower_chars(text)`` with ``lower`` and not ``nfkc``, the text itself with neither. Same return
    value: ``(norm, starts, ends)``, ``None`` maps when nothing changed."""
    if not lower:
        return nfkc_with_alignment(text) if nfkc else (text, None, None)
    fn = _lower_nfkc if nfkc else lower_chars
    norm = fn(text)
    if norm == text:
        return text, None, None
    # lower-casing is per character, so clusters of the original text still align (checked in _align)
    return _aligned(text, norm, fn)
