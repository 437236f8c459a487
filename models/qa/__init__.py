"""Extractive QA (``denki finetune qa`` / ``denki evaluate qa``): reading SQuAD 2.0 data (:mod:`.data`),
windows and span targets (:mod:`.features`), the optional answerable head (:mod:`.heads`, torch), fine-tuning,
PyTorch evaluation and the report (:mod:`.finetune`, torch inside functions), and the numpy pieces that the ONNX
runtime shares: post-processing to an exact span of the original context or no answer (:mod:`.postprocess`) and
character-level SQuAD 2.0 metrics (:mod:`.metrics`).

May import: :mod:`models.io`, :mod:`models.text`, :mod:`models.bundle`, :mod:`models.training`. Inside, one way:
``finetune → heads, features → data``; ``postprocess`` and ``metrics`` import nothing from denki.
"""
