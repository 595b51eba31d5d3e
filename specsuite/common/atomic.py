"""Atomic small-file writes: readers see the previous file or the complete new one, never half of it.

The temp file is created with O_EXCL|O_NOFOLLOW and renamed over the target, so a link planted at the
target is replaced, never written through. ``first_link`` finds links planted in a folder a command
reuses (files it opens by path, such as pytest's junit.xml, would follow them).
"""

from __future__ import annotations

import io
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any


def _open_temp(folder: Path, name: str) -> tuple[int, Path]:
    """A new temp file next to the target, created 0666 minus the umask by the kernel.

    (mkstemp makes 0600, and reading the umask means setting it process-wide, which races with worker
    threads writing stamps; O_CREAT|O_EXCL with mode 0o666 lets the kernel apply the umask instead.)"""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        tmp = folder / f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temp file for {name} in {folder}")


def first_link(folder: Path) -> tuple[Path, str] | None:
    """The first link under ``folder`` and its kind: a symbolic link (a folder too: listed, never entered),
    or a file with a second hard link (writing by its path would write that other file); None if none."""
    for root, dirs, files in os.walk(folder):
        for name in sorted((*dirs, *files)):
            path = Path(root, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                return path, "a symbolic link"
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                return path, "a hard link"
    return None


def write_bytes(path: Path, data: bytes) -> None:
    """Write via a unique temp file in the same folder and ``os.replace``; a failure leaves no temp file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _open_temp(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def save_figure(fig: Any, path: Path, **savefig: Any) -> Path:
    """A matplotlib figure as a PNG, written like every other file (rendered in memory, then replaced);
    the figure is closed either way."""
    import matplotlib.pyplot as plt  # optional dependency (the `plot` extra): only where a plot is drawn

    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", **{"dpi": 110, **savefig})
        write_bytes(path, buf.getvalue())
    finally:
        plt.close(fig)
    return Path(path)


def write_json(path: Path, data: Any, *, indent: int | None = 2, sort_keys: bool = False) -> None:
    write_text(path, json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n")
