"""Pieces every training loop shares — pretraining (``pretrain/``) and fine-tuning (:mod:`models.classify.finetune`,
:mod:`models.qa.finetune`): seeds, device choice, AdamW with layer-wise LR decay, warmup schedule (:mod:`.loop`, imports
torch), the plain-words check whether a pretrained encoder learned anything (:mod:`.pretrain_health`,
torch-free), and the position rows pretraining never trained (:mod:`.positions`, torch only when tiling).

May import: :mod:`models.io`.
"""
