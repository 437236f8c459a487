"""``denki experiment electra-vs-mlm``: the ELECTRA paper's core comparison on the user's corpus.

For each pretraining FLOPs budget, pretrain an ELECTRA discriminator (replaced-token detection) and an MLM encoder
at equal FLOPs, plus one random-init control (it does not depend on the budget); fine-tune every model on every
task with every seed; evaluate on dev; write ``OUT/report.json``, ``OUT/report.md`` and ``OUT/score_vs_flops.png``
(the analogue of the paper's Figure 1/3: downstream score against pretraining FLOPs per objective).

Layout of ``OUT`` (every stage has its own directory and is skipped when it is complete, so re-running the same
command resumes; the pretraining runs themselves also resume from their newest checkpoint)::

    experiment.json                  settings that fine-tuning results depend on (a re-run with others is refused)
    data/TASK/{train,dev}.jsonl      the (sub)sampled task files every model is fine-tuned / evaluated on
    pretrain/electra-B/, mlm-B/      pretrain.train run directories (summary.json, curves.png, bundle/)
    random/bundle/                   the random-init control
    probe/MODEL.json                 [CLS] collapse probe of each pretrained encoder
    finetune/MODEL/TASK/seed-S/      one fine-tuning run (report.json; the fine-tuned bundle is deleted unless
                                     keep_finetuned)
    report.json, report.md, score_vs_flops.png

With ``electra15`` the paper's "ELECTRA 15%" ablation (discriminator loss only on the masked positions, Table 5:
82.4 vs 85.0 GLUE) is pretrained at every budget too and gets its own column (``pretrain/electra15-B/``).

Read it in this order: :mod:`.plan` (tasks, settings, budgets, the sampled task data, the encoders to compare)
→ :mod:`.run` (the stages — pretrain, random init, probe, fine-tune — each skipped when done, and
:func:`~pretrain.experiment.run.run_experiment`, which runs them) → :mod:`.report` (medians over seeds,
ELECTRA − MLM against seed noise, collapse flags, ``report.json`` / ``report.md`` / ``score_vs_flops.png``).

May import: :mod:`pretrain.train`, :mod:`pretrain.settings`, ``models/`` (classify, qa, bundle, text, io). Inside,
one way:
``run → report → plan``.
"""
