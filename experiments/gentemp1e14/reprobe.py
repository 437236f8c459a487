"""The end-of-run probe of finished --gen-temperature runs, again from their last checkpoint with the current probe
code: the AUC and recall on replacements drawn at T = 1 (as logged) plus the AUC at the run's own T
(``disc_auc_own_t``, added after the 1e14 runs had finished; the health check judges that one).
Same probe batch and corruption as the run's own probe (the probe seeds its own RNG).
    python experiments/gentemp1e14/reprobe.py runs/hybrid/electra-cc1-t3-1e14 [...]   → one JSON line per run
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from denki.pretrain.diagnostics import load_run_probe  # noqa: E402

for run in sys.argv[1:]:
    model, last, probe = load_run_probe(run)  # gen_temperature from the run's identity
    d = probe()
    print(json.dumps({"run": run, "checkpoint": last.name, "gen_temperature": model.gen_temperature,
                      **{k: d.get(k) for k in ("disc_auc", "probe_recall", "disc_auc_own_t")}}), flush=True)
