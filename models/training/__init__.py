"""Pieces every training loop shares — pretraining (``pretrain/``) and fine-tuning (:mod:`models.classify.finetune`,
:mod:`models.qa.finetune`): seeds, device choice, AdamW with layer-wise LR decay, warmup schedule (:mod:`.loop`, imports
torch), and the plain-words check whether a pretrained encoder learned anything (:mod:`.pretrain_health`,
torch-free).

May import: :mod:`models.io`.
"""
