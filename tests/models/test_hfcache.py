"""The shared caches: files huggingface_hub (the real one) or llama.cpp already hold enter the model folder
without a download, only when they match; --hf-cache writes the layout huggingface_hub reads; HF_HUB_OFFLINE
makes no connection at all."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from pathlib import Path

import pytest

from specsuite.common.errors import UserError
from specsuite.models import hfcache, stamps
from specsuite.models.fetch import FetchOptions, fetch_models

pytest_plugins = ["fakehub"]
REPO, REV = "test-org/test-GGUF", "0123456789abcdef0123456789abcdef01234567"  # the fake Hub's defaults
DATA = os.urandom(300_000)
SHA = hashlib.sha256(DATA).hexdigest()


def _lock(tmp_path: Path, data: bytes = DATA, locked: bool = True, path: str = "sub/m.gguf") -> Path:
    vals = (
        f'size = {len(data)}\nsha256 = "{hashlib.sha256(data).hexdigest()}"\n'
        if locked
        else "locked = false\n"
    )
    lock = tmp_path / "models.lock"
    lock.write_text(
        f'version = 1\n[[model]]\nname = "m.gguf"\nsource = "hf"\nrepo = "{REPO}"\nrevision = "{REV}"\n'
        f'path = "{path}"\n{vals}'
    )
    return lock


def _fetch(tmp_path: Path, **kw) -> Path:
    if "lock" not in kw:
        kw["lock"] = _lock(tmp_path)
    opts = FetchOptions(models=["m.gguf"], model_dir=tmp_path / "models", tty=False, **kw)
    return fetch_models(opts)["m.gguf"]


def _blob(root: Path, data: bytes = DATA, repo: str = REPO) -> Path:
    """A blob and its snapshot link as huggingface_hub lays them out (see the test that uses the real one)."""
    blob = root / hfcache.repo_folder(repo) / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    snap = root / hfcache.repo_folder(repo) / "snapshots" / REV / "sub" / "m.gguf"
    snap.parent.mkdir(parents=True, exist_ok=True)
    snap.symlink_to(os.path.relpath(blob, snap.parent))
    return blob


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` with its mode, size and mtime: a cache that was only read stays equal."""
    return {
        str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def test_a_file_huggingface_hub_downloaded_is_used_without_a_request(tmp_path, fakehub, hf_home, capsys):
    import huggingface_hub  # the test extra installs it: the real tool, not our idea of its layout

    fakehub.add("sub/m.gguf", DATA)
    hf_path = huggingface_hub.hf_hub_download(
        REPO, "sub/m.gguf", revision=REV, cache_dir=hf_home / "hub", endpoint=fakehub.url
    )
    before, requests = _tree(hf_home / "hub"), len(fakehub.log)
    got = _fetch(tmp_path)
    assert got.read_bytes() == DATA and stamps.read_stamp(got) == SHA
    assert os.path.samefile(got, hf_path)  # a hard link: no byte copied
    assert len(fakehub.log) == requests  # locked: not even a HEAD
    assert _tree(hf_home / "hub") == before  # read, never written
    out, err = capsys.readouterr()
    assert "m.gguf  293.0 KiB  hf      Hugging Face cache (hard link)" in out
    blob = hf_home / "hub" / hfcache.repo_folder(REPO) / "blobs" / SHA
    assert f"m.gguf: from the Hugging Face cache, {blob} (hard link)" in err


def test_a_blob_with_the_right_name_and_wrong_bytes_is_ignored_and_said(tmp_path, fakehub, hf_home, capsys):
    fakehub.add("sub/m.gguf", DATA)
    wrong = bytearray(DATA)
    wrong[1000] ^= 1
    blob = _blob(hf_home / "hub", DATA)
    blob.write_bytes(wrong)  # the name says SHA, the bytes do not
    before = _tree(hf_home / "hub")
    got = _fetch(tmp_path)
    assert got.read_bytes() == DATA and not os.path.samefile(got, blob)
    assert len(fakehub.data_requests()) == 1
    assert _tree(hf_home / "hub") == before and blob.read_bytes() == wrong
    err = capsys.readouterr().err
    bad = hashlib.sha256(wrong).hexdigest()
    assert f"m.gguf: ignoring {blob} (Hugging Face cache): its sha256 is {bad}, not {SHA}" in err


def test_a_blob_of_another_size_is_ignored_and_said(tmp_path, fakehub, hf_home, capsys):
    fakehub.add("sub/m.gguf", DATA)
    blob = _blob(hf_home / "hub", DATA)
    blob.write_bytes(DATA[:-1])
    _fetch(tmp_path)
    assert f"ignoring {blob} (Hugging Face cache): 299999 bytes, not 300000" in capsys.readouterr().err
    assert len(fakehub.data_requests()) == 1


def test_llama_cache_is_looked_in_too(tmp_path, fakehub, hf_home, monkeypatch, capsys):
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "llama"))
    blob = _blob(tmp_path / "llama", DATA, repo="other-org/mirror-GGUF")  # the same bytes in another repo
    got = _fetch(tmp_path)
    assert os.path.samefile(got, blob) and fakehub.log == []
    assert "LLAMA_CACHE (hard link)" in capsys.readouterr().out


