"""Starting or joining Ray for the scale-out engine (optional extra ``denki[ray]``), quietly and offline.

    ray, session = connect_ray(address=None)      # a private local instance in a short temp dir
    ...
    session.close()                               # shuts down what this process started

* No usage statistics (``RAY_USAGE_STATS_ENABLED=0``) and no onnxruntime/HF telemetry or downloads in the workers:
  the variables are set here and passed to every worker through ``runtime_env`` (a worker on another node does
  not inherit the driver's environment).
* A local instance gets its own temp dir under ``/tmp`` (short: Ray's Unix socket paths must stay under 107
  bytes, which a deep ``pytest`` tmp path can exceed), no dashboard, and binds its node address to 127.0.0.1.
  Ray's internal services (GCS, raylets, object manager) still open several ports: on a cluster, firewall them
  (docs/serving.md).
* ``address="auto"`` (or ``ray://HOST:10001``) joins an existing cluster instead; denki must then be installed
  at the same path/version on every node, and bundle paths must be readable there.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from denki.models.io.errors import DenkiError

#: environment of every Ray worker (and of this process before ``import ray``)
WORKER_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "ORT_DISABLE_TELEMETRY": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "GRADIO_ANALYTICS_ENABLED": "False",
    "TOKENIZERS_PARALLELISM": "false",
}


def checked_bundle(path: str | os.PathLike, task: str) -> str:
    """Absolute path of a verified ONNX bundle of the task named ``task`` (files match the manifest's sha256s). Checked on the
    driver so that a wrong path or a damaged bundle fails with a clear error before Ray starts; absolute because
    replicas and actors may run in another working directory."""
    from denki.models.bundle.format import verify_bundle
    from denki.models.registry.tasks import task_for
    from denki.serve.runtime import resolve_onnx_bundle

    p = Path(resolve_onnx_bundle(path)).resolve()
    verify_bundle(p, kinds=(task_for(task).onnx_kind,))
    return str(p)


def import_ray():
    """``import ray`` with telemetry off, or a clear error naming the extra to install."""
    for k, v in WORKER_ENV.items():
        os.environ.setdefault(k, v)
    try:
        import ray
    except ImportError:
        raise DenkiError("the Ray engine needs the optional extra: pip install 'denki[ray]' "
                         "(installs ray[serve,data])") from None
    return ray


@dataclass
class RaySession:
    started: bool  # True: this process started a local instance (and stops it in close())
    temp_dir: str | None  # a temp dir this process made (removed in close())
    address: str | None
    owns: bool = True  # False: Ray was already initialised by the caller, who shuts it down

    def close(self) -> None:
        ray = import_ray()
        if self.owns and ray.is_initialized():
            ray.shutdown()
        if self.started and self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


def connect_ray(address: str | None = None, *, temp_dir: str | None = None, num_cpus: float | None = None,
                num_gpus: int | None = None):
    """Join ``address`` (``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``) or start a private local instance.

    Returns ``(ray, RaySession)``. Reuses a Ray already initialised in this process (tests)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray, RaySession(started=False, temp_dir=None, address=address, owns=False)
    runtime_env = {"env_vars": dict(WORKER_ENV)}
    if address:
        if num_cpus is not None or num_gpus is not None:
            raise DenkiError("--address joins an existing cluster: its resources are fixed there")
        try:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
        except ConnectionError as e:
            raise DenkiError(f"cannot reach a Ray cluster at {address!r} ({e}); start one with `ray start --head` "
                             "or drop --address to use a private local instance") from e
        return ray, RaySession(started=False, temp_dir=None, address=address)
    made = temp_dir is None
    tmp = temp_dir or tempfile.mkdtemp(prefix="denki-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    os.makedirs(tmp, exist_ok=True)
    kw = {}
    if num_cpus is not None:
        kw["num_cpus"] = num_cpus
    if num_gpus is not None:
        kw["num_gpus"] = num_gpus
    ray.init(runtime_env=runtime_env, include_dashboard=False, _temp_dir=os.path.abspath(tmp),
             _node_ip_address="127.0.0.1", log_to_driver=True, **kw)
    return ray, RaySession(started=True, temp_dir=tmp if made else None, address=None)
