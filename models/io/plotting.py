"""Matplotlib set-up shared by every report and the demo: headless backend and a Japanese font that ships with
the package ``matplotlib-fontja`` (IPAexGothic), so plots look the same on every machine, system fonts or none."""
from __future__ import annotations

_DONE = False
#: used only when matplotlib-fontja is missing (it is a dependency): the first of these installed on the system
JAPANESE_FONTS = ("IPAexGothic", "IPAGothic", "Noto Sans CJK JP", "Noto Sans JP", "TakaoGothic")
#: per-glyph fallback after the Japanese font (matplotlib's own font: e.g. U+2212 MINUS SIGN, missing from IPAex)
FALLBACK_FONT = "DejaVu Sans"


def _packaged_japanese_font(font_manager) -> str | None:
    """Register matplotlib-fontja's font file with matplotlib and return its family name (None if not installed)."""
    try:
        from matplotlib_fontja import get_font_ttf_path
    except ImportError:
        return None
    path = get_font_ttf_path()
    font_manager.fontManager.addfont(path)
    return font_manager.FontProperties(fname=path).get_name()


def setup_matplotlib():
    """Use the Agg backend and a Japanese font (labels are often Japanese); returns pyplot."""
    global _DONE
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    if not _DONE:
        from matplotlib import font_manager

        name = _packaged_japanese_font(font_manager)
        if name is None:
            installed = {f.name for f in font_manager.fontManager.ttflist}
            name = next((n for n in JAPANESE_FONTS if n in installed), None)
        matplotlib.rcParams["font.family"] = [name, FALLBACK_FONT] if name else [FALLBACK_FONT]
        _DONE = True
    return plt
