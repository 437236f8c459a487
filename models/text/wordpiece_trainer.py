"""Deterministic WordPiece vocabulary trainer (BPE-style merges, as HF ``tokenizers``' ``WordPieceTrainer``).

Why not HF's trainer: it keeps words, the alphabet and pair statistics in Rust ``HashMap``s, so ties (characters
with equal counts at the ``limit_alphabet`` cut, the ids of ``##x`` tokens, merges with equal counts) are broken
by hash iteration order and three runs on the same corpus give three vocabularies. denki promises reproducible
runs, so here the vocabulary is a pure function of ``(word counts, settings)``: every tie is broken by code point
or by token id, and token ids are assigned in a fixed order. Input dict order does not matter.

Semantics (HF ``BpeTrainer`` with ``continuing_subword_prefix="##"``, which ``WordPieceTrainer`` wraps):

1. **Special tokens** get ids ``0..k-1`` in the given order.
2. **Alphabet.** Character frequencies are counted over all words, weighted by word count. With
   ``limit_alphabet`` only the most frequent characters are kept (ties: lower code point wins). Every kept
   character enters the vocabulary in its word-initial form ``x`` (in code-point order), then the continuing form
   ``##x`` of every kept character that occurs after the first position of some training word (code-point order;
   HF adds these in hash order).
3. **Training words.** A word becomes its characters: the first as is, the others as ``##x``. As in HF,
   characters outside the kept alphabet are *dropped* from the training word, and the ``##`` form is decided by
   the character's position in the original word. (At encode time such a word becomes ``[UNK]``.)
4. **Merges.** Repeatedly the adjacent pair with the highest count (sum of word counts over all occurrences) is
   merged in every word, left to right, non-overlapping. Ties: the pair with the lower ``(left id, right id)``
   wins, i.e. older tokens first (as HF's heap order, but on deterministic ids). Merging ``a`` + ``##b`` gives
   ``ab``; ``##a`` + ``##b`` gives ``##ab``. A merge whose result is already in the vocabulary (reachable by two
   different pairs) uses the existing id and adds nothing. Training stops when the vocabulary has ``vocab_size``
   tokens or the best pair's count is below ``min_frequency``.

Deviations from HF, on purpose: words longer than ``max_input_chars_per_word`` are not used at all (the encoder
turns them into a single ``[UNK]``, so statistics from them would be wasted); HF's occasional double merge of a
pair (a stale heap entry carrying only part of a pair's word positions) is not reproduced — pair counts and
positions here are exact; and the vocabulary never exceeds ``vocab_size`` (HF silently exceeds it when the
alphabet alone is larger; here that raises :class:`~models.io.errors.DenkiError` naming ``limit_alphabet``).

Speed: pair → count and pair → set of word indices are updated incrementally, only for the words that contain
the merged pair, and the best pair comes from a heap with lazy invalidation (an entry is trusted only if its
count equals the current count; every changed pair is pushed again with its new count).
"""
from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping

from denki.models.io.errors import DenkiError


def _alphabet(word_counts: Mapping[str, int], limit_alphabet: int | None) -> set[str]:
    """The kept characters: all of them, or the ``limit_alphabet`` most frequent (ties: lower code point)."""
    freq: Counter[str] = Counter()
    for word, count in word_counts.items():
        for ch in word:
            freq[ch] += count
    if limit_alphabet is None or len(freq) <= limit_alphabet:
        return set(freq)
    ranked = sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))
    return {ch for ch, _ in ranked[:limit_alphabet]}


def _clean_counts(word_counts: Mapping[str, int], max_chars: int) -> dict[str, int]:
    """Words as the trainer sees them: whitespace-split (as HF's WhitespaceSplit would), counts summed, words
    longer than ``max_chars`` and non-positive counts dropped."""
    out: dict[str, int] = {}
    for word, count in word_counts.items():
        count = int(count)
        if count <= 0:
            continue
        parts = word.split() if (not word or any(c.isspace() for c in word)) else (word,)
        for part in parts:
            if len(part) <= max_chars:
                out[part] = out.get(part, 0) + count
    return out


