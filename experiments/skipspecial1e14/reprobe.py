"""Re-run the end-of-run health probe of finished RTD runs with the current probe code.

Why: until the fix in this commit, a ``--disc-skip-special`` run's probe AUC and logged precision also judged the
[SEP] positions, whose discriminator outputs that run never trains (on the learning test's synthetic corpus this
halved the logged precision). Runs finished before the fix keep the old figures in summary.json; this prints the
corrected ones from their last checkpoint (same probe batch, same corruption: the probe seeds its own RNG).

    python experiments/skipspecial1e14/reprobe.py runs/hybrid/electra-skip-1e14-s2 [...]
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from denki.models.text.tokenizer import JapaneseTokenizer  # noqa: E402
from denki.pretrain.diagnostics import load_run_probe  # noqa: E402

for run in map(Path, sys.argv[1:]):
    c = json.loads((run / "run.json").read_text(encoding="utf-8"))["config"]
    tok = JapaneseTokenizer.load(run / "tokenizer")
    model, last, probe = load_run_probe(run)  # the newest checkpoint
    ids = probe.ids
    old = probe()
    row = {"run": str(run), "checkpoint": last.name, "sep_share": float((ids == tok.sep_id).sum() / (ids != tok.pad_id).sum()),
           "disc_auc_all_but_cls": old["disc_auc"]}
    if c.get("disc_skip_special"):
        model.skip_in_disc_loss((tok.cls_id, tok.sep_id))
        row["disc_auc_scored_only"] = probe()["disc_auc"]
    print(json.dumps(row), flush=True)
