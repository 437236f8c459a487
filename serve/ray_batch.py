"""``denki classify --engine ray``: batch scoring of many CSV/JSONL files through Ray Data.

Pipeline (one Ray Data dataset over all input files, order preserved)::

    from_items(files) ─flat_map(read rows, 0.25 CPU)─▶ rows ─map_batches(_Scorer actors, ActorPoolStrategy)─▶
        driver: one output + one errors file per input file in OUTPUT_DIR (written to .partial, then renamed)

* Reading uses the single-machine parser (:func:`serve.batch.iter_rows`) and the same checks
  (:func:`serve.batch.check_text`): a bad line becomes an error row with its line number and reason, never a
  failed job — so the row accounting is exactly that of ``denki classify`` (output rows + error rows = input
  records, per file), and the errors file has the same ``line``/``reason``/``raw`` fields plus ``id``/``file``.
* Every row carries an ``id`` (the record's own ``--id-field`` value when it has one, else ``FILE:LINE``), so
  scored rows can be re-joined with the source.
* The scorer is a class UDF: each actor of the pool loads the ONNX :class:`~serve.runtime.Predictor` once.
  Actors ask for ``--cpus-per-actor`` (fractions allowed) and the read tasks for a quarter CPU: with whole-CPU
  requests on a small machine the read task can hold the only free CPU while the actor waits for it, and the
  pipeline hangs without a word.

Torch-free, like the rest of ``serve/``.
"""
from __future__ import annotations

import glob
import json
import time
from pathlib import Path

from denki.models.io.errors import DenkiError, InputError
from denki.serve.batch_files import (ADDED, Writer, check_text, csv_header, file_format, finalize, iter_rows,
                                     output_prefix, scored_record)

READ_CPUS = 0.25


def expand_inputs(pattern: str) -> list[Path]:
    """A glob (``data/*.jsonl.gz``, ``logs/**/*.csv``), a directory (its .jsonl/.csv files) or one file."""
    p = Path(pattern)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and _is_data_name(f.name))
    elif p.is_file():
        files = [p]
    else:
        files = sorted(Path(f) for f in glob.glob(pattern, recursive=True) if Path(f).is_file())
    if not files:
        raise DenkiError(f"--input {pattern!r} matches no file")
    for f in files:
        file_format(f)  # unknown type → InputError naming the file
    names = {}
    for f in files:
        if f.name in names:
            raise DenkiError(f"two inputs share the name {f.name} ({names[f.name]} and {f}); outputs are named after "
                             "the inputs, so give files with distinct names")
        names[f.name] = f
    return files


def _is_data_name(name: str) -> bool:
    try:
        file_format(Path(name))  # the local engine's notion of a readable file type
    except InputError:
        return False
    return True


def read_rows(item: dict, *, text_field: str, id_field: str):
    """Ray ``flat_map`` function: every record of one file as a flat row (good or bad; never raises per line).

    Columns (all strings but ``file_idx``/``line``, so blocks have one Arrow schema whatever the records hold):
    ``file_idx``, ``line``, ``id``, ``record`` (the record as JSON), ``text``, ``error`` ("" when fine), ``raw``."""
    path = Path(item["path"])
    for row in iter_rows(path):
        text = check_text(row, text_field)
        own = row.record.get(id_field) if row.record is not None else None
        yield {"file_idx": int(item["file_idx"]), "line": int(row.line),
               "id": str(own) if own is not None and own != "" else f"{path.name}:{row.line}",
               "record": json.dumps(row.record, ensure_ascii=False) if row.record is not None else "",
               "text": text or "", "error": row.error or "", "raw": row.raw or ""}


class _Scorer:
    """Ray Data class UDF (one per actor): holds the ONNX predictor, scores the rows without an error."""

    def __init__(self, model_dir: str, backend: str, device: str, threads: int, batch_size: int):
        from denki.serve.runtime import Predictor

        self.predictor = Predictor(model_dir, backend=backend, device=device, threads=threads)
        self.batch_size = batch_size

    def __call__(self, df):
        ok = (df["error"] == "").to_numpy()
        labels, scores, routes = [""] * len(df), [float("nan")] * len(df), [""] * len(df)
        texts = df["text"][ok].tolist()
        if texts:
            res = self.predictor.classify(texts, batch_size=self.batch_size)
            for i, r in zip(ok.nonzero()[0], res):
                labels[i], scores[i], routes[i] = r["label"], float(r["score"]), r["route"]
        df = df.drop(columns=["text"])  # the record holds it; no need to ship it twice
        df["label"], df["score"], df["route"] = labels, scores, routes
        return df


