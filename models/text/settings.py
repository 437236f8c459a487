"""The settings of a MeCab + WordPiece checkpoint's tokenizer, read from (and written as) transformers'
``tokenizer_config.json``, so that denki's encoder gives the ids ``BertJapaneseTokenizer`` gives.

What ``BertJapaneseTokenizer`` (transformers 4.57.6) does with a text, and so what denki reproduces:

1. ``do_lower_case``: every character is lower-cased on its own, except inside special-token literals
   (``PreTrainedTokenizer.tokenize``);
2. literal special/added tokens (``[CLS]``, ``[SEP]``, …) are split out; each piece between them goes to
   ``MecabTokenizer.tokenize``:
3. NFKC unless ``mecab_kwargs.normalize_text`` is false; MeCab with the dictionary ``mecab_kwargs.mecab_dic``
   (``unidic_lite`` when absent — transformers' default, whatever the checkpoint's model card says);
4. ``do_lower_case``: each MeCab surface is lower-cased again (``str.lower``) unless it is in ``never_split``;
5. WordPiece (``subword_tokenizer_type="wordpiece"``; words over 100 characters → ``[UNK]``) or one token per
   character of the NFKC'd word (``"character"``).

Settings transformers would read differently from what denki can reproduce are refused with an error naming the
file and field (other word tokenizers, sentencepiece, a system MeCab dictionary via ``mecab_option``, ``single_word``
added tokens). A directory without ``tokenizer_config.json`` gets denki's defaults (what ``denki tokenizer train``
writes). Torch-free.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from denki.models.io.errors import InputError

DICTIONARIES = ("unidic_lite", "ipadic", "unidic")
SUBWORD_TYPES = ("wordpiece", "character")
SPECIAL_NAMES = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_DEFAULT_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                     "mask_token": "[MASK]"}
_MECAB_KWARGS = ("mecab_dic", "mecab_option", "normalize_text")
TOKENIZER_CONFIG = "tokenizer_config.json"


@dataclass(frozen=True)
class TokenizerSettings:
    """Everything that changes ids. The defaults are denki's own tokenizer (unidic-lite, NFKC, cased)."""

    mecab_dic: str = "unidic_lite"
    do_lower_case: bool = False
    normalize_text: bool = True  # NFKC before MeCab (MecabTokenizer's normalize_text)
    subword_tokenizer_type: str = "wordpiece"
    never_split: tuple[str, ...] = ()  # surfaces never lower-cased (MecabTokenizer's never_split)
    unk_token: str = "[UNK]"
    sep_token: str = "[SEP]"
    pad_token: str = "[PAD]"
    cls_token: str = "[CLS]"
    mask_token: str = "[MASK]"
    extra_tokens: tuple[str, ...] = field(default=())  # other added / additional special tokens (split out too)

    def special_tokens(self) -> list[str]:
        """The five special tokens, then the extra added tokens: every literal split out before MeCab."""
        base = [self.unk_token, self.sep_token, self.pad_token, self.cls_token, self.mask_token]
        return base + [t for t in self.extra_tokens if t not in base]

    def is_default(self) -> bool:
        return self == TokenizerSettings()

    def differences(self) -> dict:
        """The settings that differ from denki's defaults (recorded in the fingerprint and denki_tokenizer.json)."""
        d, base = asdict(self), asdict(TokenizerSettings())
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items() if v != base[k]}

    def segmenter(self) -> str:
        return "mecab-" + self.mecab_dic.replace("_", "-")

    def normalization(self) -> str:
        return "+".join((["lowercase"] if self.do_lower_case else []) + (["NFKC"] if self.normalize_text else [])) \
            or "none"

    def tokenizer_config(self, model_max_length: int) -> dict:
        """``tokenizer_config.json`` that plain transformers loads as ``BertJapaneseTokenizer`` with exactly these
        settings (every behaviour key explicit, so no transformers default decides anything)."""
        mecab_kwargs: dict = {"mecab_dic": self.mecab_dic}
        if not self.normalize_text:
            mecab_kwargs["normalize_text"] = False
        cfg = {"tokenizer_class": "BertJapaneseTokenizer", "do_lower_case": self.do_lower_case,
               "word_tokenizer_type": "mecab", "subword_tokenizer_type": self.subword_tokenizer_type,
               "mecab_kwargs": mecab_kwargs, "model_max_length": model_max_length}
        if self.never_split:
            cfg["never_split"] = list(self.never_split)
        cfg.update({k: getattr(self, k) for k in SPECIAL_NAMES})
        if self.extra_tokens:
            cfg["additional_special_tokens"] = list(self.extra_tokens)
        return cfg

    def special_tokens_map(self) -> dict:
        out = {k: getattr(self, k) for k in SPECIAL_NAMES}
        if self.extra_tokens:
            out["additional_special_tokens"] = list(self.extra_tokens)
        return out


