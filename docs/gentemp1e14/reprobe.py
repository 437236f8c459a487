"""The end-of-run probe of finished --gen-temperature runs, again from their last checkpoint with the current probe
code: the AUC and recall on replacements drawn at T = 1 (as logged) plus the AUC at the run's own T
(``disc_auc_own_t``, added after the 1e14 runs had finished; the health check judges that one).
Same probe batch and corruption as the run's own probe (the probe seeds its own RNG).
    python docs/gentemp1e14/reprobe.py runs/hybrid/electra-cc1-t3-1e14 [...]   → one JSON line per run
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from models.text.tokenizer import JapaneseTokenizer  # noqa: E402
from pretrain.data import build_token_cache  # noqa: E402
from pretrain.diagnostics import probe_batch, run_probe  # noqa: E402
from pretrain.export import load_pretrainer  # noqa: E402
from pretrain.masking import ELECTRA_SPLIT, mask_tokens  # noqa: E402

for run in map(Path, sys.argv[1:]):
    meta = json.loads((run / "run.json").read_text(encoding="utf-8"))
    c, ident = meta["config"], meta["identity"]
    tok = JapaneseTokenizer.load(run / "tokenizer")
    cache = build_token_cache(c["corpus"], tok, c["cache_dir"], progress=False, corpus_shas=ident["corpus_sha256"])
    model, last, _ = load_pretrainer(run)  # the newest checkpoint; gen_temperature from the run's identity
    ids = probe_batch(cache, c["seq_len"], cls_id=tok.cls_id, pad_id=tok.pad_id)
    special = (tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id)

    def mask_fn(x):
        return mask_tokens(x, mask_prob=ident["mask_prob"], mask_id=tok.mask_id, special_ids=special,
                           vocab_size=tok.vocab_size, split=ELECTRA_SPLIT, first_regular_id=len(tok.special_ids))

    d = run_probe(model, ids, pad_id=tok.pad_id, mask_fn=mask_fn)
    print(json.dumps({"run": str(run), "checkpoint": last.name, "gen_temperature": model.gen_temperature,
                      **{k: d.get(k) for k in ("disc_auc", "probe_recall", "disc_auc_own_t")}}), flush=True)
