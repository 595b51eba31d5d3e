"""Verification stamps: a sidecar recording (size, mtime_ns, inode, device, sha256) of a verified file.

A warm run compares the stamp with ``os.stat`` instead of re-reading tens of GiB (the idea of DVC's state
database). Any change of size, mtime, inode or device makes the stamp stale and forces a re-hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from . import atomic

VERSION = 1
_BLOCK = 8 << 20


def stamp_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.stamp")


def _key(st: os.stat_result) -> dict[str, int]:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino, "device": st.st_dev}


def write_stamp(final: Path, sha256: str) -> None:
    data = {"version": VERSION, **_key(final.stat()), "sha256": sha256}
    atomic.write_json(stamp_path(final), data, indent=None, sort_keys=True)


def read_stamp(final: Path) -> str | None:
    """The sha256 a fresh stamp vouches for, or None if missing, unreadable or stale."""
    try:
        data = json.loads(stamp_path(final).read_text(encoding="utf-8"))
        st = final.stat()
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return None
    if any(data.get(k) != v for k, v in _key(st).items()):
        return None
    sha = data.get("sha256")
    return sha if isinstance(sha, str) else None


def drop_stamp(final: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        stamp_path(final).unlink()


def hash_file(path: Path, hasher=None, progress=None) -> hashlib._Hash:  # type: ignore[name-defined]
    """Feed a whole file to ``hasher`` (a new sha256 by default) in large blocks; returns the hasher."""
    h = hasher or hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(_BLOCK):
            h.update(chunk)
            if progress:
                progress(len(chunk))
    return h


def verify_file(final: Path, size: int | None, sha256: str | None, full: bool = False) -> tuple[bool, str]:
    """Check a file against (size, sha256); trust a fresh stamp unless ``full``. Returns (ok, how)."""
    try:
        actual = final.stat().st_size
    except FileNotFoundError:
        return False, "missing"
    if size is not None and actual != size:
        return False, f"size {actual} != {size}"
    if not full and sha256 and read_stamp(final) == sha256:
        return True, "stamp"
    got = hash_file(final).hexdigest()
    if sha256 and got != sha256:
        drop_stamp(final)
        return False, f"sha256 {got} != {sha256}"
    write_stamp(final, got)
    return True, "hashed"
