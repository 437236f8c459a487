"""Matplotlib set-up shared by every report and the demo: headless backend, a Japanese-capable font if any."""
from __future__ import annotations

_DONE = False
JAPANESE_FONTS = ("IPAexGothic", "IPAGothic", "Noto Sans CJK JP", "Noto Sans JP", "TakaoGothic")


def setup_matplotlib():
    """Use the Agg backend and the first installed Japanese font (labels are often Japanese); returns pyplot."""
    global _DONE
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    if not _DONE:
        from matplotlib import font_manager

        names = {f.name for f in font_manager.fontManager.ttflist}
        for name in JAPANESE_FONTS:
            if name in names:
                matplotlib.rcParams["font.family"] = [name, "DejaVu Sans"]
                break
        _DONE = True
    return plt