def _default_actors(ray, cpus_per_actor: float, gpus_per_actor: float) -> int:
    res = ray.cluster_resources()
    if gpus_per_actor > 0:
        return max(1, int(res.get("GPU", 0) // gpus_per_actor))
    if cpus_per_actor <= 0:
        return 1
    # leave room for the read tasks: the pitfall the module docstring describes
    return max(1, int((res.get("CPU", 1) - READ_CPUS) // cpus_per_actor))


class _FileOutput:
    """The output and errors files of one input, written as partial files and renamed when complete."""

    def __init__(self, inp: Path, out_dir: Path, id_field: str):
        self.inp, self.fmt = inp, file_format(inp)
        self.out = out_dir / inp.name
        self.err = out_dir / (inp.name.removesuffix(".gz") + ".errors.jsonl")  # as the local engine names it
        self.part_out = out_dir / ("." + self.out.name.removesuffix(".gz") + ".partial")
        self.part_err = out_dir / ("." + self.err.name + ".partial")
        header = None
        self.prefix = ""
        self.add_id = True
        if self.fmt == "csv":
            in_header = csv_header(inp)
            self.prefix = output_prefix(in_header)
            self.add_id = id_field not in in_header
            header = in_header + ([id_field] if self.add_id else []) + [self.prefix + k for k in ADDED]
        self.id_field = id_field
        self.w_out = Writer(self.part_out, self.fmt, header, None)
        self.w_err = Writer(self.part_err, "jsonl", None, None)
        self.rows_out = self.rows_err = 0

    def write(self, row) -> None:
        if row.error:
            self.w_err.write({"id": row.id, "file": self.inp.name, "line": int(row.line), "reason": row.error,
                              "raw": row.raw})
            self.rows_err += 1
            return
        rec = json.loads(row.record)
        if self.id_field not in rec:
            rec[self.id_field] = row.id
        prefix = self.prefix or (output_prefix(None, rec) if self.fmt == "jsonl" else "")
        self.w_out.write(scored_record(rec, {"label": row.label, "score": row.score, "route": row.route}, prefix))
        self.rows_out += 1

    def finish(self) -> dict:
        self.w_out.sync()
        self.w_err.sync()
        self.w_out.close()
        self.w_err.close()
        finalize(self.part_out, self.out)
        finalize(self.part_err, self.err)
        return {"input": str(self.inp), "output": str(self.out), "errors": str(self.err),
                "rows_out": self.rows_out, "rows_err": self.rows_err, "rows_in": self.rows_out + self.rows_err}

    def abort(self) -> None:
        for f in (self.w_out, self.w_err):
            f.close()
        for p in (self.part_out, self.part_err):
            p.unlink(missing_ok=True)


def classify_files_ray(model_dir, input_pattern: str, output_dir, *, text_field: str | None = None,
                       id_field: str = "id", batch_size: int = 64, actors: int | None = None,
                       cpus_per_actor: float = 1.0, gpus_per_actor: float = 0.0, backend: str = "auto",
                       device: str = "auto", threads: int | None = None, address: str | None = None,
                       temp_dir: str | None = None, progress: bool = True) -> dict:
    """Score every file matched by ``input_pattern`` into ``output_dir`` (one output + errors file per input,
    named after it) on Ray Data; returns totals, per-file counts and throughput (also in ``summary.json``)."""
    from tqdm.auto import tqdm

    from denki.models.bundle.format import read_task
    from denki.models.io.fileio import atomic_write_json
    from denki.serve.ray_setup import checked_bundle, connect_ray

    files = expand_inputs(input_pattern)
    out_dir = Path(output_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise DenkiError(f"--output {out_dir}: with --engine ray this is a directory (one output per input file)")
    for f in files:
        if f.resolve().parent == out_dir.resolve():
            raise DenkiError(f"--output {out_dir} holds the input {f.name}: its output would replace it")
    if batch_size < 1 or cpus_per_actor < 0 or gpus_per_actor < 0 or (actors is not None and actors < 1):
        raise DenkiError("--batch-size and --actors must be ≥ 1, --cpus-per-actor/--gpus-per-actor ≥ 0")
    bundle = checked_bundle(model_dir, "classifier")  # the actors load it; checked here before Ray starts
    field = text_field or read_task(bundle).get("text_field", "text")
    if gpus_per_actor > 0 and device == "auto":
        device = "cuda"
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = [_FileOutput(f, out_dir, id_field) for f in files]  # CSV headers checked here, up front

    ray, session = connect_ray(address, temp_dir=temp_dir)
    t0 = time.perf_counter()
    try:
        from ray.data import ActorPoolStrategy, DataContext

        ctx = DataContext.get_current()
        ctx.execution_options.preserve_order = True  # outputs keep the input order
        ctx.enable_progress_bars = False
        n_actors = actors or _default_actors(ray, cpus_per_actor, gpus_per_actor)
        ort_threads = threads or max(1, int(cpus_per_actor))
        ds = ray.data.from_items([{"file_idx": i, "path": str(f.resolve())} for i, f in enumerate(files)])
        ds = ds.flat_map(read_rows, fn_kwargs={"text_field": field, "id_field": id_field}, num_cpus=READ_CPUS)
        ds = ds.map_batches(_Scorer, fn_constructor_kwargs={"model_dir": bundle, "backend": backend,
                                                            "device": device, "threads": ort_threads,
                                                            "batch_size": batch_size},
                            compute=ActorPoolStrategy(size=n_actors), batch_size=batch_size, batch_format="pandas",
                            num_cpus=cpus_per_actor, num_gpus=gpus_per_actor or None)
        bar = tqdm(desc="classify (ray)", unit=" rows", disable=not progress)
        try:
            for df in ds.iter_batches(batch_format="pandas", batch_size=None):
                for row in df.itertuples(index=False):
                    outputs[row.file_idx].write(row)
                bar.update(len(df))
        except BaseException:
            for o in outputs:
                o.abort()
            raise
        finally:
            bar.close()
        per_file = [o.finish() for o in outputs]
    finally:
        session.close()
    seconds = time.perf_counter() - t0
    rows_out, rows_err = sum(p["rows_out"] for p in per_file), sum(p["rows_err"] for p in per_file)
    summary = {"engine": "ray", "model": bundle, "text_field": field, "id_field": id_field, "files": per_file,
               "rows_out": rows_out, "rows_err": rows_err, "rows_in": rows_out + rows_err, "seconds": seconds,
               "rows_per_s": (rows_out + rows_err) / seconds if seconds > 0 else 0.0, "actors": n_actors,
               "cpus_per_actor": cpus_per_actor, "gpus_per_actor": gpus_per_actor, "output_dir": str(out_dir)}
    atomic_write_json(out_dir / "summary.json", summary)
    return summary

