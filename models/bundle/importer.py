"""`denki import`: a public transformers checkpoint → a denki ``pretrained`` bundle that every later stage takes.

Input: a directory (``config.json`` + safetensors weights + the tokenizer files of ``BertJapaneseTokenizer``) or a
hub id that is **already in the local Hugging Face cache** (resolved with ``local_files_only=True``; denki never
downloads). Architectures: ``ElectraForPreTraining`` / ``ElectraModel`` / ``ElectraForMaskedLM`` (ELECTRA
discriminators and denki's own MLM encoders), ``BertForPreTraining`` / ``BertForMaskedLM`` / ``BertModel``; an
ELECTRA generator (``ElectraForMaskedLM``) may come along (``generator=``) and is kept in the bundle's
``generator/`` folder for continued RTD pretraining.

What is checked before anything is written (each failure is an error naming the file):

* weights: safetensors only — a ``.bin``-only checkpoint gets the one-line conversion command; every tensor the
  architecture needs must be in the file (no silently random layers);
* tokenizer: denki reads the settings from ``tokenizer_config.json`` (:mod:`models.text.settings`) and loads the
  same directory in transformers' own ``BertJapaneseTokenizer``; the two must agree on every effective setting
  (dictionary, lower-casing, normalisation, special tokens and their ids, added tokens) and give identical ids on
  :data:`PROBE_TEXTS` (plus ``parity_texts`` when given) — and again after denki has written the bundle's own
  tokenizer files, loaded back by transformers;
* vocabulary: the model's embedding rows cover the tokenizer's ids; a generator shares the discriminator's
  vocabulary.

The bundle is the same ``pretrained`` bundle ``denki pretrain`` writes (``save_pretrained`` + denki tokenizer files
+ manifest); ``manifest.source.import`` records where it came from (path or hub id and cached revision, sha256 of
every source file). torch/transformers are imported inside the functions.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from denki.models.io.errors import DenkiError, InputError
from denki.models.io.fileio import sha256_file

#: encoder architectures a ``pretrained`` bundle can hold → model_type
ENCODER_ARCHITECTURES = {"ElectraForPreTraining": "electra", "ElectraModel": "electra",
                         "ElectraForMaskedLM": "electra", "BertForPreTraining": "bert", "BertForMaskedLM": "bert",
                         "BertModel": "bert"}
GENERATOR_ARCHITECTURES = {"ElectraForMaskedLM": "electra"}
GENERATOR_DIR = "generator"  # sub-directory of an imported ELECTRA bundle holding its generator
_SOURCE_FILES = ("config.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                 "tokenizer.json")

#: texts the tokenizer gate always checks: scripts, widths, case, numbers, symbols, literals, long words
PROBE_TEXTS = [
    "", " ", "東京都に住んでいます。", "吾輩は猫である。名前はまだ無い。",
    "外国人参政権について話し合った", "すもももももももものうち", "行ってきました!食べさせられなかった?",
    "ＡＢＣ　ｄｅｆ　１２３", "ｶﾞｯｺｳﾆ ｲｷﾏｽ", "①②③と㍿と㌔と㍻", "か\u3099き\u3099", "Ω≒≠√∞㎏㎡℃¼½",
    "Hello WORLD ＨＥＬＬＯ ｗｏｒｌｄ ＬｉｎｕｘとUNIX", "ΑΣ ΣΑΣ ℌ𝐀𝚺 Ⅻ ⅷ İstanbul",
    "ls -la /usr/bin | grep python3.11 > out.txt 2>&1", "https://example.co.jp/path?q=検索&n=10#frag",
    "価格は1,980円(税込)、送料は￥500です。", "2024年4月1日 午前10時30分〜12時", "電話: 03-1234-5678",
    "タブ\tと改行\nと\r\nCRLF", "絵文字😀と👨‍👩‍👧‍👦家族🇯🇵旗", "ﾃﾞｰﾀﾍﾞｰｽ\u200bゼロ幅\ufeffBOM",
    "a[CLS]b [SEP] c[MASK]d [UNK] [PAD]", "［ＣＬＳ］は全角", "x" * 150 + " 長い単語",
    "機械学習モデルを本番環境にデプロイする際には、レイテンシとスループットの両方を考慮する必要がある。",
    "『源氏物語』は平安時代中期に成立した日本の長編物語である。", "カーネルのパラメータを sysctl で変更する。",
]


# ----------------------------------------------------------------------------------------------- resolving
def resolve_checkpoint(model: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None,
                       revision: str | None = None) -> tuple[Path, dict]:
    """A checkpoint directory, or a hub id found in the local Hugging Face cache → ``(directory, origin)``.

    ``origin``: ``{"path": …}`` or ``{"hub_id", "revision" (the cached commit), "snapshot"}``. Never touches the
    network (``local_files_only=True``); a hub id that is not cached is a :class:`DenkiError` that says so."""
    p = Path(model)
    if p.is_dir():
        return p, {"path": str(p.resolve())}
    if p.exists():
        raise DenkiError(f"{p}: not a directory (give a transformers checkpoint directory or a hub id)")
    name = str(model)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        snap = snapshot_download(name, local_files_only=True, cache_dir=cache_dir, revision=revision)
    except HFValidationError:
        raise DenkiError(f"{name}: no such directory, and not a valid hub id") from None
    except (LocalEntryNotFoundError, FileNotFoundError, OSError):
        from huggingface_hub import constants

        where = cache_dir or constants.HF_HUB_CACHE
        raise DenkiError(f"{name}: no such directory, and not in the local Hugging Face cache ({where}). denki "
                         "never downloads: fetch it where there is network (`huggingface-cli download "
                         f"{name}`), copy that cache here (or pass --cache-dir), or give the directory") from None
    return Path(snap), {"hub_id": name, "revision": Path(snap).name, "snapshot": str(snap)}


def _weight_files(d: Path) -> list[Path]:
    return sorted(d.glob("*.safetensors"))


def check_weights(d: Path, architecture: str | None = None) -> list[Path]:
    """The checkpoint's safetensors files; a clear error (with the conversion command) when it has only
    pickled / TF / Flax weights."""
    files = _weight_files(d)
    if files:
        return files
    others = [f for f in ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")
              if (d / f).is_file()] + [f.name for f in sorted(d.glob("pytorch_model-*.bin"))][:1]
    if others:
        cls = architecture or "AutoModel"
        raise DenkiError(
            f"{d}: weights only in {others}; denki loads weights only from safetensors (loading a pickle can run "
            f"code). Convert them once, where you trust the file: python -c 'from transformers import {cls} as M; "
            f"M.from_pretrained(\"{d}\").save_pretrained(\"{d}\", safe_serialization=True)'")
    raise DenkiError(f"{d}: no model weights (no *.safetensors file)")


def _read_config(d: Path) -> dict:
    p = d / "config.json"
    if not p.is_file():
        raise DenkiError(f"{d}: no config.json (not a transformers checkpoint directory)")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{p}: invalid JSON ({e})") from None


def _weight_keys(files: list[Path]) -> set[str]:
    from safetensors import safe_open

    keys: set[str] = set()
    for f in files:
        with safe_open(str(f), framework="np") as fh:
            keys |= set(fh.keys())
    return keys


def _architecture(d: Path, cfg: dict, allowed: dict[str, str], files: list[Path]) -> str:
    """``config.json``'s ``architectures[0]``, or — when it names none — the one the weight names show."""
    archs = cfg.get("architectures") or []
    arch = archs[0] if archs else None
    if arch is None:
        keys = _weight_keys(files)
        mt = cfg.get("model_type")
        if mt == "electra":
            arch = "ElectraForPreTraining" if any(k.startswith("discriminator_predictions.") for k in keys) else \
                "ElectraForMaskedLM" if any(k.startswith("generator_") for k in keys) else "ElectraModel"
        elif mt == "bert":
            arch = "BertForPreTraining" if any(k.startswith("cls.seq_relationship") for k in keys) else \
                "BertForMaskedLM" if any(k.startswith("cls.predictions") for k in keys) else "BertModel"
    if arch not in allowed:
        raise InputError(f"{d / 'config.json'} (field 'architectures'): {arch!r} is not supported here; "
                         f"choose a checkpoint of {sorted(allowed)}")
    if cfg.get("model_type") != allowed[arch]:
        raise InputError(f"{d / 'config.json'} (field 'model_type'): {cfg.get('model_type')!r} does not match "
                         f"the architecture {arch}")
    return arch


