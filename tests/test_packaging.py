"""One ``denki`` namespace and a torch-free runtime install (README "Embedding in your backend").

Fast checks: the wheel's package list matches the folders, every module has one name (a bare ``import serve`` is
refused), bundle format numbers, the runtime's errors for names and PyTorch bundles, file modes. The slow one builds
the wheel, installs it with only ``[cpu,serve]`` in a fresh venv and runs the runtime there on bundles exported by
this (full) install: ``Predictor``, ``denki classify`` on a file, ``denki serve`` — from another folder, with no
torch, transformers, sklearn or gradio imported.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("app", "serve", "models", "pretrain")
HEAVY = ("torch", "transformers", "sklearn", "gradio", "scipy", "matplotlib", "optimum")


def test_wheel_lists_every_package():
    """pyproject's explicit package list = denki/ + every package folder of the four layers + samples (data)."""
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    on_disk = {"denki", "denki.samples"}
    for layer in LAYERS:
        for init in (REPO / layer).rglob("__init__.py"):
            on_disk.add(".".join(["denki", *init.parent.relative_to(REPO).parts]))
    assert set(cfg["packages"]) == on_disk
    assert {k: v for k, v in cfg["package-dir"].items() if k != "denki"} == \
        {**{f"denki.{x}": x for x in LAYERS}, "denki.samples": "samples"}
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"denki": "denki.app.cli:main"}


def test_bare_layer_names_are_refused():
    """From the repository root (where ``serve/`` is on sys.path) ``import serve`` fails and says what to write,
    and importing through ``denki`` leaves no bare-named module behind: one class object per class."""
    code = textwrap.dedent("""
        import sys
        for name in ("app", "serve", "models", "pretrain"):
            try:
                __import__(name)
            except ImportError as e:
                assert f"import denki.{name}, not {name}" in str(e), e
            else:
                raise SystemExit(f"import {name} worked")
        import denki
        from denki import DenkiError, Predictor
        import denki.app.cli, denki.serve.http, denki.serve.batch, denki.models.io.errors as errs
        assert DenkiError is errs.DenkiError
        assert Predictor.__module__ == "denki.serve.runtime"
        bare = sorted(m for m in sys.modules if m.split(".")[0] in ("app", "serve", "models", "pretrain"))
        assert not bare, bare
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:] + r.stdout


def test_newer_bundle_format_is_refused_and_todays_loads(tmp_path):
    from denki.models.bundle.format import FORMAT, read_manifest, verify_bundle, write_manifest
    from denki.models.io.errors import DenkiError

    (tmp_path / "x.txt").write_text("x", encoding="utf-8")
    m = write_manifest(tmp_path, "classifier")
    assert m["format"] == FORMAT == verify_bundle(tmp_path)["format"]
    m["format"] = FORMAT + 1
    (tmp_path / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    with pytest.raises(DenkiError, match=f"bundle format {FORMAT + 1} is newer than this denki reads"):
        read_manifest(tmp_path)
    # a bundle written before the number existed (no "format" in its manifest) still verifies
    old = tmp_path / "old"
    old.mkdir()
    (old / "x.txt").write_text("x", encoding="utf-8")
    m = write_manifest(old, "classifier")
    del m["format"]
    (old / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    assert verify_bundle(old, kinds=("classifier",))["kind"] == "classifier"


def test_runtime_names_and_kinds_say_what_to_do(qa_bundle, tmp_path):
    from denki import Predictor
    from denki.models.io.errors import DenkiError

    with pytest.raises(DenkiError, match="PyTorch qa bundle.*denki export --model"):
        Predictor(qa_bundle)
    # a shipped checkpoint's name is found, as on the command line; it is a PyTorch bundle, so: export it
    with pytest.raises(DenkiError, match="PyTorch qa bundle.*denki export"):
        Predictor("denki-electra-tiny-ja-qa")
    with pytest.raises(DenkiError, match="no-such-model: not found .*checkpoints: denki-electra-tiny-ja"):
        Predictor("no-such-model")


def test_cli_runs_from_another_folder(tmp_path):
    """Nothing is read relative to the working directory: checkpoint names and the quickstart's samples resolve
    from the package, wherever the command is started."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-m", "denki.app.cli", "checkpoints"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "denki-electra-tiny-ja-qa" in r.stdout, r.stderr[-2000:]
    (tmp_path / "three.txt").write_text("保証期間は一年です。\n修理はサポート窓口へ。\n営業時間は9時から17時です。\n",
                                        encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "denki.app.cli", "tokenize", "--tokenizer", "denki-electra-tiny-ja",
                        "--input", "three.txt", "--output", "toks.jsonl"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len((tmp_path / "toks.jsonl").read_text(encoding="utf-8").splitlines()) == 3


def test_written_files_follow_the_umask(tmp_path):
    """mkstemp's 0600 would keep a service running as another user from reading a bundle."""
    from denki.models.io.fileio import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "task.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "task.json").stat().st_mode) == 0o644


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 900), **kw)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


