"""`denki pretrain` (ELECTRA replaced-token detection or the MLM baseline) and `denki pretrain export`.

Every option's default is :class:`~pretrain.settings.PretrainConfig`'s (read with ``field_default``); the defaults
that depend on the run (objective, lr, mask rate, ...) are chosen when it starts and printed in one line. Why each
default is what it is: docs/pretrain.md.
"""
from __future__ import annotations

import argparse
import os

from denki.models.io.corpus import CORPUS_HELP
from denki.models.training.precision import PRECISIONS
from denki.pretrain.settings import field_default as D

DESCRIPTION = (
    "Pretrain on a Japanese corpus (UTF-8 text files, one paragraph per line, and/or the text fields of JSONL/CSV "
    "records) with ELECTRA replaced-token detection (generator + discriminator, shared embeddings) or BERT-style "
    "MLM on the same encoder, until --steps or --max-flops is reached. Re-running the same command on the same "
    "--out resumes from the newest checkpoint. Writes OUT/metrics.jsonl, OUT/curves.png, OUT/summary.json and the "
    "model bundle OUT/bundle/. The defaults that depend on the run (objective, lr, mask rate, ...) are printed in "
    "one line when it starts. Multi-GPU: `torchrun --nproc_per_node N -m denki.app.cli pretrain ...`. Continued "
    "(domain-adaptive) pretraining: --init-from BUNDLE starts from a pretrained bundle (`denki import` or an "
    "earlier run) with its tokenizer and architecture instead of --tokenizer/--size (docs/import.md). Guide: "
    "docs/pretrain.md.")