def load_checkpoint_model(d: Path, allowed: dict[str, str] = ENCODER_ARCHITECTURES):
    """Load the checkpoint's model from safetensors (float32) → ``(model, architecture, loading_info)``.

    Refuses a checkpoint whose weights lack tensors the architecture needs (they would be random)."""
    import transformers
    from transformers.utils import logging as hf_logging

    cfg = _read_config(d)
    files = check_weights(d, (cfg.get("architectures") or [None])[0])
    arch = _architecture(d, cfg, allowed, files)
    cls = getattr(transformers, arch)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # unexpected keys (e.g. a BertForPreTraining NSP head) are reported below
    try:
        model, info = cls.from_pretrained(str(d), use_safetensors=True, local_files_only=True,
                                          output_loading_info=True, dtype="float32")
    finally:
        hf_logging.set_verbosity(verbosity)
    if info.get("missing_keys") or info.get("mismatched_keys"):
        bad = list(info.get("missing_keys") or []) + [str(m) for m in info.get("mismatched_keys") or []]
        raise DenkiError(f"{d}: the safetensors weights lack {len(bad)} tensors a {arch} needs (e.g. {bad[:3]}); "
                         "a truncated file, or config.json describes another model")
    model.eval()
    return model, arch, {"unexpected_keys": sorted(info.get("unexpected_keys") or [])}


