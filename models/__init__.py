"""denki's model layer, one stage package each (read them in this order; imports flow only this way):

- :mod:`models.io` — errors, atomic writes, text files, JSONL/CSV records, plot set-up (imports nothing of denki);
- :mod:`models.text` — tokenisation (NFKC with offsets, MeCab → WordPiece, the vocabulary trainer);
- :mod:`models.bundle` — the bundle format, PyTorch save/load, ONNX variant files and sessions, size presets;
- :mod:`models.training` — what every training loop shares, and the pretrained-encoder health check;
- :mod:`models.classify`, :mod:`models.qa` — each task's fine-tuning, evaluation, decision rule and report;
- :mod:`models.export` — PyTorch bundle → ONNX bundle behind the parity gate.

``io ← text ← bundle ← classify, qa ← export``, with ``training`` (needs only ``io``) beside ``bundle``.
Importing a package is cheap and torch-free (no ``__init__`` imports anything); modules that need torch import it themselves,
so that ``serve/`` (which must not import torch) can use the tokenizer, the bundle reader, the ONNX sessions and
the decision rules. ``tests/test_layout.py`` checks the direction and that nothing imports in a circle.
"""

if not __name__.startswith("denki."):  # one name per module: `models.x` and `denki.models.x` would be two copies
    raise ImportError("import denki.models, not models (every denki module lives under the denki namespace)")
