"""Torch-free predictor on onnxruntime: what backend services, the batch CLI and the demo call.

    from denki import Predictor
    p = Predictor("runs/quickstart/classifier-onnx")        # verifies every file's sha256 first
    p.classify(["ログインできません"])  # → [{"label", "score", "scores", "route"}]; route = label or "human"
    q = Predictor("runs/quickstart/qa-onnx")
    q.answer("質問", "文書…")           # → {"answer", "start", "end", "score", "has_answer", "null_score_diff"}

Only numpy, onnxruntime and denki's tokenizer are imported (a test checks ``sys.modules`` for torch). The
decision rules are the bundle's ``task.json`` applied by the same numpy code as the PyTorch evaluation
(:mod:`models.classify.decision`, :mod:`models.qa.postprocess`).

Backends (files of an ONNX bundle): ``fp32`` (``model.onnx``), ``o2`` (ORT graph fusions), ``int8`` (dynamic
quantisation, CPU), ``int8-channel`` (dynamic, per-channel weight scales), ``int8-static`` (static QDQ),
``fp16`` (for CUDA). On CPU, ``auto`` uses the fastest variant recorded for this CPU by ``denki bench pick``
(:mod:`serve.fastpath`) when there is such a record; ``.choice`` says why a backend was chosen. Device: CUDA
when a CUDA session can really be created (onnxruntime-gpu lists the CUDA provider even on machines without a
GPU), else CPU; ``.provider`` says which was used.
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from denki.models.bundle.checkpoints import resolve_or_explain
from denki.models.bundle.format import read_manifest, read_task, resolve_bundle, verify_bundle
from denki.models.bundle.onnx import MODEL_FILES, import_ort, open_session, passed_gate
from denki.models.io.errors import DenkiError
from denki.models.text.tokenizer import JapaneseTokenizer

ONNX_KINDS = ("onnx-classifier", "onnx-qa")
MAX_TEXT_CHARS = 20_000  # an inquiry; longer input is refused with a clear message, not silently cut
MAX_CONTEXT_CHARS = 100_000  # a QA passage (windows cover all of it)
HUMAN = "human"
#: the fixed cost of one model call, in padded-token equivalents, for :func:`length_groups`. Measured with
#: bench/bucketing.py (tiny int8 router, 1 thread, routing_dev texts; experiments/bench-bucketing): model time vs
#: one padded batch 0.51× at 32 texts and 0.75× at 8 with cost 32; cost 8 was 4–7 % faster still (0.48× / 0.70×),
#: cost 0 and 128 slower (0.55–0.56× / 0.86–0.91×). 32 rather than 8 because a call's fixed cost grows with threads.
CALL_COST_TOKENS = 32


def length_groups(lengths: Sequence[int], max_batch: int, call_cost: float = CALL_COST_TOKENS) -> list[tuple[int, int]]:
    """Cut ascending ``lengths`` into contiguous ``[start, end)`` groups of at most ``max_batch`` rows.

    The groups minimise ``Σ (call_cost + rows · longest)`` — a padded batch costs its rows × its longest row plus a
    fixed per-call overhead — exactly, by dynamic programming in ``O(n · max_batch)``. Why: a micro-batch of
    short and long texts padded to the longest wastes much of its work (32 mixed inquiries: 2.0× the model time
    as one padded batch as in ~4 length groups, bench/bucketing.py); a large ``call_cost`` keeps batches whole."""
    n = len(lengths)
    if n == 0:
        return []
    max_batch = max(1, int(max_batch))
    inf = float("inf")
    best = [0.0] + [inf] * n  # best[j]: cheapest cost of the first j rows
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        longest = lengths[j - 1]  # ascending: the last row of a group is its longest
        bj, cj = inf, 0
        for i in range(max(0, j - max_batch), j):
            c = best[i] + call_cost + (j - i) * longest
            if c < bj:
                bj, cj = c, i
        best[j], cut[j] = bj, cj
    groups, j = [], n
    while j > 0:
        groups.append((cut[j], j))
        j = cut[j]
    return groups[::-1]


def sorted_batches(lengths: Sequence[int], max_batch: int) -> list[np.ndarray]:
    """Row indices of each batch: the rows sorted by length (stable: ties keep input order), then cut by
    :func:`length_groups`. The one batching rule of ``Predictor.logits``, ``Predictor.answer_batch`` and the
    batch engine's windows."""
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    return [order[a:b] for a, b in length_groups([int(lengths[i]) for i in order], max_batch)]


