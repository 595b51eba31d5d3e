"""hub: endpoint and token handling, resolve metadata, paths-info, the token across redirects."""

from __future__ import annotations

import hashlib
import os

import pytest

from specsuite import hub
from specsuite.download import Policy, download
from specsuite.errors import UserError

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


def test_token_goes_to_the_hub_only_across_a_redirect(monkeypatch, tmp_path):
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


def test_missing_token_for_gated_repo(monkeypatch, tmp_path):
    from fakehub import FakeHub

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    with FakeHub({"m.gguf": b"x"}, token="hf_secret") as hf:
        monkeypatch.setenv("HF_ENDPOINT", hf.url)
        with hub.session() as s, pytest.raises(UserError, match=r"HTTP 401 .*set HF_TOKEN"):
            hub.file_meta(s, REPO, REV, "m.gguf")
