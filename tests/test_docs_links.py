"""Every relative link in README.md, docs/, experiments/ and checkpoints/ resolves: the file or folder exists, and an
``#anchor`` into a markdown file matches one of its headings (GitHub's slugs). The house rules of the docs too:
README stays a user's guide (≤ 200 lines), docs/ holds guides and no experiment data, and experiments/README.md lists
every study folder. Fast: text only."""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def _markdown_files() -> list[Path]:
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for top in ("experiments", "checkpoints"):
        files += sorted((REPO / top).rglob("*.md")) if (REPO / top).is_dir() else []
    return files


def _unfenced(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def _prose(text: str) -> str:
    """The text outside code blocks and inline code (links there are examples, not links)."""
    return "\n".join(re.sub(r"`[^`]*`", "", line) for line in _unfenced(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped (letters of any script, digits,
    ``-`` and ``_`` kept), each space a ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    kept = [c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM"]
    return "".join(kept).replace(" ", "-")


@lru_cache(maxsize=None)
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _unfenced(path.read_text(encoding="utf-8")):  # a heading's inline code is part of its anchor
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return frozenset(out)


def broken_links(path: Path) -> list[str]:
    bad = []
    for target in LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(REPO)}: ({target})"
        if not dest.exists():
            bad.append(f"{where} → no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{where} → no heading #{anchor} in {dest.relative_to(REPO)}")
    return bad


def test_slugs_follow_githubs_rules():
    assert slug("The quickstart") == "the-quickstart"
    assert slug("Export and serving") == "export-and-serving"
    assert slug("`denki serve` under load (2 cores)") == "denki-serve-under-load-2-cores"
    assert slug("T = 2 and the answerable head") == "t--2-and-the-answerable-head"
    assert slug("回答抽出の例") == "回答抽出の例"


def test_every_relative_link_resolves():
    bad = [b for p in _markdown_files() for b in broken_links(p)]
    assert not bad, f"{len(bad)} broken links:\n" + "\n".join(bad[:60])


def test_readme_is_a_users_guide():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    # history belongs to experiments/: no issue numbers, no machine letters
    assert not re.search(r"\bissue \d+|\(issue|machine [A-D]\b", text)


def test_docs_hold_guides_and_experiments_an_index_of_every_study():
    assert not [p for p in (REPO / "docs").iterdir() if p.is_dir()], "docs/ holds guides only: studies go to experiments/"
    index = (REPO / "experiments" / "README.md").read_text(encoding="utf-8")
    studies = sorted(p.name for p in (REPO / "experiments").iterdir() if p.is_dir())
    missing = [s for s in studies if f"]({s}/)" not in index]
    assert not missing, f"experiments/README.md does not list {missing}"
    no_readme = [s for s in studies if not (REPO / "experiments" / s / "README.md").is_file()]
    assert not no_readme, f"studies without a README: {no_readme}"
