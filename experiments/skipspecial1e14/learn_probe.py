"""Scratch probe: the learning test's synthetic corpus and settings (tests/test_pretrain_learns.py: 200 steps, batch
16 × 32, lr 1e-3, tiny) for ELECTRA with and without --disc-skip-special, over several seeds, optionally with
--cls-contrast W. Prints one JSON line per run (end-of-run metrics and the probe; traj = (step, gen acc, replaced
share, disc recall) every 25 steps).

    python experiments/skipspecial1e14/learn_probe.py SEEDS [CLS_CONTRAST] [SKIP_MODES]
    python experiments/skipspecial1e14/learn_probe.py 0,1,2,3,4,5,6,7            # skip off / on, no contrast
    python experiments/skipspecial1e14/learn_probe.py 0,4,7 1.0                  # with --cls-contrast 1
    python experiments/skipspecial1e14/learn_probe.py 0,4,7 0 cls                # skip [CLS] only (not [SEP])
"""
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from denki.models.text.tokenizer import train_tokenizer  # noqa: E402
from denki.pretrain.model import RTDPretrainer  # noqa: E402
from denki.pretrain.runlog import last_diagnostics, read_metrics  # noqa: E402
from denki.pretrain.train import PretrainConfig, run_pretrain  # noqa: E402

WORDS = "猫 犬 鳥 魚 花 木 山 川 海 空 雨 雪 風 星 月 石 砂 森 島 橋 駅 町 村 道 家 窓 扉 机 本 紙".split()
seeds = [int(s) for s in sys.argv[1].split(",")]
cc = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
modes = sys.argv[3].split(",") if len(sys.argv) > 3 else ["off", "on"]
if "cls" in modes:  # skip [CLS] only
    _skip = RTDPretrainer.skip_in_disc_loss
    RTDPretrainer.skip_in_disc_loss = lambda self, ids: _skip(self, tuple(ids)[:1])
d = Path(tempfile.mkdtemp())
r = random.Random(0)
corpus = d / "corpus.txt"
corpus.write_text("\n".join(" ".join([r.choice(WORDS)] * 48) for _ in range(1500)) + "\n", encoding="utf-8")
tok = train_tokenizer([corpus], vocab_size=100, limit_alphabet=100, progress=False)
tok.save(d / "tok")
keys = ("gen_acc", "replace_rate", "disc_recall", "disc_precision", "disc_auc", "cls_spread") + (("cls_acc",) if cc else ())
for seed in seeds:
    for mode in modes:
        out = d / f"s{seed}-{mode}"
        run_pretrain(PretrainConfig(corpus=[str(corpus)], tokenizer=str(d / "tok"), out=str(out), size="tiny",
                                    objective="electra", steps=200, batch_size=16, seq_len=32, lr=1e-3, seed=seed,
                                    device="cpu", log_every=25, save_every=100, cache_dir=str(d / "cache"),
                                    progress=False, export=False, disc_skip_special=mode != "off", cls_contrast=cc))
        rows = read_metrics(out)
        last = dict(rows[-1])
        last.update(last_diagnostics(rows))
        traj = [(x["step"], round(x["gen_acc"], 2), round(x["replace_rate"], 3), round(x["disc_recall"], 2))
                for x in rows]
        print(json.dumps({"seed": seed, "skip": mode, "cls_contrast": cc, **{k: round(last[k], 3) for k in keys},
                          "traj": traj}), flush=True)
