"""API keys of `denki serve` (serve/http_auth.py): `--api-key-file FILE` and `DENKI_API_KEY`, `Authorization: Bearer
KEY`, 401 on every path but /healthz and /readyz (checked before the body is read), rotation by rewriting the
file, no key in /v1/models, the start-up warnings, a bad key file refused at start, and two worker processes
that each read the file.
"""
import os
import sys
import time

import httpx
import pytest

pytest.importorskip("fastapi")

from denki.models.io.errors import DenkiError  # noqa: E402
from denki.serve import http_auth  # noqa: E402
from denki.serve.http import ServerSettings, create_app  # noqa: E402
from denki.serve.http_auth import API_KEY_ENV, ApiKeys  # noqa: E402

from .conftest import serve_two_workers  # noqa: E402

KEYS = ["k-alpha-0123456789", "k-beta-9876543210"]


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)


def _key_file(path, keys, comment=True):
    path.write_text(("# rotated weekly\n\n" if comment else "") + "".join(f"  {k}  \n" for k in keys),
                    encoding="utf-8")
    return path


def _bump_mtime(path, step_ns: int) -> None:
    """Make sure the file's mtime differs from the last one read (filesystems with coarse timestamps)."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + step_ns))


def _bearer(key):
    return {"Authorization": f"Bearer {key}"}


def _assert_401(r):
    assert r.status_code == 401, (r.request.url, r.status_code, r.text)
    assert r.headers["www-authenticate"] == "Bearer"
    err = r.json()["error"]
    assert err["code"] == "unauthorized" and err["message"] and err["details"] is None


def test_every_path_but_health_and_readiness_needs_a_key(cls_pred, qa_pred, tmp_path):
    from fastapi.testclient import TestClient
    from prometheus_client.parser import text_string_to_metric_families

    path = _key_file(tmp_path / "keys.txt", KEYS)
    app = create_app(classifier=cls_pred, qa=qa_pred, settings=ServerSettings(api_key_file=str(path)))
    paths = sorted({r.path for r in app.routes if hasattr(r, "path")})
    assert {"/v1/classify", "/v1/answer", "/v1/answer/batch", "/v1/models", "/metrics", "/docs", "/openapi.json",
            "/docs/oauth2-redirect", "/healthz", "/readyz"} <= set(paths)
    with TestClient(app) as c:
        refused = 0
        for p in paths + ["/no/such/path"]:
            for method in ("GET", "POST"):
                r = c.request(method, p, json={"texts": ["a"]})
                if p in ("/healthz", "/readyz"):
                    assert r.status_code in (200, 405), (method, p, r.status_code)
                    continue
                _assert_401(r)  # unknown paths too: 401, not 404
                refused += 1
        # no key, another scheme, an empty token, a wrong key, a key with a character more or less
        for headers in ({}, {"Authorization": f"Basic {KEYS[0]}"}, {"Authorization": "Bearer"},
                        {"Authorization": "Bearer "}, _bearer("wrong"), _bearer(KEYS[0] + "x"), _bearer(KEYS[0][:-1]),
                        {"X-Api-Key": KEYS[0]}):
            _assert_401(c.post("/v1/classify", json={"texts": ["a"]}, headers=headers))
            refused += 1
        # refused before the body is read: a body over the limit gets 401, not 413
        _assert_401(c.post("/v1/classify", content=b"x" * (3 * 1024 * 1024)))
        refused += 1
        for key in KEYS:  # every key of the file works; the scheme is case-insensitive
            for scheme in ("Bearer", "bearer"):
                r = c.post("/v1/classify", json={"texts": ["ログインできません"]},
                           headers={"Authorization": f"{scheme} {key}"})
                assert r.status_code == 200, r.text
        for p in ("/metrics", "/docs", "/openapi.json", "/v1/models"):
            assert c.get(p, headers=_bearer(KEYS[1])).status_code == 200, p
        assert c.get("/nope", headers=_bearer(KEYS[0])).status_code == 404  # with a key, unknown is unknown
        assert c.get("/healthz").json() == {"status": "ok"} and c.get("/readyz").status_code == 200
        models = c.get("/v1/models", headers=_bearer(KEYS[0]))
        assert models.json()["api_keys"] == 2 and models.json()["settings"]["api_key_file"] == str(path)
        assert not any(k in models.text for k in KEYS)  # the keys are never shown
        assert not any(k in c.get("/openapi.json", headers=_bearer(KEYS[0])).text for k in KEYS)
        text = c.get("/metrics", headers=_bearer(KEYS[0])).text
    samples = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
    unauthorized = sum(v for n, lab, v in samples if n == "denki_http_errors_total" and lab["code"] == "unauthorized")
    assert unauthorized == refused
    assert sum(v for n, lab, v in samples if n == "denki_http_requests_total" and lab["status"] == "401") == refused


def test_keys_rotate_when_the_file_changes(cls_pred, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    path = _key_file(tmp_path / "keys.txt", [KEYS[0]])
    monkeypatch.setattr(http_auth, "STAT_INTERVAL_S", 0.0)  # look at the file on every request
    app = create_app(classifier=cls_pred, settings=ServerSettings(api_key_file=str(path)))
    body = {"texts": ["料金について"]}
    with TestClient(app) as c:
        assert c.post("/v1/classify", json=body, headers=_bearer(KEYS[0])).status_code == 200
        _key_file(path, [KEYS[0], KEYS[1]])  # add the new key, move the clients ...
        _bump_mtime(path, 1_000_000)
        assert c.post("/v1/classify", json=body, headers=_bearer(KEYS[1])).status_code == 200
        assert c.post("/v1/classify", json=body, headers=_bearer(KEYS[0])).status_code == 200
        _key_file(path, [KEYS[1]], comment=False)  # ... then retire the old one
        _bump_mtime(path, 2_000_000)
        _assert_401(c.post("/v1/classify", json=body, headers=_bearer(KEYS[0])))
        assert c.post("/v1/classify", json=body, headers=_bearer(KEYS[1])).status_code == 200
        assert c.get("/v1/models", headers=_bearer(KEYS[1])).json()["api_keys"] == 1


def test_key_file_rereads_are_rate_limited_and_fail_closed(tmp_path):
    path = _key_file(tmp_path / "keys.txt", [KEYS[0]])
    keys = ApiKeys(str(path), stat_interval_s=3600)
    auth = [(b"authorization", f"Bearer {KEYS[0]}".encode())]
    new = [(b"authorization", f"Bearer {KEYS[1]}".encode())]
    assert keys.allows(auth) and not keys.allows(new)
    _key_file(path, [KEYS[1]])
    _bump_mtime(path, 1_000_000)
    assert keys.allows(auth) and not keys.allows(new)  # not looked at again within the interval
    keys.stat_interval_s = 0
    assert keys.allows(new) and not keys.allows(auth)
    os.remove(path)  # a vanished file keeps the keys read last
    assert keys.allows(new)
    path.write_text("# nothing left\n", encoding="utf-8")  # a file emptied of keys refuses everyone
    _bump_mtime(path, 3_000_000)
    assert not keys.allows(new) and not keys.allows(auth) and len(keys) == 0
    assert not keys.allows([])


def test_denki_api_key_from_the_environment(cls_pred, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    monkeypatch.setenv(API_KEY_ENV, " env-key-42 ")
    body = {"texts": ["料金について"]}
    with TestClient(create_app(classifier=cls_pred)) as c:  # no file: the variable alone turns keys on
        _assert_401(c.post("/v1/classify", json=body))
        assert c.post("/v1/classify", json=body, headers=_bearer("env-key-42")).status_code == 200
        models = c.get("/v1/models", headers=_bearer("env-key-42"))
        assert models.json()["api_keys"] == 1 and "env-key-42" not in models.text
    path = _key_file(tmp_path / "keys.txt", [KEYS[0]])
    with TestClient(create_app(classifier=cls_pred, settings=ServerSettings(api_key_file=str(path)))) as c:
        for key in (KEYS[0], "env-key-42"):  # the file and the variable: the union
            assert c.post("/v1/classify", json=body, headers=_bearer(key)).status_code == 200
    # a process that should have the variable (where the server started it was set) refuses to serve without it
    monkeypatch.delenv(API_KEY_ENV)
    with pytest.raises(DenkiError, match=API_KEY_ENV):
        create_app(classifier=cls_pred, settings=ServerSettings(api_key_env=True))
    from denki.serve.serve_settings import ServeSettings

    assert ServeSettings().server_settings().api_key_env is False
    monkeypatch.setenv(API_KEY_ENV, "env-key-42")
    assert ServeSettings().server_settings().api_key_env is True


def test_bad_key_file_is_refused_at_start(tmp_path, onnx_classifier, capsys):
    from denki.app.cli import main

    missing = tmp_path / "missing-keys.txt"
    with pytest.raises(DenkiError, match="missing-keys.txt: no such file"):
        ServerSettings(api_key_file=str(missing))
    empty = tmp_path / "empty-keys.txt"
    empty.write_text("# only a comment\n\n   \n", encoding="utf-8")
    with pytest.raises(DenkiError, match="empty-keys.txt: no key in it"):
        ServerSettings(api_key_file=str(empty))
    spaced = tmp_path / "spaced-keys.txt"
    spaced.write_text("secret with spaces\n", encoding="utf-8")
    with pytest.raises(DenkiError, match="spaced-keys.txt, line 1") as e:
        ServerSettings(api_key_file=str(spaced))
    assert "secret" not in str(e.value)  # errors name the file and line, never the key
    for bad in (missing, empty):  # the command stops with the reason before anything loads
        assert main(["serve", "--classifier", str(onnx_classifier), "--api-key-file", str(bad)]) == 2
        assert bad.name in capsys.readouterr().err
    rel = ServerSettings(api_key_file=os.path.relpath(_key_file(tmp_path / "k.txt", KEYS)))
    assert rel.api_key_file == str(tmp_path / "k.txt")  # absolute: every worker and replica reads the same file


def test_start_warnings_for_a_non_loopback_host(tmp_path, monkeypatch):
    from denki.app.cli import build_parser
    from denki.app.cmd_serve import serve_settings, start_warnings

    def warnings(*argv):
        return start_warnings(serve_settings(build_parser().parse_args(["serve", "--classifier", "X", *argv])))

    assert warnings() == [] and warnings("--host", "localhost") == []
    (w,) = warnings("--host", "0.0.0.0")
    assert "0.0.0.0 without API keys" in w and "--api-key-file" in w and "TLS" in w
    path = _key_file(tmp_path / "keys.txt", KEYS)
    (w,) = warnings("--host", "0.0.0.0", "--api-key-file", str(path))
    assert "without API keys" not in w and "TLS" in w
    monkeypatch.setenv(API_KEY_ENV, "env-key-42")
    (w,) = warnings("--host", "10.0.0.5")
    assert "without API keys" not in w
    args = build_parser().parse_args(["serve", "--classifier", "X", "--api-key-file", os.path.relpath(path)])
    assert serve_settings(args).with_checked_api_keys().api_key_file == str(path)
    assert build_parser().parse_args(["serve", "--classifier", "X"]).api_key_file is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="two uvicorn workers: Linux CI")
def test_two_workers_each_read_the_key_file(onnx_classifier, tmp_path):
    """`denki serve --workers 2 --api-key-file FILE`: both workers refuse without a key and accept one of the file
    (a fresh connection per request, so both answer); a rotation reaches both within a second or so."""
    from prometheus_client.parser import text_string_to_metric_families

    path = _key_file(tmp_path / "keys.txt", [KEYS[0]])
    with serve_two_workers(onnx_classifier, "--api-key-file", str(path)) as server:
        assert len(server.pids) == 2, f"only worker(s) {server.pids} answered"
        body = {"texts": ["料金について"]}
        for _ in range(6):
            _assert_401(httpx.post(server.url + "/v1/classify", json=body, timeout=30))
            r = httpx.post(server.url + "/v1/classify", json=body, headers=_bearer(KEYS[0]), timeout=30)
            assert r.status_code == 200 and r.json()["model_version"], r.text
        _key_file(path, [KEYS[1]])
        _bump_mtime(path, 1_000_000)
        time.sleep(1.3)  # each worker looks at the file at most once a second
        for _ in range(6):
            _assert_401(httpx.post(server.url + "/v1/classify", json=body, headers=_bearer(KEYS[0]), timeout=30))
            assert httpx.post(server.url + "/v1/classify", json=body, headers=_bearer(KEYS[1]),
                              timeout=30).status_code == 200
        _assert_401(httpx.get(server.url + "/metrics", timeout=10))
        text = httpx.get(server.url + "/metrics", headers=_bearer(KEYS[1]), timeout=10).text
        version = httpx.get(server.url + "/v1/models", headers=_bearer(KEYS[1]), timeout=10).json()[
            "model_versions"]["classifier"]
    samples = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
    assert sum(v for n, lab, v in samples if n == "denki_http_errors_total" and lab["code"] == "unauthorized") == 13
    info = [(lab, v) for n, lab, v in samples if n == "denki_model_info"]
    assert info == [({"model": "classifier", "version": version}, 1.0)]  # one series over both workers (livemax)
    assert server.proc.returncode == 0, server.out[-3000:]
