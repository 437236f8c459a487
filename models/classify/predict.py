"""Running a classifier on texts with PyTorch: token ids (``[CLS] … [SEP]``, truncated), length-sorted
batches with dynamic padding (shuffled in buckets for training, fully sorted for prediction, so little compute
goes to padding), batched logits, and ``texts → logits`` for a saved ``classifier`` bundle
(:func:`torch_logits_fn`, what ``denki evaluate classify`` uses for a PyTorch bundle).

Torch is imported at module level.
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm


# ----------------------------------------------------------------------------------------------- encoding
def encode_texts(tokenizer, texts: list[str], max_length: int, *, progress: bool = True,
                 desc: str = "tokenize") -> tuple[list[np.ndarray], int]:
    """Token ids per text (``[CLS] … [SEP]``, truncated); returns ``(ids, n_truncated)``."""
    ids, n_trunc = [], 0
    for t in tqdm(texts, desc=desc, unit="text", disable=not progress, leave=False, mininterval=1.0):
        e = tokenizer.encode(t, max_length=max_length, truncation=True)
        ids.append(np.asarray(e.ids, dtype=np.int64))
        n_trunc += bool(e.overflow)
    return ids, n_trunc


def length_batches(lengths: list[int] | np.ndarray, batch_size: int, rng: random.Random | None = None,
                   bucket_batches: int = 50) -> list[np.ndarray]:
    """Index batches with similar lengths. With ``rng`` (training): shuffle, sort inside buckets of
    ``bucket_batches`` batches, then shuffle the batch order — length-sorted yet random. Without (prediction):
    one global sort."""
    lengths = np.asarray(lengths)
    n = len(lengths)
    if rng is None:
        order = np.argsort(-lengths, kind="stable")
        return [order[i:i + batch_size] for i in range(0, n, batch_size)]
    perm = list(range(n))
    rng.shuffle(perm)
    perm = np.asarray(perm)
    batches = []
    size = batch_size * bucket_batches
    for s in range(0, n, size):
        chunk = perm[s:s + size]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(ids: list[np.ndarray], batch: np.ndarray, pad_id: int, device) -> dict[str, torch.Tensor]:
    """Pad the batch to its longest member → ``input_ids``, ``attention_mask``, ``token_type_ids`` ``(b, seq)``."""
    n = max(len(ids[i]) for i in batch)
    x = np.full((len(batch), n), pad_id, dtype=np.int64)
    m = np.zeros((len(batch), n), dtype=np.int64)
    for r, i in enumerate(batch):
        x[r, :len(ids[i])] = ids[i]
        m[r, :len(ids[i])] = 1
    return {"input_ids": torch.from_numpy(x).to(device), "attention_mask": torch.from_numpy(m).to(device),
            "token_type_ids": torch.zeros_like(torch.from_numpy(x)).to(device)}


def autocast(device: torch.device, bf16: bool):
    if device.type == "cuda" and bf16:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    import contextlib

    return contextlib.nullcontext()


@torch.no_grad()
def predict_logits(model, ids: list[np.ndarray], *, pad_id: int = 0, batch_size: int = 128, device=None,
                   bf16: bool = True, progress: bool = True, desc: str = "predict") -> np.ndarray:
    """Logits ``(n, K)`` float32 in the input order (batches sorted by length internally)."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = np.zeros((len(ids), model.config.num_labels), dtype=np.float32)
    batches = length_batches([len(x) for x in ids], batch_size)
    for b in tqdm(batches, desc=desc, unit="batch", disable=not progress, leave=False, mininterval=1.0):
        with autocast(device, bf16):
            logits = model(**collate(ids, b, pad_id, device)).logits
        out[b] = logits.float().cpu().numpy()
    model.train(was_training)
    return out



# ----------------------------------------------------------------------------------------------- evaluation
def torch_logits_fn(bundle_dir: Path, *, device: str = "auto", batch_size: int = 128, progress: bool = True):
    """``texts → logits (n, K)`` with the bundle's PyTorch model (tokenised with the bundle's tokenizer); for a
    fused router (``task.json`` ``fusion``) the fused logits, as the ONNX runtime gives them."""
    from transformers import AutoModelForSequenceClassification  # ELECTRA or BERT, as config.json says

    from denki.models.bundle.format import read_task
    from denki.models.bundle.pytorch import load_model
    from denki.models.text.tokenizer import JapaneseTokenizer
    from denki.models.training.loop import pick_device

    task = read_task(bundle_dir)
    dev = pick_device(device)
    net = load_model(bundle_dir, AutoModelForSequenceClassification, kinds=("classifier",)).to(dev)
    tok = JapaneseTokenizer.load(bundle_dir)
    lexical = None
    if task.get("fusion"):
        from denki.models.classify.lexical import LexicalModel

        lexical = LexicalModel.load(bundle_dir)

    def fn(texts: list[str]) -> np.ndarray:
        from denki.models.classify.fusion import fused_logits

        ids, _ = encode_texts(tok, texts, int(task.get("max_length", 128)), progress=progress)
        # fp32 even on CUDA: evaluation should match the ONNX fp32 path, and inference is cheap
        enc = predict_logits(net, ids, pad_id=tok.pad_id, batch_size=batch_size, device=dev, bf16=False,
                             progress=progress)
        return fused_logits(task, enc, lexical.logits(texts) if lexical is not None else None)

    return fn
