"""Change points kept between builds of the site: the splits of each noisy series (speed, or acceptance
judged as noisy), stored under a key that is a hash of everything they were computed from, the series'
values, commits and nondeterministic flags in their order, the metric and the detector's parameters.

A series that gained or lost a run, whose order changed, or a value of which changed, has another key, so
it is computed again; one that did not is read back. Deterministic series are not kept: their change
points cost one pass over the values.

One JSON file (``<cache>/report/changes.json`` for ``specsuite report``), read whole and written whole
(``atomic``: a temp file renamed over it, so a link planted there is replaced, never written through). A
file that is not one this version wrote, or is a link, is ignored with a warning: every series is then
computed, as on a first build. Entries no build used for ``KEEP_DAYS`` go, and the file keeps at most
``MAX_ENTRIES`` (the most recently used).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from specsuite.common import atomic

FORMAT = "specsuite change points"
VERSION = 1
KEEP_DAYS = 30
MAX_ENTRIES = 20_000
# One split: (index of the first point after it, p-value, mean before, mean after, runs before, runs after)
SplitRow = tuple[int, float | None, float, float, int, int]


class _Entry(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    used: float  # when a build last used it (seconds since the epoch)
    splits: list[SplitRow]


class _File(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    version: int
    entries: dict[str, _Entry]


def series_key(params: Sequence[Any], metric: str, points: Sequence[tuple[str, float, bool]]) -> str:
    """The hash of a series as the detector sees it: ``params`` (the detector's own: its version, alpha,
    resamples), the metric, and each point's (commit, value, nondeterministic) in series order. msgspec
    writes a float so that it reads back the same float: two different values never hash alike."""
    return hashlib.sha256(msgspec.json.encode([list(params), metric, list(points)])).hexdigest()


class SplitCache:
    """The cache file's entries, what this build looked up (``hits``) and computed (``misses``)."""

    def __init__(self, path: Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self.entries: dict[str, _Entry] = _load(self.path) if self.path is not None else {}
        self.used: set[str] = set()
        self.hits = self.misses = 0
        self.now = time.time()

    def get(self, key: str) -> list[SplitRow] | None:
        entry = self.entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self.used.add(key)
        entry.used = self.now
        return entry.splits

    def put(self, key: str, splits: list[SplitRow]) -> None:
        self.entries[key] = _Entry(self.now, splits)
        self.used.add(key)

    def save(self) -> None:
        """Write what this build used and the recent rest; a folder it cannot write costs a warning and the
        next build's computation, never the site."""
        if self.path is None:
            return
        keep = self.now - KEEP_DAYS * 86400
        kept = sorted(
            ((k, e) for k, e in self.entries.items() if k in self.used or e.used >= keep),
            key=lambda item: (item[0] in self.used, item[1].used),
            reverse=True,
        )[:MAX_ENTRIES]
        data = msgspec.json.encode(_File(FORMAT, VERSION, dict(sorted(kept))))
        try:
            atomic.write_bytes(self.path, data)
        except OSError as exc:
            _warn(f"the change-point cache {self.path} could not be written ({exc.strerror or exc})")


def _warn(text: str) -> None:
    print(f"warning: report: {text}; its series are computed again next time", file=sys.stderr)


def _read(path: Path) -> bytes | None:
    """The file's bytes, opened without following a link (a link is reported, not read); None if absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))  # a FIFO: no wait
    except FileNotFoundError:
        return None  # the first build
    except OSError as exc:
        kind = "a symbolic link" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror or exc})"
        raise ValueError(kind) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError("not a file")
        return fh.read()


def _load(path: Path) -> dict[str, _Entry]:
    try:
        data = _read(path)
        if data is None:
            return {}
        found = msgspec.json.decode(data, type=_File)
    except (OSError, ValueError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        why = " ".join(str(exc).split())[:200]
        _warn(f"the change-point cache {path} is not one this version wrote ({why}): ignored")
        return {}
    if (found.format, found.version) != (FORMAT, VERSION):
        _warn(f"the change-point cache {path} is {found.format!r} version {found.version}: ignored")
        return {}
    return found.entries
