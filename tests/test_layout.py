"""The layout holds (README "Layout"): ``serve/`` imports no torch, imports flow one way between the layers and
between the stage packages of ``models/``, and no two modules import each other, directly or round a circle.

The import graph is read from the source (``ast``): module-level imports and those inside functions alike, so a
lazy import cannot hide a circle. Fast: one subprocess, no model.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "serve", "models", "pretrain")
SCANNED = PACKAGES + ("bench", "scripts", "tests")

#: layer → the layers it may import (app → serve → models ← pretrain; app also drives pretrain and models)
LAYERS = {"app": {"serve", "models", "pretrain"}, "serve": {"models"}, "pretrain": {"models"}, "models": set()}
#: stage package of models/ → the stage packages it may import (one way: io ← text ← bundle ← task ← the task
#: packages ← registry ← export). A task package declares everything of its task (head, export outputs, parity,
#: runtime head) on the base in ``task``; the registry lists the task packages; export (like serve/ and app/) asks
#: the registry and never names a task package.
MODELS_STAGES = {
    "io": set(),
    "text": {"io"},
    "bundle": {"io", "text"},
    "training": {"io"},
    "task": {"io", "text", "bundle", "training"},
    "classify": {"io", "text", "bundle", "training", "task"},
    "qa": {"io", "text", "bundle", "training", "task"},
    "retrieval": {"io", "text"},
    "registry": {"io", "text", "bundle", "training", "task", "classify", "qa"},
    "export": {"io", "text", "bundle", "task", "registry"},
}
#: the issue-60 goals, kept: no product function longer than this many lines, no product module longer than that
MAX_FUNCTION_LINES = 120
MAX_MODULE_LINES = 600


def _modules() -> dict[str, Path]:
    out = {}
    for top in SCANNED:
        for p in sorted((REPO / top).rglob("*.py")):
            parts = list(p.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


def _graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module → the repo modules it imports (``from pkg import sub`` counts as importing ``pkg.sub``)."""

    def resolve(name: str) -> str | None:
        if name.startswith("denki."):  # the layers import each other as denki.<layer>.…; the graph keys drop it
            name = name[len("denki."):]
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                deps |= {resolve(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]  # relative: graph names
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    deps.add(sub if sub in mods else resolve(base))
        graph[mod] = {d for d in deps if d and d != mod}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def _collapse(graph: dict[str, set[str]], key) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        k = key(mod)
        if k is None:
            continue
        out.setdefault(k, set())
        out[k] |= {key(d) for d in deps if key(d) not in (None, k)}
    return out


def _stage(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if parts[0] == "models" and len(parts) > 2 else None


def test_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    graph = _graph(_modules())
    assert "models.classify.evaluate" in graph and graph["app.cli"], "the graph is empty: scanning went wrong"
    assert _cycles(graph) == [], "modules importing each other (directly or round a circle)"
    # whole packages as well: the stage packages of models/, and the four layers
    assert _cycles(_collapse(graph, _stage)) == []
    assert _cycles(_collapse(graph, lambda m: m.split(".")[0] if m.split(".")[0] in PACKAGES else None)) == []


def test_imports_flow_one_way():
    graph = _graph(_modules())
    wrong = []
    for mod, deps in graph.items():
        top = mod.split(".")[0]
        for d in deps:
            dtop = d.split(".")[0]
            if top in LAYERS and dtop in LAYERS and dtop != top and dtop not in LAYERS[top]:
                wrong.append(f"{mod} → {d} (layer {top} may import {sorted(LAYERS[top])})")
            s, ds = _stage(mod), _stage(d)
            if s and ds and s != ds and ds not in MODELS_STAGES[s]:
                wrong.append(f"{mod} → {d} (models/{s} may import {sorted(MODELS_STAGES[s])})")
    assert not wrong, "\n".join(wrong)
    stages = {p.name for p in (REPO / "models").iterdir() if (p / "__init__.py").is_file()}
    assert stages == set(MODELS_STAGES), "a new stage package of models/ needs its place in MODELS_STAGES"
    flat = sorted(p.name for p in (REPO / "models").glob("*.py") if p.name != "__init__.py")
    assert not flat, f"models/ holds stage packages only, not modules: {flat}"


def test_every_import_goes_through_denki():
    """``from serve.x import y`` would load a second copy of ``serve.x`` beside ``denki.serve.x`` (and the layers
    refuse a bare name anyway): every absolute import of a layer is spelled ``denki.<layer>``."""
    bare = []
    for mod, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bare += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names if n.split(".")[0] in PACKAGES]
    assert not bare, "import these through denki.:\n" + "\n".join(bare)


def test_every_package_says_what_it_owns():
    for init in [REPO / p / "__init__.py" for p in PACKAGES] + sorted((REPO / "models").glob("*/__init__.py")) + \
            sorted((REPO / "pretrain").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc) > 40, f"{init.relative_to(REPO)}: no docstring saying what it owns"
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assert not [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], \
            f"{init.relative_to(REPO)}: a package __init__ imports nothing (importing a stage stays cheap)"


def test_serve_imports_no_torch():
    """Every module under serve/, imported one after the other in a fresh interpreter: none brings in torch."""
    mods = sorted(f"denki.{m}" for m in _modules() if m == "serve" or m.startswith("serve."))
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "    bad = sorted(x for x in sys.modules if x == 'torch' or x.startswith('torch.'))\n"
        "    assert not bad, f'importing {m} imported torch'\n"
        "print('ok', len(" + repr(mods) + "))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("ok"), r.stdout


def _top_level_commands(parser) -> dict:
    import argparse

    acts = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(acts[0].choices) if acts else {}


def test_each_command_lives_in_a_file_named_after_it():
    """``denki X`` is registered by ``app/cmd_X.py`` (dashes as underscores) and by no other module; every
    ``app/cmd_*.py`` is such a module, or a helper ``cmd_<command>_<sub>.py`` of one of its subcommands."""
    import argparse
    import importlib

    from denki.app.cli import build_parser

    commands = _top_level_commands(build_parser())
    assert {"serve", "export", "classify", "bench", "finetune"} <= set(commands), "the parser lost commands"
    files = {p.stem[len("cmd_"):]: p for p in sorted((REPO / "app").glob("cmd_*.py"))}
    wrong = []
    for name, sub in commands.items():
        stem = name.replace("-", "_")
        if stem not in files:
            wrong.append(f"`denki {name}`: no app/cmd_{stem}.py")
            continue
        src = files[stem].read_text(encoding="utf-8")
        if not re.search(r"add_parser\(\s*" + re.escape(repr(name)).replace("'", "[\"']"), src):
            wrong.append(f"`denki {name}`: app/cmd_{stem}.py does not add_parser({name!r})")
        # registering the module alone on a fresh parser adds exactly this command
        fresh = argparse.ArgumentParser(prog="denki").add_subparsers()
        importlib.import_module(f"denki.app.cmd_{stem}").register(fresh)
        if sorted(fresh.choices) != [name]:
            wrong.append(f"app/cmd_{stem}.py registers {sorted(fresh.choices)}, not just `denki {name}`")
    stems = {n.replace("-", "_"): n for n in commands}
    for stem, path in files.items():
        if stem in stems:
            continue
        # a helper cmd_<command>_<sub>.py: the command exists and has that subcommand
        helper = [(c, s) for c in stems for s in _top_level_commands(commands[stems[c]])
                  if stem == f"{c}_{s.replace('-', '_')}"]
        if not helper:
            wrong.append(f"app/{path.name}: no `denki {stem.replace('_', '-')}` command (and not a "
                         f"cmd_<command>_<sub>.py helper of an existing subcommand)")
    assert not wrong, "\n".join(wrong)


def _product_files() -> list[Path]:
    return [p for top in PACKAGES for p in sorted((REPO / top).rglob("*.py")) if "__pycache__" not in p.parts]


def test_no_long_functions_or_modules():
    """A long function is a list of named steps; a long module is several modules (issue 60's goals)."""
    long_fns, long_mods = [], []
    for path in _product_files():
        src = path.read_text(encoding="utf-8")
        rel = path.relative_to(REPO)
        if src.count("\n") > MAX_MODULE_LINES:
            long_mods.append(f"{rel}: {src.count(chr(10))} lines")
        for node in ast.walk(ast.parse(src, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long_fns.append(f"{rel}:{node.lineno} {node.name}: {n} lines")
    assert not long_fns, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long_fns)
    assert not long_mods, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(long_mods)


def _task_names() -> set[str]:
    from denki.models.registry.tasks import TASKS

    return {n for t in TASKS.values() for n in (t.name, t.onnx_kind, t.command)}


def _string_comparisons(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """``(line, name)`` of each comparison (``==``, ``!=``, ``in``, ``not in``, ``match`` case) against one of
    ``names`` as a string literal, alone or in a tuple/list/set literal."""
    def literals(node) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [x for e in node.elts for x in literals(e)]
        return []

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                found += [(node.lineno, v) for v in literals(side) if v in names]
        elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue):
            found += [(node.pattern.lineno, v) for v in literals(node.pattern.value) if v in names]
    return found


def test_string_comparison_finder():
    tree = ast.parse("if kind == 'qa': pass\nif k in ('classifier', 'x'): pass\nif name == 'other': pass\n"
                     "d = {'qa': 1}\n")
    assert _string_comparisons(tree, {"qa", "classifier"}) == [(1, "qa"), (2, "classifier")]


def test_no_task_kind_comparisons_outside_the_registry():
    """Code asks the task (models.registry) instead of branching on a task's name or kind (issue 60)."""
    names = _task_names()
    assert {"classifier", "qa", "onnx-classifier", "classify"} <= names
    wrong = []
    for path in _product_files():
        rel = path.relative_to(REPO)
        if rel.parts[:2] == ("models", "registry"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        wrong += [f"{rel}:{line} compares with {v!r}" for line, v in _string_comparisons(tree, names)]
    assert not wrong, "ask the task registry instead:\n" + "\n".join(wrong)
