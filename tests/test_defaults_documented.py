"""Every default that README.md and docs/*.md state for a `denki` option is the option's argparse default.

The parser is app/cli.py's, walked through every subcommand. The docs state defaults in a handful of ways, and each
is parsed here (test_the_statements_found_cover_every_pattern keeps the list honest):

* ``--opt`` (default V) / ``--opt``, default V / ``--opt`` value (default V) / ``--opt`` defaults to V /
  ``--opt X`` (what it does; default V);
* ``--opt V`` (the default) / ``--opt V``, the default;
* ``--opt`` (V) with V a number (units: MiB, s, points);
* ``--opt`` … (V by default);
* option tables with a ``default`` column (``| option | default | what |``);
* a command line in a code block ending in ``# default: V``, about its option whose value lists the choices
  (``--objective electra|mlm … # default: electra``);
* option lists (a paragraph starting "Options", or under an "Options" heading): the first ``--opt V`` of each option,
  at a list position (after ``:``, ``,``, ``(``, ``/``, "and" or "or").

Which command a statement is about: the nearest ``denki CMD [SUB]`` named before it in the same file that has the
option; else the one command that has it; else, when every command that has it shares one default, that default.
A stated value is compared as a number (``2,048``, ``2 MiB``, ``2 points`` = 0.02, ``40 %`` = 0.4), a word, a list
(``1 0``), ``off`` for a flag, ``(required)``. An argparse default of None means "decided at run time": then the
option's --help must state the same value (so docs and --help agree), or the statement must be descriptive or
conditional ("default 1 for a tiny … run, else 0").
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]

OPT = r"`(--[a-z0-9][a-z0-9-]*)(?: ([^`]*))?`"
#: (pattern name, regex): group 1 the option, group 2 the value inside its backticks, group 3 the stated default
PATTERNS = [
    ("(default V)", re.compile(OPT + r"(?: [a-z]+)?,? \(?default:? ((?:`[^`]*`|\.(?=[0-9])|[^)`;.,:])+?)(?=[),;:]|\.\s|\.$)")),
    ("(…; default V)", re.compile(OPT + r" \([^`()]{1,80}?; default ((?:\.(?=[0-9])|[^,;.)])+)")),
    ("defaults to V", re.compile(OPT + r" defaults? to ((?:`[^`]*`|[^.;)])+)")),
    ("--opt V (the default)", re.compile(OPT + r",? \((the default)\)")),
    ("--opt V, the default", re.compile(OPT + r", (the default)\b")),
    ("--opt (number)", re.compile(OPT + r",? \(([0-9][0-9,.]*(?: ?(?:MiB|s|points))?)\)")),
    ("(V by default)", re.compile(OPT + r"[^`(\n]{0,20}\(([^()]{1,20}) by default")),
]
COMMAND = re.compile(r"\bdenki ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")
CONDITIONAL = re.compile(r"\b(for|when|from|else|otherwise|if|unless|per)\b")


def _commands() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    from denki.app.cli import build_parser

    out = {}

    def walk(p, path):
        out[path] = p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    walk(sp, path + (name,))

    walk(build_parser(), ())
    return out


def _options(commands) -> dict[str, dict[tuple[str, ...], argparse.Action]]:
    """``--opt`` → {command path: its action}."""
    out: dict[str, dict] = {}
    for path, p in commands.items():
        for a in p._actions:
            for o in a.option_strings:
                if o.startswith("--"):
                    out.setdefault(o, {})[path] = a
    return out


@dataclass
class Statement:
    doc: str
    line: int
    pattern: str
    option: str
    stated: str
    pos: int

    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def _statements(text: str, doc: str) -> list[Statement]:
    found: dict[tuple[int, str], Statement] = {}

    def add(pattern, option, stated, pos):
        key = (pos, option)
        if key not in found:
            found[key] = Statement(doc, text.count("\n", 0, pos) + 1, pattern, option, stated.strip(), pos)

    for name, rx in PATTERNS:
        for m in rx.finditer(text):
            stated = m.group(3)
            if stated == "the default":  # the value is the one inside the option's backticks
                if not m.group(2):
                    continue
                stated = m.group(2)
            add(name, m.group(1), stated, m.start())
    for m in re.finditer(r"^\|[^\n]*\|\s*default\s*\|[^\n]*\n\|[-| ]+\|\n((?:\|[^\n]*\n)+)", text, re.M | re.I):
        for row in re.finditer(r"^\|\s*`(--[a-z0-9-]+)[^`]*`\s*\|\s*([^|]+?)\s*\|", m.group(1), re.M):
            add("option table", row.group(1), row.group(2), m.start(1) + row.start())
    # a command line in a code block with a trailing comment: `--objective electra|mlm … # default: electra`
    for m in re.finditer(r"(--[a-z0-9][a-z0-9-]*) [a-z0-9_.-]+(?:\|[a-z0-9_.-]+)+[^\n#]*# default: ([^\s,;]+)", text):
        add("# default: V (code comment)", m.group(1), m.group(2), m.start())
    for para, start in _option_lists(text):
        seen = set()
        for m in re.finditer(r"(^|[:,(/]\s*|\band\s+|\bor\s+)" + OPT, para):
            opt, value = m.group(2), m.group(3)
            if opt in seen:
                continue
            seen.add(opt)
            if value and re.fullmatch(r"[0-9][0-9.e-]*|[a-z][a-z0-9_,.-]*", value) and "|" not in value:
                add("option list", opt, value, start + m.start(2) - 1)
    return sorted(found.values(), key=lambda s: s.pos)


def _option_lists(text: str):
    """Paragraphs that list options with their defaults: "Options (…)" paragraphs and those under an Options
    heading → (paragraph, its offset)."""
    pos = 0
    under_options = False
    for para in re.split(r"(\n\s*\n)", text):
        if para.lstrip().startswith("#"):
            under_options = bool(re.match(r"#+\s*Options\b", para.lstrip()))
        elif para.strip() and (under_options or re.match(r"\s*Options\b", para)):
            yield para, pos
        pos += len(para)


def _paragraphs(text: str) -> list[tuple[int, int]]:
    """(start, end) of every blank-line-separated paragraph (a fenced code block without blank lines is one)."""
    out, start = [], 0
    for m in re.finditer(r"\n\s*\n", text):
        out.append((start, m.start()))
        start = m.end()
    return out + [(start, len(text))]


def _context(text: str, st: Statement, commands, options) -> list[tuple[str, ...]]:
    """The commands a statement may be about: those named in its own paragraph before it, else in the nearest
    paragraph before that names any, that have the option (``denki experiment …`` stands for its subcommands)."""
    having = options[st.option]

    def named(start, end):
        found = []
        for m in COMMAND.finditer(text, start, end):
            for path in ((m.group(1), m.group(2)), (m.group(1),)):
                if path in having:
                    found.append(path)
                    break
            else:  # a command group named without its subcommand: the subcommands that have the option
                found += [p for p in having if p[:1] == (m.group(1),) and len(p) == 2]
        return found

    paras = _paragraphs(text)
    i = next(k for k, (a, b) in enumerate(paras) if a <= st.pos <= b)
    own = named(paras[i][0], st.pos)
    if own:
        return list(dict.fromkeys(own))
    for a, b in reversed(paras[:i]):
        found = named(a, b)
        if found:
            return list(dict.fromkeys(found))
    return [next(iter(having))] if len(having) == 1 else []


_UNITS = {"MiB": 2 ** 20, "s": 1, "points": 0.01, "%": 0.01}


def _number(s: str):
    m = re.fullmatch(r"([0-9][0-9,]*(?:\.[0-9]+)?(?:e-?[0-9]+)?)\s*(MiB|s|points|%)?", s)
    if not m:
        return None
    return float(m.group(1).replace(",", "")) * _UNITS.get(m.group(2) or "", 1)


def _literal(stated: str):
    """The stated default as a comparable value, or None when it is descriptive (words, not a value)."""
    s = stated.strip().strip("`").strip()
    if s in ("(required)", "required"):
        return ("required",)
    if s in ("off", "on"):
        return ("flag", s == "on")
    n = _number(s)
    if n is not None:
        return ("number", n)
    if re.fullmatch(r"[0-9]+( [0-9]+)+", s):
        return ("list", [int(x) for x in s.split()])
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.,+-]*", s) and not (s[:1].isupper() and s[1:2].islower()):
        return ("word", s)
    return None


def _matches(lit, action: argparse.Action) -> bool:
    kind, *v = lit
    d = action.default
    if kind == "required":
        return action.required
    if kind == "flag":
        return isinstance(action, argparse._StoreTrueAction) and d is False and not v[0]
    if kind == "number":
        return isinstance(d, (int, float)) and not isinstance(d, bool) and abs(float(d) - v[0]) <= 1e-9 * max(1, abs(v[0]))
    if kind == "list":
        return isinstance(d, (list, tuple)) and list(d) == v[0]
    return str(d) == v[0]


def _help_states(action: argparse.Action, lit) -> bool:
    """The option's --help states the same default (for options whose argparse default is None)."""
    h = action.help or ""
    kind, *v = lit
    if kind == "number":
        nums = [_number(x) for x in re.findall(r"[0-9][0-9,]*(?:\.[0-9]+)?(?:e-?[0-9]+)?", h)]
        return any(x is not None and abs(x - v[0]) <= 1e-9 * max(1, abs(v[0])) for x in nums)
    if kind == "word":
        return re.search(rf"\b{re.escape(v[0])}\b", h) is not None
    return False


