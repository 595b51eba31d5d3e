"""lock_models against the fake Hub's paths-info: fill, refresh, --check, missing path."""

from __future__ import annotations

import hashlib

import pytest

from specsuite.common.errors import UserError
from specsuite.models.lock import load_lock
from specsuite.models.lockmodels import lock_models

pytest_plugins = ["fakehub"]
REPO, REV = "test-org/test-GGUF", "0123456789abcdef0123456789abcdef01234567"  # the fake Hub's defaults
OLD = "1" * 64

TEXT = f"""# keep this comment
version = 1

[[model]]
name = "m.gguf"  # trailing comment
source = "hf"
repo = "{REPO}"
revision = "{REV}"
path = "m.gguf"
locked = false
license = "x"

[[model]]
name = "n.gguf"
source = "hf"
repo = "{REPO}"
revision = "{REV}"
path = "sub/n.gguf"
size = 3
sha256 = "{OLD}"

[[model]]
name = "p.gguf"
source = "pypi"
packages = ["a==1"]
size = 1
sha256 = "{OLD}"
"""


@pytest.fixture
def lockfile(tmp_path, fakehub):
    fakehub.add("sub/n.gguf", b"abc")
    path = tmp_path / "models.lock"
    path.write_text(TEXT)
    return path


def test_check_reports_drift_and_writes_nothing(lockfile, fakehub, capsys):
    with pytest.raises(UserError, match="differs from the Hub for 2 entries") as exc:
        lock_models(lock=lockfile, check=True)
    assert exc.value.code == 1
    assert lockfile.read_text() == TEXT
    out = capsys.readouterr().out
    assert "m.gguf: not locked -> 2000000 bytes" in out and f"n.gguf: 3 bytes, sha256 {OLD} -> 3 bytes" in out
    assert len([r for r in fakehub.log if r["method"] == "POST"]) == 1  # one paths-info per (repo, revision)


def test_lock_fills_and_keeps_comments_then_check_passes(lockfile, payload, capsys):
    assert lock_models(lock=lockfile) == 2
    sha_m, sha_n = hashlib.sha256(payload).hexdigest(), hashlib.sha256(b"abc").hexdigest()
    expected = TEXT.replace("locked = false\n", f'size = 2000000\nsha256 = "{sha_m}"\n').replace(
        f'size = 3\nsha256 = "{OLD}"', f'size = 3\nsha256 = "{sha_n}"'
    )
    assert lockfile.read_text() == expected
    assert load_lock(lockfile).entries["m.gguf"].locked
    assert lock_models(lock=lockfile, check=True) == 0
    assert lock_models(lock=lockfile) == 0 and lockfile.read_text() == expected


def test_missing_path_is_an_error(lockfile):
    lockfile.write_text(TEXT.replace('path = "sub/n.gguf"', 'path = "gone.gguf"'))
    with pytest.raises(UserError, match=r"has no file 'gone\.gguf' at revision"):
        lock_models(lock=lockfile)
    assert "gone.gguf" in lockfile.read_text() and "locked = false" in lockfile.read_text()


def test_retries_paths_info_like_a_download(lockfile, fakehub, monkeypatch, capsys):
    monkeypatch.setenv("SPEC_FETCH_BACKOFF_S", "0.01")
    fakehub.fault("POST", "drop", "status:503", "status:429")
    assert lock_models(lock=lockfile) == 2
    assert load_lock(lockfile).entries["m.gguf"].locked
    assert len([r for r in fakehub.log if r["method"] == "POST"]) == 4
    err = capsys.readouterr().err
    assert "ConnectionError" in err and "HTTP 503; retry 2/10" in err and "HTTP 429; retry 3/10" in err


def test_gives_up_with_one_message_and_writes_nothing(lockfile, fakehub, monkeypatch):
    monkeypatch.setenv("SPEC_FETCH_BACKOFF_S", "0.01")
    monkeypatch.setenv("SPEC_FETCH_ATTEMPTS", "2")
    fakehub.fault("POST", *["status:500"] * 3)
    with pytest.raises(UserError, match=r"giving up on paths-info of .* after 2 retries \(last: HTTP 500\)"):
        lock_models(lock=lockfile)
    assert lockfile.read_text() == TEXT


def test_dataset_entry_is_locked_from_the_datasets_api(tmp_path, hf_home, monkeypatch):
    from fakehub import FakeHub

    text = TEXT.split("[[model]]")[0] + (
        f'[[model]]\nname = "q.parquet"\nsource = "hf-dataset"\nrepo = "{REPO}"\nrevision = "{REV}"\n'
        'path = "qualitative/q.parquet"\nlocked = false\n'
    )
    path = tmp_path / "models.lock"
    path.write_text(text)
    with FakeHub({"qualitative/q.parquet": b"PAR1"}, repo_type="dataset") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert lock_models(lock=path) == 1
        assert [r["path"] for r in hub.log] == [f"/api/datasets/{REPO}/paths-info/{REV}"]
    entry = load_lock(path).entries["q.parquet"]
    assert (entry.size, entry.sha256, entry.source) == (4, hashlib.sha256(b"PAR1").hexdigest(), "hf-dataset")
