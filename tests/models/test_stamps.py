"""Stamps: trusted only while size, mtime, inode and device are unchanged."""

from __future__ import annotations

import hashlib
import os

from specsuite.models import stamps


def test_stamp_roundtrip_and_staleness(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"hello")
    sha = hashlib.sha256(b"hello").hexdigest()
    assert stamps.read_stamp(f) is None
    assert stamps.verify_file(f, 5, sha) == (True, "hashed")
    assert stamps.read_stamp(f) == sha
    assert stamps.verify_file(f, 5, sha) == (True, "stamp")
    assert stamps.verify_file(f, 5, sha, full=True) == (True, "hashed")
    os.utime(f, ns=(0, 12345))  # touched: the stamp no longer vouches for it
    assert stamps.read_stamp(f) is None
    assert stamps.verify_file(f, 5, sha) == (True, "hashed")


def test_replaced_file_invalidates_stamp(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"hello")
    sha = hashlib.sha256(b"hello").hexdigest()
    stamps.verify_file(f, 5, sha)
    st = f.stat()
    other = tmp_path / "other"
    other.write_bytes(b"jello")
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, f)  # same size and mtime, new inode
    assert stamps.read_stamp(f) is None
    ok, why = stamps.verify_file(f, 5, sha)
    assert not ok and why.startswith("sha256 ")
    assert not stamps.stamp_path(f).exists()


def test_size_mismatch_and_missing(tmp_path):
    f = tmp_path / "m.gguf"
    assert stamps.verify_file(f, 5, "0" * 64) == (False, "missing")
    f.write_bytes(b"abc")
    assert stamps.verify_file(f, 5, "0" * 64) == (False, "size 3 != 5")


def test_stamp_fields_are_the_shared_identity(tmp_path):
    import json

    from specsuite.common.statcache import identity

    f = tmp_path / "m.gguf"
    f.write_bytes(b"hello")
    stamps.write_stamp(f, "a" * 64)
    data = json.loads(stamps.stamp_path(f).read_text())
    assert data == {"version": stamps.VERSION, **identity(f), "sha256": "a" * 64}


def test_other_stamp_versions_only_cost_a_rehash(tmp_path):
    import json

    f = tmp_path / "m.gguf"
    f.write_bytes(b"hello")
    sha = hashlib.sha256(b"hello").hexdigest()
    stamps.write_stamp(f, sha)
    data = json.loads(stamps.stamp_path(f).read_text())
    stamps.stamp_path(f).write_text(json.dumps({**data, "version": 0}))
    assert stamps.read_stamp(f) is None
    assert stamps.verify_file(f, 5, sha) == (True, "hashed")
    assert stamps.read_stamp(f) == sha


def test_links_are_never_vouched_for(tmp_path):
    real = tmp_path / "real"
    real.write_bytes(b"hello")
    sha = hashlib.sha256(b"hello").hexdigest()
    stamps.write_stamp(real, sha)
    link = tmp_path / "m.gguf"
    link.symlink_to(real)
    stamps.stamp_path(link).symlink_to(stamps.stamp_path(real))
    assert stamps.read_stamp(real) == sha
    assert stamps.read_stamp(link) is None  # neither the file nor its stamp is followed


def test_unlocked_entry_is_hashed_and_stamped(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"hello")
    assert stamps.verify_file(f, None, None) == (True, "hashed")
    assert stamps.read_stamp(f) == hashlib.sha256(b"hello").hexdigest()
