"""The experiment's plan: built-in tasks and ``--task`` specs, the settings (:class:`ExperimentConfig`), FLOP
budgets, the (sub)sampled task files every model is fine-tuned on, and the encoders to compare (:class:`Model`)."""
from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from denki.models.io.errors import DenkiError, InputError
from denki.models.io.fileio import atomic_write_json, atomic_write_text
from denki.models.registry.tasks import by_command, task_for

#: the tasks an experiment can fine-tune, by their command names (run.py has a recipe for each)
EXPERIMENT_TASKS = (task_for("classifier").command, task_for("qa").command)

# ------------------------------------------------------------------------------------------------ tasks
#: built-in task names → files in the shared data folder (see ../shared/data/README.md)
BUILTIN_TASKS = {
    "livedoor-title": {"kind": "classify", "train": "livedoor_train.jsonl.gz", "dev": "livedoor_dev.jsonl.gz",
                       "text_field": "title"},
    "livedoor-text": {"kind": "classify", "train": "livedoor_train.jsonl.gz", "dev": "livedoor_dev.jsonl.gz",
                      "text_field": "title+text"},
    "jaquad-qtype": {"kind": "classify", "train": "jaquad_qtype_train.jsonl.gz", "dev": "jaquad_qtype_dev.jsonl.gz",
                     "text_field": "text"},
    "manpages-section": {"kind": "classify", "train": "manpages_section_train.jsonl.gz",
                         "dev": "manpages_section_dev.jsonl.gz", "text_field": "text"},
    "jaquad-qa": {"kind": "qa", "train": "jaquad_train.squad2.json.gz", "dev": "jaquad_dev.squad2.json.gz"},
    # JSQuAD train is not available here: train on JaQuAD train, evaluate on JSQuAD valid
    "jsquad-qa": {"kind": "qa", "train": "jaquad_train.squad2.json.gz", "dev": "jsquad_valid.squad2.json.gz"},
}


QA_SPAN_METRIC = "HasAns_span_f1"  # best non-null span on answerable questions (models/qa/metrics.py)


@dataclass
class TaskSpec:
    name: str
    kind: str            # the task's command: classify | qa
    train: str
    dev: str
    text_field: str = "text"
    label_field: str = "label"

    @property
    def task(self):
        """The registered task (:mod:`models.registry`) this spec fine-tunes."""
        return by_command(self.kind)

    @property
    def is_qa(self) -> bool:
        """Extractive QA (SQuAD 2.0 data, spans) rather than classification (labelled records)."""
        return self.task is task_for("qa")

    @property
    def metric(self) -> str:
        """The headline dev metric: macro-F1 (classification), best-threshold F1 (SQuAD 2.0)."""
        return self.task.experiment_metric


def default_data_dir() -> str:
    return os.environ.get("DENKI_SHARED_DATA") or "../shared/data"


def parse_task(text: str, data_dir: str | os.PathLike) -> TaskSpec:
    """A built-in name (``livedoor-title``), ``NAME=classify:TRAIN:DEV[:TEXTFIELD[:LABELFIELD]]``,
    ``NAME=qa:TRAIN:DEV`` or a JSON file ``{"name", "kind", "train", "dev", "text_field"?, "label_field"?}``."""
    if text in BUILTIN_TASKS:
        t = BUILTIN_TASKS[text]
        spec = TaskSpec(name=text, kind=t["kind"], train=str(Path(data_dir) / t["train"]),
                        dev=str(Path(data_dir) / t["dev"]), text_field=t.get("text_field", "text"))
    elif "=" in text:
        name, rest = text.split("=", 1)
        parts = rest.split(":")
        if len(parts) < 3 or parts[0] not in EXPERIMENT_TASKS:
            raise DenkiError(f"--task {text!r}: expected NAME=classify:TRAIN:DEV[:TEXTFIELD[:LABELFIELD]] or "
                             "NAME=qa:TRAIN:DEV")
        spec = TaskSpec(name=name, kind=parts[0], train=parts[1], dev=parts[2],
                        text_field=parts[3] if len(parts) > 3 and parts[3] else "text",
                        label_field=parts[4] if len(parts) > 4 and parts[4] else "label")
    elif text.endswith(".json") and Path(text).is_file():
        try:
            d = json.loads(Path(text).read_text(encoding="utf-8"))
            spec = TaskSpec(name=d["name"], kind=d["kind"], train=d["train"], dev=d["dev"],
                            text_field=d.get("text_field", "text"), label_field=d.get("label_field", "label"))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise InputError(f"task definition: {e}", path=text) from e
        if spec.kind not in EXPERIMENT_TASKS:
            raise InputError(f"task kind must be classify or qa, got {spec.kind!r}", path=text, field="kind")
    else:
        raise DenkiError(f"unknown task {text!r}: built-in tasks are {', '.join(BUILTIN_TASKS)}; or define one as "
                         "NAME=classify:TRAIN:DEV[:TEXTFIELD[:LABELFIELD]], NAME=qa:TRAIN:DEV or a JSON file")
    if not spec.name or "/" in spec.name or spec.name.startswith("."):
        raise DenkiError(f"task name {spec.name!r} is not usable as a directory name")
    for role in ("train", "dev"):
        p = Path(getattr(spec, role))
        if not p.is_file():
            raise DenkiError(f"task {spec.name}: {role} file not found: {p}"
                             + (" (the shared data folder; set --data-dir or DENKI_SHARED_DATA)"
                                if text in BUILTIN_TASKS else ""))
    return spec


