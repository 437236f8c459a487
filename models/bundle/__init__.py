"""The bundle format every stage reads and writes: a directory of model files, tokenizer files, ``task.json``
and ``manifest.json`` (checksums, provenance, metrics). :mod:`.format` reads, writes and verifies it
(torch-free); :mod:`.pytorch` saves and loads PyTorch bundles (safetensors, ``save_pretrained``);
:mod:`.onnx` names an ONNX bundle's variant files and opens them in onnxruntime the one way that the runtime
and the export's parity gate share (torch-free); :mod:`.presets` holds the model sizes a bundle is built from;
:mod:`.importer` turns a public transformers checkpoint (ELECTRA/BERT, MeCab + WordPiece) into a ``pretrained``
bundle (`denki import`).

May import: :mod:`models.io`, :mod:`models.text`. torch/transformers only inside :mod:`.pytorch`,
:mod:`.presets` and :mod:`.importer` functions.
"""
