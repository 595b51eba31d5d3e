"""The one stat-keyed cache rule: an answer about a file is reused only while the file is the same file.

"The same" is (size, mtime_ns, inode, device) from ``os.stat``: any rewrite, truncation, replacement or copy
changes one of them. The fetcher's verification stamps, the probe cache (per binary) and the GGUF metadata
cache (per model) all key on this identity; the latter two store their answers under ``<cache>/<kind>/``.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from specsuite.common import atomic, paths
from specsuite.common.filehash import sha256_text


def identity(path: Path, st: os.stat_result | None = None) -> dict[str, int]:
    """What makes a file the same file: size, mtime_ns, inode and device."""
    st = st or os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino, "device": st.st_dev}


class StatCache:
    """JSON answers under ``<cache>/<kind>/``, one file per (resolved path, identity, schema)."""

    def __init__(self, kind: str, schema: int) -> None:
        self.kind, self.schema = kind, schema

    def _key(self, path: Path) -> dict[str, Any]:
        resolved = Path(path).resolve()
        return {"schema": self.schema, "path": str(resolved), **identity(resolved)}

    def _file(self, key: dict[str, Any]) -> Path:
        return paths.cache_dir() / self.kind / f"{sha256_text(json.dumps(key, sort_keys=True))[:32]}.json"

    def get(self, path: Path) -> Any | None:
        """The stored answer for this file as it is now, or None (absent, stale, corrupt, other schema)."""
        key = self._key(path)
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads(self._file(key).read_text(encoding="utf-8"))
            if data["key"] == key:
                return data["value"]
        return None

    def put(self, path: Path, value: Any) -> None:
        """Store an answer; a read-only or full cache folder only costs the next computation."""
        key = self._key(path)
        with contextlib.suppress(OSError):
            atomic.write_json(self._file(key), {"key": key, "value": value}, indent=1)
