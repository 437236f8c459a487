"""Pretraining step cost: the RTD (ELECTRA) step vs the MLM step on the same discriminator, and vs a naive RTD.

Variants, measured in one run with the steps interleaved round-robin (so that load changes on a shared machine
hit every variant alike):

* ``rtd``   — denki's ``RTDPretrainer``: shared embeddings, generator LM head only at the masked positions;
* ``mlm``   — denki's ``MLMPretrainer`` (BERT-style MLM on the discriminator-size encoder);
* ``naive`` — a naive RTD reference: the generator has its own embeddings (no sharing) and computes LM-head
  logits at every position (``B·L·V``), the loss is then gathered at the masked positions.
* ``rtd-nodrop`` / ``mlm-nodrop`` (opt-in, ``--variants rtd,mlm,rtd-nodrop,mlm-nodrop``) — the same with dropout 0
  everywhere: not a recipe, a measurement of how much of the RTD/MLM time ratio is dropout's random numbers (the
  generator has its own dropout layers, and CPU Bernoulli draws cost ≈ 6–8 ns per element).
* ``rtd-cheapdrop`` / ``mlm-cheapdrop`` (opt-in) — the same model with every dropout's keep-mask drawn by
  ``pretrain.kernels.CheapMaskDropout`` (a quarter of the random numbers) instead of torch's Bernoulli draws;
  ``…-sdpa``: attention through ``F.scaled_dot_product_attention`` (``pretrain.kernels.use_sdpa_attention``).
  Suffixes combine: ``rtd-cheapdrop-sdpa``.

Each timed step = masking + forward + backward + AdamW step. Reported: seconds per step (median), tokens/s,
analytic GFLOP per step, ratios to MLM, and peak memory (CUDA: ``max_memory_allocated``; CPU: peak RSS of a
separate process running that variant for two steps, minus its RSS after imports).

    python bench/pretrain_step.py --size tiny --steps 10
    python bench/pretrain_step.py --size small --steps 3 --json runs/bench_pretrain_small.json
    python bench/pretrain_step.py --size tiny --variants rtd --profile 5 --bf16   # + torch.profiler, top ops

``--profile N`` then runs N more steps of the first variant under ``torch.profiler`` and prints the operators by
self time, with the share of matrix work (``aten::mm`` / ``addmm`` / ``bmm`` / ``linear``'s kernels, attention)
against everything else (elementwise, softmax, layer norm, embedding, the optimizer, sampling, masking).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from denki.models.bundle.presets import electra_config, generator_config  # noqa: E402
from denki.pretrain.kernels import use_cheap_mask_dropout, use_sdpa_attention  # noqa: E402
from denki.pretrain.flops import (disc_head_forward_flops, encoder_forward_flops,  # noqa: E402
                            mlm_head_forward_flops, step_flops)
from denki.pretrain.masking import BERT_SPLIT, ELECTRA_SPLIT, mask_tokens  # noqa: E402
from denki.pretrain.model import build_pretrainer, gumbel_sample  # noqa: E402

SPECIAL = (0, 2, 3, 4)


class NaiveRTD(nn.Module):
    """Reference RTD without the two savings: separate generator embeddings, LM head at all positions."""

    def __init__(self, disc_config, gen_config, disc_weight=50.0):
        super().__init__()
        from transformers import ElectraForMaskedLM, ElectraForPreTraining

        self.discriminator = ElectraForPreTraining(disc_config)
        self.generator = ElectraForMaskedLM(gen_config)  # own embeddings, head tied to them
        self.disc_weight = disc_weight

    def forward(self, original_ids, masked_ids, positions, attention_mask):
        logits = self.generator(input_ids=masked_ids, attention_mask=attention_mask).logits  # (B, L, V)
        targets = original_ids[positions]
        mlm_logits = logits[positions]
        mlm_loss = F.cross_entropy(mlm_logits.float(), targets)
        sampled = gumbel_sample(mlm_logits)
        disc_input = original_ids.clone()
        disc_input[positions] = sampled
        labels = ((disc_input != original_ids) & attention_mask.bool()).float()
        dl = self.discriminator(input_ids=disc_input, attention_mask=attention_mask).logits
        per = F.binary_cross_entropy_with_logits(dl.float(), labels, reduction="none")
        disc_loss = (per * attention_mask).sum() / attention_mask.sum()
        return {"loss": mlm_loss + self.disc_weight * disc_loss}


def naive_flops(d, g, B, L, M):
    fwd = (encoder_forward_flops(g, B, L) + mlm_head_forward_flops(g, B * L)
           + encoder_forward_flops(d, B, L) + disc_head_forward_flops(d, B, L))
    return 3 * fwd


def build(variant, d, g, device):
    # suffixes, in any order after the base: -cheapdrop, -sdpa, -nodrop
    base, *suffixes = variant.split("-")
    unknown = set(suffixes) - {"cheapdrop", "sdpa", "nodrop"}
    if unknown or base not in ("rtd", "mlm", "naive"):
        raise SystemExit(f"unknown variant {variant!r}")
    cheap, sdpa = "cheapdrop" in suffixes, "sdpa" in suffixes
    variant = base + ("-nodrop" if "nodrop" in suffixes else "")
    if variant.endswith("-nodrop"):
        variant = variant[:-len("-nodrop")]
        nod = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        d = type(d).from_dict({**d.to_dict(), **nod})
        g = type(g).from_dict({**g.to_dict(), **nod})
    if variant == "rtd":
        m = build_pretrainer("electra", d, g)
    elif variant == "mlm":
        m = build_pretrainer("mlm", d, g)
    else:
        m = NaiveRTD(d, g)
    if cheap:
        use_cheap_mask_dropout(m)
    if sdpa:
        use_sdpa_attention(m)
    m = m.to(device).train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=device.type == "cuda")
    return m, opt


def make_batch(B, L, V, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, L), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    return ids.to(device), torch.ones(B, L, dtype=torch.long, device=device)


def one_step(variant, m, opt, ids, am, V, amp):
    mk = mask_tokens(ids, mask_prob=0.15, mask_id=4, special_ids=SPECIAL, vocab_size=V,
                     split=BERT_SPLIT if variant.startswith("mlm") else ELECTRA_SPLIT)
    with amp():
        out = m(ids, mk.input_ids, mk.positions, am)
    out["loss"].backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return int(mk.positions.sum())


def _amp_factory(device, bf16):
    import contextlib

    if bf16:
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


#: operators doing matrix products (their self time is the "matrix work" of a profile)
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::_addmm_activation",
              "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math",
              "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_flash_attention",
              "aten::_scaled_dot_product_cudnn_attention", "mkldnn::_linear_pointwise", "aten::mkldnn_linear")


def profile_steps(variant, m, opt, ids, am, V, amp, steps: int, device, top: int = 15) -> dict:
    """Run ``steps`` steps under torch.profiler; return (and print) the operators by self time and the share of
    matrix products. Self times add up to the profiled time (no double counting of nested operators)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            one_step(variant, m, opt, ids, am, V, amp)
        if device.type == "cuda":
            torch.cuda.synchronize()
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, key, 0) > 0]
    total = sum(getattr(e, key) for e in events) or 1.0
    matmul = sum(getattr(e, key) for e in events if e.key in MATMUL_OPS)
    rows = sorted(({"op": e.key, "self_ms_per_step": getattr(e, key) / 1e3 / steps, "share": getattr(e, key) / total,
                    "calls_per_step": e.count / steps} for e in events), key=lambda r: -r["self_ms_per_step"])
    print(f"profile: {variant}, {steps} steps, self {'device' if device.type == 'cuda' else 'CPU'} time "
          f"{total / 1e3 / steps:.1f} ms/step; matrix products {matmul / total:.1%}, everything else "
          f"{1 - matmul / total:.1%}")
    print(f"{'operator':48} {'ms/step':>8} {'share':>6} {'calls':>6}")
    for r in rows[:top]:
        print(f"{r['op'][:48]:48} {r['self_ms_per_step']:8.2f} {r['share']:6.1%} {r['calls_per_step']:6.0f}")
    return {"variant": variant, "steps": steps, "ms_per_step": total / 1e3 / steps, "matmul_share": matmul / total,
            "top": rows[:top]}


