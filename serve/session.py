"""The session half of the runtime (torch-free): an ONNX bundle verified and opened on the variant and provider
chosen for this machine. :class:`serve.runtime.Predictor` puts the bundle's task head on top of it.

Backends (files of an ONNX bundle): ``fp32`` (``model.onnx``), ``o2`` (ORT graph fusions), ``int8`` (dynamic
quantisation, CPU), ``int8-channel`` (dynamic, per-channel weight scales), ``int8-static`` (static QDQ),
``fp16`` (for CUDA). On CPU, ``auto`` uses the fastest variant recorded for this CPU by ``denki bench pick``
(:mod:`serve.fastpath`) when there is such a record; ``.choice`` says why a backend was chosen. Device: CUDA
when a CUDA session can really be created (onnxruntime-gpu lists the CUDA provider even on machines without a
GPU), else CPU; ``.provider`` says which was used.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from denki.models.registry.checkpoints import resolve_or_explain
from denki.models.bundle.format import read_manifest, read_task, resolve_bundle, verify_bundle
from denki.models.bundle.onnx import MODEL_FILES, import_ort, open_session, passed_gate
from denki.models.io.errors import DenkiError
from denki.models.registry.tasks import onnx_kinds
from denki.models.text.tokenizer import JapaneseTokenizer


def resolve_onnx_bundle(path: str | os.PathLike) -> Path:
    """A bundle directory, a `denki export --out` folder holding one in ``bundle/``, or a shipped checkpoint's name
    (as every command line option that takes a bundle accepts; the checkpoints are PyTorch bundles, so the kind check
    that follows says to export one first)."""
    return resolve_bundle(resolve_or_explain(path, str(path)))


class OnnxSession:
    """An ONNX bundle opened for inference: the verified bundle, its tokenizer, the variant chosen, the provider
    and the session that runs padded batches (:meth:`run`). Task-free: :class:`serve.runtime.Predictor` adds the
    bundle's task head.

    ``backend``: ``auto`` — CUDA: fp16 when exported, else fp32; CPU: the fastest variant ``denki bench pick``
    recorded for this CPU fingerprint and thread count (with its spinning setting), among those that passed the
    export's parity gate; without such a record the default rule: int8 when it passed, else int8-channel when it
    passed, else o2, else fp32.
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
                 workload: str = "mixed"):
        self.dir = resolve_onnx_bundle(bundle_dir)
        self.manifest = verify_bundle(self.dir, kinds=onnx_kinds()) if verify else read_manifest(self.dir)
        self.kind = self.manifest["kind"]
        self.task = read_task(self.dir)
        self.tokenizer = JapaneseTokenizer.load(self.dir)
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
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.last_timing: dict[str, float] = {}

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
        # default rule (bundles without a record, or none for this CPU): dynamic int8 when it passed its gate, else
        # dynamic int8 with per-channel weight scales (closer to fp32 where per-tensor scales lose too much: a QA
        # reader's span logits, experiments/reader-epochs)
        for q in ("int8", "int8-channel"):
            if q in available and passed_gate(self.manifest, q):
                self.choice = f"default rule: {q} passed its parity gate ({why})"
                return q
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

    def describe(self, head_note: str = "") -> str:
        """One line: kind, backend (file, spinning), provider, what the head adds, why this backend."""
        spin = "" if self.allow_spinning is None else f", spinning {'on' if self.allow_spinning else 'off'}"
        return (f"{self.kind} · backend {self.backend} ({self.model_file.name}{spin}) · {self.provider}{head_note} · "
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
