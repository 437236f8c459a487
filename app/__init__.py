"""denki command line and Gradio demo (thin layer over serve/, pretrain/ and models/)."""

if not __name__.startswith("denki."):  # one name per module: `app.x` and `denki.app.x` would be two copies
    raise ImportError("import denki.app, not app (every denki module lives under the denki namespace)")
