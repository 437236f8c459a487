"""Which part of a pretrained encoder helps or hurts fine-tuning? Writes two bundles from a pretrained bundle A and
a freshly initialised discriminator of the same config (``ElectraForPreTraining(config)`` after seed 0):
    OUT/layers-only      A's transformer layers, random embeddings (token, position, type + their LayerNorm)
    OUT/embeddings-only  A's embeddings, random transformer layers
    python experiments/hybrid1e14/swap.py A OUT        (then fine-tune each with experiments/levers1e14/ft.sh's ft_model)"""
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from denki.models.bundle.format import read_manifest, write_manifest


def main(src: str, out: str) -> int:
    from transformers import ElectraConfig, ElectraForPreTraining

    from denki.models.training.loop import set_seed

    src_p, out_p = Path(src), Path(out)
    cfg = ElectraConfig.from_pretrained(src_p)
    set_seed(0)
    rand = ElectraForPreTraining(cfg).state_dict()
    pre = load_file(str(src_p / "model.safetensors"))
    man = read_manifest(src_p)
    for name, keep_embeddings in (("layers-only", False), ("embeddings-only", True)):
        d = out_p / name
        if d.exists():
            shutil.rmtree(d)
        shutil.copytree(src_p, d)
        w = {}
        for k, v in pre.items():
            is_emb = k.startswith("electra.embeddings.")
            is_layer = k.startswith("electra.encoder.")
            if (is_emb and not keep_embeddings) or (is_layer and keep_embeddings):
                w[k] = rand[k].clone().contiguous()
            else:
                w[k] = v
        save_file(w, str(d / "model.safetensors"), metadata={"format": "pt"})
        source = {**man.get("source", {}), "swap": {"from": str(src_p), "kept": "embeddings" if keep_embeddings
                                                    else "transformer layers", "random_seed": 0}}
        write_manifest(d, man["kind"], source=source, metrics=man.get("metrics"))
        print(name, "→", d, json.dumps(source["swap"]))
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main(*sys.argv[1:3]))
