"""Verification stamps: a sidecar recording the identity and sha256 of a verified file.

A warm run compares the stamp with ``os.lstat`` instead of re-reading tens of GiB (the idea of DVC's state
database). The identity is the package's one stat-keyed cache rule, ``statcache.identity`` (size, mtime_ns,
inode, device): any change makes the stamp stale and forces a re-hash. A stamp of another version, or with
other fields, is merely stale: it costs one re-hash, never a wrong answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from specsuite.common import atomic, filehash
from specsuite.common.statcache import identity

VERSION = 1  # the fields are statcache.identity's plus sha256; bump when they change
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_MAX = 4096  # a stamp is one short JSON line


def stamp_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.stamp")


def write_stamp(final: Path, sha256: str, origin: str | None = None) -> None:
    """Record that ``final`` as it is now has ``sha256`` (atomically; the rename never follows a link).

    ``origin`` says what that sha256 was checked against (an unlocked entry's Hub file at its pinned
    revision), so a later run need not ask again; a stamp without it is still valid."""
    data: dict[str, object] = {"version": VERSION, **identity(final, os.lstat(final)), "sha256": sha256}
    if origin is not None:
        data["origin"] = origin
    atomic.write_json(stamp_path(final), data, indent=None, sort_keys=True)


def _load(path: Path) -> object:
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(_MAX)
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _fresh(final: Path) -> dict[str, object] | None:
    """The stamp if it still describes ``final`` as it is; None if missing, unreadable, stale, not a file."""
    try:
        st = os.lstat(final)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    data = _load(stamp_path(final))
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return None
    if any(data.get(k) != v for k, v in identity(final, st).items()):
        return None
    return data if isinstance(data.get("sha256"), str) else None


def read_stamp(final: Path) -> str | None:
    """The sha256 a fresh stamp vouches for, or None."""
    data = _fresh(final)
    return None if data is None else str(data["sha256"])


def read_origin(final: Path) -> tuple[str, str] | None:
    """(sha256, origin) of a fresh stamp that records what its sha256 was checked against, or None."""
    data = _fresh(final)
    origin = None if data is None else data.get("origin")
    return (str(data["sha256"]), origin) if data is not None and isinstance(origin, str) else None


def drop_stamp(final: Path) -> None:
    with contextlib.suppress(OSError):  # none, or a folder we may not write: a stale stamp is only stale
        stamp_path(final).unlink()


NOT_SAVED = "hashed, stamp not saved"  # verify_file's answer in a folder this user cannot write


def verify_file(final: Path, size: int | None, sha256: str | None, full: bool = False) -> tuple[bool, str]:
    """Check a file against (size, sha256); trust a fresh stamp unless ``full``. Returns (ok, how).

    ``sha256`` None (an entry not locked yet) accepts any content and stamps what it hashed."""
    try:
        actual = os.lstat(final).st_size
    except FileNotFoundError:
        return False, "missing"
    if size is not None and actual != size:
        return False, f"size {actual} != {size}"
    if not full and sha256 and read_stamp(final) == sha256:
        return True, "stamp"
    got = filehash.sha256_file(final)
    if sha256 and got != sha256:
        drop_stamp(final)
        return False, f"sha256 {got} != {sha256}"
    try:
        write_stamp(final, got)
    except OSError:  # a read-only model folder: the file is verified all the same, the next check re-hashes
        return True, NOT_SAVED
    return True, "hashed"
