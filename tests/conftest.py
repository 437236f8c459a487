"""Shared fixtures: the shared data folder and a tiny tokenizer trained once per test session."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("DENKI_SHARED_DATA", REPO.parent / "shared" / "data"))
SAMPLE_CORPUS = REPO / "samples" / "corpus_ja.txt"


def shared(name: str) -> Path:
    """Path of a file in ../shared/data; skips the test with a clear reason when it is missing."""
    p = SHARED_DATA / name
    if not p.exists():
        pytest.skip(f"shared data file missing: {p} (clone the repo beside ../shared or set DENKI_SHARED_DATA)")
    return p


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    """A 4,000-token tokenizer trained on the shipped sample corpus (≈1 s)."""
    from models.tokenizer import train_tokenizer

    out = tmp_path_factory.mktemp("tok")
    train_tokenizer([SAMPLE_CORPUS], vocab_size=4000, limit_alphabet=1500, progress=False).save(out)
    return out


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_tokenizer_dir):
    from models.tokenizer import JapaneseTokenizer

    return JapaneseTokenizer.load(tiny_tokenizer_dir)
