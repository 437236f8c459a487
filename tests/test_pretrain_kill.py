"""A pretraining run killed with a real SIGKILL and started again ends bit-identical to one never killed (issue 62,
item 4). tests/test_pretrain.py simulates the kill in-process (``run_pretrain(stop_after=…)``); here every run is a
``denki pretrain`` subprocess and the kills are ``os.kill(pid, SIGKILL)``:

1. a reference run, never killed;
2. the same command in another ``--out``, killed mid-training: after its first checkpoint, while it trains on past
   it (metrics logged beyond the checkpoint, so the resume has steps to redo and a log to cut back);
3. the same command again: it resumes, trains to the end and is killed *during the bundle export*, with
   ``OUT/bundle.partial`` half written (weights in, no manifest);
4. the same command once more, unmodified: it finishes.

The final bundle verifies, carries every file of the reference's bundle byte for byte (the weights included), and
records the same steps, tokens and FLOPs; the last training states (weights, optimizer, RNG) are identical too, and
no ``bundle.partial`` is left. Run 3 is the plain CLI with one test-only wrapper: ``copy_tokenizer`` into a
``.partial`` bundle (which :func:`models.bundle.pytorch.save_bundle` calls after writing the weights) announces
itself in a marker file and sleeps, so that the kill lands inside the export every time (no production hook).
Tiny model, 20 steps of 4 × 32 tokens; ≈ 1 minute on one busy core (four process starts)."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import REPO, SAMPLE_CORPUS

STEPS, SAVE_EVERY = 20, 4
RUN_TIMEOUT_S = 300  # one whole run (process start ≈ 10-15 s on a busy core, then ≈ 0.15 s a step)

#: run 3's wrapper: the CLI, except that the export stops inside the bundle's ``.partial`` folder (weights written,
#: tokenizer and manifest not yet) and says so in the marker file named by argv[1]
_PAUSE_IN_EXPORT = """
import sys, time
from pathlib import Path
import denki.models.bundle.pytorch as pt
marker = Path(sys.argv.pop(1))
copy = pt.copy_tokenizer
def paused(src, dest):
    if Path(dest).name.endswith(".partial"):
        marker.write_text(str(dest))
        time.sleep(600)
    copy(src, dest)
pt.copy_tokenizer = paused
from denki.app.cli import main
sys.exit(main())
"""


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _args(out: Path, tok: Path, cache: Path) -> list[str]:
    return ["pretrain", "--corpus", str(SAMPLE_CORPUS), "--tokenizer", str(tok), "--size", "tiny",
            "--out", str(out), "--steps", str(STEPS), "--batch-size", "4", "--seq-len", "32", "--seed", "3",
            "--save-every", str(SAVE_EVERY), "--log-every", "1", "--device", "cpu", "--cache-dir", str(cache),
            "--no-progress"]


class _Proc:
    """A ``denki pretrain`` subprocess with its output in a log file (no pipe to fill)."""

    def __init__(self, argv: list[str], log: Path):
        self.log = log
        # unbuffered: what a run printed before its SIGKILL is in the log
        env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   PYTHONUNBUFFERED="1")
        with open(log, "wb") as f:
            self.p = subprocess.Popen([sys.executable, *argv], cwd=REPO, env=env, stdout=f,
                                      stderr=subprocess.STDOUT)

    def tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:] if self.log.is_file() else ""

    def wait_until(self, cond, what: str, timeout_s: float = RUN_TIMEOUT_S) -> None:
        """Poll ``cond()`` until true; fail if the process exits first or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while not cond():
            assert self.p.poll() is None, f"the run exited ({self.p.returncode}) before {what}:\n{self.tail()}"
            assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f} s:\n{self.tail()}"
            time.sleep(0.02)

    def sigkill(self) -> None:
        os.kill(self.p.pid, signal.SIGKILL)
        assert self.p.wait(timeout=60) == -signal.SIGKILL

    def finish(self) -> None:
        rc = self.p.wait(timeout=RUN_TIMEOUT_S)
        assert rc == 0, f"the run failed ({rc}):\n{self.tail()}"

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(timeout=60)


def _metrics_steps(out: Path) -> list[int]:
    p = out / "metrics.jsonl"
    if not p.is_file():
        return []
    steps = []
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            steps.append(json.loads(line)["step"])
        except (json.JSONDecodeError, KeyError):
            break  # a line being written
    return steps


