"""The runtime-only install, measured: size on disk, cold start to the first answer, memory, heavy imports.

It builds denki's wheel from a clean copy of the source, installs it with only the runtime extras (``[cpu,serve]``
by default) into a fresh venv, and then, for ``--rounds`` fresh processes pinned to one core, times
``import denki`` → ``Predictor(MODEL)`` (sha256 of every file, tokenizer, ONNX session) → the first
``classify`` of one text, and reads the process's peak RSS. The first round runs after the page cache is dropped
(``/proc/sys/vm/drop_caches``, when this user may write it): the cold start a service sees after a reboot or a
fresh deploy; later rounds find the files cached. The same steps with this (full) install's interpreter are
the baseline, measured in the same run, so the ratio says what the runtime install saves.

    python bench/runtime_install.py --model runs/quickstart/classifier-onnx --core 1 --rounds 5 \
        --out runs/bench/runtime-install
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.batch_throughput import cpu_lines  # noqa: E402  (one CPU description for every benchmark)

#: the venv's own tooling (there before denki is installed), left out of the install's size
TOOLING = ("pip", "setuptools", "pkg_resources", "_distutils_hack", "distutils-precedence.pth")
HEAVY = ("torch", "transformers", "sklearn", "gradio", "scipy", "matplotlib", "optimum", "onnx")

PROBE = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import denki
t1 = time.perf_counter()
from denki import Predictor
p = Predictor(sys.argv[1])
t2 = time.perf_counter()
out = p.classify(["今夜泊まれるホテルを探しています"])
t3 = time.perf_counter()
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[2].split(",")))
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_classify_s": t3 - t2, "total_s": t3 - t0,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "heavy": heavy,
                  "backend": p.backend, "label": out[0]["label"]}))
"""


def dir_size(path: Path, skip=()) -> int:
    total = 0
    for p in path.iterdir():
        if p.name in skip or any(p.name.startswith(s + "-") and p.name.endswith(".dist-info") for s in skip):
            continue
        if p.is_symlink():
            continue
        if p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())
        else:
            total += p.stat().st_size
    return total


def build_runtime_venv(venv: Path, extras: str) -> Path:
    """Wheel from a clean copy (no build/ left-overs), fresh venv, ``pip install wheel[extras]``; the python."""
    with tempfile.TemporaryDirectory(prefix="denki-wheel-") as tmp:
        src, wheels = Path(tmp) / "src", Path(tmp) / "wheels"
        shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", "build", "runs", "*.egg-info",
                                                                 "__pycache__", "experiments"))
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(wheels)],
                       check=True)
        wheel = next(wheels.glob("denki-*.whl"))
        if venv.exists():
            shutil.rmtree(venv)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"{wheel}[{extras}]"],
                       check=True)
    return venv / "bin" / "python"


def drop_page_cache() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def probe(python: Path, model: str, core: int, cold: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", ORT_DISABLE_TELEMETRY="1")
    dropped = drop_page_cache() if cold else False
    r = subprocess.run(["taskset", "-c", str(core), str(python), "-c", PROBE, model, ",".join(HEAVY)],
                       capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), check=True)
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "cold": dropped}


def measure(python: Path, model: str, core: int, rounds: int) -> dict:
    runs = [probe(python, model, core, cold=(i == 0)) for i in range(rounds)]
    warm = runs[1:] or runs
    med = {k: statistics.median(r[k] for r in warm) for k in ("import_s", "load_s", "first_classify_s", "total_s",
                                                              "rss_mib")}
    return {"cold": runs[0], "warm_median": med, "heavy": sorted({h for r in runs for h in r["heavy"]}),
            "backend": runs[0]["backend"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="an ONNX classifier bundle (e.g. the quickstart's tiny router)")
    ap.add_argument("--extras", default="cpu,serve", help="the runtime install's extras (default: cpu,serve)")
    ap.add_argument("--venv", default="runs/bench/runtime-venv", help="where the fresh venv is made (replaced)")
    ap.add_argument("--core", type=int, default=0, help="the one core every probe runs on")
    ap.add_argument("--rounds", type=int, default=5, help="fresh processes per install (the first one cold)")
    ap.add_argument("--out", default="runs/bench/runtime-install", help="folder for result.json and result.md")
    args = ap.parse_args()
    model = str(Path(args.model).resolve())
    venv = Path(args.venv).resolve()
    python = build_runtime_venv(venv, args.extras)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    full_site = Path(subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                    capture_output=True, text=True, check=True).stdout.strip())
    res = {
        "extras": args.extras, "cpu": cpu_lines(), "model": model,
        "size_mib": {"runtime": dir_size(site, TOOLING) / 2**20, "full": dir_size(full_site, TOOLING) / 2**20},
        "runtime": measure(python, model, args.core, args.rounds),
        "full": measure(Path(sys.executable), model, args.core, args.rounds),
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(res, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    rt, full = res["runtime"], res["full"]
    lines = [f"# runtime-only install `denki[{args.extras}]` vs this full install", "", *res["cpu"], "",
             "| | runtime | full | ratio |", "|---|---:|---:|---:|",
             f"| size on disk (site-packages, MiB) | {res['size_mib']['runtime']:.0f} | "
             f"{res['size_mib']['full']:.0f} | {res['size_mib']['runtime'] / res['size_mib']['full']:.2f}x |"]
    for label, pick in (("cold start: import + load + first classify (s)", lambda m: m["cold"]["total_s"]),
                        ("warm start, median (s)", lambda m: m["warm_median"]["total_s"]),
                        ("  of it `import denki` (s)", lambda m: m["warm_median"]["import_s"]),
                        ("  of it load (s)", lambda m: m["warm_median"]["load_s"]),
                        ("  of it first classify (s)", lambda m: m["warm_median"]["first_classify_s"]),
                        ("peak RSS (MiB)", lambda m: m["warm_median"]["rss_mib"])):
        lines.append(f"| {label} | {pick(rt):.3f} | {pick(full):.3f} | {pick(rt) / pick(full):.2f}x |")
    lines += ["", f"backend: {rt['backend']}; heavy modules imported by the runtime: {rt['heavy'] or 'none'}; "
              f"first round after dropping the page cache: {rt['cold']['cold']}", "", f"`{res['command']}`"]
    (out / "result.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0 if not rt["heavy"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
