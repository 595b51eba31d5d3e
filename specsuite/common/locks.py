"""Waiting for a lock out loud: one line when another process holds it (which one, and what it runs), one
when it is ours.

A build of the same folder, a fetch of the same file, the git mirror, a bisect step: each is one FileLock
(flock), held for minutes. Who holds it is read from the kernel's table of locks (``/proc/locks``: the
holder's pid, then its command line from ``/proc/<pid>/cmdline``) rather than from a note written beside
the lock: the kernel's entry cannot go stale when a holder is killed, and needs no write the holder could
leave half done. Where that table does not exist (not Linux) or the holder is in another PID namespace (a
container sharing the cache), the line says "another process".
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # filelock takes 70 ms to import: only where a lock is taken, never for a lookup
    from filelock import FileLock

PROC_LOCKS = Path("/proc/locks")
_COMMAND_CHARS = 120  # a holder's command line in a message, at most


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def holders(path: str | os.PathLike[str], offset: int | None = None, table: Path = PROC_LOCKS) -> list[int]:
    """Pids (other than ours) holding a write lock on ``path`` (flock or POSIX; at byte ``offset`` when
    given, for SQLite's byte-range locks), from the kernel's table; [] when it cannot be read. A pid of 0
    is a holder in another PID namespace."""
    try:
        st = os.stat(path)
        lines = table.read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return []
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    found: list[int] = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK ADVISORY WRITE 1234 fd:01:5678 0 EOF"; a waiter's line has "->" after the number
        if len(fields) < 8 or fields[1] == "->" or fields[3] != "WRITE" or fields[5] != ident:
            continue
        start, end = fields[6], fields[7]
        if offset is not None and not (int(start) <= offset and (end == "EOF" or offset <= int(end))):
            continue
        with contextlib.suppress(ValueError):
            pid = int(fields[4])
            if pid != os.getpid() and pid not in found:
                found.append(pid)
    return found


def command_of(pid: int, proc: Path = Path("/proc")) -> str | None:
    """A process's command line, short: the interpreter and script as their file names, at most 120 chars."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    if not args:
        return None
    args[: min(2, len(args))] = [Path(a).name if "/" in a else a for a in args[:2]]
    text = " ".join(" ".join(args).split())  # one line, whatever an argument holds
    return text if len(text) <= _COMMAND_CHARS else text[: _COMMAND_CHARS - 1] + "…"


def describe(pids: list[int]) -> str:
    """Who holds a lock, in words: ``pid 1234 (specsuite build --cpu)``, or ``another process``."""
    named = []
    for pid in pids:
        if pid <= 0:
            named.append("a process in another PID namespace (a container sharing this folder)")
            continue
        command = command_of(pid)
        named.append(f"pid {pid} ({command})" if command else f"pid {pid}")
    return ", ".join(named) or "another process"


def elapsed(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60)} s"


def acquire(
    path: str | os.PathLike[str],
    what: str,
    *,
    note: Callable[[str], None] = _stderr,
    timeout: float = -1,
) -> FileLock:
    """The FileLock at ``path`` (``what`` it guards, for the messages), acquired. When another process holds
    it: say so at once (who), wait (``timeout`` seconds, -1: as long as it takes; filelock.Timeout after),
    and say when it is ours. OSError when the lock file cannot be opened."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        t0 = time.monotonic()
        note(f"waiting for {what}: {describe(holders(path))} holds {path}")
        lock.acquire(timeout=timeout)
        note(f"got {what} after waiting {elapsed(time.monotonic() - t0)}")
    return lock


@contextlib.contextmanager
def held(
    path: str | os.PathLike[str],
    what: str,
    *,
    note: Callable[[str], None] = _stderr,
    timeout: float = -1,
) -> Iterator[FileLock]:
    """``acquire``, released on the way out."""
    lock = acquire(path, what, note=note, timeout=timeout)
    try:
        yield lock
    finally:
        lock.release()
