"""Tokenize a text file line by line into JSONL (the `denki tokenize` command)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from denki.models.io.fileio import temp_file_beside
from denki.models.io.textio import count_lines, iter_lines
from denki.models.text.tokenizer import JapaneseTokenizer


def tokenize_file(tokenizer_dir, input_path, output_path, *, max_length: int | None = None,
                  progress: bool = True) -> dict:
    """Write one JSON object per input line: ``{"line", "text", "ids", "tokens", "offsets"}``.

    Every input line gives exactly one output line (an empty line gives ``[CLS] [SEP]``). The output is written
    to a temporary file and renamed into place, so an interrupted run leaves no half-written file.
    """
    from tqdm.auto import tqdm

    tok = JapaneseTokenizer.load(tokenizer_dir)
    out = Path(output_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    n_lines = n_tokens = n_unk = n_chars = 0
    fd, tmp = temp_file_beside(out)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for lineno, text in tqdm(iter_lines(input_path), total=count_lines(input_path), unit=" lines",
                                     desc="tokenize", disable=not progress):
                enc = tok.encode(text, max_length=max_length, truncation=max_length is not None)
                f.write(json.dumps({"line": lineno, "text": text, "ids": enc.ids, "tokens": enc.tokens,
                                    "offsets": [list(o) for o in enc.offsets]}, ensure_ascii=False) + "\n")
                n_lines += 1
                n_tokens += len(enc.ids) - 2
                n_unk += sum(1 for i in enc.ids if i == tok.unk_id)
                n_chars += len(text)
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return {"lines": n_lines, "tokens": n_tokens, "unk_rate": n_unk / max(1, n_tokens),
            "chars_per_token": n_chars / max(1, n_tokens)}
