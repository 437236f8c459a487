"""bench/pretrain_step.py --profile: the operator table of a profiled RTD step adds up and names the matrix work."""
import importlib.util
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_pretrain_step", REPO / "bench" / "pretrain_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_profile_of_a_tiny_rtd_step_adds_up():
    b = _bench()
    from models.bundle.presets import electra_config, generator_config

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