def memory_child(args) -> None:
    """Subprocess: run one variant for two steps, print peak RSS (MiB)."""
    def hwm_mib() -> float:
        # VmHWM is per address space (reset by exec), unlike ru_maxrss which a child inherits from its parent
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    device = torch.device("cpu")
    d = electra_config(args.size, args.vocab)
    g = generator_config(d, 0.25)
    ids, am = make_batch(args.batch_size, args.seq_len, args.vocab, device)
    base = hwm_mib()
    m, opt = build(args.memory_child, d, g, device)
    for _ in range(2):
        one_step(args.memory_child, m, opt, ids, am, args.vocab, _amp_factory(device, args.bf16))
    peak = hwm_mib()
    print(json.dumps({"peak_rss_mib": peak, "delta_rss_mib": peak - base}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="tiny", choices=("tiny", "small", "base"))
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=8000, help="vocabulary size (8,000 = the shared-corpus tokenizer)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per variant")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps per variant first")
    ap.add_argument("--variants", default="rtd,mlm,naive")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (always on with CUDA)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-memory", action="store_true", help="skip the CPU peak-RSS subprocesses")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="then profile N steps of the first variant (torch.profiler): operators by self time")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(args)
        return 0

    from denki.models.training.loop import pick_device

    device = pick_device(args.device)
    bf16 = args.bf16 or device.type == "cuda"
    amp = _amp_factory(device, bf16)
    torch.manual_seed(0)
    d = electra_config(args.size, args.vocab)
    g = generator_config(d, 0.25)
    B, L, V = args.batch_size, args.seq_len, args.vocab
    ids, am = make_batch(B, L, V, device)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    built = {v: build(v, d, g, device) for v in variants}
    for v in variants:
        for _ in range(args.warmup):
            one_step(v, *built[v], ids, am, V, amp)
    times = {v: [] for v in variants}
    masked = {}
    peak = {}
    for _ in range(args.steps):
        for v in variants:  # round-robin: load changes hit every variant alike
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            masked[v] = one_step(v, *built[v], ids, am, V, amp)
            if device.type == "cuda":
                torch.cuda.synchronize()
                peak[v] = max(peak.get(v, 0), torch.cuda.max_memory_allocated() / 2**20)
            times[v].append(time.perf_counter() - t0)

    if device.type == "cpu" and not args.no_memory:
        for v in variants:
            cmd = [sys.executable, __file__, "--size", args.size, "--batch-size", str(B), "--seq-len", str(L),
                   "--vocab", str(V), "--memory-child", v] + (["--bf16"] if args.bf16 else [])
            res = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
            try:
                peak[v] = json.loads(res.stdout.strip().splitlines()[-1])["delta_rss_mib"]
            except (IndexError, json.JSONDecodeError, KeyError):
                peak[v] = None

    rows = {}
    for v in variants:
        s = statistics.median(times[v])
        M = masked[v]
        fl = naive_flops(d, g, B, L, M) if v == "naive" else step_flops(
            "electra" if v.startswith("rtd") else "mlm", d, g, B, L, M)
        rows[v] = {"s_per_step": s, "tokens_per_s": B * L / s, "gflop_per_step": fl / 1e9,
                   "achieved_gflop_s": fl / 1e9 / s, "peak_mem_mib": peak.get(v)}
    base = rows.get("mlm", {}).get("s_per_step")
    for v in rows:
        rows[v]["time_vs_mlm"] = rows[v]["s_per_step"] / base if base else None
    if "rtd-nodrop" in rows and "mlm-nodrop" in rows:  # the ratio with dropout's RNG cost removed from both
        rows["rtd-nodrop"]["nodrop_ratio"] = rows["rtd-nodrop"]["s_per_step"] / rows["mlm-nodrop"]["s_per_step"]
    result = {"size": args.size, "batch": B, "seq_len": L, "vocab": V, "device": str(device), "bf16": bf16,
              "threads": torch.get_num_threads(), "steps": args.steps, "torch": torch.__version__,
              "peak_mem_kind": ("cuda max_memory_allocated" if device.type == "cuda"
                                else "process peak RSS (VmHWM) minus RSS after imports"),
              "variants": rows}
    if "rtd" in rows and "naive" in rows:
        result["rtd_vs_naive_time"] = rows["rtd"]["s_per_step"] / rows["naive"]["s_per_step"]
    print(f"pretrain step, size {args.size}, batch {B}×{L}, vocab {V}, {device}, bf16={bf16}, "
          f"{torch.get_num_threads()} threads, median of {args.steps} interleaved steps")
    print(f"{'variant':20} {'s/step':>8} {'tokens/s':>10} {'GFLOP/step':>11} {'GFLOP/s':>8} {'× MLM':>6} "
          f"{'peak MiB':>9}")
    for v, r in rows.items():
        pm = f"{r['peak_mem_mib']:.0f}" if r["peak_mem_mib"] else "-"
        tv = f"{r['time_vs_mlm']:.2f}" if r["time_vs_mlm"] else "-"
        print(f"{v:20} {r['s_per_step']:8.3f} {r['tokens_per_s']:10,.0f} {r['gflop_per_step']:11.1f} "
              f"{r['achieved_gflop_s']:8.1f} {tv:>6} {pm:>9}")
    if "rtd_vs_naive_time" in result:
        print(f"RTD / naive RTD step time: {result['rtd_vs_naive_time']:.2f}")
    if "nodrop_ratio" in rows.get("rtd-nodrop", {}):
        print(f"RTD / MLM with dropout 0 in both: {rows['rtd-nodrop']['nodrop_ratio']:.2f} "
              f"(with dropout: {rows['rtd']['time_vs_mlm']:.2f})" if "rtd" in rows else "")
    if args.profile > 0:
        result["profile"] = profile_steps(variants[0], *built[variants[0]], ids, am, V, amp, args.profile, device)
    if args.json:
        from denki.models.io.fileio import atomic_write_json

        atomic_write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