class _Vocab:
    """Tokens in id order; adding a token that is already there returns its id and adds nothing."""

    def __init__(self):
        self.id_to_token: list[str] = []
        self.token_to_id: dict[str, int] = {}

    def add(self, token: str) -> int:
        tid = self.token_to_id.get(token)
        if tid is None:
            tid = self.token_to_id[token] = len(self.id_to_token)
            self.id_to_token.append(token)
        return tid

    def __len__(self) -> int:
        return len(self.id_to_token)


def train_wordpiece(word_counts: Mapping[str, int], vocab_size: int, *, special_tokens: list[str],
                    limit_alphabet: int | None = None, min_frequency: int = 2,
                    continuing_subword_prefix: str = "##", max_input_chars_per_word: int = 100,
                    progress: bool = False) -> list[str]:
    """Train a WordPiece vocabulary on ``word_counts`` (word → occurrences; words are whitespace-free, e.g.
    MeCab surfaces of NFKC text) → the tokens in id order: specials, alphabet, merged tokens in merge order.

    Deterministic: the result depends only on the multiset of ``(word, count)`` and the settings (see the module
    docstring for the exact rules). ``len(result) <= vocab_size`` and there are no duplicates.
    """
    if vocab_size < len(special_tokens):
        raise DenkiError(f"vocab_size={vocab_size} is smaller than the {len(special_tokens)} special tokens")
    if limit_alphabet is not None and limit_alphabet < 0:
        raise DenkiError(f"limit_alphabet must be >= 0 (got {limit_alphabet})")
    prefix = continuing_subword_prefix
    vocab = _Vocab()
    for t in special_tokens:  # 1. special tokens
        vocab.add(t)
    counts = _clean_counts(word_counts, max_input_chars_per_word)
    kept = _add_alphabet(vocab, counts, limit_alphabet, prefix, vocab_size, len(special_tokens))  # 2.
    words, weights = _training_words(counts, kept, vocab.token_to_id, prefix)  # 3.
    _merge_until_full(vocab, _PairStats(words, weights), vocab_size, min_frequency, prefix, progress)  # 4.
    return vocab.id_to_token


def _add_alphabet(vocab: _Vocab, counts: dict[str, int], limit_alphabet: int | None, prefix: str, vocab_size: int,
                  n_special: int) -> set[str]:
    """Add the kept characters (code-point order), then the ``##x`` form of each one that occurs after a word's
    first position → the kept characters. Raises when the alphabet alone would exceed ``vocab_size``."""
    kept = _alphabet(counts, limit_alphabet)
    continuing = {ch for word in counts for ch in word[1:] if ch in kept}
    needed = len(vocab) + len(kept) + len(continuing)
    if needed > vocab_size:
        raise DenkiError(f"the alphabet needs {len(kept)} characters + {len(continuing)} '{prefix}' forms; with "
                         f"{n_special} special tokens that is {needed} > vocab_size={vocab_size}: "
                         f"lower limit_alphabet or raise vocab_size")
    for ch in sorted(kept):
        vocab.add(ch)
    for ch in sorted(continuing):
        vocab.add(prefix + ch)
    return kept


def _training_words(counts: dict[str, int], kept: set[str], token_to_id: dict[str, int],
                    prefix: str) -> tuple[list[list[int]], list[int]]:
    """Training words as lists of token ids (chars outside the alphabet dropped, as HF does) and their counts.
    Sorted word order makes everything after this independent of the input's dict order."""
    words: list[list[int]] = []
    weights: list[int] = []
    for word in sorted(counts):
        syms = [token_to_id[ch if i == 0 else prefix + ch] for i, ch in enumerate(word) if ch in kept]
        if len(syms) >= 2:  # single symbols have no pairs and never change
            words.append(syms)
            weights.append(counts[word])
    return words, weights


