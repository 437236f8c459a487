"""Writing and loading PyTorch bundles (``save_pretrained`` + safetensors + tokenizer + manifest)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from denki.models.bundle.format import verify_bundle, write_manifest
from denki.models.io.errors import DenkiError

TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "denki_tokenizer.json")


def copy_tokenizer(src_dir: str | os.PathLike, dest_dir: str | os.PathLike) -> None:
    """Copy a tokenizer's files (from a tokenizer directory or another bundle) into ``dest_dir``."""
    src, dest = Path(src_dir), Path(dest_dir)
    if not (src / "vocab.txt").is_file():
        raise DenkiError(f"{src}: no tokenizer here (vocab.txt missing)")
    dest.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            tmp = dest / f".{name}.partial"
            shutil.copyfile(src / name, tmp)
            os.replace(tmp, dest / name)


def save_bundle(model, tokenizer_dir: str | os.PathLike, out_dir: str | os.PathLike, kind: str, *,
                source: dict | None = None, metrics: dict | None = None, extra_files: dict | None = None,
                submodels: dict | None = None, write_extra=None) -> dict:
    """Write ``model`` (a transformers PreTrainedModel) as a bundle: built in ``OUT.partial`` then renamed, so
    a crash never leaves a half-written bundle under the final name. ``extra_files`` maps names to JSON objects
    (e.g. ``{"task.json": {...}}``); ``submodels`` maps sub-directory names to further models saved there the
    same way (an imported ELECTRA generator: ``{"generator": model}``), hashed in the manifest like every file;
    ``write_extra(directory)`` writes any other files (a fused router's lexical model) before the manifest.
    Returns the manifest."""
    from denki.models.io.fileio import atomic_write_json, replace_dir

    out = Path(out_dir)
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for name, sub in (submodels or {}).items():
        sub.save_pretrained(tmp / name, safe_serialization=True)
    copy_tokenizer(tokenizer_dir, tmp)
    for name, obj in (extra_files or {}).items():
        atomic_write_json(tmp / name, obj)
    if write_extra is not None:
        write_extra(tmp)
    manifest = write_manifest(tmp, kind, source=source, metrics=metrics)
    replace_dir(tmp, out)
    return manifest


def load_model(bundle_dir: str | os.PathLike, model_cls, *, kinds: tuple[str, ...] | None = None, **kwargs):
    """Verify the bundle's checksums, then ``model_cls.from_pretrained`` from safetensors only (never pickle)."""
    verify_bundle(bundle_dir, kinds=kinds)
    if not (Path(bundle_dir) / "model.safetensors").is_file():
        raise DenkiError(f"{bundle_dir}: no model.safetensors (denki loads weights only from safetensors)")
    return model_cls.from_pretrained(str(bundle_dir), use_safetensors=True, local_files_only=True, **kwargs)


def random_init_bundle(size: str, tokenizer_dir: str | os.PathLike, out_dir: str | os.PathLike, *,
                       seed: int = 0) -> dict:
    """A randomly initialised encoder saved as a ``pretrained`` bundle: the random-init control for
    fine-tuning comparisons, and a quick stand-in for tests."""
    import torch
    from transformers import ElectraForPreTraining

    from denki.models.bundle.presets import electra_config
    from denki.models.text.tokenizer import JapaneseTokenizer

    tok = JapaneseTokenizer.load(tokenizer_dir)
    torch.manual_seed(seed)
    model = ElectraForPreTraining(electra_config(size, tok.vocab_size))
    return save_bundle(model, tokenizer_dir, out_dir, "pretrained",
                       source={"init": "random", "size": size, "seed": seed, "tokenizer": tok.fingerprint()})
