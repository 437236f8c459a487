"""`denki pretrain` (ELECTRA replaced-token detection or the MLM baseline) and `denki pretrain export`."""
from __future__ import annotations

import argparse
import os

from denki.models.io.corpus import CORPUS_HELP


def register(sub) -> None:
    p = sub.add_parser(
        "pretrain", help="pretrain an ELECTRA discriminator or an MLM encoder on a corpus",
        description="Pretrain on a Japanese corpus (UTF-8 text files, one paragraph per line, and/or the text "
                    "fields of JSONL/CSV records) with ELECTRA replaced-token detection (generator + "
                    "discriminator, shared embeddings) or BERT-style MLM on the same encoder, until --steps or "
                    "--max-flops is reached. Re-running the same command on the same --out resumes from the "
                    "newest checkpoint. Writes OUT/metrics.jsonl, "
                    "OUT/curves.png, OUT/summary.json and the model bundle OUT/bundle/. Multi-GPU: "
                    "`torchrun --nproc_per_node N -m denki.app.cli pretrain ...`. Continued (domain-adaptive) pretraining: "
                    "--init-from BUNDLE starts from a pretrained bundle (`denki import` or an earlier run) with its "
                    "tokenizer and architecture instead of --tokenizer/--size (docs/import.md).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.set_defaults(_group_parser=p, func=cmd_pretrain)
    p.add_argument("--corpus", nargs="+", metavar="SOURCE", help=CORPUS_HELP)
    p.add_argument("--tokenizer", metavar="DIR",
                   help="tokenizer directory (denki tokenizer train); with --init-from: the bundle's (leave it out)")
    p.add_argument("--init-from", metavar="BUNDLE", default=None,
                   help="continue pretraining from this pretrained bundle (imported or denki's): its weights, "
                        "tokenizer and architecture (--size is ignored)")
    p.add_argument("--gen-init", choices=("bundle", "copy", "random"), default=None,
                   help="--init-from with electra: the generator — bundle (its generator/), copy (the checkpoint's "
                        "bottom --gen-layers layers + embeddings, new MLM head), random (fresh, --gen-size wide; "
                        "embeddings from the checkpoint). Default: bundle if it has a generator, else copy")
    p.add_argument("--gen-layers", type=int, default=None,
                   help="--gen-init copy: generator depth (default: a quarter of the discriminator's layers, ≥ 1)")
    p.add_argument("--size", choices=("tiny", "mini", "small", "base"), default="tiny")
    p.add_argument("--objective", choices=("electra", "mlm", "electra15", "electra-mlm"), default=None,
                   help="default: electra at every size (tiny: at one CPU-hour its routers trail compute-matched "
                        "MLM by about one pretraining-seed SD while its QA leads by about 10 F1: "
                        "experiments/anshead). electra15 = the paper's 'ELECTRA 15%%' ablation (disc loss on masked "
                        "positions only); electra-mlm = ELECTRA whose discriminator also predicts the original "
                        "token at the masked positions (a hybrid; docs/pretrain.md)")
    p.add_argument("--out", metavar="DIR", help="run directory (checkpoints, metrics, bundle)")
    p.add_argument("--max-flops", type=float, default=None, metavar="F",
                   help="stop when cumulative training FLOPs reach F (e.g. 3.5e13), or when the steps planned to spend F "
                        "are done: the plan counts every row as full, so a run can end a few tenths of a percent "
                        "short (0.01–0.32%% measured; summary.json records the FLOPs spent)")
    p.add_argument("--steps", type=int, default=None, help="number of optimizer steps (LR schedule length)")
    p.add_argument("--batch-size", type=int, default=32, help="sequences per step (per process under torchrun)")
    p.add_argument("--micro-batch", type=int, default=None, metavar="N",
                   help="sequences per forward/backward when --batch-size does not fit the device's memory: the "
                        "gradients of batch/N chunks are accumulated and the optimizer steps once per --batch-size "
                        "(same training, up to float rounding; default: the whole batch at once, halved by itself "
                        "whenever a pass runs out of GPU memory)")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=None,
                   help="peak learning rate (default: tiny 1e-3 for mlm; tiny electra 1e-3 for a run of ≥ 1,000 steps "
                        "(3e13 FLOPs at batch 32 × 128), 3e-4 for a shorter one (1e-3 collapses it) and for "
                        "electra15/electra-mlm; small 5e-4, base 2e-4)")
    p.add_argument("--warmup-steps", type=int, default=None, help="default: 10%% of the steps (≤ 10,000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--mask-prob", type=float, default=None,
                   help="fraction of tokens masked. Default: 0.4 for MLM from scratch at --size tiny (it fine-tuned "
                        "better than 15%% at 6e12 and 1e14 FLOPs: experiments/qsm40), else 0.15 (the paper's; "
                        "0.25 for ELECTRA-Large)")
    p.add_argument("--gen-size", type=float, default=0.25, help="generator width as a fraction of the "
                                                                "discriminator's")
    p.add_argument("--disc-weight", type=float, default=50.0, help="λ: total = mlm + λ·disc")
    p.add_argument("--embeddings", choices=("shared", "separate"), default="shared",
                   help="electra: one token/position embedding module for generator and discriminator (shared, "
                        "the paper's) or one each (separate: the discriminator's learn from the RTD loss only)")
    p.add_argument("--disc-skip-special", action="store_true",
                   help="electra*: leave [CLS] and [SEP] out of the discriminator loss (their label is always "
                        "'original', a target that collapses the [CLS] state the router reads; the paper scores "
                        "them). Off by default: +4.4 / +8.6 points on livedoor titles at 1e14 FLOPs (two pretraining "
                        "seeds), still below random init, and it stalled RTD once on a synthetic corpus "
                        "(experiments/skipspecial1e14)")
    p.add_argument("--cls-contrast", type=float, default=None, metavar="W",
                   help="electra*: add W × a contrastive loss at [CLS] between the discriminator's view (corrupted "
                        "text) and the generator's (masked text) of each sequence in the batch, so that [CLS] gets "
                        "a target that depends on the whole sequence (RTD gives it none). Default: 1 for a tiny electra "
                        "run of ≥ 1,000 steps (with lr 1e-3 it fine-tuned +8.7 points over the paper's loss on "
                        "livedoor titles at 1e14 FLOPs, 3 pretraining seeds: experiments/cc1e14), else 0 (off; "
                        "ELECTRA-Small with it scored 1.6 points lower on livedoor titles at 7.5e14 FLOPs on an H200)")
    p.add_argument("--gen-temperature", type=float, default=None, metavar="T",
                   help="electra*: sample the generator's replacements at temperature T (logits / T). T > 1 makes "
                        "them less plausible, so easier to detect. Default 2 for a tiny ELECTRA from scratch that "
                        "plans ≥ 1,000 steps (three pretraining seeds at 2e14 FLOPs: recall on replaced tokens "
                        "0.34–0.35 vs 0.06–0.07 at T = 1, livedoor-title routers 0.715 vs 0.699; QA from it needs "
                        "`denki finetune qa`'s answerable head, its default for ELECTRA bundles: one seed's QA "
                        "median 38.7 F1 without, 47.3 with), else 1, the paper's. T = 3: recall 0.46–0.48 but QA "
                        "38.87 / 47.01 / 43.58 F1 without the head (experiments/t3more). "
                        "The probe's AUC and recall sample at T = 1, so runs compare; disc_auc_own_t is the AUC at T")
    p.add_argument("--adam-eps", type=float, default=None, metavar="EPS",
                   help="AdamW's epsilon (default torch's 1e-8; the official ELECTRA code uses 1e-6)")
    p.add_argument("--dropout", type=float, default=None, metavar="P",
                   help="dropout while pretraining (default 0.1); the bundle keeps 0.1 for fine-tuning")
    p.add_argument("--log-every", type=int, default=10, help="steps between metrics.jsonl lines")
    p.add_argument("--save-every", type=int, default=200, help="steps between checkpoints")
    p.add_argument("--keep", type=int, default=3, help="checkpoints kept")
    p.add_argument("--cache-dir", default=None, help="token cache (default ~/.cache/denki/corpus or $DENKI_CACHE)")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="autocast precision of forward/backward (weights, optimizer, losses and sampling stay fp32). "
                        "auto: bf16 on CUDA and on CPUs with avx512_bf16/amx_bf16 (1.84x the tokens/s of fp32 for "
                        "tiny RTD, routers within seed noise at equal FLOPs), fp32 elsewhere (docs/pretrain.md)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (a GPU option; if compiling fails, the run warns and goes on "
                        "uncompiled)")
    p.add_argument("--attention", choices=("auto", "eager", "sdpa"), default="auto",
                   help="attention kernel: sdpa = torch's scaled_dot_product_attention (fused flash/efficient kernels "
                        "on CUDA); eager = transformers' matmul + softmax. auto: sdpa on CUDA, eager on CPUs (there "
                        "sdpa was 0.81x the tiny bf16 step: experiments/cpu-dropout)")
    p.add_argument("--dropout-masks", choices=("cheap", "torch"), default="cheap",
                   help="cheap: dropout keep-masks from a quarter of the random numbers on CPUs (the same Bernoulli "
                        "masks; a tiny bf16 RTD step 1.11-1.16x faster on an idle core: experiments/cpu-dropout); "
                        "torch: torch's dropout. On GPUs both are torch's")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar; one plain line per checkpoint (--save-every) instead, for logs")
    p.add_argument("--no-export", action="store_true", help="do not write OUT/bundle at the end")

    psub = p.add_subparsers(dest="pretrain_command", metavar="SUBCOMMAND")
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
    e.set_defaults(func=cmd_export)