def _checkpoints(out: Path) -> list[int]:
    root = out / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(int(p.name.split("-")[1]) for p in root.iterdir()
                  if p.name.startswith("step-") and not p.name.endswith(".partial") and (p / "state.json").is_file())


@pytest.mark.slow
def test_sigkilled_pretraining_resumes_bit_identical_even_when_killed_during_export(tiny_tokenizer_dir, tmp_path):
    from denki.models.bundle.format import verify_bundle

    cache, ref, run = tmp_path / "cache", tmp_path / "ref", tmp_path / "killed"
    procs: list[_Proc] = []

    def start(argv, name):
        procs.append(_Proc(argv, tmp_path / f"{name}.log"))
        return procs[-1]

    cli = ["-m", "denki.app.cli"]
    try:
        # 1. the reference, never killed (it also fills the token cache the others reuse)
        start(cli + _args(ref, tiny_tokenizer_dir, cache), "ref").finish()

        # 2. killed mid-training: past the first checkpoint, metrics already logged beyond it
        p = start(cli + _args(run, tiny_tokenizer_dir, cache), "run1")
        p.wait_until(lambda: _checkpoints(run) and max(_metrics_steps(run), default=0) > _checkpoints(run)[-1],
                     "checkpoint followed by a logged step")
        p.sigkill()
        ckpts, logged = _checkpoints(run), _metrics_steps(run)
        assert ckpts and ckpts[-1] < STEPS and not (run / "summary.json").exists(), \
            f"the kill should land mid-training (checkpoints {ckpts}):\n{p.tail()}"
        assert max(logged) > ckpts[-1]  # steps the resume must redo (and metrics lines it must cut back)

        # 3. resumed, trains to the end, killed inside the bundle export (weights in bundle.partial, no manifest)
        marker = tmp_path / "in-export"
        p = start(["-c", _PAUSE_IN_EXPORT, str(marker)] + _args(run, tiny_tokenizer_dir, cache), "run2")
        p.wait_until(lambda: marker.is_file() and marker.read_text(), "bundle export")
        partial = Path(marker.read_text())
        assert partial == run / "bundle.partial" and (partial / "model.safetensors").is_file()
        assert not (partial / "manifest.json").exists()
        p.sigkill()
        assert f"resuming {run} from step {ckpts[-1]}" in p.tail(), p.tail()
        assert not (run / "bundle").exists() and not (run / "summary.json").exists()
        assert _checkpoints(run)[-1] == STEPS  # the last step's training state was saved before the export

        # 4. the same command, unmodified: resumes at the last step and exports
        p = start(cli + _args(run, tiny_tokenizer_dir, cache), "run3")
        p.finish()
        assert f"resuming {run} from step {STEPS}" in p.tail(), p.tail()
    finally:
        for q in procs:
            q.stop()

    # the bundle: complete, verified, every file (weights, config, tokenizer) byte-identical to the reference's
    man_ref = verify_bundle(ref / "bundle", kinds=("pretrained",))
    man = verify_bundle(run / "bundle", kinds=("pretrained",))
    assert not (run / "bundle.partial").exists() and not (run / "bundle.old").exists()
    assert man["files"] == man_ref["files"] and "model.safetensors" in man["files"]
    assert _sha(run / "bundle" / "model.safetensors") == _sha(ref / "bundle" / "model.safetensors")
    for k in ("steps", "tokens", "flops"):
        assert man["source"][k] == man_ref["source"][k], k
    assert man["source"]["steps"] == STEPS
    s_ref, s = (json.loads((d / "summary.json").read_text()) for d in (ref, run))
    assert s["finished"] and (s["steps"], s["tokens"], s["flops"]) == (s_ref["steps"], s_ref["tokens"], s_ref["flops"])
    # the last training state: generator, discriminator, optimizer moments and RNG states alike
    last = f"checkpoints/step-{STEPS:08d}"
    for name in ("model.safetensors", "optimizer.safetensors"):
        assert _sha(run / last / name) == _sha(ref / last / name), name
    # the metrics log: cut back at the resume and written again, one line per step, the same losses
    rows_ref, rows = ([json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()] for d in (ref, run))
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in rows] == [r["loss"] for r in rows_ref]