RUNTIME_CHECK = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    from denki import Predictor
    cls = Predictor(sys.argv[1])
    out = cls.classify(["ホテルを予約したい", "ログインできません"])
    assert len(out) == 2 and all("label" in o and "route" in o for o in out), out
    qa = Predictor(sys.argv[2])
    a = qa.answer("保証期間は？", "この製品の保証期間は購入日から一年間です。")
    assert {"answer", "has_answer", "start", "end", "score"} <= set(a), a
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in %r)
    assert not heavy, f"the runtime imported {heavy}"
    print(json.dumps({"first_s": time.perf_counter() - t0, "labels": [o["label"] for o in out]}))
""" % (HEAVY,))


@pytest.mark.slow
def test_runtime_wheel_alone_serves_bundles_from_the_full_install(onnx_classifier, onnx_qa, tmp_path):
    """`pip wheel --no-deps .`, then `pip install "<wheel>[cpu,serve]"` in a fresh venv: Predictor, `denki classify`
    and `denki serve` work there on bundles this install exported, with nothing heavy imported, from a folder that is
    not the repository; site-packages holds ``denki`` and no bare layer package."""
    import httpx

    from tests.conftest import wait_ready

    wheels, venv, work, src = tmp_path / "wheels", tmp_path / "venv", tmp_path / "elsewhere", tmp_path / "src"
    work.mkdir()
    # built from a copy without build outputs: setuptools reuses build/lib, where a stale file would hide a change
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", "build", "runs", "*.egg-info",
                                                             "__pycache__", "experiments", ".pytest_cache"))
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(wheels)], cwd=tmp_path)
    wheel = next(wheels.glob("denki-*.whl"))
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "-q", f"{wheel}[cpu,serve]"], cwd=work)
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    assert (site / "denki" / "serve" / "runtime.py").is_file()
    assert not [x for x in LAYERS if (site / x).exists()], "a bare layer package was installed"
    r = _run([str(py), "-c", "from denki.app.cmd_quickstart import SAMPLES; print(SAMPLES)"], cwd=tmp_path)
    assert Path(r.stdout.strip()) == site / "denki" / "samples" and (site / "denki/samples/routing_train.jsonl").is_file()
    installed = {d.name.split("-")[0].lower() for d in site.glob("*.dist-info")}
    assert "onnxruntime" in installed and not {"torch", "transformers", "onnxruntime_gpu", "gradio"} & installed

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    # 1. the Python API
    r = _run([str(py), "-c", RUNTIME_CHECK, str(onnx_classifier), str(onnx_qa)], cwd=work, env=env)
    assert len(json.loads(r.stdout.strip().splitlines()[-1])["labels"]) == 2
    # 2. `denki classify` on a file, and `denki checkpoints` saying where the checkpoints are
    denki = str(venv / "bin" / "denki")
    (work / "in.jsonl").write_text('{"id": 1, "text": "駅までタクシーを呼んでください"}\n', encoding="utf-8")
    _run([denki, "classify", "--model", str(onnx_classifier), "--input", "in.jsonl", "--output", "out.jsonl",
          "--text-field", "text"],
         cwd=work, env=env)
    rows = [json.loads(x) for x in (work / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 1 and rows[0]["id"] == 1 and "label" in json.dumps(rows[0])
    assert "DENKI_CHECKPOINTS" in _run([denki, "checkpoints"], cwd=work, env=env).stdout
    # a command whose extra is missing says which `pip install` fixes it (no traceback)
    for cmd, extra in ((["finetune", "classify", "--model", str(onnx_classifier), "--train", "in.jsonl", "--dev",
                         "in.jsonl", "--out", "ft"], "train"),
                       (["demo", "--classifier", str(onnx_classifier), "--port", str(free_port())], "demo")):
        r = subprocess.run([denki, *cmd], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and f"pip install 'denki[{extra}]'" in r.stderr and "Traceback" not in r.stderr, \
            r.stderr[-2000:]
    # 3. `denki serve` answers /v1/classify
    port = free_port()
    proc = subprocess.Popen([denki, "serve", "--classifier", str(onnx_classifier), "--port", str(port),
                             "--log-level", "warning"], cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, 180, lambda: proc.poll() is None, "denki serve (runtime-only install)")
        resp = httpx.post(url + "/v1/classify", json={"texts": ["今夜泊まれるホテルはありますか"]}, timeout=30)
        assert resp.status_code == 200, resp.text
        assert len(resp.json()["results"]) == 1
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    # one worker: uvicorn drains, then re-raises SIGTERM (exit by the signal, as a service manager expects)
    assert proc.returncode in (0, -15) and "Traceback" not in out, out[-3000:]
    shutil.rmtree(venv)  # 450 MB: not left for the rest of the session
