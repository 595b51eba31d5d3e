"""The one file-hashing helper: sha256 of a file (or the rest of a hasher) in large blocks."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

BLOCK = 8 << 20  # large reads: hashing runs at memory speed, not at syscall speed


def hash_into(path: Path, hasher: Any = None, progress: Callable[[int], None] | None = None) -> Any:
    """Feed a whole file to ``hasher`` (a new sha256 by default); returns the hasher.

    ``progress`` gets the size of every block read (download progress bars when re-hashing a partial)."""
    h = hasher if hasher is not None else hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(BLOCK):
            h.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return h


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    """Hex sha256 of a file's bytes."""
    return str(hash_into(Path(path), progress=progress).hexdigest())


def sha256_text(text: str) -> str:
    """Hex sha256 of a text's UTF-8 bytes (cache keys, the cases file's identity)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