class _PairStats:
    """Exact pair statistics, updated incrementally: ``count`` (pair → summed word counts), ``where`` (pair → the
    indices of the words holding it) and a max-heap of ``(-count, left id, right id)`` with lazy invalidation (an
    entry is trusted only if its count equals the current count)."""

    def __init__(self, words: list[list[int]], weights: list[int]):
        self.words, self.weights = words, weights
        self.count: dict[tuple[int, int], int] = {}
        self.where: dict[tuple[int, int], set[int]] = {}
        for wi, syms in enumerate(words):
            c = weights[wi]
            for pair in zip(syms, syms[1:]):
                self.count[pair] = self.count.get(pair, 0) + c
                s = self.where.get(pair)
                if s is None:
                    self.where[pair] = {wi}
                else:
                    s.add(wi)
        self.heap = [(-c, a, b) for (a, b), c in self.count.items()]
        heapq.heapify(self.heap)

    def pop_best(self) -> tuple[int, int, int] | None:
        """The current best pair ``(count, a, b)`` (ties: lower ids), or None when no pair is left."""
        while self.heap:
            neg, a, b = heapq.heappop(self.heap)
            if self.count.get((a, b), 0) == -neg:
                return -neg, a, b
            # stale entry: the current count was pushed when it changed
        return None

    def merge(self, a: int, b: int, new: int) -> None:
        """Merge ``a b`` → ``new`` in every word that holds the pair. Re-count only those words: remove their old
        pairs, merge, add their new pairs."""
        delta: dict[tuple[int, int], int] = {}
        for wi in sorted(self.where.pop((a, b))):
            syms = self.words[wi]
            c = self.weights[wi]
            merged = _merge_word(syms, a, b, new)
            self.words[wi] = merged
            old_pairs, new_pairs = list(zip(syms, syms[1:])), list(zip(merged, merged[1:]))
            for p in old_pairs:
                delta[p] = delta.get(p, 0) - c
            for p in new_pairs:
                delta[p] = delta.get(p, 0) + c
            old_set, new_set = set(old_pairs), set(new_pairs)
            for p in old_set - new_set:
                s = self.where.get(p)
                if s is not None:
                    s.discard(wi)
            for p in new_set - old_set:
                s = self.where.get(p)
                if s is None:
                    self.where[p] = {wi}
                else:
                    s.add(wi)
        for p, d in delta.items():
            if not d:
                continue
            c = self.count.get(p, 0) + d
            if c > 0:
                self.count[p] = c
                heapq.heappush(self.heap, (-c, p[0], p[1]))
            else:  # 0: the pair is gone (the merged pair always ends here)
                self.count.pop(p, None)
                self.where.pop(p, None)


def _merge_word(syms: list[int], a: int, b: int, new: int) -> list[int]:
    """``syms`` with every ``a b`` replaced by ``new``, left to right, non-overlapping."""
    merged: list[int] = []
    i, n = 0, len(syms)
    while i < n:
        if i + 1 < n and syms[i] == a and syms[i + 1] == b:
            merged.append(new)
            i += 2
        else:
            merged.append(syms[i])
            i += 1
    return merged


def _merge_until_full(vocab: _Vocab, pairs: _PairStats, vocab_size: int, min_frequency: int, prefix: str,
                      progress: bool) -> None:
    """Merge the best pair, add its token, repeat: until the vocabulary has ``vocab_size`` tokens, no pair is left,
    or the best pair's count is below ``min_frequency``."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=vocab_size, initial=len(vocab), unit=" tokens", desc="wordpiece: merges")
    plen = len(prefix)
    min_count = max(int(min_frequency), 1)
    while len(vocab) < vocab_size:
        best = pairs.pop_best()
        if best is None:
            break
        count, a, b = best
        if count < min_count:
            break  # the heap's best is exact, so no pair reaches min_frequency any more
        right = vocab.id_to_token[b]
        new_token = vocab.id_to_token[a] + (right[plen:] if plen and right.startswith(prefix) else right)
        before = len(vocab)
        new = vocab.add(new_token)
        if bar is not None and len(vocab) > before:
            bar.update(1)
        pairs.merge(a, b, new)
    if bar is not None:
        bar.close()
