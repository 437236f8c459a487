"""ONNX bundles, torch-free: which file holds which variant (:data:`MODEL_FILES`), and the one way every
ONNX file of a bundle is opened in onnxruntime (:func:`open_session`) — by the serving runtime
(``serve.runtime``) and by the export's parity gate (:mod:`models.export.onnx`), so that the gate checks exactly
the sessions that will serve (the same int8 kernel choice, :func:`exact_int8_gemm`)."""
from __future__ import annotations

import functools
import os

from denki.models.io.errors import DenkiError

#: backend name → file. ``o2`` holds the graph of the one ``--optimize`` level asked for (O1, O2 or O3); ``o3``
#: is O3 written beside it (``--optimize O2 O3``). ``int8`` is dynamic per-tensor int8 (what every bundle before the fast-path picker has);
#: ``int8-channel`` dynamic with per-channel weight scales; ``int8-static`` static QDQ int8 (activation scales
#: calibrated at export). Old bundles only hold the first four names, which keep their files.
MODEL_FILES = {"fp32": "model.onnx", "o2": "model.o2.onnx", "o3": "model.o3.onnx", "int8": "model.int8.onnx",
               "int8-channel": "model.int8-channel.onnx", "int8-static": "model.int8-static.onnx",
               "fp16": "model.fp16.onnx"}
#: the variants quantised to int8 (gated on prediction agreement / metric drop, like fp16)
INT8_VARIANTS = ("int8", "int8-channel", "int8-static")
#: the variants a CPU session runs (fp16 is for CUDA: the CPU provider lacks most fp16 kernels)
CPU_VARIANTS = ("fp32", "o2", "o3") + INT8_VARIANTS


def passed_gate(manifest: dict, backend: str) -> bool:
    """True only when the export's parity gate ran for ``backend`` on this bundle and passed.

    A variant that was not checked (``ran: false``) or has no parity entry is not trusted: every automatic
    choice (the default rule, a recorded or measured fastest variant) is made among passing variants only."""
    r = manifest.get("metrics", {}).get("parity", {}).get(backend) or {}
    return bool(r.get("ran")) and r.get("passed") is True


def import_ort():
    """``import onnxruntime`` with telemetry off, or a clear error naming the extra (``pip install denki`` alone
    brings no ONNX Runtime: the user picks the CPU or the GPU build)."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        import onnxruntime as ort
    except ModuleNotFoundError:
        raise DenkiError("no ONNX Runtime is installed: pip install 'denki[cpu]' (or 'denki[gpu]' on a CUDA "
                         "machine; never both)") from None

    return ort


_VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
_EXACT_INT8: bool | None = None


@functools.lru_cache(maxsize=1)
def cpuinfo_text() -> str | None:
    """``/proc/cpuinfo`` as text, read once per process (the CPU does not change under it); ``None`` where it
    cannot be read (not Linux). The one reader behind :func:`exact_int8_gemm` and the fast-path CPU key."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def exact_int8_gemm() -> bool:
    """True where onnxruntime's default int8 GEMM would saturate, so sessions turn on its exact mode.

    Dynamic int8 graphs multiply uint8 activations by int8 weights (U8S8). On x86 CPUs without VNNI (AVX2 only,
    e.g. many AMD EPYC / older Xeon; AVX-512 without VNNI) that kernel sums pairs of products in 16 bits with
    saturation (``vpmaddubsw``), so the int8 outputs are wrong where two large products meet — and differ from
    a VNNI CPU's. ``session.x64quantprecision=1`` makes onnxruntime convert such weights to uint8 and use its
    exact U8U8 kernel: the same integer results as on a VNNI CPU, somewhat slower. On VNNI CPUs the default
    kernel is already exact (and faster), so the option is left off there; on other architectures it does not
    exist. Decided once per process from the CPU flags (Linux); x86 without readable flags → exact mode."""
    global _EXACT_INT8
    if _EXACT_INT8 is None:
        import platform

        if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686", "x86"):
            _EXACT_INT8 = False
        else:
            flags = next((line.split(":", 1)[1].split() for line in (cpuinfo_text() or "").splitlines()
                          if line.startswith("flags")), None)
            _EXACT_INT8 = flags is None or not any(v in flags for v in _VNNI_FLAGS)
    return _EXACT_INT8


def open_session(path: str | os.PathLike, device: str, threads: int | None, *, allow_spinning: bool | None = None):
    """Create an InferenceSession; for ``cuda`` fall back to CPU when CUDA cannot really be used.

    ``allow_spinning``: onnxruntime's ``session.intra_op.allow_spinning`` (``None``: its default, spinning on).
    Spinning intra-op threads answer the next call sooner but burn a core while idle — which wins depends on
    the CPU and the load, so the fast-path picker measures both. Returns ``(session, provider)``."""
    ort = import_ort()
    so = ort.SessionOptions()
    so.log_severity_level = 3  # the CUDA probe on a CPU machine logs errors we handle ourselves
    if exact_int8_gemm():
        # int8 outputs identical on every x86 CPU (see exact_int8_gemm); no effect on float graphs
        so.add_session_config_entry("session.x64quantprecision", "1")
    if threads:
        so.intra_op_num_threads = int(threads)
        so.inter_op_num_threads = 1
    if allow_spinning is not None:
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    providers = ["CPUExecutionProvider"]
    if device == "cuda":
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    old = ort.get_default_logger_severity() if hasattr(ort, "get_default_logger_severity") else None
    ort.set_default_logger_severity(4)
    try:
        sess = ort.InferenceSession(str(path), sess_options=so, providers=providers)
    finally:
        if old is not None:
            ort.set_default_logger_severity(old)
    provider = sess.get_providers()[0]
    if device == "cuda" and provider != "CUDAExecutionProvider":
        raise DenkiError("--device cuda: onnxruntime could not create a CUDA session here (no GPU, or CUDA/cuDNN "
                         "libraries missing); use --device cpu or auto")
    return sess, provider
