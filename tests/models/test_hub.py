"""hub: endpoint and token handling, resolve metadata, paths-info, the token across redirects."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time

import pytest

from specsuite.common.errors import UserError
from specsuite.models import hub
from specsuite.models.download import download
from specsuite.models.http import Policy

pytest_plugins = ["fakehub"]
REPO, REV = "test-org/test-GGUF", "0123456789abcdef0123456789abcdef01234567"  # the fake Hub's defaults
POLICY = Policy(backoff=0.01, chunk=64 << 10, margin=0)


def test_endpoint_defaults_and_env(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert (
        hub.resolve_url("o/r", REV, "a b/c.gguf") == f"https://huggingface.co/o/r/resolve/{REV}/a%20b/c.gguf"
    )
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.example:8080/")
    assert hub.resolve_url("o/r", REV, "c.gguf") == f"http://mirror.example:8080/o/r/resolve/{REV}/c.gguf"


def test_head_meta_reads_linked_headers(fakehub, payload):
    with hub.session() as s:
        meta = hub.head_meta(s, REPO, REV, "m.gguf")
    assert meta == hub.FileMeta(len(payload), hashlib.sha256(payload).hexdigest(), REV)
    assert fakehub.log[-1]["method"] == "HEAD"


def test_head_meta_404_names_what_to_check(fakehub):
    with hub.session() as s, pytest.raises(UserError, match=r"HTTP 404 for test-org/test-GGUF/nope\.gguf"):
        hub.head_meta(s, REPO, REV, "nope.gguf")


def test_paths_info(fakehub, payload):
    fakehub.add("sub/n.gguf", b"abc")
    with hub.session() as s:
        got = hub.paths_info(s, REPO, REV, ["m.gguf", "sub/n.gguf"])
    assert got["m.gguf"] == hub.FileMeta(len(payload), hashlib.sha256(payload).hexdigest())
    assert got["sub/n.gguf"].sha256 == hashlib.sha256(b"abc").hexdigest()
    post = next(r for r in fakehub.log if r["method"] == "POST")
    assert post["path"] == f"/api/models/{REPO}/paths-info/{REV}"


def test_paths_info_missing_path_is_an_error(fakehub):
    with hub.session() as s, pytest.raises(UserError, match=r"has no file 'gone\.gguf' at revision"):
        hub.paths_info(s, REPO, REV, ["m.gguf", "gone.gguf"])


def test_token_goes_to_the_hub_only_across_a_redirect(monkeypatch, tmp_path, hf_home):
    from fakehub import FakeHub

    data = os.urandom(300_000)
    with FakeHub() as cdn, FakeHub({"m.gguf": data}, token="hf_secret", cdn=cdn) as hf:
        monkeypatch.setenv("HF_ENDPOINT", hf.url)
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
        with hub.session() as s:
            meta = hub.file_meta(s, REPO, REV, "m.gguf")
            status = download(hub.resolve_url(REPO, REV, "m.gguf"), tmp_path / "m.gguf", size=meta.size,
                              sha256=meta.sha256, sess=s, policy=POLICY)  # fmt: skip
        assert status == "downloaded" and (tmp_path / "m.gguf").read_bytes() == data
        assert {r["headers"].get("Authorization") for r in hf.log} == {"Bearer hf_secret"}
        assert [r["kind"] for r in hf.log] == ["resolve", "resolve"]  # HEAD, then GET answered with 302
        assert len(cdn.log) == 1 and "Authorization" not in cdn.log[0]["headers"]


def test_missing_token_for_gated_repo(monkeypatch, tmp_path, hf_home):
    from fakehub import FakeHub

    with FakeHub({"m.gguf": b"x"}, token="hf_secret") as hf:
        monkeypatch.setenv("HF_ENDPOINT", hf.url)
        with hub.session() as s, pytest.raises(UserError, match=r"HTTP 401 .*set HF_TOKEN"):
            hub.file_meta(s, REPO, REV, "m.gguf")


@pytest.mark.parametrize(
    "value",
    [
        "huggingface.co",
        "ftp://mirror.example",
        "http://",
        "http://mirror.example:port",
        "http://mirror.example:99999",
        "http://mir ror.example",
        "http://user:pw@mirror.example",
        "https://mirror.example/?token=1",
        "https://mirror.example/#x",
        "http://[::1",  # urlsplit itself raises on an unclosed IPv6 bracket
    ],
)
def test_malformed_endpoint_is_one_message_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("HF_ENDPOINT", value)
    with pytest.raises(UserError) as exc:
        hub.resolve_url(REPO, REV, "m.gguf")
    assert str(exc.value) == (
        f"HF_ENDPOINT={value!r} is not an http(s)://host[:port][/path] URL; fix it or unset it "
        "(the default is https://huggingface.co)"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        ("https://hf-mirror.example/hub/", "https://hf-mirror.example/hub"),
        ("http://[::1]:9000", "http://[::1]:9000"),
    ],
)
def test_good_endpoints(monkeypatch, value, expected):
    monkeypatch.setenv("HF_ENDPOINT", value)
    assert hub.endpoint() == expected


# ---------------------------------------------------------------- metadata requests retry like downloads


class Notes(list):
    def __call__(self, msg: str) -> None:
        self.append(msg)


def test_head_retried_after_a_dropped_connection(fakehub, payload):
    fakehub.fault("HEAD", "drop")
    notes = Notes()
    with hub.session() as s:
        meta = hub.head_meta(s, REPO, REV, "m.gguf", policy=POLICY, note=notes)
    assert meta is not None and meta.sha256 == hashlib.sha256(payload).hexdigest()
    assert [r["method"] for r in fakehub.log] == ["HEAD", "HEAD"]
    assert notes[0].startswith(f"{REPO}/m.gguf at {REV}: ConnectionError") and "retry 1/10" in notes[0]


def test_head_retried_on_server_errors(fakehub, payload):
    fakehub.fault("HEAD", "status:503", "status:502", "status:408")
    with hub.session() as s:
        meta = hub.file_meta(s, REPO, REV, "m.gguf", policy=POLICY, note=Notes())
    assert meta.size == len(payload)
    assert [r["method"] for r in fakehub.log] == ["HEAD"] * 4


def test_paths_info_honours_retry_after(fakehub, payload):
    fakehub.fault("POST", "status:429:1")
    notes = Notes()
    with hub.session() as s:
        got = hub.paths_info(s, REPO, REV, ["m.gguf"], policy=POLICY, note=notes)
    assert got["m.gguf"].size == len(payload)
    assert notes == [f"paths-info of {REPO} at {REV}: HTTP 429; retry 1/10 in 1.0 s"]


def test_metadata_refusals_are_not_retried(fakehub):
    fakehub.fault("POST", "status:403", "status:500")
    with hub.session() as s, pytest.raises(UserError, match=r"HTTP 403 for paths-info .*set HF_TOKEN"):
        hub.paths_info(s, REPO, REV, ["m.gguf"], policy=POLICY, note=Notes())
    assert len([r for r in fakehub.log if r["method"] == "POST"]) == 1


def test_metadata_gives_up_after_the_attempts(fakehub):
    policy = Policy(attempts=2, backoff=0.01, max_backoff=0.02)
    fakehub.fault("HEAD", *["status:500"] * 3)
    with hub.session() as s, pytest.raises(UserError) as exc:
        hub.head_meta(s, REPO, REV, "m.gguf", policy=policy, note=Notes())
    assert str(exc.value).startswith(
        f"giving up on {REPO}/m.gguf at {REV} after 2 retries (last: HTTP 500); check the network and "
        f"HF_ENDPOINT ({fakehub.url})"
    )
    assert len(fakehub.log) == 3


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: bound, then let go."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_connection_fails_at_once(monkeypatch):
    """Nothing listens there: the first refusal is the answer, not ten retries over minutes. The real
    policy's waits (1 s backoff up to 60 s, ten retries) would take minutes if any retry happened."""
    port = closed_port()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    notes = Notes()
    t0 = time.monotonic()
    with hub.session() as s, pytest.raises(UserError) as exc:
        hub.head_meta(s, REPO, REV, "m.gguf", policy=Policy(), note=notes)
    assert time.monotonic() - t0 < 30  # generous: "at once instead of minutes" is the point
    assert notes == []
    assert str(exc.value) == (
        f"{REPO}/m.gguf at {REV}: connection refused at 127.0.0.1:{port} (not retried); "
        f"check the network and HF_ENDPOINT (http://127.0.0.1:{port})"
    )