def check_all():
    commands = _commands()
    options = _options(commands)
    checked, problems, skipped = [], [], []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for st in _statements(text, doc.relative_to(REPO).as_posix()):
            if st.option not in options:
                skipped.append(f"{st.where()}: {st.option} is no `denki` option (a script's): {st.stated!r}")
                continue
            paths = _context(text, st, commands, options)
            lit = _literal(st.stated)
            conditional = lit is None or bool(CONDITIONAL.search(st.stated))
            if not paths:
                defaults = {repr(a.default) for a in options[st.option].values()}
                if len(defaults) > 1:
                    skipped.append(f"{st.where()}: {st.option} ({st.stated!r}): no command named before it, and "
                                   f"its commands differ: {sorted(' '.join(p) for p in options[st.option])}")
                    continue
                paths = list(options[st.option])
            verdicts = []
            for path in paths:
                action = options[st.option][path]
                what = (f"{st.where()} [{st.pattern}] denki {' '.join(path)} {st.option}: doc {st.stated!r}, "
                        f"argparse {action.default!r}")
                if lit is not None and not CONDITIONAL.search(st.stated) and _matches(lit, action):
                    verdicts.append((True, what))
                elif action.default is None and (conditional or _help_states(action, lit)):
                    verdicts.append((True, what + " (decided at run time; " + (
                        "the doc describes it)" if conditional else "--help states the same value)")))
                else:
                    verdicts.append((False, what))
            ok = [w for good, w in verdicts if good]
            if ok:  # the statement holds for a command it is about (the first that fits is listed)
                checked.append(ok[0])
            else:
                problems.append(" / ".join(w for _, w in verdicts))
    return checked, problems, skipped


def test_documented_defaults_are_the_argparse_defaults():
    checked, problems, skipped = check_all()
    print("checked:\n  " + "\n  ".join(checked))
    print("skipped:\n  " + "\n  ".join(skipped))
    assert not problems, "docs state another default than the code:\n  " + "\n  ".join(problems)


def test_the_statements_found_cover_every_pattern():
    """The parser still finds the docs' statements (a reworded doc must not silently check nothing)."""
    checked, problems, _ = check_all()
    found = {re.search(r"\[(.*?)\]", c).group(1) for c in checked + problems}
    assert {name for name, _ in PATTERNS} | {"option table", "option list", "# default: V (code comment)"} <= found, found
    assert len(checked) + len(problems) >= 40


@pytest.mark.parametrize("stated,expected", [("2,048", 2048.0), ("2 MiB", 2 * 2 ** 20), ("2 points", 0.02),
                                             ("150 s", 150.0), ("0.95", 0.95)])
def test_numbers_with_units(stated, expected):
    assert _number(stated) == pytest.approx(expected)
