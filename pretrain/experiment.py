"""``denki experiment electra-vs-mlm``: the ELECTRA paper's core comparison on the user's corpus.

For each pretraining FLOPs budget, pretrain an ELECTRA discriminator (replaced-token detection) and an MLM encoder
at equal FLOPs, plus one random-init control (it does not depend on the budget); fine-tune every model on every
task with every seed; evaluate on dev; write ``OUT/report.json``, ``OUT/report.md`` and ``OUT/score_vs_flops.png``
(the analogue of the paper's Figure 1/3: downstream score against pretraining FLOPs per objective).

Layout of ``OUT`` (every stage has its own directory and is skipped when it is complete, so re-running the same
command resumes; the pretraining runs themselves also resume from their newest checkpoint)::

    experiment.json                  settings that fine-tuning results depend on (a re-run with others is refused)
    data/TASK/{train,dev}.jsonl      the (sub)sampled task files every model is fine-tuned / evaluated on
    pretrain/electra-B/, mlm-B/      pretrain.train run directories (summary.json, curves.png, bundle/)
    random/bundle/                   the random-init control
    probe/MODEL.json                 [CLS] collapse probe of each pretrained encoder
    finetune/MODEL/TASK/seed-S/      one fine-tuning run (report.json; the fine-tuned bundle is deleted unless
                                     keep_finetuned)
    report.json, report.md, score_vs_flops.png

With ``electra15`` the paper's "ELECTRA 15%" ablation (discriminator loss only on the masked positions, Table 5:
82.4 vs 85.0 GLUE) is pretrained at every budget too and gets its own column (``pretrain/electra15-B/``).
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from models.io.errors import DenkiError, InputError
from models.io.fileio import atomic_write_json, atomic_write_text

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
    kind: str            # classify | qa
    train: str
    dev: str
    text_field: str = "text"
    label_field: str = "label"

    @property
    def metric(self) -> str:
        """The headline dev metric: macro-F1 (classification), best-threshold F1 (SQuAD 2.0)."""
        return "macro_f1" if self.kind == "classify" else "best_f1"


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
        if len(parts) < 3 or parts[0] not in ("classify", "qa"):
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
        if spec.kind not in ("classify", "qa"):
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
    electra15: bool = False          # also pretrain the "ELECTRA 15%" ablation at every budget
    # fine-tuning
    epochs: float = 3
    lr: float | None = None          # None: each fine-tuner's default (3e-4 for tiny encoders)
    max_length: int = 128            # classification
    qa_max_length: int = 256
    qa_doc_stride: int | None = None  # None: half the window
    max_train: int | None = 2000
    max_dev: int | None = 500
    keep_finetuned: bool = False
    device: str = "auto"
    threads: int | None = None
    cache_dir: str | None = None
    progress: bool = True
    extra: dict = field(default_factory=dict)

    def finetune_identity(self) -> dict:
        """What a cached fine-tuning result depends on besides its (model, task, seed) directory name."""
        return {"size": self.size, "batch_size": self.batch_size, "seq_len": self.seq_len,
                "pretrain_lr": self.pretrain_lr, "pretrain_seed": self.pretrain_seed, "epochs": self.epochs,
                "lr": self.lr, "max_length": self.max_length, "qa_max_length": self.qa_max_length,
                "qa_doc_stride": self.qa_doc_stride, "max_train": self.max_train, "max_dev": self.max_dev}


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
    if spec.kind == "classify":
        from models.io.records import iter_records

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
        from models.qa.data import read_qa

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


# ------------------------------------------------------------------------------------------------ stages
@dataclass
class Model:
    """One encoder to fine-tune: ``electra-2e12``, ``mlm-2e12`` or ``random``."""
    id: str
    objective: str           # electra | mlm | random
    budget: float | None
    run_dir: Path | None     # pretraining run directory (None for random)
    bundle: Path


def _pretrain_stage(cfg: ExperimentConfig, objective: str, budget: float) -> Model:
    from .train import PretrainConfig, run_pretrain

    mid = f"{objective}-{budget_tag(budget)}"
    run = Path(cfg.out) / "pretrain" / mid
    pc = PretrainConfig(corpus=list(cfg.corpus), tokenizer=cfg.tokenizer, out=str(run), size=cfg.size,
                        objective=objective, max_flops=budget, steps=None, batch_size=cfg.batch_size,
                        seq_len=cfg.seq_len, lr=cfg.pretrain_lr, seed=cfg.pretrain_seed, device=cfg.device,
                        cache_dir=cfg.cache_dir, progress=cfg.progress)
    run_pretrain(pc)
    return Model(mid, objective, budget, run, run / "bundle")


def _random_stage(cfg: ExperimentConfig) -> Model:
    from models.bundle.format import verify_bundle
    from models.bundle.pytorch import random_init_bundle

    b = Path(cfg.out) / "random" / "bundle"
    try:
        verify_bundle(b, kinds=("pretrained",))
    except DenkiError:
        if b.exists():
            shutil.rmtree(b)
        random_init_bundle(cfg.size, cfg.tokenizer, b, seed=cfg.pretrain_seed)
    return Model("random", "random", None, None, b)


def cls_probe(bundle: Path, texts: list[str], out_json: Path, max_length: int = 128) -> dict:
    """How input-dependent the encoder's [CLS] vector is: its std across inputs (mean over hidden dims) and the
    mean pairwise cosine between inputs. A collapsed [CLS] (std ≈ 0, cosine ≈ 1) cannot feed a CLS classifier."""
    if out_json.is_file():
        return json.loads(out_json.read_text(encoding="utf-8"))
    import torch
    from transformers import ElectraModel

    from models.bundle.pytorch import load_model
    from models.text.tokenizer import JapaneseTokenizer

    tok = JapaneseTokenizer.load(bundle)
    model = load_model(bundle, ElectraModel).eval()
    enc = tok.pad(tok.encode_batch(texts, max_length=max_length, truncation=True))
    with torch.no_grad():
        h = model(input_ids=torch.from_numpy(enc["input_ids"]),
                  attention_mask=torch.from_numpy(enc["attention_mask"])).last_hidden_state  # (n, seq, hidden)
    cls = h[:, 0].double()
    tokens = h[torch.from_numpy(enc["attention_mask"]).bool()].double()  # (n_tokens, hidden)
    unit = torch.nn.functional.normalize(cls, dim=1)
    cos = unit @ unit.T
    n = cls.shape[0]
    cls_std, token_std = float(cls.std(dim=0).mean()), float(tokens.std(dim=0).mean())
    res = {"n_inputs": n, "cls_std": cls_std, "token_std": token_std,
           "cls_relative_std": cls_std / token_std if token_std > 0 else None,
           "cls_mean_cosine": float((cos.sum() - n) / (n * (n - 1))) if n > 1 else None}
    out_json.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_json, res)
    return res


def _probe_texts(corpus: list[str], n: int = 64) -> list[str]:
    from models.io.textio import iter_corpus

    texts = []
    for item in iter_corpus(corpus):
        text = item[-1] if isinstance(item, tuple) else item
        if text.strip():
            texts.append(text)
        if len(texts) >= n:
            break
    return texts


def _finetune_stage(cfg: ExperimentConfig, model: Model, task: TaskSpec, seed: int) -> dict:
    """Fine-tune ``model`` on ``task`` with one seed (cached in its own directory) → the per-seed dev result."""
    d = Path(cfg.out) / "finetune" / model.id / task.name / f"seed-{seed}"
    res_path = d / "result.json"
    data_src = json.loads((Path(task.train).parent / "done.json").read_text(encoding="utf-8"))["source"]
    if res_path.is_file():
        res = json.loads(res_path.read_text(encoding="utf-8"))
        if res.get("data", data_src) == data_src:
            return res
        print(f"    {task.name} now points at other data: fine-tuning again", flush=True)
    if d.exists():  # a run killed half-way: start it again from scratch (fine-tuning runs are short)
        shutil.rmtree(d)
    t0 = time.perf_counter()
    if task.kind == "classify":
        from models.classify.finetune import FinetuneConfig, finetune

        fc = FinetuneConfig(epochs=int(max(1, round(cfg.epochs))), max_length=cfg.max_length, seeds=[seed],
                            device=cfg.device, progress=cfg.progress, lr=cfg.lr)
        rep = finetune(train_path=task.train, dev_path=task.dev, out_dir=str(d), model=str(model.bundle),
                       text_field=task.text_field, label_field=task.label_field, cfg=fc, baseline=False)
        s = rep["seeds"][0]
        res = {"macro_f1": s["macro_f1"], "accuracy": s["accuracy"], "best_epoch": s["best_epoch"],
               "epochs_run": s["epochs_run"], "lr": rep["config"].get("lr")}
    else:
        from models.qa.finetune import finetune_qa

        kw = {"lr": cfg.lr} if cfg.lr is not None else {}
        rep = finetune_qa(model=str(model.bundle), train=task.train, dev=task.dev, out=str(d),
                          max_length=cfg.qa_max_length,
                          doc_stride=cfg.qa_doc_stride or cfg.qa_max_length // 2, seeds=1, seed=seed,
                          epochs=cfg.epochs, device=cfg.device, progress=cfg.progress, **kw)
        m = rep["seeds"][0]["dev_metrics"]
        res = {k: m.get(k) for k in ("best_f1", "f1", "exact", "HasAns_f1", "NoAns_exact", "best_exact",
                                     QA_SPAN_METRIC)}
    res.update(model=model.id, task=task.name, seed=seed, seconds=time.perf_counter() - t0, data=data_src)
    if not cfg.keep_finetuned:
        shutil.rmtree(d / "bundle", ignore_errors=True)
    atomic_write_json(res_path, res)
    return res


def _is_cached(res_path: Path, task: TaskSpec) -> bool:
    if not res_path.is_file():
        return False
    data_src = json.loads((Path(task.train).parent / "done.json").read_text(encoding="utf-8"))["source"]
    return json.loads(res_path.read_text(encoding="utf-8")).get("data", data_src) == data_src


# ------------------------------------------------------------------------------------------------ orchestration
def _check_settings(out: Path, cfg: ExperimentConfig) -> None:
    p = out / "experiment.json"
    ident = cfg.finetune_identity()
    if p.is_file():
        old = json.loads(p.read_text(encoding="utf-8")).get("identity")
        if old is not None and old != ident:
            diff = {k: (old.get(k), v) for k, v in ident.items() if old.get(k) != v}
            raise DenkiError(f"{out} holds an experiment with other settings {diff} (old, new); cached results "
                             "would mix — use another --out or the same settings (budgets, tasks and seeds may "
                             "change)")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(p, {"identity": ident, "settings": {**asdict(cfg), "tasks": [asdict(t) for t in cfg.tasks]}})


def run_experiment(cfg: ExperimentConfig) -> dict:
    """Run (or resume) every stage, then write the report. Returns the report dict."""
    import torch

    from models.bundle.presets import SIZES

    if cfg.size not in SIZES:
        raise DenkiError(f"unknown size {cfg.size!r}; choose one of {sorted(SIZES)}")
    if cfg.seeds < 1:
        raise DenkiError("--seeds must be at least 1")
    if not cfg.tasks:
        raise DenkiError("give at least one --tasks name")
    if len({t.name for t in cfg.tasks}) != len(cfg.tasks):
        raise DenkiError("task names must be unique")
    for p in cfg.corpus:
        if not Path(p).is_file():
            raise DenkiError(f"corpus file not found: {p}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    _check_settings(out, cfg)
    t0 = time.perf_counter()

    objectives = ("electra", "mlm", "electra15") if cfg.electra15 else ("electra", "mlm")
    n_models = len(objectives) * len(cfg.budgets) + (1 if cfg.random_init else 0)
    n_stages = 1 + n_models + n_models * len(cfg.tasks) * cfg.seeds
    stage = [0]

    def say(msg: str) -> None:
        stage[0] += 1
        print(f"[experiment {stage[0]}/{n_stages} {time.perf_counter() - t0:6.0f}s] {msg}", flush=True)

    say(f"data: {', '.join(t.name for t in cfg.tasks)}")
    tasks = [prepare_task_data(t, out, cfg.max_train, cfg.max_dev) for t in cfg.tasks]

    models: list[Model] = []
    for b in cfg.budgets:
        for obj in objectives:
            say(f"pretrain {obj} {cfg.size} at {b:.3g} FLOPs")
            models.append(_pretrain_stage(cfg, obj, b))
    if cfg.random_init:
        say("random-init control")
        models.append(_random_stage(cfg))
    texts = _probe_texts(cfg.corpus)
    probes = {m.id: cls_probe(m.bundle, texts, out / "probe" / f"{m.id}.json") for m in models}

    # seeds outermost, and a report after every (seed, model): an interrupted run still leaves a complete
    # one-seed comparison behind, and later seeds only add the noise estimate
    results = []
    for s in range(cfg.seeds):
        for m in models:
            fresh = False
            for t in tasks:
                cached = _is_cached(out / "finetune" / m.id / t.name / f"seed-{s}" / "result.json", t)
                fresh = fresh or not cached
                say(f"finetune {m.id} on {t.name} seed {s}" + (" (cached)" if cached else ""))
                r = _finetune_stage(cfg, m, t, s)
                results.append(r)
                if not cached:
                    print(f"    → {t.metric} {r[t.metric]:.4f} ({r['seconds']:.0f}s)", flush=True)
            if fresh or (s == cfg.seeds - 1 and m is models[-1]):
                report = build_report(cfg, models, tasks, results, probes)
                write_report(out, report)
    print(f"experiment: report in {out / 'report.md'} ({time.perf_counter() - t0:.0f}s this run)", flush=True)
    return report


# ------------------------------------------------------------------------------------------------ report
def _pretrain_row(m: Model) -> dict:
    s = json.loads((m.run_dir / "summary.json").read_text(encoding="utf-8"))
    f = s.get("final") or {}
    return {"model": m.id, "objective": m.objective, "budget": m.budget, "flops": s["flops"], "steps": s["steps"],
            "tokens": s["tokens"], "wall_s": s["wall_s"], "gen_acc": f.get("gen_acc"),
            "mlm_loss": f.get("mlm_loss"), "disc_loss": f.get("disc_loss"),
            "replace_rate": f.get("replace_rate"), "disc_acc": f.get("disc_acc"),
            "all_original_acc": None if f.get("replace_rate") is None else 1 - f["replace_rate"],
            "disc_precision": f.get("disc_precision"), "disc_recall": f.get("disc_recall")}


def _stats(vals: list[float]) -> dict:
    a = np.asarray(vals, dtype=float)
    return {"n": len(a), "median": float(np.median(a)), "min": float(a.min()), "max": float(a.max()),
            "mean": float(a.mean()), "sd": float(a.std(ddof=1)) if len(a) > 1 else None,
            "values": [float(x) for x in a]}


def compare(e: dict, m: dict) -> dict:
    """ELECTRA − MLM on the median, judged against seed noise (pooled per-seed SD; 1 seed → unknown)."""
    diff = e["median"] - m["median"]
    sds = [x["sd"] for x in (e, m) if x["sd"] is not None]
    noise = math.sqrt(sum(s * s for s in sds) / len(sds)) if len(sds) == 2 else None
    if noise is None:
        verdict = "ELECTRA ahead" if diff > 0 else ("MLM ahead" if diff < 0 else "tie")
        verdict += " (1 seed: seed noise not measured)"
    elif abs(diff) <= 2 * noise:
        verdict = "within seed noise"
    else:
        verdict = "ELECTRA wins" if diff > 0 else "MLM wins"
    return {"electra_minus_mlm": diff, "seed_sd_pooled": noise,
            "diff_over_sd": (diff / noise) if noise else None, "verdict": verdict}


def trivial_reference(task: TaskSpec) -> dict:
    """The score of a constant answer on the (subsampled) dev set — what a model that learnt nothing gets:
    the train-majority label (classification macro-F1), or "no answer" everywhere (SQuAD 2.0 F1)."""
    rows = [json.loads(x) for x in Path(task.dev).read_text(encoding="utf-8").splitlines() if x.strip()]
    if task.kind == "qa":
        no_ans = sum(1 for r in rows if r.get("is_impossible"))
        return {"answer": "always no answer", "score": 100.0 * no_ans / max(1, len(rows))}
    train = [json.loads(x)[task.label_field]
             for x in Path(task.train).read_text(encoding="utf-8").splitlines() if x.strip()]
    labels = sorted(set(train))
    major = max(labels, key=train.count)
    prec = sum(1 for r in rows if r[task.label_field] == major) / max(1, len(rows))
    f1 = 2 * prec / (prec + 1) if prec else 0.0
    return {"answer": f"always {major!r}", "score": f1 / len(labels)}


def build_report(cfg: ExperimentConfig, models: list[Model], tasks: list[TaskSpec], results: list[dict],
                 probes: dict) -> dict:
    from models.bundle.format import command_line

    by = {}
    for r in results:
        by.setdefault((r["model"], r["task"]), []).append(r)
    pre = {m.id: _pretrain_row(m) for m in models if m.run_dir is not None}
    for mid, row in pre.items():
        row["cls_probe"] = probes.get(mid)
    table = {}
    # QA gets a second table: the best non-null span's F1 on answerable questions (null decision off), the
    # number that still separates encoders while every tiny model answers "no answer" to everything
    views = [(t.name, t, t.metric) for t in tasks]
    views += [(f"{t.name} (span F1)", t, QA_SPAN_METRIC) for t in tasks if t.kind == "qa"]
    for name, t, metric in views:
        cells = {}
        for m in models:
            rs = [r for r in by.get((m.id, t.name), []) if r.get(metric) is not None]
            if rs:
                cells[m.id] = {**_stats([r[metric] for r in rs]), "objective": m.objective, "budget": m.budget,
                               "pretrain_flops": pre[m.id]["flops"] if m.id in pre else 0.0}
        comps = {}
        for b in cfg.budgets:
            e, mm = cells.get(f"electra-{budget_tag(b)}"), cells.get(f"mlm-{budget_tag(b)}")
            if e and mm:
                comps[budget_tag(b)] = compare(e, mm)
        abl = {}
        for b in cfg.budgets:
            e, e15 = cells.get(f"electra-{budget_tag(b)}"), cells.get(f"electra15-{budget_tag(b)}")
            if e and e15:
                abl[budget_tag(b)] = compare(e, e15)
        table[name] = {"kind": t.kind, "metric": metric, "cells": cells, "electra_vs_mlm": comps,
                       "electra_vs_electra15": abl,
                       "trivial": trivial_reference(t) if metric == t.metric else None}
    planned = len(models) * len(tasks) * cfg.seeds
    return {"kind": "experiment-electra-vs-mlm", "command": command_line(), "size": cfg.size,
            "finetune_runs_done": len(results), "finetune_runs_planned": planned,
            "complete": len(results) == planned,
            "budgets": cfg.budgets, "seeds": cfg.seeds, "corpus": list(cfg.corpus), "tokenizer": cfg.tokenizer,
            "settings": {k: v for k, v in asdict(cfg).items() if k not in ("tasks", "extra")},
            "tasks": [asdict(t) for t in tasks], "pretraining": list(pre.values()),
            "random_init_probe": probes.get("random"), "results": table, "per_seed": results,
            "ablation_electra_15": ("included" if cfg.electra15 else
                                    "not run (add --electra15 to pretrain it at every budget)"),
            "plot": "score_vs_flops.png"}


LABELS = {"electra": "ELECTRA", "mlm": "MLM", "electra15": "ELECTRA 15%"}


def plot_score_vs_flops(report: dict, path: Path) -> None:
    """One panel per task: median dev score (bars = min..max over seeds) against pretraining FLOPs, per objective;
    the random-init control as a dashed line."""
    from matplotlib.ticker import NullFormatter

    from models.io.plotting import setup_matplotlib

    plt = setup_matplotlib()

    names = list(report["results"])
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        res = report["results"][name]
        for obj, style in (("electra", "o-"), ("mlm", "s--"), ("electra15", "^-.")):
            cells = sorted((c for c in res["cells"].values() if c["objective"] == obj),
                           key=lambda c: c["pretrain_flops"])
            if not cells:
                continue
            x = [c["pretrain_flops"] for c in cells]
            y = [c["median"] for c in cells]
            err = [[c["median"] - c["min"] for c in cells], [c["max"] - c["median"] for c in cells]]
            ax.errorbar(x, y, yerr=err, fmt=style, capsize=3, label=LABELS[obj])
        rnd = res["cells"].get("random")
        if rnd:
            ax.axhline(rnd["median"], color="gray", ls=":", label="random init")
        if res.get("trivial"):
            ax.axhline(res["trivial"]["score"], color="red", ls=":", lw=1, label="constant answer")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide when the budgets are close
        budgets = report.get("budgets") or []
        if budgets:  # label the budgets themselves: with two close budgets a log axis may show one decade tick
            ax.set_xticks(budgets, [f"{b:.2g}" for b in budgets])
        ax.set_xlabel("pretraining FLOPs")
        ax.set_ylabel(f"dev {res['metric']} (median over seeds)")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"ELECTRA vs MLM ({report['size']}): downstream score vs pretraining compute")
    fig.tight_layout()
    tmp = path.with_name(path.name + ".partial.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def _noise_text(c: dict) -> str:
    if c.get("diff_over_sd") is not None:
        return f"{c['diff_over_sd']:+.1f} seed SDs"
    if c.get("seed_sd_pooled") == 0:
        return "every seed gave the same score"
    return "seed noise not measured"


def _f(v, nd=3) -> str:
    if v is None:
        return "—"
    return f"{v:.{nd}f}"


def collapse_flags(report: dict) -> dict:
    """Per pretrained encoder: has its [CLS] (or every) output collapsed to an input-independent vector?
    Judged against the random-init control (final LayerNorm outputs, so absolute stds compare across models);
    without the control, against fixed floors measured on tiny random-init encoders (CLS ≈ 0.014, tokens ≈ 0.8)."""
    ref = report.get("random_init_probe") or {}
    cls_ref, tok_ref = ref.get("cls_std") or 0.014, ref.get("token_std") or 0.8
    out = {}
    for r in report["pretraining"]:
        p = r.get("cls_probe") or {}
        if p.get("cls_std") is None:
            continue
        out[r["model"]] = {"cls_collapsed": p["cls_std"] < 0.2 * cls_ref,
                           "tokens_collapsed": p["token_std"] < 0.1 * tok_ref}
    return out


def render_markdown(report: dict) -> str:
    L = ["# ELECTRA vs MLM at equal pretraining compute", "",
         f"Command: `{report['command']}`", "",
         f"Size `{report['size']}`, budgets {', '.join(f'{b:.3g}' for b in report['budgets'])} FLOPs, "
         f"{report['seeds']} fine-tuning seed(s) per cell; corpus: {', '.join(f'`{c}`' for c in report['corpus'])}. "
         "Cells: median over seeds (min–max). Fine-tuning uses the [CLS] representation.", ""]
    if not report.get("complete", True):
        L += [f"**Partial report: {report['finetune_runs_done']} of {report['finetune_runs_planned']} fine-tuning "
              "runs done (re-run the command to continue).**", ""]
    verdicts = []
    for name, res in report["results"].items():
        has15 = any(c["objective"] == "electra15" for c in res["cells"].values())
        L += [f"## {name} ({res['kind']}, dev {res['metric']})", "",
              "| budget (FLOPs) | ELECTRA | MLM | " + ("ELECTRA 15% | " if has15 else "") +
              "random init | ELECTRA − MLM | seed SD | verdict |",
              "|---|---|---|---|---|---|---|" + ("---|" if has15 else "")]
        rnd = res["cells"].get("random")
        for b in report["budgets"]:
            tag = budget_tag(b)
            e, m = res["cells"].get(f"electra-{tag}"), res["cells"].get(f"mlm-{tag}")
            c = res["electra_vs_mlm"].get(tag, {})

            nd = 3 if res["metric"] == "macro_f1" else 1  # macro-F1 in [0, 1]; SQuAD F1 in [0, 100]

            def cell(x):
                return "—" if not x else f"{x['median']:.{nd}f} ({x['min']:.{nd}f}–{x['max']:.{nd}f})"

            e15 = f"{cell(res['cells'].get(f'electra15-{tag}'))} | " if has15 else ""
            L.append(f"| {b:.3g} | {cell(e)} | {cell(m)} | {e15}{cell(rnd)} | {_f(c.get('electra_minus_mlm'), nd)} | "
                     f"{_f(c.get('seed_sd_pooled'), nd)} | {c.get('verdict', '—')} |")
            if c:
                verdicts.append((name, b, c))
        if res["metric"] == QA_SPAN_METRIC:
            L += ["", "F1 of the best non-null span on the answerable dev questions, as if the model always "
                      "answered (the null decision switched off): it separates encoders even when all of them "
                      "still answer \"no answer\" everywhere and the headline best_f1 equals the no-answer share."]
        if res.get("trivial"):
            L += ["", f"Reference: a constant answer ({res['trivial']['answer']}) scores "
                      f"{res['trivial']['score']:.{3 if res['metric'] == 'macro_f1' else 1}f} on this dev set."]
        L.append("")
    L += ["## Does ELECTRA win at this scale?", ""]
    wins = [v for v in verdicts if v[2]["verdict"] == "ELECTRA wins"]
    losses = [v for v in verdicts if v[2]["verdict"] == "MLM wins"]
    for name, b, c in verdicts:
        noise = _noise_text(c)
        L.append(f"- {name} at {b:.3g} FLOPs: ELECTRA − MLM = {c['electra_minus_mlm']:+.3g} ({noise}) → "
                 f"{c['verdict']}.")
    L += ["", (f"**ELECTRA wins (by more than 2 seed SDs) in {len(wins)} of {len(verdicts)} task×budget "
               f"comparisons; MLM wins in {len(losses)}; the rest are within seed noise or unmeasured.**"), ""]
    n_cells, n_trivial = 0, 0
    for res in report["results"].values():
        if not res.get("trivial"):
            continue
        tol = 0.01 if res["metric"] == "macro_f1" else 1.0
        for c in res["cells"].values():
            n_cells += 1
            n_trivial += c["median"] <= res["trivial"]["score"] + tol
    if n_cells:
        L += [f"{n_trivial} of {n_cells} cells (medians) are no better than a constant answer (within 0.01 "
              "macro-F1 / 1 F1 point): " + ("at this scale the comparison says nothing about the objectives "
                                             "beyond that." if n_trivial == n_cells else "see the tables."), ""]
    L += ["![score vs FLOPs](score_vs_flops.png)", "",
          "## Replaced-token-detection diagnostics (end of pretraining)", "",
          "gen_acc = generator (ELECTRA) or MLM accuracy on masked positions; replace rate = fraction of non-pad "
          "tokens the generator's sample changed; 'all original' = the discriminator accuracy of always answering "
          "*original*; precision/recall with *replaced* = positive. [CLS] probe: std of the final-layer [CLS] "
          "vector across 64 corpus lines (mean over hidden dims), the same for all token vectors, and their ratio. "
          "These are final-LayerNorm outputs, so the stds compare across models: a collapsed, input-independent "
          "[CLS] (std ≈ 0) gives a CLS classifier nothing to start from. Even a random-init encoder's [CLS] varies "
          "little (the same token at the same position everywhere), so compare with its row.", "",
          "| model | steps | FLOPs | wall s | gen/MLM acc | replace rate | disc acc | 'all original' | disc P | "
          "disc R | [CLS] std | token std | ratio |",
          "|" + "---|" * 13]
    rows = list(report["pretraining"])
    if report.get("random_init_probe"):
        rows.append({"model": "random", "cls_probe": report["random_init_probe"]})
    for r in rows:
        p = r.get("cls_probe") or {}
        L.append(f"| {r['model']} | {r.get('steps', '—')} | "
                 f"{'—' if r.get('flops') is None else format(r['flops'], '.3g')} | "
                 f"{'—' if r.get('wall_s') is None else format(r['wall_s'], '.0f')} | {_f(r.get('gen_acc'))} | "
                 f"{_f(r.get('replace_rate'))} | {_f(r.get('disc_acc'))} | {_f(r.get('all_original_acc'))} | "
                 f"{_f(r.get('disc_precision'))} | {_f(r.get('disc_recall'))} | {_f(p.get('cls_std'), 4)} | "
                 f"{_f(p.get('token_std'), 4)} | {_f(p.get('cls_relative_std'), 4)} |")
    stuck = [r["model"] for r in report["pretraining"]
             if r.get("disc_recall") is not None and (r["disc_recall"] or 0) < 0.05]
    flags = collapse_flags(report)
    collapsed = [m for m, f in flags.items() if f["cls_collapsed"]]
    all_collapsed = [m for m, f in flags.items() if f["tokens_collapsed"]]
    L.append("")
    if stuck:
        L.append(f"At these budgets the discriminator of {', '.join(stuck)} has recall < 5% on replaced tokens: "
                 "it has (nearly) not left the trivial 'everything is original' answer, so replaced-token "
                 "detection has not started to teach it much yet.")
    if collapsed:
        L.append(f"The [CLS] vector of {', '.join(collapsed)} has collapsed: its std across inputs is below a "
                 "fifth of the random-init encoder's, so CLS-based fine-tuning starts from a nearly "
                 "input-independent representation there.")
    if all_collapsed:
        L.append(f"In {', '.join(all_collapsed)} every output vector has collapsed (token std below a tenth of the "
                 "random-init encoder's): the encoder maps all inputs to (almost) the same output, the state a "
                 "discriminator reaches when it answers 'original' everywhere.")
    if report["ablation_electra_15"] == "included":
        L += ["", "## Ablation: ELECTRA 15%", "",
              "The discriminator loss averaged over the masked positions only (paper Table 5: ELECTRA 85.0 vs "
              "ELECTRA 15% 82.4 GLUE, i.e. most of ELECTRA's gain comes from learning from all tokens).", ""]
        for name, res in report["results"].items():
            for tag, c in res.get("electra_vs_electra15", {}).items():
                noise = _noise_text(c)
                verdict = c["verdict"].replace("MLM", "ELECTRA 15%")
                L.append(f"- {name} at {tag} FLOPs: ELECTRA − ELECTRA 15% = {c['electra_minus_mlm']:+.3g} "
                         f"({noise}) → {verdict}.")
    else:
        L += ["", "## Not included", "",
              "- The paper's *ELECTRA 15%* ablation (discriminator loss only on the masked positions; paper Table "
              "5: 82.4 vs 85.0 GLUE): " + report["ablation_electra_15"] + ".", ""]
    L.append("")
    return "\n".join(L)


def write_report(out: Path, report: dict) -> None:
    report["collapse"] = collapse_flags(report)
    plot_score_vs_flops(report, out / "score_vs_flops.png")
    atomic_write_json(out / "report.json", report)
    atomic_write_text(out / "report.md", render_markdown(report))
