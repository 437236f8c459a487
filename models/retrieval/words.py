"""The words BM25 ranks on: NFKC + lower-case (as the tokenizer normalises), MeCab (unidic-lite) surfaces, then
the ones that carry no meaning of their own dropped — punctuation and symbols, and the commonest particles,
auxiliaries and copulas (``は``, ``が``, ``です``…), which match every passage and only slow a query down.

The segmenter's identity (:func:`segmenter_id`) goes into an index's manifest: a query segmented another way
would not match the index's words, so an index built with another one is refused.
"""
from __future__ import annotations

import unicodedata
from functools import lru_cache

from denki.models.text.tokenizer import mecab_words

#: function words dropped from passages and queries (unidic-lite surfaces after NFKC + lower-case). Not content:
#: particles, auxiliaries, the copula and the light verbs' commonest forms, question words that every question has.
STOPWORDS = frozenset("""
は が の を に へ と で も や か な ね よ から まで より って て た だ です ます ました でし でしょ う ない ず ぬ
する し さ れ られ せ させ いる い ある あり あっ なる なっ こと もの ため よう これ それ あれ この その あの
ここ そこ どこ 何 なに なん いつ どう どの どれ 誰 ください くださ お ご
""".split())
SEGMENTER = {"normalize": "NFKC + lower", "word_segmenter": "mecab (fugashi) + unidic-lite",
             "drop": "punctuation/symbols + STOPWORDS", "version": 1}


@lru_cache(maxsize=1)
def segmenter_id() -> dict:
    """What an index records about the words it was built with (a query must be segmented the same way)."""
    from importlib.metadata import version

    return {**SEGMENTER, "unidic_lite": version("unidic-lite"), "stopwords": len(STOPWORDS)}


def _is_symbol(word: str) -> bool:
    return all(unicodedata.category(c)[0] in "PSZC" for c in word)


def search_words(text: str) -> list[str]:
    """The words of ``text`` that BM25 ranks on, in order (repeats kept: they are the term frequencies)."""
    norm = unicodedata.normalize("NFKC", text).lower()
    return [w for w in mecab_words(norm) if w not in STOPWORDS and not _is_symbol(w)]
