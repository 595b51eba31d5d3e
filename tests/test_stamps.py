"""Stamps: trusted only while size, mtime, inode and device are unchanged."""

from __future__ import annotations

import hashlib
import os

from specsuite import stamps


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