# ------------------------------------------------------------------------------------------------ settings
@dataclass
class ExperimentConfig:
    corpus: list[str]
    tokenizer: str
    out: str
    tasks: list[TaskSpec]
    budgets: list[float]
    size: str = "tiny"
    seeds: int = 3
    # pretraining
    batch_size: int = 32
    seq_len: int = 128
    pretrain_lr: float | None = None
    pretrain_seed: int = 0
    random_init: bool = True
    objectives: tuple[str, ...] = ("electra", "mlm")
    electra15: bool = False          # also pretrain the "ELECTRA 15%" ablation at every budget
    disc_weight: float = 50.0        # ELECTRA: λ of mlm + λ·disc
    embeddings: str = "shared"       # ELECTRA: generator/discriminator embeddings shared or separate
    mask_prob: float = 0.15          # share of tokens masked (generator input / MLM targets), every objective
    pretrain_dropout: float | None = None  # None: the preset's 0.1 (applies to every objective)
    # fine-tuning
    epochs: float | None = None      # None: the fine-tuners' own defaults (classify 10, QA 2)
    lr: float | None = None          # None: each fine-tuner's default (by width: models.training.defaults)
    max_length: int = 128            # classification
    class_weights: str = "none"      # classification loss (resolve_class_weights); none = the published tables' loss
    qa_max_length: int = 256
    qa_doc_stride: int | None = None  # None: half the window
    max_train: int | None = 2000
    max_dev: int | None = 500
    keep_finetuned: bool = False
    device: str = "auto"
    threads: int | None = None
    jobs: int = 1                    # stages run this many at a time (separate processes); results do not depend on it
    cache_dir: str | None = None
    progress: bool = True
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_args(cls, args) -> "ExperimentConfig":
        """The settings of `denki experiment electra-vs-mlm`'s parsed ``args``: every option named as its field,
        plus those the CLI spells differently (tasks, budgets, objectives, the ``--no-…`` switches, 0 = all)."""
        import dataclasses

        data_dir = args.data_dir or default_data_dir()
        names = [t.strip() for t in args.tasks.split(",") if t.strip()] + list(args.task)
        if not names:
            raise DenkiError("give --tasks (built-in names) and/or --task SPEC")
        kw = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
        kw.update(corpus=list(args.corpus), tasks=[parse_task(n, data_dir) for n in names],
                  budgets=parse_budgets(args.flops_budgets), objectives=parse_objectives(args.objectives),
                  random_init=not args.no_random_init, max_train=args.max_train or None,
                  max_dev=args.max_dev or None, progress=not args.no_progress)
        return cls(**kw)

    def pretrain_config(self, objective: str, budget: float, out: str):
        """The :class:`~pretrain.settings.PretrainConfig` of one pretraining run of the experiment (``objective``
        at ``budget`` FLOPs into ``out``); what the experiment does not set keeps `denki pretrain`'s default."""
        from denki.pretrain.settings import PretrainConfig

        return PretrainConfig(corpus=list(self.corpus), tokenizer=self.tokenizer, out=out, size=self.size,
                              objective=objective, max_flops=budget, steps=None, batch_size=self.batch_size,
                              seq_len=self.seq_len, lr=self.pretrain_lr, seed=self.pretrain_seed,
                              device=self.device, cache_dir=self.cache_dir, progress=self.progress,
                              share_embeddings=self.embeddings == "shared", dropout=self.pretrain_dropout,
                              disc_weight=self.disc_weight, mask_prob=self.mask_prob)

    def finetune_identity(self) -> dict:
        """What a cached fine-tuning result depends on besides its (model, task, seed) directory name."""
        return {"size": self.size, "batch_size": self.batch_size, "seq_len": self.seq_len,
                "pretrain_lr": self.pretrain_lr, "pretrain_seed": self.pretrain_seed, "epochs": self.epochs,
                "lr": self.lr, "max_length": self.max_length, "qa_max_length": self.qa_max_length,
                "qa_doc_stride": self.qa_doc_stride, "max_train": self.max_train, "max_dev": self.max_dev,
                "class_weights": self.class_weights}


