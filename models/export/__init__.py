"""``denki export``: a PyTorch classifier or QA bundle → an ONNX bundle (fp32, O2, int8, fp16) behind a parity
gate (:mod:`.onnx`). It lives beside the PyTorch bundles it reads because it needs torch, transformers and
optimum (imported inside its functions); the ONNX files are opened exactly as the runtime opens them
(:mod:`models.bundle.onnx`).

May import: every other package of ``models/`` (:mod:`models.io`, :mod:`models.text`, :mod:`models.bundle`,
:mod:`models.classify`, :mod:`models.qa`) — and nothing imports it but ``app/`` and the tests.
"""
