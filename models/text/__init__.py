"""Tokenisation: NFKC (and lower-casing) with offsets back into the original string (:mod:`.normalize`), the
Japanese MeCab → WordPiece tokenizer (:mod:`.tokenizer`), the settings of a checkpoint's tokenizer read from its
``tokenizer_config.json`` (:mod:`.settings`: dictionary, lower-casing, special tokens), its deterministic
vocabulary trainer (:mod:`.wordpiece_trainer`) and ``denki tokenize`` (:mod:`.tokenize_file`).

May import: :mod:`models.io`. Torch-free (the ONNX runtime in ``serve/`` tokenises with it).
"""
