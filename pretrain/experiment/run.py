"""Running the experiment: the stages — pretrain each objective at each budget, the random-init control, the
[CLS] collapse probe, fine-tune every encoder on every task and seed — each skipped when its output is complete
(so re-running resumes), then the report after every (seed, model)."""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from denki.models.io.errors import DenkiError
from denki.models.io.fileio import atomic_write_json

from .plan import QA_SPAN_METRIC, ExperimentConfig, Model, TaskSpec, budget_tag, prepare_task_data
from .report import build_report, write_experiment_report


def _pretrain_stage(cfg: ExperimentConfig, objective: str, budget: float) -> Model:
    from denki.pretrain.train import run_pretrain

    mid = f"{objective}-{budget_tag(budget)}"
    run = Path(cfg.out) / "pretrain" / mid
    run_pretrain(cfg.pretrain_config(objective, budget, str(run)))
    return Model(mid, objective, budget, run, run / "bundle")


def _random_stage(cfg: ExperimentConfig) -> Model:
    from denki.models.bundle.format import verify_bundle
    from denki.models.bundle.pytorch import random_init_bundle

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

    from denki.models.bundle.pytorch import load_model
    from denki.models.text.tokenizer import JapaneseTokenizer

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
    from denki.models.io.corpus import iter_corpus

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
    if not task.is_qa:
        from denki.models.classify.finetune import FinetuneConfig, finetune

        ep = {} if cfg.epochs is None else {"epochs": int(max(1, round(cfg.epochs)))}
        fc = FinetuneConfig(max_length=cfg.max_length, seeds=[seed], device=cfg.device, progress=cfg.progress,
                            lr=cfg.lr, class_weights=cfg.class_weights, **ep)
        rep = finetune(train_path=task.train, dev_path=task.dev, out_dir=str(d), model=str(model.bundle),
                       text_field=task.text_field, label_field=task.label_field, cfg=fc, baseline=False)
        s = rep["seeds"][0]
        res = {"macro_f1": s["macro_f1"], "accuracy": s["accuracy"], "best_epoch": s["best_epoch"],
               "epochs_run": s["epochs_run"], "lr": rep["config"].get("lr")}
    else:
        from denki.models.qa.finetune import QAFinetuneConfig, finetune as finetune_qa

        kw = {"lr": cfg.lr} if cfg.lr is not None else {}
        if cfg.epochs is not None:
            kw["epochs"] = cfg.epochs
        qc = QAFinetuneConfig(max_length=cfg.qa_max_length,
                              doc_stride=cfg.qa_doc_stride or cfg.qa_max_length // 2, seeds=[seed],
                              device=cfg.device, progress=cfg.progress,
                              # the same QA recipe for every encoder of an experiment (finetune qa's default would
                              # train the answerable head for ELECTRA bundles only), as its earlier cells were run
                              answerable_head=False, **kw)
        rep = finetune_qa(model=str(model.bundle), train_path=task.train, dev_path=task.dev, out_dir=str(d), cfg=qc)
        m = rep["seeds"][0]["dev_metrics"]
        res = {k: m.get(k) for k in ("best_f1", "f1", "exact", "HasAns_f1", "NoAns_exact", "best_exact",
                                     QA_SPAN_METRIC)}
    res.update(model=model.id, task=task.name, seed=seed, seconds=time.perf_counter() - t0, data=data_src)
    if not cfg.keep_finetuned:
        shutil.rmtree(d / "bundle", ignore_errors=True)
    atomic_write_json(res_path, res)
    return res