def _token_str(value, where: str) -> str:
    """A special token as written by transformers: a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        if value.get("single_word"):
            raise InputError(f"{where}: single_word added tokens are not supported")
        return value["content"]
    raise InputError(f"{where}: expected a token string or an AddedToken object, got {value!r}")


def _read_json(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: invalid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise InputError(f"{path}: expected a JSON object")
    return obj


def read_settings(directory: str | os.PathLike) -> tuple[TokenizerSettings, int | None]:
    """The tokenizer settings of a directory (denki tokenizer, bundle or transformers checkpoint) and its
    ``model_max_length`` (``None`` when not recorded). Raises :class:`InputError` naming file and field for what
    denki cannot reproduce exactly."""
    d = Path(directory)
    tc_path = d / TOKENIZER_CONFIG
    if not tc_path.is_file():
        return TokenizerSettings(), None
    tc = _read_json(tc_path)

    def bad(key: str, msg: str):
        return InputError(f"{tc_path} (field {key!r}): {msg}")

    tclass = tc.get("tokenizer_class")
    if tclass is None and (d / "config.json").is_file():
        tclass = _read_json(d / "config.json").get("tokenizer_class")  # the older hub layout keeps it there
    if tclass != "BertJapaneseTokenizer":
        raise bad("tokenizer_class", f"{tclass!r}: denki reproduces transformers' BertJapaneseTokenizer "
                                     "(MeCab + WordPiece) only")
    wtype = tc.get("word_tokenizer_type", "basic")  # transformers' default when the key is missing
    if wtype != "mecab":
        raise bad("word_tokenizer_type", f"{wtype!r}: only 'mecab' word segmentation is supported"
                                         + (" (missing: transformers then uses 'basic')"
                                            if "word_tokenizer_type" not in tc else ""))
    for key in ("do_word_tokenize", "do_subword_tokenize"):
        if tc.get(key, True) is not True:
            raise bad(key, "must be true (word segmentation and subwords are what denki reproduces)")
    stype = tc.get("subword_tokenizer_type", "wordpiece")
    if stype not in SUBWORD_TYPES:
        raise bad("subword_tokenizer_type", f"{stype!r} is not supported; choose one of {list(SUBWORD_TYPES)}")
    if "mecab_dic" in tc:
        # BertJapaneseTokenizer ignores a top-level mecab_dic (it reads mecab_kwargs.mecab_dic): refuse rather
        # than silently tokenise with another dictionary than the file seems to say
        raise bad("mecab_dic", "transformers ignores a top-level mecab_dic (it reads mecab_kwargs.mecab_dic); "
                               "move it into \"mecab_kwargs\": {\"mecab_dic\": ...}")
    mk = tc.get("mecab_kwargs") or {}
    if not isinstance(mk, dict):
        raise bad("mecab_kwargs", "expected an object")
    unknown = sorted(set(mk) - set(_MECAB_KWARGS))
    if unknown:
        raise bad("mecab_kwargs", f"unknown keys {unknown} (MecabTokenizer takes {list(_MECAB_KWARGS)})")
    dic = mk.get("mecab_dic", "unidic_lite")
    if dic not in DICTIONARIES:
        raise bad("mecab_kwargs.mecab_dic", f"{dic!r}: denki supports the packaged dictionaries "
                                            f"{list(DICTIONARIES)} (a system dictionary via mecab_option is not "
                                            "reproducible)")
    if mk.get("mecab_option"):
        raise bad("mecab_kwargs.mecab_option", f"{mk['mecab_option']!r}: extra MeCab options are not supported")
    normalize = mk.get("normalize_text", True)
    if not isinstance(normalize, bool):
        raise bad("mecab_kwargs.normalize_text", "expected true or false")
    lower = tc.get("do_lower_case", False)
    if not isinstance(lower, bool):
        raise bad("do_lower_case", "expected true or false")
    never_split = tc.get("never_split") or []
    if not isinstance(never_split, list) or not all(isinstance(t, str) for t in never_split):
        raise bad("never_split", "expected a list of strings")

    specials = dict(_DEFAULT_SPECIALS)
    for k in SPECIAL_NAMES:
        if tc.get(k) is not None:
            specials[k] = _token_str(tc[k], f"{tc_path} (field {k!r})")
    extra: list[str] = []
    stm_path = d / "special_tokens_map.json"
    if "added_tokens_decoder" not in tc and stm_path.is_file():
        # transformers' legacy path: special_tokens_map.json overrides tokenizer_config.json
        stm = _read_json(stm_path)
        for k in SPECIAL_NAMES:
            if stm.get(k) is not None:
                specials[k] = _token_str(stm[k], f"{stm_path} (field {k!r})")
        for i, t in enumerate(stm.get("additional_special_tokens") or []):
            extra.append(_token_str(t, f"{stm_path} (additional_special_tokens[{i}])"))
    for i, t in enumerate(tc.get("additional_special_tokens") or []):
        extra.append(_token_str(t, f"{tc_path} (additional_special_tokens[{i}])"))
    for idx, t in (tc.get("added_tokens_decoder") or {}).items():
        extra.append(_token_str(t, f"{tc_path} (added_tokens_decoder[{idx}])"))
    if "added_tokens_decoder" not in tc and (d / "added_tokens.json").is_file():
        extra += list(_read_json(d / "added_tokens.json"))
    base = set(specials.values())
    extra = list(dict.fromkeys(t for t in extra if t not in base))
    settings = TokenizerSettings(mecab_dic=dic, do_lower_case=lower, normalize_text=normalize,
                                 subword_tokenizer_type=stype, never_split=tuple(never_split),
                                 extra_tokens=tuple(extra), **specials)
    if lower:
        # transformers lower-cases the text before it looks for special-token literals; denki looks for them
        # first. The two agree unless lower-casing can *create* a literal, i.e. a token holds a lower-case letter.
        for t in settings.special_tokens():
            if any(c != c.upper() for c in t):
                raise bad("do_lower_case", f"special token {t!r} contains lower-case letters; with lower-casing "
                                           "that is not reproduced exactly")
    mml = tc.get("model_max_length")
    mml = int(mml) if isinstance(mml, (int, float)) and 0 < mml < 1e9 else None  # transformers' "no limit" is 1e30
    return settings, mml
