"""Tokenisation: NFKC with offsets back into the original string (:mod:`.normalize`), the Japanese
MeCab → WordPiece tokenizer (:mod:`.tokenizer`), its deterministic vocabulary trainer
(:mod:`.wordpiece_trainer`) and ``denki tokenize`` (:mod:`.tokenize_file`).

May import: :mod:`models.io`. Torch-free (the ONNX runtime in ``serve/`` tokenises with it).
"""