def _worker_init(threads: int | None) -> None:
    """A ``--jobs`` worker process: the same torch thread budget as the parent's."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def _pool(cfg: ExperimentConfig):
    """Worker processes for ``--jobs N`` (spawned: CUDA cannot be forked)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=cfg.jobs, mp_context=mp.get_context("spawn"),
                               initializer=_worker_init, initargs=(cfg.threads,))


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
        if old is not None:  # experiments made before --class-weights existed fine-tuned without weights
            old = {"class_weights": "none", **old}
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

    from denki.models.bundle.presets import SIZES

    if cfg.size not in SIZES:
        raise DenkiError(f"unknown size {cfg.size!r}; choose one of {sorted(SIZES)}")
    if cfg.seeds < 1:
        raise DenkiError("--seeds must be at least 1")
    if cfg.jobs < 1:
        raise DenkiError("--jobs must be at least 1")
    if not cfg.tasks:
        raise DenkiError("give at least one --tasks name")
    if len({t.name for t in cfg.tasks}) != len(cfg.tasks):
        raise DenkiError("task names must be unique")
    from denki.models.io.corpus import parse_source

    for p in cfg.corpus:  # a missing file, or fields on a text file, fails here, before any stage runs
        parse_source(p)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    _check_settings(out, cfg)
    t0 = time.perf_counter()

    objectives = tuple(cfg.objectives) + (("electra15",) if cfg.electra15 else ())
    n_models = len(objectives) * len(cfg.budgets) + (1 if cfg.random_init else 0)
    n_stages = 1 + n_models + n_models * len(cfg.tasks) * cfg.seeds
    stage = [0]

    def say(msg: str) -> None:
        stage[0] += 1
        print(f"[experiment {stage[0]}/{n_stages} {time.perf_counter() - t0:6.0f}s] {msg}", flush=True)

    say(f"data: {', '.join(t.name for t in cfg.tasks)}")
    tasks = [prepare_task_data(t, out, cfg.max_train, cfg.max_dev) for t in cfg.tasks]

    models: list[Model] = []
    plan = [(obj, b) for b in cfg.budgets for obj in objectives]
    if cfg.jobs > 1 and len(plan) > 1:
        # --jobs: the pretraining runs side by side (each one resumes on its own, as in the serial order)
        with _pool(cfg) as ex:
            futs = []
            for obj, b in plan:
                say(f"pretrain {obj} {cfg.size} at {b:.3g} FLOPs (in parallel, {cfg.jobs} at a time)")
                futs.append(ex.submit(_pretrain_stage, cfg, obj, b))
            models += [f.result() for f in futs]
    else:
        for obj, b in plan:
            say(f"pretrain {obj} {cfg.size} at {b:.3g} FLOPs")
            models.append(_pretrain_stage(cfg, obj, b))
    if cfg.random_init:
        say("random-init control")
        models.append(_random_stage(cfg))
    texts = _probe_texts(cfg.corpus)
    probes = {m.id: cls_probe(m.bundle, texts, out / "probe" / f"{m.id}.json") for m in models}

    report = (_finetune_parallel if cfg.jobs > 1 else _finetune_serial)(cfg, models, tasks, probes, out, say)
    print(f"experiment: report in {out / 'report.md'} ({time.perf_counter() - t0:.0f}s this run)", flush=True)
    return report


def _finetune_serial(cfg: ExperimentConfig, models: list[Model], tasks: list[TaskSpec], probes: dict, out: Path,
                     say) -> dict:
    """Every fine-tuning cell in this process. Seeds outermost, and a report after every (seed, model): an
    interrupted run still leaves a complete one-seed comparison behind, and later seeds only add the noise
    estimate."""
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
                write_experiment_report(out, report)
    return report


def _finetune_parallel(cfg: ExperimentConfig, models: list[Model], tasks: list[TaskSpec], probes: dict, out: Path,
                       say) -> dict:
    """``--jobs N``: every fine-tuning cell (seed, model, task) in N worker processes, the report rewritten as each
    one finishes. Cells are independent runs with their own seeds, so the results equal the serial order's; only
    the log lines interleave. Worth it where one run leaves the machine idle (a GPU driven by a small model's
    per-step overhead; several CPU cores at one thread per run)."""
    from concurrent.futures import as_completed

    cells = [(s, m, t) for s in range(cfg.seeds) for m in models for t in tasks]
    done: dict[int, dict] = {}

    def rewrite_report() -> dict:
        rep = build_report(cfg, models, tasks, [done[k] for k in sorted(done)], probes)
        write_experiment_report(out, rep)
        return rep

    with _pool(cfg) as ex:
        futs = {}
        for i, (s, m, t) in enumerate(cells):
            if _is_cached(out / "finetune" / m.id / t.name / f"seed-{s}" / "result.json", t):
                say(f"finetune {m.id} on {t.name} seed {s} (cached)")
                done[i] = _finetune_stage(cfg, m, t, s)
            else:
                say(f"finetune {m.id} on {t.name} seed {s} (started, {cfg.jobs} at a time)")
                futs[ex.submit(_finetune_stage, cfg, m, t, s)] = i
        report = None
        for f in as_completed(futs):
            i = futs[f]
            done[i] = r = f.result()
            s, m, t = cells[i]
            print(f"    → {m.id} on {t.name} seed {s}: {t.metric} {r[t.metric]:.4f} ({r['seconds']:.0f}s)", flush=True)
            report = rewrite_report()
    return report if report is not None else rewrite_report()  # everything cached: the report once
