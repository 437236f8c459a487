"""Corpus → tokenized cache (:mod:`.data`) → RTD/MLM pretraining → discriminator bundle, and the ELECTRA-vs-MLM
experiment on top (:mod:`.experiment`).

A run (:func:`.train.run_pretrain`, which reads as the list of its steps): its settings and every default
(:mod:`.settings`) → its start, data, model, optimizer and resume (:mod:`.run_setup`; the model in :mod:`.model`,
masking in :mod:`.masking`, FLOPs in :mod:`.flops`, continued pretraining from a ``pretrained`` bundle in
:mod:`.init_from`, ``denki pretrain --init-from``) → the step loop (:mod:`.loop`, with the health probe of
:mod:`.diagnostics`, speed and MFU of :mod:`.speed`, resumable training states in :mod:`.train_state`, faster
kernels that keep the recipe — cheaper CPU dropout masks, SDPA attention — in :mod:`.kernels`) → ``summary.json``,
``curves.png`` and the bundle (:mod:`.summary`, :mod:`.export`). The run directory's records: :mod:`.run_dir`; the
run log read back: :mod:`.runlog`; ranks and process groups: :mod:`.distributed`.

May import: ``models/`` (never ``serve/`` or ``app/``).
"""

if not __name__.startswith("denki."):  # one name per module: `pretrain.x` and `denki.pretrain.x` would be two copies
    raise ImportError("import denki.pretrain, not pretrain (every denki module lives under the denki namespace)")
