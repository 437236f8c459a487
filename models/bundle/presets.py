"""Model size presets (ELECTRA paper, Table 6) and the generator's scaled-down config."""
from __future__ import annotations

SIZES: dict[str, dict] = {
    # tests and CPU runs (hidden ≤128, a few layers)
    "tiny": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=2, intermediate_size=512,
                 embedding_size=128),
    # BERT-Mini's shape (Turc et al. 2019: L4/H256): tiny made twice as wide, ~4.5M parameters with an 8k vocabulary —
    # the compute-optimal size (~20 tokens a parameter) for a few 1e15 FLOPs of CPU pretraining
    "mini": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                 embedding_size=128),
    # the paper's ELECTRA-Small
    "small": dict(hidden_size=256, num_hidden_layers=12, num_attention_heads=4, intermediate_size=1024,
                  embedding_size=128),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                 embedding_size=768),
}


#: dropout (hidden and attention) of every encoder denki builds or exports for fine-tuning (BERT/ELECTRA's 0.1)
FINETUNE_DROPOUT = 0.1


def electra_config(size: str, vocab_size: int, *, max_position_embeddings: int = 512, **overrides):
    """An ``ElectraConfig`` for a discriminator / encoder of the given size (pad id 0, as denki vocabularies)."""
    from transformers import ElectraConfig

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
    kw = dict(SIZES[size], vocab_size=vocab_size, max_position_embeddings=max_position_embeddings,
              type_vocab_size=2, pad_token_id=0, hidden_dropout_prob=FINETUNE_DROPOUT,
              attention_probs_dropout_prob=FINETUNE_DROPOUT)
    kw.update(overrides)
    return ElectraConfig(**kw)


def generator_config(disc_config, gen_size: float = 0.25):
    """The generator: same depth, hidden/heads/FFN scaled by ``gen_size`` (paper: 1/4–1/2 works best),
    same embedding size (token/position embeddings are shared with the discriminator)."""
    from transformers import ElectraConfig

    if not 0 < gen_size <= 1:
        raise ValueError("gen_size must be in (0, 1]")
    hidden = max(16, int(round(disc_config.hidden_size * gen_size)))
    heads = max(1, int(round(disc_config.num_attention_heads * gen_size)))
    while hidden % heads:
        heads -= 1
    cfg = disc_config.to_dict()
    cfg.update(hidden_size=hidden, num_attention_heads=heads,
               intermediate_size=max(64, int(round(disc_config.intermediate_size * gen_size))))
    for k in ("architectures", "_name_or_path", "transformers_version", "model_type"):
        cfg.pop(k, None)
    return ElectraConfig(**cfg)
