"""Progress for parallel downloads: tqdm bars on a terminal, throttled plain lines otherwise (CI logs)."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from tqdm import tqdm


def human_size(n: float) -> str:
    """Bytes in B, KiB, MiB or GiB (one decimal above B)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class Board:
    """One total plus one entry per file. ``tty=None`` asks the stream."""

    def __init__(
        self, total: int, *, tty: bool | None = None, interval: float = 10.0, stream: TextIO | None = None
    ):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = interval
        self.lock = threading.Lock()
        self.total, self.done, self.start = total, 0, time.monotonic()
        self.bar = (
            tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="total", position=0,
                 file=self.stream, leave=True, dynamic_ncols=True)
            if self.tty else None
        )  # fmt: skip
        self.rows = 0

    def file(self, name: str, size: int) -> FileProgress:
        with self.lock:
            self.rows += 1
            row = self.rows
        return FileProgress(self, name, size, row)

    def _moved(self, delta: int) -> None:
        with self.lock:
            self.done += delta
        if self.bar is not None:
            self.bar.update(delta)

    def write(self, msg: str) -> None:
        if self.bar is not None:
            tqdm.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class FileProgress:
    """What download() reports to: advance, set (after a restart), note (a retry message)."""

    def __init__(self, board: Board, name: str, size: int, row: int) -> None:
        self.board, self.name, self.size = board, name, size
        self.pos, self.start, self.last_line = 0, time.monotonic(), float("-inf")
        self.bar = (
            tqdm(total=size, unit="B", unit_scale=True, unit_divisor=1024, desc=name[:40], position=row,
                 file=board.stream, leave=False, dynamic_ncols=True)
            if board.bar is not None else None
        )  # fmt: skip

    def resize(self, size: int) -> None:
        """Set the size once known (an unlocked entry learns it from the Hub); grows the total too."""
        with self.board.lock:
            self.board.total += size - self.size
        self.size = size
        if self.bar is not None and self.board.bar is not None:
            self.bar.total = size
            self.board.bar.total = self.board.total
            self.bar.refresh()

    def advance(self, n: int) -> None:
        self.pos += n
        self.board._moved(n)
        if self.bar is not None:
            self.bar.update(n)
        else:
            self._line()

    def set(self, n: int) -> None:
        delta, self.pos = n - self.pos, n
        self.board._moved(delta)
        if self.bar is not None:
            self.bar.reset(total=self.size)
            self.bar.update(n)

    def note(self, msg: str) -> None:
        self.board.write(msg)

    def _line(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_line < self.board.interval:
            return
        self.last_line = now
        rate = self.pos / max(now - self.start, 1e-6)
        eta = (self.size - self.pos) / rate if rate > 0 else float("inf")
        pct = 100 * self.pos / self.size if self.size else 100
        size, total = human_size(self.size), human_size(self.board.total)
        self.board.write(
            f"{self.name}: {pct:5.1f}%  {human_size(self.pos)} / {size}  {human_size(rate)}/s  "
            f"ETA {eta:.0f} s  (total {human_size(self.board.done)} / {total})"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.pos:
            self._line(force=True)