# ----------------------------------------------------------------------------------------------- tokenizer
def _effective_hf_settings(hf) -> dict:
    """What transformers' loaded BertJapaneseTokenizer will really do, in denki's terms."""
    mk = dict(hf.mecab_kwargs or {})
    return {"word_tokenizer_type": hf.word_tokenizer_type if hf.do_word_tokenize else None,
            "subword_tokenizer_type": hf.subword_tokenizer_type if hf.do_subword_tokenize else None,
            "mecab_dic": mk.get("mecab_dic", "unidic_lite"), "normalize_text": mk.get("normalize_text", True),
            "mecab_option": mk.get("mecab_option"), "do_lower_case": bool(hf.lower_case),
            "never_split": list(hf.never_split or []),
            **{k: str(getattr(hf, k)) for k in ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")},
            "split_tokens": sorted(hf.added_tokens_encoder)}


def _denki_settings(tok) -> dict:
    s = tok.settings
    return {"word_tokenizer_type": "mecab", "subword_tokenizer_type": s.subword_tokenizer_type,
            "mecab_dic": s.mecab_dic, "normalize_text": s.normalize_text, "mecab_option": None,
            "do_lower_case": s.do_lower_case, "never_split": list(s.never_split),
            **{k: getattr(s, k) for k in ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")},
            "split_tokens": sorted(s.special_tokens())}


def _hf_tokenizer(d: Path):
    from transformers import AutoTokenizer

    try:
        hf = AutoTokenizer.from_pretrained(str(d), local_files_only=True)
    except Exception as e:  # transformers' own complaint, with the directory named
        raise DenkiError(f"{d}: transformers cannot load this tokenizer ({type(e).__name__}: {e})") from None
    if type(hf).__name__ != "BertJapaneseTokenizer":
        raise DenkiError(f"{d}: transformers loads this tokenizer as {type(hf).__name__}; denki reproduces "
                         "BertJapaneseTokenizer (MeCab + WordPiece) only")
    return hf


def _mismatches(tok, hf, texts: list[str]) -> list[str]:
    bad = []
    for t in texts:
        if tok.encode(t, truncation=False).ids != hf(t, truncation=False)["input_ids"]:
            bad.append(t)
    return bad


def check_tokenizer(d: Path, texts: list[str]):
    """Load the checkpoint's tokenizer in denki and in transformers; require identical settings and ids.
    Returns ``(denki tokenizer, hf tokenizer)``."""
    import logging

    from denki.models.text.tokenizer import JapaneseTokenizer

    logging.getLogger("transformers.tokenization_utils_base").setLevel(logging.ERROR)  # "sequence > 512" notes
    if not (d / "vocab.txt").is_file():
        raise DenkiError(f"{d}: no vocab.txt (a MeCab + WordPiece checkpoint ships its vocabulary there)")
    tok = JapaneseTokenizer.load(d)  # InputError naming file + field for settings denki cannot reproduce
    hf = _hf_tokenizer(d)
    ours, theirs = _denki_settings(tok), _effective_hf_settings(hf)
    diff = {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}
    if diff:
        raise DenkiError(f"{d}: denki and transformers read this tokenizer differently "
                         f"({', '.join(f'{k}: denki {a!r} vs transformers {b!r}' for k, (a, b) in diff.items())})")
    wrong_ids = {t: (tok.vocab[t], i) for t, i in hf.added_tokens_encoder.items() if tok.vocab.get(t) != i}
    if wrong_ids:
        raise DenkiError(f"{d}: special/added tokens have other ids in transformers than in vocab.txt: {wrong_ids}")
    bad = _mismatches(tok, hf, texts)
    if bad:
        raise DenkiError(f"{d}: denki's ids differ from BertJapaneseTokenizer's on {len(bad)}/{len(texts)} probe "
                         f"texts (e.g. {bad[0][:60]!r}); refusing to import a tokenizer it does not reproduce")
    return tok, hf


def read_parity_texts(path: str | os.PathLike, limit: int = 5000) -> list[str]:
    """Extra tokenizer-gate texts: one per line of a UTF-8 text file (.gz allowed)."""
    from denki.models.io.textio import iter_lines

    out = []
    for _, line in iter_lines(path):
        out.append(line)
        if len(out) >= limit:
            break
    return out


# ----------------------------------------------------------------------------------------------- import
def _source_files(d: Path) -> dict[str, str]:
    names = [n for n in _SOURCE_FILES if (d / n).is_file()] + [f.name for f in _weight_files(d)]
    names += [f.name for f in sorted(d.glob("*.safetensors.index.json"))]
    return {n: sha256_file(d / n) for n in names}


def import_checkpoint(model: str | os.PathLike, out_dir: str | os.PathLike, *,
                      generator: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None,
                      revision: str | None = None, parity_texts: str | os.PathLike | None = None,
                      command: str | None = None) -> dict:
    """Import a checkpoint (see the module docstring) as a ``pretrained`` bundle at ``out_dir``; returns the
    manifest. Nothing is written when a check fails."""
    from denki.models.bundle.format import command_line
    from denki.models.bundle.pytorch import save_bundle

    src, origin = resolve_checkpoint(model, cache_dir=cache_dir, revision=revision)
    texts = PROBE_TEXTS + (read_parity_texts(parity_texts) if parity_texts else [])
    cfg = _read_config(src)
    check_weights(src, (cfg.get("architectures") or [None])[0])  # before the (slow) tokenizer checks
    tok, hf = check_tokenizer(src, texts)
    net, arch, info = load_checkpoint_model(src)
    c = net.config
    if c.vocab_size < tok.vocab_size:
        raise DenkiError(f"{src}: the model has {c.vocab_size} embedding rows but vocab.txt {tok.vocab_size} tokens")
    # the encoder cannot look further than its position embeddings, whatever the tokenizer says
    tok.model_max_length = min(tok.model_max_length, int(c.max_position_embeddings))
    notes = []
    if getattr(c, "type_vocab_size", 2) < 2:
        notes.append(f"type_vocab_size {c.type_vocab_size}: QA (question + context pairs) needs 2 token types")
    if c.vocab_size > tok.vocab_size:
        notes.append(f"{c.vocab_size - tok.vocab_size} embedding rows beyond vocab.txt (never produced by the "
                     "tokenizer)")
    gen = gen_record = None
    if generator is not None:
        if c.model_type != "electra":
            raise DenkiError(f"--generator goes with an ELECTRA discriminator; {src} is {c.model_type}")
        gsrc, gorigin = resolve_checkpoint(generator, cache_dir=cache_dir, revision=revision)
        gen, garch, ginfo = load_checkpoint_model(gsrc, GENERATOR_ARCHITECTURES)
        if gen.config.vocab_size != c.vocab_size:
            raise DenkiError(f"{gsrc}: generator vocabulary {gen.config.vocab_size} ≠ discriminator's {c.vocab_size}")
        if (gsrc / "vocab.txt").is_file() and \
                (gsrc / "vocab.txt").read_text(encoding="utf-8") != (src / "vocab.txt").read_text(encoding="utf-8"):
            raise DenkiError(f"{gsrc / 'vocab.txt'}: the generator's vocabulary differs from the discriminator's")
        if gen.config.embedding_size != c.embedding_size:
            raise DenkiError(f"{gsrc}: generator embedding_size {gen.config.embedding_size} ≠ discriminator's "
                             f"{c.embedding_size} (ELECTRA shares token embeddings between the two)")
        gen_record = {"from": gorigin, "architecture": garch, "files": _source_files(gsrc),
                      "hidden_size": gen.config.hidden_size, **ginfo}

    # a denki bundle (or run) imported like a hub checkpoint keeps the pretraining FLOPs its manifest records,
    # so continued runs on top of it can still report total FLOPs
    pre_flops = None
    if (src / "manifest.json").is_file():
        try:
            dm = json.loads((src / "manifest.json").read_text(encoding="utf-8"))
            dsrc = dm.get("source") or {}
            # a continued run records its total (None when its own start was unknown); a fresh run its FLOPs
            pre_flops = dsrc.get("total_flops") if dsrc.get("init_from") else (dm.get("metrics") or {}).get("flops")
            if dsrc.get("init") == "import":
                pre_flops = dsrc.get("import", {}).get("pretraining_flops")
        except (json.JSONDecodeError, AttributeError):
            pre_flops = None

    with tempfile.TemporaryDirectory(prefix="denki-import-") as tmp:
        tok_dir = Path(tmp) / "tokenizer"
        tok.save(tok_dir)  # denki's files, every setting explicit (what transformers and denki both read)
        again = _hf_tokenizer(tok_dir)
        bad = [t for t in texts if again(t, truncation=False)["input_ids"] != hf(t, truncation=False)["input_ids"]]
        if bad:  # pragma: no cover - a settings writer bug; never ship a bundle that transformers reads otherwise
            raise DenkiError(f"internal: the rewritten tokenizer files tokenise {len(bad)} probe texts differently")
        n_params = sum(p.numel() for p in net.parameters())
        source = {"import": {"from": origin, "architecture": arch, "model_type": c.model_type,
                             "files": _source_files(src), **info, "notes": notes, "generator": gen_record,
                             "pretraining_flops": pre_flops},
                  "init": "import", "tokenizer": tok.fingerprint(), "tokenizer_settings": tok.settings.differences(),
                  "command": command or command_line()}
        metrics = {"import": {"tokenizer_probe_texts": len(texts), "tokenizer_identical": len(texts),
                              "parameters": int(n_params), "hidden_size": c.hidden_size,
                              "num_hidden_layers": c.num_hidden_layers, "vocab_size": tok.vocab_size}}
        manifest = save_bundle(net, tok_dir, out_dir, "pretrained", source=source, metrics=metrics,
                               submodels={GENERATOR_DIR: gen} if gen is not None else None)
    return manifest


def generator_of(bundle_dir: str | os.PathLike) -> Path | None:
    """The generator folder of a ``pretrained`` bundle (an imported ELECTRA with ``--generator``), or None."""
    g = Path(bundle_dir) / GENERATOR_DIR
    return g if (g / "config.json").is_file() else None

