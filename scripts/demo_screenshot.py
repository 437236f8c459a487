"""Take the README's demo screenshot: start `denki demo` on the quickstart's ONNX bundles (127.0.0.1, a free port),
drive headless Chromium (Debian's /usr/bin/chromium) through one routing request and one QA request, and save
docs/demo.png (routing) and docs/demo_qa.png.

    .venv/bin/python scripts/demo_screenshot.py [--classifier DIR --qa DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--classifier", default="runs/quickstart/classifier-onnx")
    ap.add_argument("--qa", default="runs/quickstart/qa-onnx")
    ap.add_argument("--out", default="docs")
    args = ap.parse_args()
    from playwright.sync_api import expect, sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "denki.app.cli", "demo", "--classifier", args.classifier, "--qa",
                             args.qa, "--port", str(port)], cwd=REPO,
                            env=dict(os.environ, GRADIO_ANALYTICS_ENABLED="False"))
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        qa_ex = json.loads(Path(args.qa, "parity_sample.json").read_text(encoding="utf-8"))["examples"]
        ex = next(e for e in qa_ex if len(e["context"]) < 600)
        with sync_playwright() as pw:
            b = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                   args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            page = b.new_page(viewport={"width": 1100, "height": 1250})
            page.goto(url, wait_until="domcontentloaded")
            page.locator("#route-input textarea").wait_for(timeout=60_000)
            page.locator("#route-input textarea").fill("日本で一番高い山はどこですか?")
            page.locator("#route-button").click()
            expect(page.locator("#route-output")).to_contain_text("振り分け先", timeout=30_000)
            page.screenshot(path=str(Path(args.out, "demo.png")), full_page=False)
            page.get_by_role("tab", name="回答抽出").click()
            page.locator("#qa-question textarea").fill(ex["question"])
            page.locator("#qa-passage textarea").fill(ex["context"])
            page.locator("#qa-button").click()
            expect(page.locator("#qa-output")).to_contain_text("回答", timeout=30_000)
            page.screenshot(path=str(Path(args.out, "demo_qa.png")), full_page=False)
            b.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(f"wrote {args.out}/demo.png and {args.out}/demo_qa.png")


if __name__ == "__main__":
    main()
