"""The load test of `denki serve` (bench/serve_load.py with the compiled bench/loadgen.c): the request mix, the
generator's loopback-only rule, and one short end-to-end run of each loop against a real server.

Function only, seconds long: the measurements themselves are experiments/serve-load/run.sh.
"""
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench import serve_load  # noqa: E402

needs_cc = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler")


def test_request_mix_follows_the_shares():
    texts = ["ログインできません", "請求書の再発行", "パスワードを忘れた", "解約したい"]
    reqs = serve_load.make_requests(texts, [("何時?", "会議は10時から。")], serve_load.parse_mix(serve_load.DEFAULT_MIX),
                                    n=200, seed=1, max_text_chars=50)
    counts = {name: sum(1 for c, _ in reqs if serve_load.CLASSES[c] == name) for name in serve_load.CLASSES}
    assert counts == {"classify": 170, "badjson": 10, "toolong": 10, "qa": 10}
    for cid, raw in reqs:
        head, body = raw.split(b"\r\n\r\n", 1)
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.startswith(b"Content-Length")))
        assert length == len(body)
        text = body.decode("utf-8")  # every body is valid UTF-8: broken JSON is cut at a character
        name = serve_load.CLASSES[cid]
        if name == "badjson":
            with pytest.raises(json.JSONDecodeError):
                json.loads(text)
        elif name == "toolong":
            assert len(json.loads(text)["texts"][0]) == 51
        elif name == "classify":
            assert 1 <= len(json.loads(text)["texts"]) <= 4 and head.startswith(b"POST /v1/classify ")
        else:
            assert head.startswith(b"POST /v1/answer ")
    with pytest.raises(SystemExit):
        serve_load.parse_mix("classify=1,bogus=2")


@needs_cc
def test_loadgen_refuses_other_hosts(tmp_path):
    binary = serve_load.compile_loadgen(tmp_path / "loadgen")
    reqs = tmp_path / "r.txt"
    serve_load.write_requests(reqs, [(0, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")])
    r = subprocess.run([str(binary), "--host", "10.1.2.3", "--port", "80", "--requests", str(reqs), "--duration",
                        "1"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "loopback" in r.stderr


@needs_cc
@pytest.mark.parametrize("rate", [0, 40])
def test_load_run_end_to_end(onnx_classifier, onnx_qa, tmp_path, rate):
    """A short closed-loop (capacity) and open-loop run: every request recorded with its status, the mix's
    outcomes where they belong (valid → 200, broken or over-long → 422), RSS and recovery reported."""
    out = tmp_path / "run.json"
    r = subprocess.run([sys.executable, str(REPO / "bench" / "serve_load.py"), "run", "--classifier",
                        str(onnx_classifier), "--qa", str(onnx_qa), "--workers", "1", "--rate", str(rate),
                        "--duration", "2", "--warmup", "0.5", "--connections", "4", "--max-text-chars", "20000",
                        "--data", str(REPO / "samples" / "routing_dev.jsonl"), "--distinct-requests", "200",
                        "--rss-every", "0.5", "--rss-warmup-s", "0", "--label", "t", "--workdir", str(tmp_path),
                        "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    s = res["summary"]
    assert s["requests"] > 10 and s["status"].get("200", 0) > 0
    by = s["by_class"]
    assert set(by["classify"]["status"]) <= {"200", "503"}
    for bad in ("badjson", "toolong"):
        if bad in by:
            assert set(by[bad]["status"]) <= {"422", "503"}, by[bad]
    assert res["loadgen"]["conn_errors"] == 0 and res["loadgen"]["timeouts"] == 0
    if rate:
        assert abs(s["offered_rps"] - rate) <= 5  # the open loop kept its rate
    assert res["recovery"]["ok"] == res["recovery"]["n"] and res["rss"]["peak_mib"] > 0
    # graceful exit: uvicorn (one process) re-raises the SIGTERM it handled once it has shut down
    assert res["server_exit"] in (0, -signal.SIGTERM)
    assert "| offered req/s |" in r.stdout
