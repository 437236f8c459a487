"""`denki export`: a classifier or QA bundle → an ONNX bundle, gated on parity with PyTorch.

Steps (all written into ``OUT.partial``, renamed to ``OUT`` only when every gate passed):

1. ``optimum.exporters.onnx.main_export`` (tasks ``text-classification`` / ``question-answering``) → ``model.onnx``
   (fp32; loads in ``optimum.onnxruntime.ORTModelFor…`` as well); a QA bundle trained with ``--answerable-head``
   gets a third output, ``answerable_logits`` ``(batch,)``, and the parity gate compares it too;
2. ``--optimize O2``: ORT transformer fusions (optimum maps electra to the bert fusions; BERT bundles from
   ``denki import`` use them directly) → ``model.o2.onnx`` (whatever the level, as bundles always had it);
   ``--optimize O2 O3`` also writes O3 (O2 + approximate GELU) beside it → ``model.o3.onnx``, so that
   ``denki bench pick`` can time both on a CPU;
3. ``--quantize int8``: dynamic int8 quantisation for CPU (of the O2 graph when present; that needs
   ``DefaultTensorType=FLOAT``, which optimum's quantizer cannot pass, so onnxruntime's ``quantize_dynamic`` is
   called directly) → ``model.int8.onnx``; more int8 variants may be asked for beside it (``--quantize int8
   int8-channel int8-static``): ``int8-channel`` is dynamic with per-channel weight scales
   (``model.int8-channel.onnx``), ``int8-static`` static QDQ int8 — weights per channel, activation scales
   calibrated on the parity sample — of the fp32 graph (``model.int8-static.onnx``). Which is fastest depends on
   the CPU (VNNI or not, AVX-512 or not): ``denki bench pick`` measures them and the runtime uses the record;
4. ``--fp16``: optimum's O4 (fusions + fp16 weights, fp32 inputs/outputs) for CUDA → ``model.fp16.onnx``;
5. parity gate on the bundle's own dev sample (``parity_sample.json``, or ``--parity-data``): fp32 and O2 must
   match PyTorch within ``atol`` (max |logit difference|) or the export fails; int8/fp16 report prediction
   agreement and metric drop and must reach ``min_agreement`` / stay within ``max_drop``. A failure stops the
   export (``denki export``), or — with ``best_effort=True`` (the quickstart) — leaves a failing O2/int8/fp16
   variant out of the bundle and records it under ``metrics.left_out`` (fp32 failing is always an error). A
   fused router's TF-IDF half (numpy, copied as is) must give scikit-learn's probabilities from fine-tuning
   within :data:`models.classify.parity.LEXICAL_ATOL`, or the export fails (the task's ``extra_gates``);
6. tokenizer files, ``task.json`` (+ a fused router's lexical files), golden tokenization vectors (``golden_tokenization.jsonl``) and ``manifest.json``
   (sha256 of every file, parity figures under ``metrics.parity``).

What differs between tasks — the fp32 graph's outputs, the parity data and check, extra gates, extra files,
golden tokenisation — the bundle's task declares (:class:`models.task.base.Task`, found in :mod:`models.registry`
by the bundle's kind); this module never names a task.

Torch and optimum are imported inside the functions (importing this module is cheap). The ONNX files are
opened by :func:`models.bundle.onnx.open_session`, as the serving runtime opens them.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from denki.models.bundle.format import command_line, read_manifest, read_task, resolve_bundle, verify_bundle, write_manifest
from denki.models.bundle.onnx import INT8_VARIANTS, MODEL_FILES
from denki.models.io.errors import DenkiError
from denki.models.io.fileio import replace_dir
from denki.models.registry.tasks import task_for, torch_kinds
from denki.models.task.parity import batches

TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "denki_tokenizer.json")
#: every task's bundle carries these beside the model when its parent has them
TASK_FILES = ("task.json", "parity_sample.json")


def _quiet():
    """Keep optimum's, transformers' and onnxruntime's progress chatter out of the CLI (the parity gate reports
    what matters: how each graph compares with PyTorch)."""
    for name in ("optimum", "transformers", "onnxruntime", "torch.onnx"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore")
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except Exception:  # pragma: no cover
        pass


# ------------------------------------------------------------------ build steps
def _export_fp32(src: Path, work: Path, task, task_json: dict | None = None) -> Path:
    """The task's fp32 graph in ``work`` (:meth:`models.task.base.Task.export_fp32`)."""
    return task.export_fp32(src, work, task_json or {})


