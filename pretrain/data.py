"""Corpus → cached token array → packed ``seq_len`` sequences.

The corpus (one paragraph per line, UTF-8 ``.txt`` / ``.gz``, or the text fields of JSONL/CSV records: see
``models.io.corpus``) is tokenized once with
``JapaneseTokenizer.token_ids`` and written as a flat token stream in which every paragraph is followed by
``[SEP]``. The stream lives in a cache directory keyed by the sha256 of the corpus files and the tokenizer
fingerprint::

    CACHE/<key>/tokens.bin     flat uint16 (vocab < 65,536) or int32 token ids, paragraphs each ending in [SEP]
    CACHE/<key>/paragraphs.bin int64 end offset of every paragraph in tokens.bin
    CACHE/<key>/meta.json      dtype, counts, corpus sha256s, tokenizer fingerprint

Tokenizing streams to disk in chunks and training reads the stream through ``numpy.memmap``, so memory stays
flat however large the corpus is. The cache directory is built under ``<key>.partial`` and renamed into
place, so an interrupted tokenization never leaves a half cache under the final name.

Packing (RoBERTa "full sentences" style, simpler than BERT's sentence pairs): sequence ``i`` is
``[CLS] + stream[i*(L-1) : (i+1)*(L-1)]``; a sequence therefore contains whole or partial paragraphs separated by
[SEP], and only the last one is padded. All token type ids are 0.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from denki.models.io.errors import InputError
from denki.models.io.fileio import atomic_write_json
from denki.models.io.corpus import count_source_lines, iter_source, parse_source, source_sha256

CACHE_FORMAT = 1


def default_cache_dir() -> Path:
    """Where token caches go without ``--cache-dir``: ``$DENKI_CACHE/corpus``, by default
    ``~/.cache/denki/corpus`` (set DENKI_CACHE to move every denki cache, e.g. to a larger disk)."""
    return Path(os.environ.get("DENKI_CACHE", Path.home() / ".cache" / "denki")) / "corpus"


def file_sha256(path: str | os.PathLike) -> str:
    """A corpus source's identity (``models.io.corpus.source_sha256``): the file's sha256, plus the fields for a
    JSONL/CSV source. Raises :class:`InputError` for a missing file."""
    return source_sha256(path)


def corpus_key(corpus_shas: list[str], tokenizer_fingerprint: str) -> str:
    h = hashlib.sha256()
    for s in corpus_shas:
        h.update(s.encode())
    h.update(tokenizer_fingerprint.encode())
    h.update(f"format{CACHE_FORMAT}".encode())
    return h.hexdigest()[:32]


class TokenCache:
    """A tokenized corpus on disk, read through memmaps. ``tokens``: ``(n_tokens,)``; ``paragraph_ends``:
    ``(n_paragraphs,)`` (exclusive end offsets)."""

    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        self.meta = json.loads((self.dir / "meta.json").read_text(encoding="utf-8"))
        self.tokens = np.memmap(self.dir / "tokens.bin", dtype=self.meta["dtype"], mode="r",
                                shape=(self.meta["n_tokens"],))
        self.paragraph_ends = np.memmap(self.dir / "paragraphs.bin", dtype=np.int64, mode="r",
                                        shape=(self.meta["n_paragraphs"],))

    @property
    def n_tokens(self) -> int:
        return int(self.meta["n_tokens"])


def build_token_cache(corpus: list[str | os.PathLike], tokenizer, cache_dir: str | os.PathLike | None = None, *,
                      progress: bool = True, corpus_shas: list[str] | None = None) -> TokenCache:
    """Return the cached token stream of ``corpus`` for ``tokenizer``, tokenizing it first if needed.

    Raises :class:`InputError` naming file and line for non-UTF-8 input, and naming the file for a corpus file
    without any non-blank line.
    """
    from tqdm.auto import tqdm

    cache_root = Path(cache_dir) if cache_dir else default_cache_dir()
    shas = corpus_shas or [file_sha256(p) for p in corpus]
    key = corpus_key(shas, tokenizer.fingerprint())
    final = cache_root / key
    if (final / "meta.json").is_file():
        return TokenCache(final)

    # said once, when the cache is written: later runs of the same corpus and tokenizer reuse it silently
    print(f"pretrain: tokenizing the corpus into the token cache {final} (reused by later runs; --cache-dir or "
          "$DENKI_CACHE moves it)", file=sys.stderr, flush=True)
    tmp = cache_root / f"{key}.{os.getpid()}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    dtype = np.uint16 if tokenizer.vocab_size <= 65535 else np.int32
    sep = tokenizer.sep_id
    n_tokens = n_par = 0
    try:
        with open(tmp / "tokens.bin", "wb") as ftok, open(tmp / "paragraphs.bin", "wb") as fpar:
            buf: list[int] = []
            ends: list[int] = []
            for path in corpus:
                total = count_source_lines(path) if progress else None
                n_file = 0
                name = parse_source(path)[0].name
                bar = tqdm(iter_source(path), total=total, desc=f"tokenize {name}", unit=" lines",
                           disable=not progress, mininterval=1.0)
                for _lineno, text in bar:
                    if not text.strip():
                        continue
                    ids = tokenizer.token_ids(text)
                    if not ids:
                        continue
                    buf.extend(ids)
                    buf.append(sep)
                    n_tokens += len(ids) + 1
                    n_par += 1
                    n_file += 1
                    ends.append(n_tokens)
                    if len(buf) >= 1 << 20:  # flush ~1M tokens at a time: memory stays flat
                        ftok.write(np.asarray(buf, dtype=dtype).tobytes())
                        fpar.write(np.asarray(ends, dtype=np.int64).tobytes())
                        buf.clear()
                        ends.clear()
                bar.close()
                if n_file == 0:
                    raise InputError("corpus file is empty (no non-blank line with any token)", path=str(path))
            ftok.write(np.asarray(buf, dtype=dtype).tobytes())
            fpar.write(np.asarray(ends, dtype=np.int64).tobytes())
        atomic_write_json(tmp / "meta.json", {
            "format": CACHE_FORMAT, "dtype": np.dtype(dtype).name, "n_tokens": n_tokens, "n_paragraphs": n_par,
            "corpus": [{"path": str(p), "sha256": s} for p, s in zip(corpus, shas)],
            "tokenizer": tokenizer.fingerprint(), "vocab_size": tokenizer.vocab_size,
        })
        try:
            os.replace(tmp, final)
        except OSError:  # another process (e.g. a rank on another node) finished first: keep its copy
            if not (final / "meta.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return TokenCache(final)


class PackedSequences:
    """Fixed-length ``[CLS] + chunk`` sequences over a token stream (see module docstring).

    ``batch(step, batch_size, rank, world)`` is a pure function of its arguments and the seed: step ``s`` of a
    run uses global sample positions ``[s·B·W, (s+1)·B·W)`` of an endless sequence of per-epoch permutations
    (``numpy`` PCG64 seeded by ``(seed, epoch)``), rank ``r`` takes its slice. The data position saved in a
    checkpoint is therefore just the step number.
    """

    def __init__(self, cache: TokenCache, seq_len: int, *, cls_id: int, pad_id: int, seed: int):
        if seq_len < 8:
            raise ValueError("seq_len must be at least 8")
        self.tokens = cache.tokens
        self.seq_len = seq_len
        self.chunk = seq_len - 1
        self.cls_id, self.pad_id, self.seed = cls_id, pad_id, seed
        self.n = max(1, -(-cache.n_tokens // self.chunk))
        self._perm_epoch = -1
        self._perm: np.ndarray | None = None

    def __len__(self) -> int:
        return self.n

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            self._perm_epoch = epoch
        return self._perm

    def sequence(self, i: int) -> np.ndarray:
        """``(seq_len,)`` int64: [CLS], up to ``seq_len-1`` stream tokens, [PAD]s."""
        out = np.full(self.seq_len, self.pad_id, dtype=np.int64)
        out[0] = self.cls_id
        chunk = self.tokens[i * self.chunk:(i + 1) * self.chunk]
        out[1:1 + len(chunk)] = chunk
        return out

    def batch(self, step: int, batch_size: int, rank: int = 0, world: int = 1) -> np.ndarray:
        """``(batch_size, seq_len)`` int64 token ids for this step and rank."""
        start = (step * world + rank) * batch_size
        rows = []
        for p in range(start, start + batch_size):
            epoch, j = divmod(p, self.n)
            rows.append(self.sequence(int(self._permutation(epoch)[j])))
        return np.stack(rows)
