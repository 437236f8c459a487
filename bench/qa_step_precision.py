"""QA fine-tuning step cost by precision: ``denki finetune qa --precision fp32`` against ``bf16``.

One step = the forward under the precision's autocast (:func:`models.training.precision.autocast`) + loss + backward
+ AdamW step, on a full batch of full-length windows (``--batch-size`` × ``--max-length`` tokens: JaQuAD's contexts
fill a 384-token window, so most training batches are this shape). The variants are interleaved round-robin, so
that load changes on a shared core hit both alike. Prints the median seconds per step of each and the ratio to fp32.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/qa_step_precision.py --model checkpoints/denki-electra-tiny-ja-2.4e15

bf16 pays off only on CPUs with native bf16 (``avx512_bf16`` / ``amx_bf16``; elsewhere it is emulated and slower):
record ``grep -m1 flags /proc/cpuinfo`` beside the figures.
"""
from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="checkpoints/denki-electra-tiny-ja-2.4e15", help="pretrained bundle")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=384)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per variant (after one warm-up each)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", default="fp32,bf16")
    args = ap.parse_args()

    import torch

    from denki.models.qa.model import build_model, compute_loss
    from denki.models.training.precision import autocast, cpu_bf16_flags

    torch.set_num_threads(args.threads)
    variants = args.variants.split(",")
    models = {v: build_model(args.model, SimpleNamespace(answerable_head=True), seed=0, vocab_size=0) for v in variants}
    opts = {v: torch.optim.AdamW(m.parameters(), 1e-3) for v, m in models.items()}
    batch = _batch(models[variants[0]].config.vocab_size, args.batch_size, args.max_length)
    times = {v: [] for v in variants}
    for i in range(args.steps + 1):
        for v in variants:  # round-robin
            m = models[v]
            m.train()
            t = time.perf_counter()
            with autocast(v, "cpu"):
                loss = compute_loss(m, batch)
            loss.backward()
            opts[v].step()
            opts[v].zero_grad(set_to_none=True)
            if i:  # the first step of each is a warm-up
                times[v].append(time.perf_counter() - t)
    base = statistics.median(times[variants[0]])
    print(f"QA step, {args.batch_size} x {args.max_length} tokens, {args.threads} thread(s), cpu bf16 flags: "
          f"{' '.join(cpu_bf16_flags()) or 'none'}")
    for v in variants:
        med = statistics.median(times[v])
        print(f"{v:5s} {med:.3f} s/step  ({base / med:.2f}x the {variants[0]} step rate)")


def _batch(vocab_size: int, b: int, length: int) -> dict:
    """Random token ids in full-length windows, with random span targets: ``(b, length)`` inputs, ``(b,)`` targets."""
    import torch

    g = torch.Generator().manual_seed(0)
    return dict(input_ids=torch.randint(5, vocab_size, (b, length), generator=g),
                attention_mask=torch.ones(b, length, dtype=torch.long),
                token_type_ids=torch.zeros(b, length, dtype=torch.long),
                start_positions=torch.randint(0, length, (b,), generator=g),
                end_positions=torch.randint(0, length, (b,), generator=g))


if __name__ == "__main__":
    main()