def _optimize(work: Path, level: str, for_gpu: bool, dest: Path) -> None:
    from optimum.onnxruntime import ORTOptimizer
    from optimum.onnxruntime.configuration import AutoOptimizationConfig

    out = work / f"_opt_{level}"
    ORTOptimizer.from_pretrained(str(work)).optimize(
        AutoOptimizationConfig.with_optimization_level(level, for_gpu=for_gpu), save_dir=str(out))
    os.replace(out / "model_optimized.onnx", dest)
    shutil.rmtree(out)


def _quantize_int8(src_model: Path, dest: Path, per_channel: bool = False) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # onnxruntime's advice to run its pre-processing first ("Please consider to run pre-processing before
    # quantization") goes to the root logger: kept out of the CLI. The pre-processing would rewrite the graph that
    # the parity gate and `denki bench pick` measure; the gate judges the quantised graph as it is (docs/serving.md)
    was = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        quantize_dynamic(str(src_model), str(dest), weight_type=QuantType.QInt8, per_channel=per_channel,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        logging.disable(was)


def _quantize_int8_static(src_model: Path, dest: Path, feeds: list[dict]) -> None:
    """Static QDQ int8 of ``src_model``: activation ranges from running ``feeds`` (MinMax calibration).

    uint8 activations × int8 per-channel weights (U8S8), as in the dynamic variants: on CPUs without VNNI,
    :func:`models.bundle.onnx.exact_int8_gemm`'s session option makes onnxruntime rewrite these weights to uint8
    too (its ``Avx2WeightS8ToU8Transformer`` also covers the ``QLinearMatMul`` a QDQ graph is fused into)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class _Feeds(CalibrationDataReader):
        def __init__(self):
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    # MatMul only: the GEMMs are where int8 pays; QDQ pairs around LayerNorm/Add/Softmax would add conversions
    # (and error) without an int8 kernel to run them. The quantiser's advice (pre-processing, per-channel axes of
    # 1-D weights) goes to the root logger at WARNING: kept out of the CLI, the parity gate judges the result.
    was = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        quantize_static(str(src_model), str(dest), _Feeds(), quant_format=QuantFormat.QDQ, per_channel=True,
                        op_types_to_quantize=["MatMul"], activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8,
                        # symmetric weights: zero points are 0, so no zero-point correction term in the GEMM
                        extra_options={"WeightSymmetric": True})
    finally:
        logging.disable(was)


def _calibration_feeds(src_model: Path, tok, task, data: dict, task_json: dict, limit: int = 64) -> list[dict]:
    """Padded input batches for static calibration: the task's first ``limit`` parity inputs, tokenised as the
    gate and the runtime do."""
    import onnx

    names = [i.name for i in onnx.load(str(src_model), load_external_data=False).graph.input]
    encs = task.sample_encodings(tok, data, task_json, limit)
    return [{k: b[k] for k in names} for _, b in batches(tok, encs, 16)]


#: float rounding slack of the share comparisons in :func:`_gate`
_SLACK = 1e-9


def _gate(parity: dict, atol: float, min_agreement: float, max_drop: float) -> dict[str, str]:
    """Mark each backend passed/failed; return ``{backend: why}`` for every backend that failed its gate."""
    failed = {}
    for b in MODEL_FILES:
        r = parity.get(b)
        if not r or not r.get("ran"):
            continue
        if b in ("fp32", "o2", "o3"):
            # O2/O3 fusions reorder float sums (O3 also approximates GELU): allow them 10× the fp32 tolerance
            tol = atol if b == "fp32" else atol * 10
            r["passed"] = r["max_abs_diff"] <= tol
            r["gate"] = f"max_abs_diff <= {tol:g}"
            if not r["passed"]:
                failed[b] = f"max |logit diff| {r['max_abs_diff']:.2e} > {tol:g}"
        else:
            drop = r.get("metric_drop")
            # the limits are decimal, the shares binary: 1 - 0.97 is 0.030000000000000027, and a drop of exactly 3
            # points must meet "≤ 3 points" (a rounding slack of 1e-9, far below one question in any parity set)
            r["passed"] = (r["agreement"] >= min_agreement - _SLACK
                           and (drop is None or drop <= max_drop + _SLACK))
            r["gate"] = f"agreement >= {min_agreement:g} and metric drop <= {max_drop:g}"
            if not r["passed"]:
                failed[b] = (f"agreement {r['agreement']:.3f}" + (f", metric drop {drop:+.3f}" if drop is not None
                                                                  else "") +
                             f" (floor {min_agreement:g}, max drop {max_drop:g})")
    return failed


# ------------------------------------------------------------------ the plan and its steps
@dataclass
class _Variants:
    """What the export builds besides fp32: ``opt`` ``{variant: level}`` (``o2``, and ``o3`` beside it),
    ``levels`` as asked, ``quants`` (int8 variants, one order), ``fp16``."""

    opt: dict[str, str]
    levels: list[str]
    quants: list[str]
    fp16: bool

    def step_names(self) -> list[str]:
        return (["export fp32"] + [f"optimize {lv}" for lv in self.opt.values()] +
                [f"quantize {q}" for q in self.quants] + (["fp16"] if self.fp16 else []) +
                ["parity gate", "write bundle"])


def _plan_variants(optimize, quantize, fp16: bool) -> _Variants:
    """Check ``--optimize``/``--quantize`` and turn them into the variants to build."""
    levels = list(dict.fromkeys([optimize] if isinstance(optimize, str) else list(optimize or [])))
    bad = [lv for lv in levels if lv not in ("O1", "O2", "O3")]
    if bad:
        raise DenkiError(f"--optimize {' '.join(map(str, bad))}: choose O1, O2 or O3")
    if len(levels) > 2 or (len(levels) == 2 and "O3" not in levels):
        raise DenkiError(f"--optimize {' '.join(levels)}: one level (→ model.o2.onnx), or O1/O2 plus O3 "
                         "(→ model.o2.onnx and model.o3.onnx)")
    # {variant: level}: the single (or lower) level keeps the o2 name and file; O3 beside another gets its own
    opt = {"o2": min(levels)} if levels else {}
    if len(levels) == 2:
        opt["o3"] = "O3"
    quants = [quantize] if isinstance(quantize, str) else list(quantize or [])
    bad = [q for q in quants if q not in INT8_VARIANTS]
    if bad:
        raise DenkiError(f"--quantize {' '.join(bad)}: choose among {', '.join(INT8_VARIANTS)}")
    return _Variants(opt, levels, [q for q in INT8_VARIANTS if q in quants], fp16)


@dataclass
class _Steps:
    """The progress bar and each step's seconds (``export_seconds`` in the manifest)."""

    bar: object
    timings: dict[str, float] = field(default_factory=dict)

    def start(self, name: str) -> None:
        self.bar.set_postfix_str(name)
        self.timings[name] = time.perf_counter()

    def done(self, name: str) -> None:
        self.timings[name] = time.perf_counter() - self.timings[name]
        self.bar.update(1)


@dataclass
class _Export:
    """One export in progress: the source bundle, its task, the staging folder and what has been built."""

    src: Path
    task: object  # models.task.base.Task
    task_json: dict
    variants: _Variants
    tmp: Path  # OUT.partial: renamed to OUT when every gate passed
    steps: _Steps
    files: dict[str, Path] = field(default_factory=dict)  # {variant: ONNX file in tmp}
    tok: object = None
    data: dict | None = None

    @property
    def work(self) -> Path:
        return self.tmp / "_work"


def _build_fp32(x: _Export) -> None:
    x.steps.start("export fp32")
    fp32 = _export_fp32(x.src, x.work, x.task, x.task_json)
    os.replace(fp32, x.tmp / "model.onnx")
    shutil.copyfile(x.work / "config.json", x.tmp / "config.json")
    # ORTOptimizer reads model.onnx + config.json from the work dir
    shutil.copyfile(x.tmp / "model.onnx", x.work / "model.onnx")
    x.files["fp32"] = x.tmp / "model.onnx"
    x.steps.done("export fp32")


def _build_optimized(x: _Export) -> None:
    for b, lv in x.variants.opt.items():
        x.steps.start("optimize " + lv)
        _optimize(x.work, lv, False, x.tmp / MODEL_FILES[b])
        x.files[b] = x.tmp / MODEL_FILES[b]
        x.steps.done("optimize " + lv)


def _build_quantized(x: _Export) -> None:
    for q in x.variants.quants:
        x.steps.start("quantize " + q)
        dest = x.tmp / MODEL_FILES[q]
        if q == "int8-static":
            # the fp32 graph: the QDQ quantiser knows the standard ops; onnxruntime fuses the quantised graph
            # itself when the session loads
            _quantize_int8_static(x.files["fp32"], dest,
                                  _calibration_feeds(x.files["fp32"], x.tok, x.task, x.data, x.task_json))
        elif q == "int8-channel":
            _quantize_int8(x.files.get("o2", x.files["fp32"]), dest, per_channel=True)
        else:
            _quantize_int8(x.files.get("o2", x.files["fp32"]), dest)
        x.files[q] = dest
        x.steps.done("quantize " + q)


def _build_fp16(x: _Export) -> None:
    if x.variants.fp16:
        x.steps.start("fp16")
        _optimize(x.work, "O4", True, x.tmp / "model.fp16.onnx")
        x.files["fp16"] = x.tmp / "model.fp16.onnx"
        x.steps.done("fp16")


def _parity_gate(x: _Export, atol: float, min_agreement: float, max_drop: float) -> tuple[dict, dict[str, str]]:
    """Every variant against PyTorch (the task's check), judged; the task's own gates (which raise)."""
    x.steps.start("parity gate")
    model = x.task.torch_model(x.src, x.task_json)
    parity = x.task.parity(model, x.tok, x.files, x.data, x.task_json)
    parity["atol"], parity["min_agreement"], parity["max_drop"] = atol, min_agreement, max_drop
    failed = _gate(parity, atol, min_agreement, max_drop)
    parity.update(x.task.extra_gates(x.src, x.task_json))
    x.steps.done("parity gate")
    return parity, failed


def _leave_out_failures(x: _Export, parity: dict, failed: dict[str, str], best_effort: bool) -> list[dict]:
    """``best_effort``: drop each failing variant but fp32 (recorded in ``left_out``); else raise on any."""
    left_out = []
    if best_effort and "fp32" not in failed:
        for b, why in failed.items():
            x.files.pop(b).unlink()
            parity[b]["left_out"] = True
            left_out.append({"variant": b, "reason": why})
        return left_out
    if failed:
        raise DenkiError("parity gate failed, nothing written:\n  " +
                         "\n  ".join(f"{b}: {why}" for b, why in failed.items()) +
                         "\n(fp32/O2 must match PyTorch; for int8/fp16 lower --min-agreement / raise --max-drop "
                         "if the trade-off is acceptable, or export without them)" +
                         x.task.gate_hint(x.task_json, failed))
    return left_out


def _write_bundle(x: _Export, parity: dict, left_out: list[dict], parity_data: str | None) -> dict:
    """Tokenizer and task files, golden tokenisation, and the manifest (sha256 of every file) last."""
    x.steps.start("write bundle")
    for name in (*TOKENIZER_FILES, *TASK_FILES, *x.task.bundle_files(x.task_json)):
        if (x.src / name).is_file():
            shutil.copyfile(x.src / name, x.tmp / name)
    golden = x.task.golden(x.tok, x.data, x.task_json)
    (x.tmp / "golden_tokenization.jsonl").write_text(
        "".join(json.dumps(g, ensure_ascii=False) + "\n" for g in golden), encoding="utf-8")
    v, parent = x.variants, read_manifest(x.src)
    manifest = write_manifest(x.tmp, x.task.onnx_kind, source={
        "parent": {"path": str(x.src), "kind": x.task.name, "created": parent.get("created"),
                   "model_sha256": parent.get("files", {}).get("model.safetensors")},
        "command": command_line(), "optimize": (v.levels[0] if len(v.levels) == 1 else v.levels) or None,
        # one variant: its name, as bundles before several int8 variants recorded it
        "quantize": (v.quants[0] if len(v.quants) == 1 else v.quants) or None, "fp16": v.fp16,
        **({"calibration": "int8-static: MinMax on the first 64 texts (QA: 16 questions) of the parity "
                           "data, which the gate also checks"} if "int8-static" in v.quants else {}),
        "parity_data": parity_data or "parity_sample.json (from the parent bundle)"},
        # export_seconds: the finished steps ("write bundle" is still running: its entry is a start time)
        metrics={"parity": parity, "file_bytes": {b: f.stat().st_size for b, f in x.files.items()},
                 "variants": list(x.files), "left_out": left_out,
                 "export_seconds": {k: t for k, t in x.steps.timings.items() if k != "write bundle"},
                 "parent_metrics": parent.get("metrics", {})})
    x.steps.done("write bundle")
    return manifest


# ------------------------------------------------------------------ entry point
def export_bundle(model_dir: str | os.PathLike, out_dir: str | os.PathLike, *, optimize: str | None = None,
                  quantize: str | None = None, fp16: bool = False, parity_data: str | None = None,
                  parity_limit: int = 200, atol: float = 1e-4, min_agreement: float = 0.95,
                  max_drop: float = 0.02, best_effort: bool = False, progress: bool = True) -> dict:
    """Export ``model_dir`` (a fine-tuned bundle of any registered task) to an ONNX bundle at ``out_dir``;
    returns its manifest.

    ``quantize``: ``None``, ``"int8"`` or a list of int8 variants (:data:`INT8_VARIANTS`: ``int8``,
    ``int8-channel``, ``int8-static``); each one is gated on its own.

    Raises :class:`DenkiError` (and writes nothing under ``out_dir``) when a parity gate fails — what
    ``denki export`` does, since its user asked for every variant by name. ``best_effort=True`` (the quickstart)
    leaves a failing O2 / int8 / fp16 variant out instead: its file is not written, its parity figures stay
    under ``metrics.parity`` (``"left_out": true``) and ``metrics.left_out`` lists ``{"variant", "reason"}``;
    the runtime's ``auto`` backend then picks among the variants that remain. fp32 failing parity is always an
    error (the export itself is wrong).
    """
    from tqdm.auto import tqdm

    from denki.models.text.tokenizer import JapaneseTokenizer

    _quiet()
    src = resolve_bundle(model_dir)
    task = task_for(verify_bundle(src, kinds=torch_kinds())["kind"])
    variants = _plan_variants(optimize, quantize, fp16)
    out = Path(out_dir)
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "_work").mkdir(parents=True)
    bar = tqdm(total=len(variants.step_names()), desc="export", unit="step", disable=not progress)
    x = _Export(src, task, read_task(src), variants, tmp, _Steps(bar))
    try:
        _build_fp32(x)
        _build_optimized(x)
        x.tok = JapaneseTokenizer.load(src)
        x.data = task.parity_data(src, parity_data, x.task_json, parity_limit)
        _build_quantized(x)
        _build_fp16(x)
        shutil.rmtree(x.work)
        parity, failed = _parity_gate(x, atol, min_agreement, max_drop)
        left_out = _leave_out_failures(x, parity, failed, best_effort)
        manifest = _write_bundle(x, parity, left_out, parity_data)
        bar.close()
        replace_dir(tmp, out)
        return manifest
    except BaseException:
        bar.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def format_parity(parity: dict) -> str:
    """One line per backend for the CLI."""
    lines = []
    for b in MODEL_FILES:
        r = parity.get(b)
        if not r:
            continue
        if not r.get("ran"):
            lines.append(f"  {b:12s} not checked here: {r.get('note')}")
            continue
        extra = f", metric drop {r['metric_drop']:+.4f}" if r.get("metric_drop") is not None else ""
        verdict = "ok" if r.get("passed") else "FAILED, left out" if r.get("left_out") else "FAILED"
        lines.append(f"  {b:12s} max|Δlogit| {r['max_abs_diff']:.2e}, agreement {r['agreement']:.3f}{extra}"
                     f"  → {verdict}")
    lex = parity.get("lexical")
    if lex:
        lines.append(f"  {'TF-IDF part':12s} max|Δprob| {lex['max_abs_diff_probs']:.2e} vs scikit-learn "
                     f"({lex['n']} texts)  → ok")
    return "\n".join(lines)
