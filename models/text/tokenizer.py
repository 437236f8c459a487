"""Japanese tokenizer: NFKC → MeCab (fugashi + unidic-lite) words → WordPiece, with original-string offsets.

Design (see docs/tokenizer.md):

* **Parity.** Token ids are identical to ``transformers.BertJapaneseTokenizer`` (word_tokenizer_type="mecab",
  subword_tokenizer_type="wordpiece") loaded from the same directory. denki's own tokenizers use
  mecab_dic="unidic_lite" and do_lower_case=False; a checkpoint's own settings (ipadic or unidic, lower-casing,
  no NFKC, other special-token strings, ``never_split``, character subwords) are read from its
  ``tokenizer_config.json`` (:mod:`models.text.settings`) and reproduced with the same ids and offsets. Like
  transformers, literal special-token strings in the text (``[CLS]``, ``[SEP]``, ``[MASK]``, …) are
  split out *before* normalisation and become those special tokens (JSQuAD contexts use ``"title [SEP] text"`` on
  purpose); everything between them is NFKC-normalised and segmented separately.
* **Normalisation.** NFKC, no lower-casing, no accent stripping (dakuten survive: が ≠ か). Full-width letters
  become ASCII, half-width kana become full-width, ``①`` → ``1``, ``㍿`` → ``株式会社``. (A checkpoint with
  ``do_lower_case`` lower-cases per character before NFKC and every MeCab surface after it, as transformers does.)
* **Offsets.** ``offsets[i] = (start, end)`` index the ORIGINAL string (Python ``str`` indices, i.e. code
  points). Special tokens added by the encoder ([CLS], [SEP], [PAD]) get ``(0, 0)`` as in transformers. When one
  original character expands into several tokens (``㍿`` → ``株式`` ``##会社``) all of them point at that character.
* **Speed.** MeCab runs in wakati mode (one C call per text) and WordPiece results are memoised per word
  (Japanese text repeats words heavily), so per-word work is a dict lookup.

Training counts MeCab words and runs a deterministic WordPiece (BPE-style) trainer, :mod:`models.text.wordpiece_trainer`.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import unicodedata

import numpy as np

from denki.models.io.errors import DenkiError
from denki.models.io.fileio import atomic_write_json, atomic_write_text
from denki.models.text.normalize import lower_chars, nfkc_with_alignment, normalize_with_alignment
from denki.models.text.settings import TokenizerSettings, read_settings

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = [PAD, UNK, CLS, SEP, MASK]  # ids 0..4 in every vocabulary denki trains
MAX_INPUT_CHARS_PER_WORD = 100  # as transformers' WordpieceTokenizer: longer words become [UNK]
DENKI_CONFIG = "denki_tokenizer.json"
FORMAT_VERSION = 1


def _special_re(tokens) -> re.Pattern:
    # longest first: transformers' added-token trie matches the longest literal at the leftmost position
    return re.compile("(" + "|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)) + ")")


_SPECIAL_RE = _special_re(SPECIAL_TOKENS)


def dictionary_dir(dic: str) -> str:
    """The packaged MeCab dictionary's directory, found as transformers' ``MecabTokenizer`` finds it."""
    try:
        if dic == "unidic_lite":
            import unidic_lite as mod
        elif dic == "ipadic":
            import ipadic as mod
        elif dic == "unidic":
            import unidic as mod
        else:
            raise DenkiError(f"unknown MeCab dictionary {dic!r}")
    except ModuleNotFoundError:
        fix = {"ipadic": "pip install 'denki[ipadic]'", "unidic": "pip install unidic && python -m unidic download"}
        raise DenkiError(f"the MeCab dictionary {dic!r} is not installed: "
                         f"{fix.get(dic, 'pip install ' + dic.replace('_', '-'))}") from None
    if not os.path.isdir(mod.DICDIR):
        raise DenkiError(f"the MeCab dictionary {dic!r} has no files at {mod.DICDIR}"
                         + (" (run `python -m unidic download`)" if dic == "unidic" else ""))
    return mod.DICDIR


def _make_tagger(dic: str = "unidic_lite"):
    import fugashi

    dic_dir = dictionary_dir(dic)
    mecabrc = os.path.join(dic_dir, "mecabrc")
    # Same dictionary and rc file as transformers' MecabTokenizer(mecab_dic=dic); wakati output is the same
    # segmentation as its node list, in one C call.
    return fugashi.GenericTagger(f'-d "{dic_dir}" -r "{mecabrc}" -Owakati')


_TAGGERS: dict[str, object] = {}
# MeCab segfaults on very long inputs (seen at ~1M characters). Longer texts are fed in chunks cut after a
# sentence end, newline or space; below this length segmentation (and so parity) is untouched.
MECAB_MAX_CHARS = 50_000
_CUT_CHARS = "\n。．！？!? "


def _chunks(text: str, limit: int):
    start, n = 0, len(text)
    while n - start > limit:
        hi = start + limit
        cut = max(text.rfind(c, start + limit // 2, hi) for c in _CUT_CHARS)
        cut = hi if cut < 0 else cut + 1
        yield text[start:cut]
        start = cut
    yield text[start:]


def mecab_words(norm_text: str, dic: str = "unidic_lite") -> list[str]:
    """Segment (already normalised) text into MeCab surface words of dictionary ``dic``, whitespace dropped.

    Splitting the wakati output on whitespace equals transformers' ``whitespace_tokenize`` of every surface.
    Texts over ``MECAB_MAX_CHARS`` characters are segmented chunk by chunk (see above).
    """
    tagger = _TAGGERS.get(dic)
    if tagger is None:
        tagger = _TAGGERS[dic] = _make_tagger(dic)
    if len(norm_text) <= MECAB_MAX_CHARS:
        return tagger.parse(norm_text).split()
    words: list[str] = []
    for chunk in _chunks(norm_text, MECAB_MAX_CHARS):
        words += tagger.parse(chunk).split()
    return words


def mecab_surfaces(norm_text: str, dic: str = "unidic_lite") -> list[str]:
    """MeCab's surfaces as its node list gives them — a surface can be a lone whitespace character MeCab does
    not skip (``\r``). WordPiece drops those (``whitespace_tokenize``) and uses :func:`mecab_words`; the
    character tokenizer turns them into tokens ([UNK]), so it needs the nodes themselves."""
    tagger = _TAGGERS.get(dic)
    if tagger is None:
        tagger = _TAGGERS[dic] = _make_tagger(dic)
    out: list[str] = []
    for chunk in _chunks(norm_text, MECAB_MAX_CHARS) if len(norm_text) > MECAB_MAX_CHARS else (norm_text,):
        out += [node.surface for node in tagger(chunk)]  # parseToNode: the output format does not apply
    return out


class _WordPieceCache(dict):
    """word → its WordPiece: a bare token id when the word is one piece (spanning the whole word; the vast
    majority), else a tuple of ``(id, start, end)``. Misses are computed by ``dict.__getitem__`` from C."""

    def __init__(self, compute, max_size: int):
        super().__init__()
        self.compute, self.max_size = compute, max_size

    def __missing__(self, word):
        if len(self) >= self.max_size:
            self.clear()  # bounded memory on huge corpora; the hot words come back quickly
        pieces = self.compute(word)
        value = self[word] = pieces[0][0] if len(pieces) == 1 else tuple(pieces)
        return value


@dataclass
class Encoding:
    """One encoded sequence (one window, for QA). All lists have the same length ``n``.

    ``offsets`` index the original text of the sequence each token belongs to (``sequence_ids`` says which:
    0 = first text / question, 1 = second text / context, ``None`` = special token added by the encoder).
    """

    ids: list[int]
    offsets: list[tuple[int, int]]
    word_ids: list[int | None]
    sequence_ids: list[int | None]
    type_ids: list[int]
    vocab: Sequence[str] = field(default=(), repr=False)  # id → token, for the lazy ``tokens``
    sample_index: int = 0  # which input this came from (several windows share one sample)
    overflow: bool = False  # True if the input was truncated to produce this sequence
    extra: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def tokens(self) -> list[str]:
        """Token strings (computed on demand: most callers only need ids and offsets)."""
        return [self.vocab[i] for i in self.ids]

    @property
    def attention_mask(self) -> list[int]:
        return [1] * len(self.ids)


@dataclass
class _Pieces:
    """Tokenised text without special tokens added by the encoder."""

    ids: list[int]
    offsets: list[tuple[int, int]]
    word_ids: list[int]


class JapaneseTokenizer:
    """Encoder for a tokenizer directory: ``vocab.txt`` + ``tokenizer_config.json`` (the settings, as transformers
    reads them) + ``denki_tokenizer.json`` (denki's metadata; optional, so a transformers checkpoint loads too).

    ``settings``: what changes ids (:class:`models.text.settings.TokenizerSettings`; default: denki's own
    unidic-lite, NFKC, cased WordPiece)."""

    def __init__(self, vocab: Sequence[str], config: dict | None = None, cache_size: int = 262144, *,
                 settings: TokenizerSettings | None = None):
        self.id_to_token = list(vocab)
        self.vocab = {t: i for i, t in enumerate(self.id_to_token)}
        if len(self.vocab) != len(self.id_to_token):
            dup = next(t for i, t in enumerate(self.id_to_token) if self.vocab[t] != i)
            raise DenkiError(f"vocabulary has duplicate tokens (e.g. {dup!r})")
        self.settings = s = settings or TokenizerSettings()
        missing = [t for t in s.special_tokens() if t not in self.vocab]
        if missing:
            raise DenkiError(f"special tokens {missing} are not in the vocabulary")
        self.config = dict(config or {})
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self.vocab[t] for t in (s.pad_token, s.unk_token, s.cls_token, s.sep_token, s.mask_token))
        self.special_ids = tuple(sorted({self.vocab[t] for t in s.special_tokens()}))
        self.model_max_length = int(self.config.get("model_max_length", 512))
        self._cache = _WordPieceCache(self._subwords, cache_size)
        self._dic = s.mecab_dic
        self._lower = s.do_lower_case
        self._never_split = frozenset(s.never_split)
        self._char_subwords = s.subword_tokenizer_type == "character"
        self._special_re = _SPECIAL_RE if set(s.special_tokens()) == set(SPECIAL_TOKENS) else \
            _special_re(s.special_tokens())
        # fast skip of the literal search: every denki special token starts with "["
        firsts = {t[0] for t in s.special_tokens()}
        self._special_first = next(iter(firsts)) if len(firsts) == 1 else None
        if s.normalize_text and not s.do_lower_case:
            self._normalize = nfkc_with_alignment
        else:
            nfkc, lower = s.normalize_text, s.do_lower_case
            self._normalize = lambda t: normalize_with_alignment(t, nfkc=nfkc, lower=lower)

    # ------------------------------------------------------------------ basics
    @property
    def vocab_size(self) -> int:
        return len(self.id_to_token)

    def fingerprint(self) -> str:
        """sha256 over the vocabulary and the settings that change ids (cache key for tokenized corpora).
        Settings at denki's defaults are left out of the hash, so existing caches and bundles keep theirs."""
        h = hashlib.sha256()
        h.update("\n".join(self.id_to_token).encode())
        h.update(json.dumps({"format": FORMAT_VERSION, "normalization": "NFKC", "segmenter": "mecab-unidic-lite",
                             "max_input_chars_per_word": MAX_INPUT_CHARS_PER_WORD}, sort_keys=True).encode())
        if not self.settings.is_default():
            h.update(json.dumps(self.settings.differences(), sort_keys=True).encode())
        return h.hexdigest()

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.id_to_token[i] for i in ids]

    # --------------------------------------------------------------- wordpiece
    def _subwords(self, word: str) -> list[tuple[int, int, int]]:
        """Subwords of one MeCab word (a whitespace-free piece of a surface) → ``[(id, start, end), …]`` with
        offsets in ``word``'s characters: lower-cased first when the checkpoint does so (transformers'
        ``MecabTokenizer``: ``surface.lower()`` unless it is in ``never_split``), then WordPiece or characters.
        Where lower-casing changed the length (``İ`` → ``i̇``) every piece points at the whole word."""
        w = word.lower() if self._lower and word not in self._never_split else word
        pieces = self._characters(w) if self._char_subwords else self._wordpiece(w)
        if len(w) != len(word):
            pieces = [(t, 0, len(word)) for t, _, _ in pieces]
        return pieces

    def _characters(self, word: str) -> list[tuple[int, int, int]]:
        """transformers' ``CharacterTokenizer``: NFKC of the word (always, whatever ``normalize_text`` says),
        then one token per character, [UNK] where the character is not in the vocabulary."""
        w = unicodedata.normalize("NFKC", word)
        vocab, unk = self.vocab, self.unk_id
        if len(w) != len(word):
            return [(vocab.get(c, unk), 0, len(word)) for c in w]
        return [(vocab.get(c, unk), i, i + 1) for i, c in enumerate(w)]

    def _wordpiece(self, word: str) -> list[tuple[int, int, int]]:
        """Greedy longest-match-first WordPiece of one word → ``[(id, start, end), …]`` in word characters.

        Exactly transformers' ``WordpieceTokenizer`` for a single whitespace-free word; a word that cannot be
        covered (or is longer than 100 characters) becomes one [UNK] spanning the whole word. Memoised by
        ``self._cache``.
        """
        n = len(word)
        if n > MAX_INPUT_CHARS_PER_WORD:
            return [(self.unk_id, 0, n)]
        vocab = self.vocab
        out: list[tuple[int, int, int]] = []
        start = 0
        while start < n:
            end = n
            cur = None
            while start < end:
                cur = vocab.get(word[start:end] if start == 0 else "##" + word[start:end])
                if cur is not None:
                    break
                end -= 1
            if cur is None:
                return [(self.unk_id, 0, n)]
            out.append((cur, start, end))
            start = end
        return out

    def _tokenize(self, text: str) -> _Pieces:
        """Tokenise one text (no [CLS]/[SEP] added); offsets into ``text``."""
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        word_ids: list[int] = []
        wid = 0
        pos = 0
        # Literal special tokens are split out first, as transformers' added-token trie does.
        first = self._special_first
        for m in self._special_re.finditer(text) if (first is None or first in text) else ():
            wid = self._tokenize_segment(text, pos, m.start(), ids, offsets, word_ids, wid)
            ids.append(self.vocab[m.group(0)])
            offsets.append(m.span())
            word_ids.append(wid)
            wid += 1
            pos = m.end()
        self._tokenize_segment(text, pos, len(text), ids, offsets, word_ids, wid)
        return _Pieces(ids, offsets, word_ids)

    def _tokenize_segment(self, text, seg_start, seg_end, ids, offsets, word_ids, wid) -> int:
        """Append the tokens of ``text[seg_start:seg_end]`` (no special-token literals inside) to the lists.

        This is the hot path of every encode: one plain loop per word over memoised WordPiece entries (measured
        faster on CPython 3.11 than chaining ``map``/``zip`` in C).
        """
        if seg_start >= seg_end:
            return wid
        seg = text[seg_start:seg_end] if (seg_start or seg_end != len(text)) else text
        norm, align_starts, align_ends = self._normalize(seg)
        cache, find, dic = self._cache, norm.find, self._dic
        segment = mecab_surfaces if self._char_subwords else mecab_words
        ids_add, off_add, wid_add = ids.append, offsets.append, word_ids.append
        cursor = 0
        if align_starts is None and not seg_start:  # the common case, kept lean
            for word in segment(norm, dic):
                p = find(word, cursor)
                if p < 0:
                    raise DenkiError(f"internal: MeCab word {word!r} not found in the normalised text")
                cursor = p + len(word)
                entry = cache[word]
                if entry.__class__ is int:  # one piece (or [UNK]) spanning the whole word
                    ids_add(entry)
                    wid_add(wid)
                    off_add((p, cursor))
                else:
                    for tid, a, b in entry:
                        ids_add(tid)
                        wid_add(wid)
                        off_add((p + a, p + b))
                wid += 1
            return wid
        for word in segment(norm, dic):
            p = find(word, cursor)
            if p < 0:  # MeCab returned something that is not in its input: refuse rather than guess
                raise DenkiError(f"internal: MeCab word {word!r} not found in the normalised text")
            cursor = p + len(word)
            entry = cache[word]
            for tid, a, b in ((entry, 0, cursor - p),) if entry.__class__ is int else entry:
                ids_add(tid)
                wid_add(wid)
                if align_starts is None:
                    off_add((seg_start + p + a, seg_start + p + b))
                else:  # normalised → original indices
                    off_add((seg_start + align_starts[p + a], seg_start + align_ends[p + b - 1]))
            wid += 1
        return wid

    # ---------------------------------------------------------------- encoding
    def token_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` without [CLS]/[SEP] (fast path for corpus tokenisation)."""
        return self._tokenize(text).ids

    def tokenize(self, text: str) -> list[str]:
        """Token strings of ``text`` without [CLS]/[SEP] (like ``BertJapaneseTokenizer.tokenize``)."""
        return self.convert_ids_to_tokens(self._tokenize(text).ids)

    def encode(self, text: str, text_pair: str | None = None, *, max_length: int | None = None,
               truncation: bool = True, add_special_tokens: bool = True) -> Encoding:
        """Encode one text or a (text, text_pair) pair as ``[CLS] a [SEP] (b [SEP])``.

        With ``truncation`` the longest sequence is shortened token by token to fit ``max_length``
        (default: ``model_max_length``), as transformers' ``longest_first``.
        """
        a = self._tokenize(text)
        b = self._tokenize(text_pair) if text_pair is not None else None
        limit = max_length if max_length is not None else self.model_max_length
        overflow = False
        if truncation and limit:
            n_special = (3 if b is not None else 2) if add_special_tokens else 0
            budget = limit - n_special
            if budget < 0:
                raise DenkiError(f"max_length={limit} leaves no room for special tokens")
            la, lb = len(a.ids), (len(b.ids) if b is not None else 0)
            if la + lb > budget:
                overflow = True
                if b is None:
                    la = budget
                else:  # longest_first: remove from the longer one, ties from the second
                    while la + lb > budget:
                        if la > lb:
                            la -= 1
                        else:
                            lb -= 1
                a = _Pieces(a.ids[:la], a.offsets[:la], a.word_ids[:la])
                if b is not None:
                    b = _Pieces(b.ids[:lb], b.offsets[:lb], b.word_ids[:lb])
        enc = self._assemble(a, b, add_special_tokens)
        enc.overflow = overflow
        return enc

    def encode_batch(self, texts: Sequence[str], pairs: Sequence[str] | None = None, **kw) -> list[Encoding]:
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError("texts and pairs must have the same length")
        out = []
        for i, t in enumerate(texts):
            e = self.encode(t, pairs[i] if pairs is not None else None, **kw)
            e.sample_index = i
            out.append(e)
        return out

    def encode_windows(self, question: str, context: str, *, max_length: int = 384, stride: int = 128,
                       sample_index: int = 0) -> list[Encoding]:
        """Encode ``[CLS] question [SEP] context-window [SEP]`` for every window over a long context.

        Windows hold up to ``max_length - len(question) - 3`` context tokens and consecutive windows overlap by
        ``stride`` tokens (transformers' ``truncation="only_second", return_overflowing_tokens=True`` semantics).
        The question is never truncated: a question that leaves fewer than 1 context token per window, or a
        stride not smaller than the window, raises :class:`DenkiError`.
        """
        q = self._tokenize(question)
        c = self._tokenize(context)
        window = max_length - len(q.ids) - 3
        if window < 1:
            raise DenkiError(f"question is {len(q.ids)} tokens; it leaves no room for the context in "
                             f"max_length={max_length}")
        if stride >= window:
            raise DenkiError(f"doc stride {stride} must be smaller than the context window ({window} tokens)")
        encs = []
        start = 0
        n = len(c.ids)
        while True:
            end = min(start + window, n)
            part = _Pieces(c.ids[start:end], c.offsets[start:end], c.word_ids[start:end])
            e = self._assemble(q, part, True)
            e.sample_index = sample_index
            e.overflow = n > window
            e.extra["window_start"] = start
            encs.append(e)
            if end >= n:
                break
            start = end - stride
        return encs

    def _assemble(self, a: _Pieces, b: _Pieces | None, add_special: bool) -> Encoding:
        ids, offs, wids, seqs, types = [], [], [], [], []
        if add_special:
            ids.append(self.cls_id); offs.append((0, 0)); wids.append(None); seqs.append(None); types.append(0)
        ids += a.ids; offs += a.offsets; wids += a.word_ids; seqs += [0] * len(a.ids); types += [0] * len(a.ids)
        if add_special:
            ids.append(self.sep_id); offs.append((0, 0)); wids.append(None); seqs.append(None); types.append(0)
        if b is not None:
            ids += b.ids; offs += b.offsets; wids += b.word_ids; seqs += [1] * len(b.ids); types += [1] * len(b.ids)
            if add_special:
                ids.append(self.sep_id); offs.append((0, 0)); wids.append(None); seqs.append(None); types.append(1)
        return Encoding(ids, offs, wids, seqs, types, self.id_to_token)

    def pad(self, encodings: Sequence[Encoding], *, pad_to_multiple_of: int | None = None,
            max_length: int | None = None) -> dict[str, np.ndarray]:
        """Pad a batch to its longest sequence (dynamic padding) → int64 arrays of shape ``(batch, seq)``:
        ``input_ids``, ``attention_mask``, ``token_type_ids``."""
        if not encodings:
            raise ValueError("cannot pad an empty batch")
        n = max(len(e) for e in encodings)
        if max_length is not None:
            n = max(n, max_length)
        if pad_to_multiple_of:
            n = -(-n // pad_to_multiple_of) * pad_to_multiple_of
        ids = np.full((len(encodings), n), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), n), dtype=np.int64)
        types = np.zeros((len(encodings), n), dtype=np.int64)
        for i, e in enumerate(encodings):
            k = len(e)
            ids[i, :k] = e.ids
            mask[i, :k] = 1
            types[i, :k] = e.type_ids
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}

    # ------------------------------------------------------------ persistence
    @classmethod
    def load(cls, directory: str | os.PathLike) -> "JapaneseTokenizer":
        d = Path(directory)
        vocab_file = d / "vocab.txt"
        if not vocab_file.is_file():
            raise DenkiError(f"{d}: not a tokenizer directory (no vocab.txt); train one with `denki tokenizer train`")
        # Same reading rule as transformers' load_vocab: one token per line, only the newline stripped.
        with open(vocab_file, encoding="utf-8") as f:
            vocab = [line.rstrip("\n") for line in f]
        config = {}
        if (d / DENKI_CONFIG).is_file():
            config = json.loads((d / DENKI_CONFIG).read_text(encoding="utf-8"))
            if config.get("format", FORMAT_VERSION) > FORMAT_VERSION:
                raise DenkiError(f"{d}: tokenizer format {config['format']} is newer than this denki supports")
        # the settings come from tokenizer_config.json, the file transformers reads, so both encode alike
        settings, max_length = read_settings(d)
        if max_length is not None:
            config.setdefault("model_max_length", max_length)
        try:
            return cls(vocab, config, settings=settings)
        except DenkiError as e:
            raise DenkiError(f"{d}: {e}") from None

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``vocab.txt``, ``tokenizer_config.json`` (plain transformers loads it as BertJapaneseTokenizer),
        ``special_tokens_map.json`` and ``denki_tokenizer.json``; each file written atomically."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        s = self.settings
        atomic_write_text(d / "vocab.txt", "\n".join(self.id_to_token) + "\n")
        atomic_write_json(d / "tokenizer_config.json", s.tokenizer_config(self.model_max_length))
        atomic_write_json(d / "special_tokens_map.json", s.special_tokens_map())
        cfg = {"format": FORMAT_VERSION, "normalization": s.normalization(),
               "word_segmenter": "mecab (fugashi) + " + s.mecab_dic.replace("_", "-"),
               "subword": s.subword_tokenizer_type, "max_input_chars_per_word": MAX_INPUT_CHARS_PER_WORD,
               "model_max_length": self.model_max_length, "vocab_size": self.vocab_size,
               "fingerprint": self.fingerprint()}
        if not s.is_default():
            cfg["settings"] = s.differences()
        cfg.update({k: v for k, v in self.config.items() if k not in cfg})
        atomic_write_json(d / DENKI_CONFIG, cfg)


def training_words(text: str, settings: TokenizerSettings | None = None) -> list[str]:
    """The words WordPiece sees for ``text`` under ``settings`` (special-token literals removed): the same
    normalisation, dictionary and lower-casing as encoding, without the offsets."""
    s = settings or TokenizerSettings()
    pattern = _SPECIAL_RE if set(s.special_tokens()) == set(SPECIAL_TOKENS) else _special_re(s.special_tokens())
    text = pattern.sub(" ", text)
    if s.do_lower_case:
        text = lower_chars(text)
    if s.normalize_text:
        text = unicodedata.normalize("NFKC", text)
    words = mecab_words(text, s.mecab_dic)
    if s.do_lower_case:
        never = set(s.never_split)
        words = [w if w in never else w.lower() for w in words]
    return words


def train_tokenizer(corpus_files: Sequence[str | os.PathLike], vocab_size: int = 8000, *,
                    limit_alphabet: int = 2500, min_frequency: int = 2, model_max_length: int = 512,
                    settings: TokenizerSettings | None = None, progress: bool = True) -> JapaneseTokenizer:
    """Train a WordPiece vocabulary on MeCab words of the NFKC-normalised corpus (one paragraph per line).

    Deterministic: the same corpus and settings always give the same vocabulary (denki's own trainer,
    :mod:`models.text.wordpiece_trainer`; HF ``tokenizers``' trainer breaks ties in hash order and differs run to run,
    with the same quality otherwise). ``limit_alphabet`` keeps the rarest characters out of the vocabulary (they
    become [UNK]); without it a small Japanese vocabulary is spent almost entirely on single characters.
    ``settings``: another dictionary (ipadic, unidic) or lower-casing (default: unidic-lite, cased); the special
    tokens stay denki's five at ids 0..4.
    """
    from collections import Counter

    from tqdm.auto import tqdm

    from denki.models.io.corpus import count_source_lines, iter_corpus, iter_source
    from denki.models.text.wordpiece_trainer import train_wordpiece

    if vocab_size <= len(SPECIAL_TOKENS):
        raise DenkiError(f"--vocab-size must be larger than {len(SPECIAL_TOKENS)}")
    settings = settings or TokenizerSettings()
    if settings.subword_tokenizer_type != "wordpiece" or settings.special_tokens() != [UNK, SEP, PAD, CLS, MASK]:
        raise DenkiError("denki trains WordPiece vocabularies with its own five special tokens only")
    for f in corpus_files:  # validate every file up front (encoding errors name file:line) before the slow part
        for _ in iter_source(f):
            pass
    total = sum(count_source_lines(f) for f in corpus_files)
    counts: Counter[str] = Counter()
    n_lines = 0
    for text in tqdm(iter_corpus(list(corpus_files)), total=total, unit=" lines", desc="tokenizer: segment+count",
                     disable=not progress):
        n_lines += 1
        # Special-token literals are removed so they never enter the vocabulary as ordinary words.
        counts.update(training_words(text, settings))
    tokens = train_wordpiece(counts, vocab_size, special_tokens=SPECIAL_TOKENS, limit_alphabet=limit_alphabet,
                             min_frequency=min_frequency, continuing_subword_prefix="##",
                             max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD, progress=progress)
    config = {"model_max_length": model_max_length,
              "train": {"trainer": "denki-wordpiece-v1", "vocab_size_requested": vocab_size,
                        "limit_alphabet": limit_alphabet, "min_frequency": min_frequency, "lines": n_lines,
                        "distinct_words": len(counts)}}
    return JapaneseTokenizer(tokens, config, settings=settings)


def load_tokenizer(directory: str | os.PathLike) -> JapaneseTokenizer:
    return JapaneseTokenizer.load(directory)
