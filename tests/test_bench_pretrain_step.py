"""bench/pretrain_step.py --profile: the operator table of a profiled RTD step adds up and names the matrix work;
bench/pretrain_mfu.py's summary of a run's logged intervals."""
import importlib.util
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_pretrain_step", REPO / "bench" / "pretrain_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_profile_of_a_tiny_rtd_step_adds_up():
    b = _bench()
    from denki.models.bundle.presets import electra_config, generator_config

    d = electra_config("tiny", 200)
    g = generator_config(d, 0.25)
    device = torch.device("cpu")
    ids, am = b.make_batch(2, 16, 200, device)
    m, opt = b.build("rtd", d, g, device)
    prof = b.profile_steps("rtd", m, opt, ids, am, 200, b._amp_factory(device, False), steps=2, device=device, top=50)
    assert 0.0 < prof["matmul_share"] < 1.0
    assert prof["ms_per_step"] > 0
    shares = [r["share"] for r in prof["top"]]
    assert shares == sorted(shares, reverse=True) and 0.5 < sum(shares) <= 1.0 + 1e-9
    assert any(r["op"] in b.MATMUL_OPS for r in prof["top"])


def test_pretrain_mfu_summary_skips_the_warm_up_third_and_takes_medians():
    """bench/pretrain_mfu.py reports the median of the intervals logged after the first third of the run (compiling
    and warm-up excluded), with their range."""
    spec = importlib.util.spec_from_file_location("bench_pretrain_mfu", REPO / "bench" / "pretrain_mfu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    summarize = mod.summarize

    rows = [{"step": 10 * i, "wall_s": float(i), "tokens_per_s": 100.0 * i, "flops_per_s": 1e9 * i, "mfu": 0.01 * i}
            for i in range(1, 10)]  # 9 s: intervals from 3 s on count
    s = summarize(rows)
    assert s["intervals"] == 7 and s["steps"] == 90 and s["wall_s"] == 9.0
    assert s["mfu"] == pytest.approx(0.06)
    assert (s["mfu_min"], s["mfu_max"]) == (pytest.approx(0.03), pytest.approx(0.09))
    assert summarize([]) is None
    assert summarize(rows[:1])["intervals"] == 1