def test_a_name_that_does_not_resolve_fails_at_once(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://hub.invalid")  # .invalid never resolves (RFC 2606)
    notes = Notes()
    with hub.session() as s, pytest.raises(UserError) as exc:
        hub.paths_info(s, REPO, REV, ["m.gguf"], policy=Policy(), note=notes)
    assert notes == []
    assert str(exc.value).startswith(
        f"paths-info of {REPO} at {REV}: the host name 'hub.invalid' does not resolve (not retried); "
    )


def test_a_reset_and_statuses_are_retried_in_a_row(fakehub, payload):
    """A reset, then 500 and 503: counted as three retries in a row, then the answer."""
    fakehub.fault("HEAD", "drop", "status:500", "status:503")
    notes = Notes()
    with hub.session() as s:
        meta = hub.head_meta(s, REPO, REV, "m.gguf", policy=POLICY, note=notes)
    assert meta is not None and meta.size == len(payload)
    kinds = [(n.split(": ")[1].split(";")[0], n.split("; ")[-1].split(" in ")[0]) for n in notes]
    assert kinds == [
        ("ConnectionError", "retry 1/10"),
        ("HTTP 500", "retry 2/10"),
        ("HTTP 503", "retry 3/10"),
    ]


def test_fetch_models_against_a_closed_port_is_one_error_line_in_seconds(tmp_path):
    """The command a user runs with a wrong HF_ENDPOINT: one error line naming the refusal, exit 2."""
    port = closed_port()
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{port}", "SPEC_CACHE_DIR": str(tmp_path / "c")}
    env.pop("HF_HUB_OFFLINE", None)
    cmd = [sys.executable, "-m", "specsuite", "fetch-models", "--models", "Qwen3-4B-Q4_K_M.gguf"]
    t0 = time.monotonic()
    proc = subprocess.run([*cmd, "--model-dir", str(tmp_path / "m")], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert time.monotonic() - t0 < 60  # generous: it took 3 min 55 s when refusals were retried
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: Qwen3-4B-Q4_K_M.gguf: ") and "retry" not in proc.stdout + proc.stderr
    assert line.endswith(
        f": connection refused at 127.0.0.1:{port} (not retried); check the network and HF_ENDPOINT "
        f"(http://127.0.0.1:{port})"
    )


# ---------------------------------------------------------------- the token and offline, as huggingface_hub


def test_token_read_as_huggingface_hub_reads_it(monkeypatch, hf_home, tmp_path):
    assert hub.token() is None
    hf_home.mkdir()
    (hf_home / "token").write_text("hf_from_home\n")
    assert hub.token() == "hf_from_home"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("  hf_from_path\r\n")
    monkeypatch.setenv("HF_TOKEN_PATH", str(elsewhere))
    assert hub.token() == "hf_from_path"
    monkeypatch.setenv("HF_TOKEN", "hf_from_env")
    assert hub.token() == "hf_from_env"


def test_unreadable_token_file_is_one_message_without_its_content(monkeypatch, hf_home, tmp_path):
    bad = tmp_path / "token"
    bad.write_bytes(b"hf_\xff\xfesecret")
    monkeypatch.setenv("HF_TOKEN_PATH", str(bad))
    with pytest.raises(UserError) as exc:
        hub.token()
    assert str(exc.value).startswith(f"cannot read the Hugging Face token file {bad} (UnicodeDecodeError)")
    assert "secret" not in str(exc.value)


def test_token_file_goes_to_the_hub_only_in_a_parallel_download(monkeypatch, tmp_path, hf_home):
    from fakehub import FakeHub

    hf_home.mkdir()
    (hf_home / "token").write_text("hf_filed")
    data = os.urandom(1_000_000)
    policy = Policy(backoff=0.01, chunk=64 << 10, margin=0, connections=4, parallel_min=0, part=128 << 10)
    with FakeHub() as cdn, FakeHub({"m.gguf": data}, token="hf_filed", cdn=cdn) as hf:
        monkeypatch.setenv("HF_ENDPOINT", hf.url)
        with hub.session() as s:
            download(hub.resolve_url(REPO, REV, "m.gguf"), tmp_path / "m.gguf", size=len(data),
                     sha256=hashlib.sha256(data).hexdigest(), sess=s, policy=policy)  # fmt: skip
        assert (tmp_path / "m.gguf").read_bytes() == data
        assert [r["headers"].get("Authorization") for r in hf.log] == ["Bearer hf_filed"]  # one resolve
        assert len(cdn.log) == 8 and not any("Authorization" in r["headers"] for r in cdn.log)


def test_offline_allows_no_request(monkeypatch, fakehub):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match=r"^HF_HUB_OFFLINE is set: no request to the Hub is allowed"):
        hub.session()
    assert fakehub.log == []
