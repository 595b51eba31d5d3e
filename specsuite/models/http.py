"""The one HTTP policy every model request follows (file bodies and Hub metadata alike): which statuses
are worth a retry, how long to wait (exponential backoff with jitter, or the server's Retry-After), when to
give up, and what a refused request means to the user."""

from __future__ import annotations

import contextlib
import email.utils
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specsuite.common import settings
from specsuite.common.errors import UserError
from specsuite.models.store import Cancelled

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
FATAL_STATUS = frozenset({401, 403, 404})


@dataclass
class Policy:
    """Retry and timing knobs, shared by every request; tests shrink them (also SPEC_FETCH_* variables)."""

    attempts: int = 10  # retries after consecutive failures without new bytes, then give up
    backoff: float = 1.0  # first delay; doubles per failure, with jitter, up to max_backoff
    max_backoff: float = 60.0
    max_retry_after: float = 900.0
    stall: float = 60.0  # window of the throughput floor; also the socket timeout (connect aside)
    stall_bytes: int = 1 << 20  # fewer bytes than this in the last `stall` seconds: stalled
    connect: float = 20.0
    chunk: int = 1 << 20  # largest piece read at once: big enough for speed, small enough to stop promptly
    margin: int = 256 << 20  # free space kept on top of the missing bytes
    connections: int = 8  # bounded ranges fetched at once for a file over parallel_min bytes
    parallel_min: int = 64 << 20
    part: int = 32 << 20  # largest range one request asks for (smaller for files under 1 GiB: see download)
    checkpoint: float = 1.0  # seconds between flushes of the partial and records of what it holds

    @classmethod
    def from_env(cls) -> Policy:
        s = settings.load()
        return cls(
            attempts=s.fetch_attempts,
            backoff=s.fetch_backoff_s,
            stall=s.fetch_stall_s,
            connections=s.fetch_connections,
        )

    def delay(self, failures: int) -> float:
        base = min(self.max_backoff, self.backoff * 2 ** max(0, failures - 1))
        return base / 2 + random.uniform(0, base / 2)  # jitter so parallel fetchers do not retry in step


class Retry(Exception):
    """A transient failure (connection, timeout, stall, 408/429/5xx): worth another attempt."""

    def __init__(self, reason: str, wait: float | None = None) -> None:
        super().__init__(reason)
        self.wait = wait


def retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    return None


def retry_for_status(code: int, headers: Any) -> Retry:
    wait = retry_after(headers.get("Retry-After")) if code in (429, 503) else None
    return Retry(f"HTTP {code}", wait)


class Attempts:
    """Counts one job's consecutive failed attempts and waits (backoff or Retry-After) before the next."""

    def __init__(
        self,
        policy: Policy,
        what: str,
        note: Callable[[str], None],
        cancel: threading.Event | None,
        hint: str,
    ) -> None:
        self.policy, self.what, self.note, self.cancel, self.hint = policy, what, note, cancel, hint
        self.failures = 0

    def failed(self, exc: Retry, progressed: bool = False) -> None:
        """Wait before the next attempt; UserError once ``policy.attempts`` attempts failed in a row."""
        self.failures = 1 if progressed else self.failures + 1  # bytes arrived: the link works, reset
        if self.failures > self.policy.attempts:
            raise UserError(
                f"giving up on {self.what} after {self.policy.attempts} retries (last: {exc}); {self.hint}"
            )
        wait = (
            self.policy.delay(self.failures)
            if exc.wait is None
            else min(exc.wait, self.policy.max_retry_after)
        )
        self.note(f"{self.what}: {exc}; retry {self.failures}/{self.policy.attempts} in {wait:.1f} s")
        sleep(wait, self.cancel)


def sleep(seconds: float, cancel: threading.Event | None) -> None:
    if cancel is None:
        time.sleep(seconds)
    elif cancel.wait(seconds):
        raise Cancelled()


def http_hint(status: int, what: str) -> str:
    """What to do about a refused request, for error messages."""
    if status in (401, 403):
        return (
            f"HTTP {status} for {what}: the repository may be gated or private; "
            "set HF_TOKEN to a token with access"
        )
    if status == 404:
        return f"HTTP 404 for {what}: check repo, revision and path in models.lock (and HF_ENDPOINT)"
    return f"HTTP {status} for {what}"
