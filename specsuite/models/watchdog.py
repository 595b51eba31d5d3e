"""The stall watchdog of a download's connections: one thread that ends the body reads that were cancelled
or that are too slow, so that a server trickling one byte a second is dropped (a per-read socket timeout
resets with every byte and never trips) and Ctrl-C or another file's failure stops a blocked read at once.

What arrived is kept; the reader raises the connection's reason (``Retry`` for a stall, which the retry
policy counts, or ``Cancelled``), and the retry policy decides when to give up.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from specsuite.models.http import Policy, Retry
from specsuite.models.store import Cancelled


@dataclass
class Watched:
    """One response the watchdog looks after."""

    raw: Any
    need: int
    received: int = 0  # written by the reader only; an int store is atomic
    reason: Retry | Cancelled | None = None
    samples: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)


class Watchdog:
    """Ends body reads that were cancelled or that are too slow, by shutting their sockets down.

    A blocked read cannot be interrupted from its own thread, and a socket timeout resets with every byte;
    urllib3's ``HTTPResponse.shutdown()`` (thread-safe, made for this) wakes the reader at once.
    """

    def __init__(self, policy: Policy, stop: threading.Event) -> None:
        self.policy, self.stop = policy, stop
        self.by_id: dict[int, Watched] = {}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def add(self, raw: Any, remaining: int) -> Watched:
        conn = Watched(raw, min(self.policy.stall_bytes, remaining))
        conn.samples.append((time.monotonic(), 0))
        with self.lock:
            self.by_id[id(conn)] = conn
        return conn

    def remove(self, conn: Watched) -> None:
        with self.lock:
            self.by_id.pop(id(conn), None)

    def _run(self) -> None:
        tick = min(0.25, self.policy.stall / 4)
        while not self.done.wait(tick):
            now = time.monotonic()
            with self.lock:
                watched = list(self.by_id.values())
            for conn in watched:
                self._check(conn, now)

    def _check(self, conn: Watched, now: float) -> None:
        if conn.reason is not None:
            return
        conn.samples.append((now, conn.received))
        if self.stop.is_set():
            return self._trip(conn, Cancelled())
        while len(conn.samples) > 1 and conn.samples[1][0] <= now - self.policy.stall:
            conn.samples.popleft()
        start, then = conn.samples[0]
        if now - start >= self.policy.stall and conn.received - then < conn.need:
            got = conn.received - then
            why = f"stalled: {got} bytes in the last {now - start:.1f} s (fewer than {conn.need})"
            self._trip(conn, Retry(why))
        return None

    @staticmethod
    def _trip(conn: Watched, reason: Retry | Cancelled) -> None:
        conn.reason = reason
        with contextlib.suppress(Exception):  # already closed or released: the reader ends anyway
            conn.raw.shutdown()

    def close(self) -> None:
        self.done.set()
        self.thread.join()