def field_default(name: str):
    """The default of :class:`ExperimentConfig`'s field ``name`` (what the CLI's options default to)."""
    return ExperimentConfig.__dataclass_fields__[name].default


def parse_objectives(text: str) -> tuple[str, ...]:
    """``--objectives electra,mlm`` → ``("electra", "mlm")`` (each once, in the order given)."""
    objs = tuple(dict.fromkeys(o.strip() for o in text.split(",") if o.strip()))
    bad = [o for o in objs if o not in ("electra", "mlm")]
    if bad or not objs:
        raise DenkiError(f"--objectives takes electra and/or mlm (comma-separated), not {text!r}"
                         " (the ELECTRA 15% ablation has its own flag, --electra15)")
    return objs


def parse_budgets(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise DenkiError(f"--flops-budgets {text!r}: give comma-separated numbers such as 2e12,6e12") from e
    if not vals or any(not (v > 0 and math.isfinite(v)) for v in vals):
        raise DenkiError(f"--flops-budgets {text!r}: budgets must be positive numbers")
    return sorted(set(vals))


def budget_tag(b: float) -> str:
    """``2e+12`` → ``2e12`` (directory names)."""
    m, e = f"{b:.3g}".split("e") if "e" in f"{b:.3g}" else (f"{b:.3g}", "0")
    return f"{m}e{int(e)}"


# ------------------------------------------------------------------------------------------------ data
def _sample_indices(n: int, k: int | None, seed: int = 0) -> list[int]:
    if k is None or k >= n:
        return list(range(n))
    return sorted(random.Random(seed).sample(range(n), k))


def prepare_task_data(spec: TaskSpec, out_dir: Path, max_train: int | None, max_dev: int | None) -> TaskSpec:
    """Write the (sub)sampled train/dev files every model uses (``Random(0)``; identical for all models and
    seeds, so differences between cells are the models', not the data's). Returns the spec pointing at them."""
    d = out_dir / "data" / spec.name
    done = d / "done.json"
    want = {"train": str(spec.train), "dev": str(spec.dev), "max_train": max_train, "max_dev": max_dev,
            "text_field": spec.text_field, "label_field": spec.label_field}
    local = TaskSpec(spec.name, spec.kind, str(d / "train.jsonl"), str(d / "dev.jsonl"), spec.text_field,
                     spec.label_field)
    if done.is_file() and json.loads(done.read_text(encoding="utf-8")).get("source") == want:
        return local
    d.mkdir(parents=True, exist_ok=True)
    counts = {}
    if not spec.is_qa:
        from denki.models.io.records import iter_records

        fields = [f for f in spec.text_field.split("+") if f] + [spec.label_field]
        train_labels = None
        for role, path, k in (("train", spec.train, max_train), ("dev", spec.dev, max_dev)):
            recs = [r for _, r in iter_records(path)]
            recs = [recs[i] for i in _sample_indices(len(recs), k)]
            rows = [{f: r.get(f) for f in fields} for r in recs]
            if role == "train":
                train_labels = {r[spec.label_field] for r in rows}
            else:  # a dev label missing from a subsampled train set would stop the fine-tuner
                before = len(rows)
                rows = [r for r in rows if r[spec.label_field] in train_labels]
                counts["dev_dropped_unseen_label"] = before - len(rows)
            counts[role] = len(rows)
            atomic_write_text(d / f"{role}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    else:
        from denki.models.qa.data import read_qa

        for role, path, k in (("train", spec.train, max_train), ("dev", spec.dev, max_dev)):
            ex = read_qa(path).examples
            ex = [ex[i] for i in _sample_indices(len(ex), k)]
            rows = [{"id": e.id, "title": e.title, "context": e.context, "question": e.question,
                     "answers": {"text": [t for t, _ in e.answers], "answer_start": [s for _, s in e.answers]},
                     "is_impossible": not e.answers} for e in ex]
            counts[role] = len(rows)
            atomic_write_text(d / f"{role}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    atomic_write_json(done, {"source": want, "counts": counts})
    return local


# ------------------------------------------------------------------------------------------------ encoders
@dataclass
class Model:
    """One encoder to fine-tune: ``electra-2e12``, ``mlm-2e12`` or ``random``."""
    id: str
    objective: str           # electra | mlm | random
    budget: float | None
    run_dir: Path | None     # pretraining run directory (None for random)
    bundle: Path
