"""Corpus → tokenized cache (:mod:`.data`) → RTD/MLM pretraining (:mod:`.train`, with :mod:`.masking`,
:mod:`.model`, :mod:`.flops`, :mod:`.diagnostics`, :mod:`.checkpoint`; fast paths that keep the recipe — cheaper
CPU dropout masks, SDPA attention — in :mod:`.fastpath`; speed and MFU in :mod:`.speed`; the run log read back in
:mod:`.runlog`)
→ discriminator bundle (:mod:`.export`); continued pretraining from a ``pretrained`` bundle (:mod:`.init_from`,
``denki pretrain --init-from``); and the ELECTRA-vs-MLM experiment on top (:mod:`.experiment`).

May import: ``models/`` (never ``serve/`` or ``app/``).
"""

if not __name__.startswith("denki."):  # one name per module: `pretrain.x` and `denki.pretrain.x` would be two copies
    raise ImportError("import denki.pretrain, not pretrain (every denki module lives under the denki namespace)")