def cmd_pretrain(args) -> int:
    from denki.models.io.errors import DenkiError

    missing = [f"--{k}" for k in ("corpus", "out") if not getattr(args, k)]
    if not args.tokenizer and not args.init_from:
        missing.append("--tokenizer (or --init-from)")
    if missing:
        raise DenkiError(f"pretrain needs {', '.join(missing)} (see `denki pretrain --help`)")
    import sys

    from denki.pretrain.train import PretrainConfig, default_objective, run_pretrain

    objective = args.objective
    if objective is None:
        objective = default_objective(args.size, args.init_from)
        if int(os.environ.get("RANK", "0")) == 0:
            why = "--init-from" if args.init_from else f"--size {args.size}"
            print(f"pretrain: objective {objective} (the default for {why}; --objective to choose)", file=sys.stderr)
    cfg = PretrainConfig(
        corpus=list(args.corpus), tokenizer=args.tokenizer, out=args.out, size=args.size, objective=objective,
        max_flops=args.max_flops, steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
        seed=args.seed, device=args.device, mask_prob=args.mask_prob, gen_size=args.gen_size,
        disc_weight=args.disc_weight, share_embeddings=args.embeddings == "shared", dropout=args.dropout,
        disc_skip_special=args.disc_skip_special, adam_eps=args.adam_eps, cls_contrast=args.cls_contrast,
        gen_temperature=args.gen_temperature,
        warmup_steps=args.warmup_steps, log_every=args.log_every,
        save_every=args.save_every, keep=args.keep, cache_dir=args.cache_dir, compile=args.compile,
        attention=args.attention, dropout_masks=args.dropout_masks, micro_batch=args.micro_batch,
        export=not args.no_export, precision=args.precision, progress=not args.no_progress, init_from=args.init_from,
        gen_init=args.gen_init,
        gen_layers=args.gen_layers)
    s = run_pretrain(cfg)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun only rank 0 reports
        return 0
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
    print(msg + f" → {s.get('bundle')}")
    return 0


def cmd_export(args) -> int:
    from denki.pretrain.export import export_from_checkpoint

    m = export_from_checkpoint(args.checkpoint, args.export_out, generator=args.generator or None)
    print(f"pretrain export: step {m['source']['steps']} → {args.export_out}")
    return 0
