"""denki's shared model layer: tokenizer, bundle format, task heads, fine-tuning, metrics.

Importing this package is cheap and torch-free; modules that need torch import it themselves, so that
``serve/`` (which must not import torch at run time) can use the tokenizer and the bundle reader.
"""