def test_across_filesystems_the_file_is_copied(tmp_path, fakehub, hf_home, small_fs, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(small_fs))  # a tmpfs: no hard link, no reflink from there
    blob = _blob(small_fs, DATA)
    before = _tree(small_fs)
    got = _fetch(tmp_path)
    assert got.read_bytes() == DATA and got.stat().st_ino != blob.stat().st_ino
    assert stamps.read_stamp(got) == SHA and fakehub.log == [] and _tree(small_fs) == before
    assert "Hugging Face cache (copy)" in capsys.readouterr().out


def test_unlocked_entry_is_checked_against_the_hub_then_taken_from_the_cache(tmp_path, fakehub, hf_home):
    fakehub.add("sub/m.gguf", DATA)
    blob = _blob(hf_home / "hub", DATA)
    got = _fetch(tmp_path, lock=_lock(tmp_path, locked=False))
    assert os.path.samefile(got, blob)
    assert [r["method"] for r in fakehub.log] == ["HEAD"]  # the Hub's sha256, no byte downloaded
    _fetch(tmp_path, lock=_lock(tmp_path, locked=False))
    assert len(fakehub.log) == 1  # verified against the Hub at the pinned revision: never asked again


def test_hf_cache_option_writes_what_huggingface_hub_reads(tmp_path, fakehub, hf_home, capsys):
    import huggingface_hub

    fakehub.add("sub/m.gguf", DATA)
    got = _fetch(tmp_path, hf_cache=True)
    hub = hf_home / "hub"
    blob = hub / hfcache.repo_folder(REPO) / "blobs" / SHA
    assert os.path.samefile(got, blob)
    assert f"m.gguf: in the Hugging Face cache as {blob} (hard link)" in capsys.readouterr().err
    assert (hub / hfcache.repo_folder(REPO) / "refs" / "main").read_text() == REV
    found = huggingface_hub.hf_hub_download(
        REPO, "sub/m.gguf", revision=REV, cache_dir=hub, local_files_only=True
    )
    assert Path(found).read_bytes() == DATA and os.path.samefile(found, got)
    assert huggingface_hub.try_to_load_from_cache(REPO, "sub/m.gguf", cache_dir=hub, revision=REV) == found
    # again: nothing left to do, nothing said; and another model folder is filled from that cache
    _fetch(tmp_path, hf_cache=True)
    assert "in the Hugging Face cache" not in capsys.readouterr().err
    n = len(fakehub.log)
    other = fetch_models(
        FetchOptions(models=["m.gguf"], lock=tmp_path / "models.lock", model_dir=tmp_path / "m2", tty=False)
    )
    assert os.path.samefile(other["m.gguf"], blob) and len(fakehub.log) == n


def test_hf_cache_variable_and_a_foreign_blob(tmp_path, fakehub, hf_home, monkeypatch, capsys):
    fakehub.add("sub/m.gguf", DATA)
    monkeypatch.setenv("SPEC_HF_CACHE", "1")
    blob = _blob(hf_home / "hub", DATA)
    blob.write_bytes(b"not ours")
    _fetch(tmp_path)
    assert blob.read_bytes() == b"not ours"  # a blob that is not this file is left alone, and said
    assert f"m.gguf: {blob} exists but is not this file; left alone" in capsys.readouterr().err
    monkeypatch.setenv("SPEC_HF_CACHE", "maybe")
    with pytest.raises(UserError, match=r"^SPEC_HF_CACHE='maybe': use 1 or 0"):
        _fetch(tmp_path)


@pytest.fixture
def dead_endpoint(monkeypatch):
    """HF_ENDPOINT at a listening socket that records every connection made to it."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.05)
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(srv.accept())
            except TimeoutError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{srv.getsockname()[1]}")
    yield accepted
    stop.set()
    t.join()
    srv.close()


def test_hf_hub_offline_makes_no_connection(tmp_path, hf_home, dead_endpoint, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError) as exc:
        _fetch(tmp_path)
    assert str(exc.value) == (
        f"HF_HUB_OFFLINE=1: not in {tmp_path / 'models'} nor in {hf_home / 'hub'}: m.gguf; "
        "unset HF_HUB_OFFLINE to fetch them"
    )
    _blob(hf_home / "hub", DATA)
    assert _fetch(tmp_path).read_bytes() == DATA  # from the cache, still without the network
    unlocked = _lock(tmp_path, locked=False)  # offline and unlocked: the snapshot names its blob
    assert _fetch(tmp_path / "u", lock=unlocked).read_bytes() == DATA
    with pytest.raises(UserError, match=r"^HF_HUB_OFFLINE is set: no request to the Hub is allowed"):
        from specsuite.models.lockmodels import lock_models

        lock_models(lock=unlocked)
    assert dead_endpoint == []  # not one connection was attempted