def resolve_onnx_bundle(path: str | os.PathLike) -> Path:
    """A bundle directory, a `denki export --out` folder holding one in ``bundle/``, or a shipped checkpoint's name
    (as every command line option that takes a bundle accepts; the checkpoints are PyTorch bundles, so the kind check
    that follows says to export one first)."""
    return resolve_bundle(resolve_or_explain(path, str(path)))


class Predictor:
    """ONNX predictor for a classifier or QA bundle (see module docstring).

    ``backend``: ``auto`` — CUDA: fp16 when exported, else fp32; CPU: the fastest variant ``denki bench pick``
    recorded for this CPU fingerprint and thread count (with its spinning setting), among those that passed the
    export's parity gate; without such a record the default rule: int8 when it passed, else o2, else fp32.
    ``fastest`` (CPU): time the passing variants now (five batch-1 and two batch-8 calls each on the bundle's
    parity sample, spinning left as it is) and use the fastest; it costs a session per variant and a second or
    more at load, and writes nothing. Or one of :data:`MODEL_FILES` by name.
    ``device``: ``auto``, ``cpu`` or ``cuda``. ``threads``: onnxruntime intra-op threads (default: onnxruntime's
    choice). ``spinning``: ``session.intra_op.allow_spinning`` (default: the record's choice, else onnxruntime's).
    ``workload``: which recorded figure ``auto`` ranks by — ``mixed`` (serving: batch 1 and batch N alike) or
    ``batch`` (batch scoring, every call a full batch: batch N alone; :func:`serve.fastpath.recorded_choice`).
    """

    def __init__(self, bundle_dir: str | os.PathLike, *, backend: str = "auto", device: str = "auto",
                 threads: int | None = None, verify: bool = True, spinning: bool | None = None,
                 workload: str = "mixed", warmup: bool = True):
        self.dir = resolve_onnx_bundle(bundle_dir)
        self.manifest = verify_bundle(self.dir, kinds=ONNX_KINDS) if verify else read_manifest(self.dir)
        self.kind = self.manifest["kind"]
        self.task = read_task(self.dir)
        self.tokenizer = JapaneseTokenizer.load(self.dir)
        self.max_length = int(self.task.get("max_length") or 128)
        available = {b: f for b, f in MODEL_FILES.items() if (self.dir / f).is_file()}
        if not available:
            raise DenkiError(f"{self.dir}: no model*.onnx file in the bundle")
        if device not in ("auto", "cpu", "cuda"):
            raise DenkiError(f"unknown device {device!r}; choose auto, cpu or cuda")
        self.device = "cuda" if device == "cuda" or (device == "auto" and _cuda_usable()) else "cpu"
        self.threads = threads
        self.allow_spinning = spinning
        self.workload = workload
        self.choice = "asked for by name"
        self.backend = self._choose_backend(backend, available)
        self.model_file = self.dir / available[self.backend]
        self.session, self.provider = open_session(self.model_file, self.device, threads,
                                                   allow_spinning=self.allow_spinning)
        # a fused router (task.json "fusion") or one with an out-of-scope rule ("scope"): the TF-IDF model, numpy,
        # files checked by verify_bundle above
        self.lexical = None
        if self.kind == "onnx-classifier" and (self.task.get("fusion") or self.task.get("scope")):
            from denki.models.classify.lexical import LexicalModel

            self.lexical = LexicalModel.load(self.dir)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.last_timing: dict[str, float] = {}
        self.warmup_ms = self.warm_up() if warmup else None

    #: what :meth:`warm_up` asks: one short inquiry, one question over a two-sentence passage
    WARMUP_TEXT = "ホテルの予約について問い合わせたいです。"
    WARMUP_QA = ("保証期間はどのくらいですか?", "この製品の保証期間はお買い上げから一年間です。修理はサポート窓口で承ります。")

    def warm_up(self) -> float:
        """One call on a fixed input at load, so that the first user's request does not pay for what a first call
        costs: MeCab's first dictionary lookups (about two thirds of a 137 ms first demo request, against 1–18 ms
        warm) and onnxruntime's first-run allocations. Returns its milliseconds; ``last_timing`` is left empty."""
        t0 = time.perf_counter()
        if self.kind == "onnx-qa":
            self.answer_batch([self.WARMUP_QA])
        else:
            self.logits([self.WARMUP_TEXT])
        self.last_timing = {}
        return (time.perf_counter() - t0) * 1e3

    def _choose_backend(self, backend: str, available: dict) -> str:
        if backend not in ("auto", "fastest"):
            if backend not in MODEL_FILES:
                raise DenkiError(f"unknown backend {backend!r}; choose auto, fastest, {', '.join(MODEL_FILES)}")
            if backend not in available:
                lo = next((x for x in self.manifest.get("metrics", {}).get("left_out", []) or []
                           if x.get("variant") == backend), None)
                if lo:  # a best-effort export (the quickstart) dropped it
                    raise DenkiError(f"{self.dir}: backend {backend!r} was left out by the export: it failed its "
                                     f"parity gate ({lo.get('reason')}); have: {', '.join(available)}")
                raise DenkiError(f"{self.dir}: backend {backend!r} was not exported (have: {', '.join(available)});"
                                 f" re-export with the matching `denki export` option")
            return backend
        if self.device == "cuda":
            self.choice = "default rule on CUDA: fp16 when exported, else fp32"
            return "fp16" if "fp16" in available else "fp32"
        if backend == "fastest":
            return self._measure_now()
        from denki.serve.fastpath import recorded_choice

        picked, why = recorded_choice(self.dir, self.manifest, available, self.threads, workload=self.workload)
        if picked is not None:
            self.choice = why
            if self.allow_spinning is None:  # the caller's explicit setting wins over the record's
                self.allow_spinning = picked.get("allow_spinning")
            return picked["backend"]
        # default rule (bundles without a record, or none for this CPU): dynamic int8 when it passed its gate
        if "int8" in available and passed_gate(self.manifest, "int8"):
            self.choice = f"default rule: int8 passed its parity gate ({why})"
            return "int8"
        b = "o2" if "o2" in available else "fp32"
        self.choice = f"default rule: no passing int8, {b} ({why})"
        return b

    def _measure_now(self) -> str:
        from denki.serve.fastpath import measure

        # spinning is not timed here: it would double the sessions opened at load; `denki bench pick` times it
        entry = measure(self.dir, self.manifest, self.tokenizer, threads=self.threads, iterations=5,
                        batch_iterations=2, batch_size=8, spinning=False)
        best = entry["candidates"][0]
        self.choice = (f"measured at load: fastest of {len(entry['candidates'])} passing candidates "
                       f"({best['score_ms']:.2f} ms)")
        return best["backend"]

    # ------------------------------------------------------------------ core
    def describe(self) -> str:
        spin = "" if self.allow_spinning is None else f", spinning {'on' if self.allow_spinning else 'off'}"
        fu = self.task.get("fusion")
        fused = f" · fused with TF-IDF ({fu['mode']}, encoder weight {float(fu['weight']):.1f})" if fu else ""
        return (f"{self.kind} · backend {self.backend} ({self.model_file.name}{spin}) · {self.provider}{fused} · "
                f"chosen: {self.choice}")

    def run(self, batch: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run the session on a padded batch (``input_ids``/``attention_mask``/``token_type_ids``, int64
        ``(batch, seq)``); returns the outputs in the model's order."""
        feed = {k: batch[k] for k in self.input_names}
        if self.provider == "CUDAExecutionProvider":
            # IOBinding: inputs copied once, outputs left on the device until read
            binding = self.session.io_binding()
            for k, v in feed.items():
                binding.bind_cpu_input(k, np.ascontiguousarray(v))
            for name in self.output_names:
                binding.bind_output(name, "cuda")
            self.session.run_with_iobinding(binding)
            return [np.asarray(o, dtype=np.float32) for o in binding.copy_outputs_to_cpu()]
        return [np.asarray(o, dtype=np.float32) for o in self.session.run(self.output_names, feed)]

    # -------------------------------------------------------------- classify
    def _check_texts(self, texts: Sequence[str], limit: int = MAX_TEXT_CHARS) -> None:
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise DenkiError(f"text {i}: expected a string, got {type(t).__name__}")
            if len(t) > limit:
                raise DenkiError(f"text {i} is {len(t):,} characters; the limit is {limit:,}")

    def logits(self, texts: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """Classifier logits ``(n, n_labels)`` float32, batched by :func:`sorted_batches` (sorted by token count,
        at most ``batch_size`` per batch, none padded far beyond its own texts). For a fused router these are the
        fused logits (:func:`models.classify.fusion.fused_logits`): what the routing rule is fitted on."""
        return self.rule_inputs(texts, batch_size=batch_size)[0]

    def rule_inputs(self, texts: Sequence[str], *, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray | None]:
        """``(logits (n, K) as :meth:`logits`, the TF-IDF model's logits (n, K) or None)``: what the routing rule
        takes (the lexical logits feed its out-of-scope check)."""
        if self.kind != "onnx-classifier":
            raise DenkiError(f"{self.dir} is a {self.kind} bundle, not a classifier")
        self._check_texts(texts)
        t0 = time.perf_counter()
        encs = [self.tokenizer.encode(t, max_length=self.max_length) for t in texts]
        t1 = time.perf_counter()
        out = np.zeros((len(texts), len(self.task["labels"])), dtype=np.float32)
        for idx in sorted_batches([len(e) for e in encs], batch_size):
            out[idx] = self.run(self.tokenizer.pad([encs[i] for i in idx]))[0]
        t2 = time.perf_counter()
        self.last_timing = {"tokenize_ms": (t1 - t0) * 1e3, "inference_ms": (t2 - t1) * 1e3, "n": len(texts)}
        lexical = None
        if self.lexical is not None:
            lexical = self.lexical.logits(texts)
            out = self.fuse(out, lexical)
            self.last_timing["lexical_ms"] = (time.perf_counter() - t2) * 1e3
        return out, lexical

    def fuse(self, encoder_logits: np.ndarray, lexical_logits: np.ndarray | None) -> np.ndarray:
        """The logits the routing rule sees from the ONNX model's ``(n, K)`` (and, for a fused router, the
        lexical model's); float32."""
        from denki.models.classify.fusion import fused_logits

        return np.asarray(fused_logits(self.task, encoder_logits, lexical_logits), dtype=np.float32)

    def classify(self, texts: Sequence[str], *, batch_size: int = 32) -> list[dict]:
        """``[{"label", "score", "scores", "route", "reason"}]`` per text, by the bundle's routing rule
        (``reason``: None when routed, else ``"unsure"`` or ``"out_of_scope"``)."""
        from denki.models.classify.decision import route

        if not texts:
            return []
        logits, lexical = self.rule_inputs(texts, batch_size=batch_size)
        return route(logits, self.task, lexical)

    # -------------------------------------------------------------------- QA
    def answer(self, question: str, context: str, *, n_best: int | None = None) -> dict:
        """Answer one question from a passage: ``{"answer", "start", "end", "score", "has_answer",
        "null_score_diff", "null_threshold"}``; ``answer == context[start:end]`` exactly (original characters)."""
        return self.answer_batch([(question, context)], n_best=n_best)[0]

    def answer_batch(self, pairs: Sequence[tuple[str, str]], *, batch_size: int = 16,
                     n_best: int | None = None) -> list[dict]:
        from denki.models.qa.postprocess import postprocess_question

        if self.kind != "onnx-qa":
            raise DenkiError(f"{self.dir} is a {self.kind} bundle, not a QA model")
        t0 = time.perf_counter()
        windows = []
        for i, (q, c) in enumerate(pairs):
            if not q or not q.strip():
                raise DenkiError(f"question {i} is empty")
            if not c or not c.strip():
                raise DenkiError(f"context {i} is empty")
            self._check_texts([q])
            self._check_texts([c], MAX_CONTEXT_CHARS)
            windows.append(self.tokenizer.encode_windows(q, c, max_length=int(self.task.get("max_length", 384)),
                                                         stride=int(self.task.get("doc_stride", 128)),
                                                         sample_index=i))
        flat = [w for ws in windows for w in ws]
        t1 = time.perf_counter()
        starts: list[np.ndarray] = [None] * len(flat)  # type: ignore[list-item]
        ends: list[np.ndarray] = [None] * len(flat)  # type: ignore[list-item]
        # a model fine-tuned with --answerable-head has a third output, one "answerable" logit per window,
        # used by task.json's null_rule ("head" / "combined"); "cls" (the default) ignores it
        null_rule, has_head = self.task.get("null_rule", "cls"), len(self.output_names) > 2
        if null_rule != "cls" and not has_head:
            raise DenkiError(f"{self.dir}: task.json null_rule {null_rule!r} needs the answerable_logits output, "
                             "which this ONNX graph lacks (re-export the bundle with this denki)")
        answerable = np.zeros(len(flat), dtype=np.float32) if has_head else None
        for idx in sorted_batches([len(e) for e in flat], batch_size):
            outs = self.run(self.tokenizer.pad([flat[i] for i in idx]))
            for row, i in enumerate(idx):
                starts[i], ends[i] = outs[0][row], outs[1][row]
                if answerable is not None:
                    answerable[i] = outs[2][row]
        t2 = time.perf_counter()
        thr = float(self.task.get("null_threshold", 0.0))
        results, k = [], 0
        for i, ws in enumerate(windows):
            n = len(ws)
            L = max(len(w) for w in ws)
            st = np.stack([np.pad(starts[k + j][:len(ws[j])], (0, L - len(ws[j])), constant_values=-1e9)
                           for j in range(n)])
            en = np.stack([np.pad(ends[k + j][:len(ws[j])], (0, L - len(ws[j])), constant_values=-1e9)
                           for j in range(n)])
            r = postprocess_question(st, en, [w.offsets for w in ws], [w.sequence_ids for w in ws], pairs[i][1],
                                     n_best=int(n_best or self.task.get("n_best", 20)),
                                     max_answer_length=int(self.task.get("max_answer_length", 30)),
                                     null_threshold=thr, null_rule=null_rule,
                                     answerable_logits=None if answerable is None else answerable[k:k + n])
            results.append({"answer": r["answer"], "start": r["start"], "end": r["end"],
                            "score": r["score"], "has_answer": r["has_answer"],
                            "null_score_diff": r["null_score_diff"], "null_threshold": thr,
                            "span_answer": r["span_answer"], "span_start": r["span_start"],
                            "span_end": r["span_end"], "windows": n})
            k += n
        t3 = time.perf_counter()
        self.last_timing = {"tokenize_ms": (t1 - t0) * 1e3, "inference_ms": (t2 - t1) * 1e3,
                            "postprocess_ms": (t3 - t2) * 1e3, "n": len(pairs)}
        return results


_CUDA_OK: bool | None = None


def _cuda_usable() -> bool:
    """True if onnxruntime can really run on CUDA here (checked once with a one-node model)."""
    global _CUDA_OK
    if _CUDA_OK is None:
        ort = import_ort()
        _CUDA_OK = False
        # No NVIDIA device node on Linux → no GPU: skip the probe (it would log loud library-load errors).
        import glob
        import sys

        no_gpu = sys.platform.startswith("linux") and not glob.glob("/dev/nvidia[0-9]*")
        if not no_gpu and "CUDAExecutionProvider" in ort.get_available_providers():
            try:
                import onnx
                from onnx import TensorProto, helper

                node = helper.make_node("Identity", ["x"], ["y"])
                graph = helper.make_graph([node], "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
                model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                so = ort.SessionOptions()
                so.log_severity_level = 4
                ort.set_default_logger_severity(4)
                s = ort.InferenceSession(onnx.ModelProto.SerializeToString(model), sess_options=so,
                                         providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
                _CUDA_OK = s.get_providers()[0] == "CUDAExecutionProvider"
            except Exception:
                _CUDA_OK = False
            finally:
                ort.set_default_logger_severity(2)
    return _CUDA_OK