def register(sub) -> None:
    p = sub.add_parser("pretrain", help="pretrain an ELECTRA discriminator or an MLM encoder on a corpus",
                       description=DESCRIPTION, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.set_defaults(_group_parser=p, func=cmd_pretrain)
    _add_start_options(p)
    _add_budget_options(p)
    _add_recipe_options(p)
    _add_rtd_options(p)
    _add_speed_options(p)
    _add_output_options(p)
    _register_export(p.add_subparsers(dest="pretrain_command", metavar="SUBCOMMAND"))


def _add_start_options(p) -> None:
    """What the run learns from and starts with: corpus, tokenizer or bundle, size, objective, run directory."""
    p.add_argument("--corpus", nargs="+", metavar="SOURCE", help=CORPUS_HELP)
    p.add_argument("--tokenizer", metavar="DIR",
                   help="tokenizer directory (denki tokenizer train); with --init-from: the bundle's (leave it out)")
    p.add_argument("--init-from", metavar="BUNDLE", default=D("init_from"),
                   help="continue pretraining from this pretrained bundle (imported or denki's): its weights, "
                        "tokenizer and architecture (--size is ignored). Use it to adapt a general checkpoint to "
                        "your domain's text")
    p.add_argument("--gen-init", choices=("bundle", "copy", "random"), default=D("gen_init"),
                   help="--init-from with electra: the generator — bundle (its generator/), copy (the checkpoint's "
                        "bottom --gen-layers layers + embeddings, new MLM head), random (fresh, --gen-size wide; "
                        "embeddings from the checkpoint). Default: bundle if it has a generator, else copy")
    p.add_argument("--gen-layers", type=int, default=D("gen_layers"),
                   help="--gen-init copy: generator depth (default: a quarter of the discriminator's layers, ≥ 1)")
    p.add_argument("--size", choices=("tiny", "mini", "small", "base"), default=D("size"),
                   help="model size preset: tiny for CPUs and tests, small (the paper's ELECTRA-Small) or base "
                        "on a GPU")
    p.add_argument("--objective", choices=("electra", "mlm", "electra15", "electra-mlm"), default=D("objective"),
                   help="default: electra at every size. mlm: BERT-style masked LM (choose it for a router alone "
                        "at a CPU budget); electra15 = the paper's 'ELECTRA 15%%' ablation (disc loss on masked "
                        "positions only); electra-mlm = ELECTRA whose discriminator also predicts the original "
                        "token at the masked positions (a hybrid; docs/pretrain.md)")
    p.add_argument("--out", metavar="DIR", help="run directory (checkpoints, metrics, bundle); the same --out "
                                                "resumes the run")


def _add_budget_options(p) -> None:
    """How long the run trains and on what batches."""
    p.add_argument("--max-flops", type=float, default=D("max_flops"), metavar="F",
                   help="stop when cumulative training FLOPs reach F (e.g. 3.5e13), or when the steps planned to "
                        "spend F are done (the plan counts every row as full, so a run can end a fraction of a "
                        "percent short; summary.json records the FLOPs spent). Give this or --steps; FLOPs "
                        "compare runs of different objectives and sizes fairly")
    p.add_argument("--steps", type=int, default=D("steps"), help="number of optimizer steps (LR schedule length)")
    p.add_argument("--batch-size", type=int, default=D("batch_size"),
                   help="sequences per step (per process under torchrun)")
    p.add_argument("--micro-batch", type=int, default=D("micro_batch"), metavar="N",
                   help="sequences per forward/backward when --batch-size does not fit the device's memory: the "
                        "gradients of batch/N chunks are accumulated and the optimizer steps once per --batch-size "
                        "(same training, up to float rounding; default: the whole batch at once, halved by itself "
                        "whenever a pass runs out of GPU memory)")
    p.add_argument("--seq-len", type=int, default=D("seq_len"), help="tokens per sequence (longer: more context, "
                                                                     "more memory and FLOPs per step)")


def _add_recipe_options(p) -> None:
    """The optimisation recipe and the masking (every objective)."""
    p.add_argument("--lr", type=float, default=D("lr"),
                   help="peak learning rate (default: per size and objective, chosen when the run starts and "
                        "printed: tiny 1e-3 for mlm; tiny electra 1e-3 for a run of ≥ 1,000 steps, 3e-4 for a "
                        "shorter one and for electra15/electra-mlm; small 5e-4, base 2e-4). Lower it if the loss "
                        "becomes NaN or the health probe reports a collapse")
    p.add_argument("--warmup-steps", type=int, default=D("warmup_steps"),
                   help="linear LR warmup (default: 10%% of the steps, ≤ 10,000)")
    p.add_argument("--seed", type=int, default=D("seed"), help="data order, masking and initialisation")
    p.add_argument("--device", default=D("device"), help="auto | cpu | cuda")
    p.add_argument("--mask-prob", type=float, default=D("mask_prob"),
                   help="fraction of tokens masked. Default: 0.4 for MLM from scratch at --size tiny, else 0.15 "
                        "(the paper's; it uses 0.25 for ELECTRA-Large)")
    p.add_argument("--adam-eps", type=float, default=D("adam_eps"), metavar="EPS",
                   help="AdamW's epsilon (default torch's 1e-8; the official ELECTRA code uses 1e-6)")
    p.add_argument("--dropout", type=float, default=D("dropout"), metavar="P",
                   help="dropout while pretraining (default 0.1); the bundle keeps 0.1 for fine-tuning")


def _add_rtd_options(p) -> None:
    """ELECTRA's generator and discriminator (objectives electra*)."""
    p.add_argument("--gen-size", type=float, default=D("gen_size"),
                   help="generator width as a fraction of the discriminator's (the paper's 1/4 to 1/2 work best)")
    p.add_argument("--disc-weight", type=float, default=D("disc_weight"), help="λ: total = mlm + λ·disc")
    p.add_argument("--embeddings", choices=("shared", "separate"),
                   default="shared" if D("share_embeddings") else "separate",
                   help="electra: one token/position embedding module for generator and discriminator (shared, "
                        "the paper's) or one each (separate: the discriminator's learn from the RTD loss only)")
    p.add_argument("--disc-skip-special", action="store_true",
                   help="electra*: leave [CLS] and [SEP] out of the discriminator loss (their label is always "
                        "'original', a target that can collapse the [CLS] state a router reads; the paper scores "
                        "them). Off by default: try it when the health probe reports a collapsed [CLS]")
    p.add_argument("--cls-contrast", type=float, default=D("cls_contrast"), metavar="W",
                   help="electra*: add W × a contrastive loss at [CLS] between the discriminator's view (corrupted "
                        "text) and the generator's (masked text) of each sequence in the batch, so that [CLS] gets "
                        "a target that depends on the whole sequence (RTD gives it none). Default: 1 for a tiny "
                        "electra run of ≥ 1,000 steps, else 0 (off)")
    p.add_argument("--gen-temperature", type=float, default=D("gen_temperature"), metavar="T",
                   help="electra*: sample the generator's replacements at temperature T (logits / T). T > 1 makes "
                        "them less plausible, so easier to detect. Default 2 for a tiny ELECTRA from scratch that "
                        "plans ≥ 1,000 steps (QA from it needs `denki finetune qa`'s answerable head, its default "
                        "for ELECTRA bundles), else 1, the paper's. The probe's AUC and recall sample at T = 1, so "
                        "runs compare; disc_auc_own_t is the AUC at T")


def _add_speed_options(p) -> None:
    """How the run computes: precision and kernels (none of them changes what is learnt beyond rounding)."""
    p.add_argument("--precision", choices=PRECISIONS, default=D("precision"),
                   help="autocast precision of forward/backward (weights, optimizer, losses and sampling stay fp32). "
                        "auto: bf16 on CUDA and on CPUs with avx512_bf16/amx_bf16 (faster, and fine-tunes as well "
                        "as fp32), fp32 elsewhere; fp32 to rule rounding out when comparing runs")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (a GPU option; if compiling fails, the run warns and goes on "
                        "uncompiled)")
    p.add_argument("--attention", choices=("auto", "eager", "sdpa"), default=D("attention"),
                   help="attention kernel: sdpa = torch's scaled_dot_product_attention (fused flash/efficient kernels "
                        "on CUDA); eager = transformers' matmul + softmax. auto: sdpa on CUDA, eager on CPUs (where "
                        "it is the faster)")
    p.add_argument("--dropout-masks", choices=("cheap", "torch"), default=D("dropout_masks"),
                   help="cheap: dropout keep-masks from a quarter of the random numbers on CPUs (the same Bernoulli "
                        "masks, a faster step); torch: torch's dropout. On GPUs both are torch's")


def _add_output_options(p) -> None:
    """What the run writes and shows."""
    p.add_argument("--log-every", type=int, default=D("log_every"), help="steps between metrics.jsonl lines")
    p.add_argument("--save-every", type=int, default=D("save_every"),
                   help="steps between checkpoints (each also runs the health probe); lower it for runs that may "
                        "be killed")
    p.add_argument("--keep", type=int, default=D("keep"), help="checkpoints kept (the newest; older ones deleted)")
    p.add_argument("--cache-dir", default=D("cache_dir"),
                   help="where the tokenized corpus is cached and reused (default $DENKI_CACHE/corpus, i.e. "
                        "~/.cache/denki/corpus; the path is printed when the cache is written). Move it to a "
                        "disk with room for about 2 bytes per token")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar; one plain line per checkpoint (--save-every) instead, for logs")
    p.add_argument("--no-export", action="store_true", help="do not write OUT/bundle at the end")


def _register_export(psub) -> None:
    e = psub.add_parser("export", help="export a checkpoint's discriminator/encoder as a bundle",
                        description="Write the discriminator (electra) or encoder (mlm) of a checkpoint as a "
                                    "`pretrained` model bundle. --checkpoint: a step-… directory or a run "
                                    "directory (its newest checkpoint).",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    e.add_argument("--checkpoint", required=True, metavar="DIR")
    e.add_argument("--out", dest="export_out", required=True, metavar="DIR")
    e.add_argument("--generator", action="store_true",
                   help="also write an RTD run's generator in OUT/generator/, so that `denki pretrain --init-from OUT` "
                        "continues replaced-token detection with it (default: only a continued run's bundle keeps it)")
    e.set_defaults(func=cmd_pretrain_export)


def cmd_pretrain(args) -> int:
    from denki.models.io.errors import DenkiError

    missing = [f"--{k}" for k in ("corpus", "out") if not getattr(args, k)]
    if not args.tokenizer and not args.init_from:
        missing.append("--tokenizer (or --init-from)")
    if missing:
        raise DenkiError(f"pretrain needs {', '.join(missing)} (see `denki pretrain --help`)")
    from denki.pretrain.train import PretrainConfig, run_pretrain

    s = run_pretrain(PretrainConfig.from_args(args))
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun only rank 0 reports
        print(_result_line(s))
    return 0


def _result_line(s: dict) -> str:
    """The run's summary in one line: what it spent, how fast, the last metrics and the health probe."""
    f = s.get("final") or {}
    msg = (f"pretrain: {s['objective']}-{s['size']} {s['steps']} steps, {s['tokens']:,} tokens, "
           f"{s['flops']:.3g} FLOPs, {s['wall_s']:.0f}s; gen_acc {f.get('gen_acc', 0):.3f}")
    sp = s.get("speed") or {}
    if sp:
        msg += (f"; {sp['tokens_per_s']:,.0f} tokens/s, {sp['flops_per_s']:.3g} FLOP/s"
                + (f", MFU {sp['mfu']:.1%} of {sp['peak_source']}" if sp.get("mfu") is not None else "")
                + f" ({s.get('precision', 'fp32')})")
    if f.get("disc_acc") is not None:
        msg += (f", replace_rate {f['replace_rate']:.3f}, disc acc {f['disc_acc']:.3f} "
                f"P {f['disc_precision']:.3f} R {f['disc_recall']:.3f}")
    d = s.get("diagnostics") or {}
    if d:
        msg += f"; probe: [CLS] spread {d.get('cls_spread', 0):.4f}, mean-pooled {d.get('mean_spread', 0):.4f}"
        if d.get("disc_auc") is not None:
            msg += f", disc AUC {d['disc_auc']:.3f}"
            if d.get("probe_recall") is not None:
                msg += f" R {d['probe_recall']:.3f} (probe, T = 1)"
    if s.get("init_from"):
        tf = s.get("total_flops")
        msg += (f"; continued from {s['init_from']['path']} (total FLOPs "
                + (f"{tf:.3g}" if tf is not None else "unknown: the checkpoint's own are not recorded") + ")")
    return msg + f" → {s.get('bundle')}"


def cmd_pretrain_export(args) -> int:
    from denki.pretrain.export import export_from_checkpoint

    m = export_from_checkpoint(args.checkpoint, args.export_out, generator=args.generator or None)
    print(f"pretrain export: step {m['source']['steps']} → {args.export_out}")
    return 0
