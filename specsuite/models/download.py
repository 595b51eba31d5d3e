"""Resumable, verified HTTP download of one file (its retries follow ``models.http``'s one policy).

Hand-written on requests because no library does all of it: pooch cannot resume and re-hashes every call,
huggingface_hub checks only the size and restarts from zero.

The bytes go to the store's partial file (``store.part_path``) and become the final file only through
``store.publish`` (size and sha256 checked). A body is read in pieces of at most ``Policy.chunk`` bytes
while a watchdog thread drops the connection when the user cancels or when fewer than ``stall_bytes``
arrived in the last ``stall`` seconds (a per-read socket timeout alone never trips on a server trickling
one byte a second); what arrived is kept, and the next attempt resumes it with ``Range``.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import queue
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from specsuite.common import filehash
from specsuite.common.errors import UserError
from specsuite.models import store
from specsuite.models.http import (
    RETRY_STATUS,
    Attempts,
    Policy,
    Retry,
    http_hint,
    retry_for_status,
)
from specsuite.models.store import Cancelled

if TYPE_CHECKING:  # requests is imported on first download only: warm runs stay fast
    import requests

__all__ = ["Cancelled", "download"]

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class Progress(Protocol):
    def advance(self, n: int) -> None: ...
    def set(self, n: int) -> None: ...
    def note(self, msg: str) -> None: ...


class _Quiet:
    def advance(self, n: int) -> None:
        pass

    def set(self, n: int) -> None:
        pass

    def note(self, msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- one download


def _adopt(
    final: Path, size: int, sha256: str, progress: Progress, cancel: threading.Event | None
) -> tuple[Any, int]:
    """Re-hash a kept partial meant for the same (size, sha256); anything else starts a new one."""
    want: dict[str, int | str] = {"size": size, "sha256": sha256}
    part = store.regular_or_absent(store.part_path(final))
    if part is None or part.st_size > size or store.read_meta(final) != want:
        store.new_part(final, want).close()
        return hashlib.sha256(), 0

    def advance(n: int) -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        progress.advance(n)

    # hashlib objects cannot be pickled, so the only way to continue the hash is to re-read the prefix.
    return filehash.hash_into(store.part_path(final), progress=advance), part.st_size


@dataclass
class _State:
    final: Path
    url: str
    size: int
    sha256: str
    sess: requests.Session
    policy: Policy
    progress: Progress
    cancel: threading.Event | None
    hasher: Any
    offset: int = 0
    restarts: int = 0

    def restart(self, why: str) -> None:
        self.restarts += 1
        if self.restarts > 3:  # bytes keep arriving, so the failure counter alone would never stop this
            raise UserError(
                f"{self.final.name}: had to start over {self.restarts} times (last: {why}); {self.url} does "
                f"not serve one consistent file of {self.size} bytes. Check HF_ENDPOINT and the lock entry"
            )
        self.progress.note(f"{self.final.name}: {why}; starting over from byte 0")
        with store.open_part(self.final, new=False) as f:
            f.truncate(0)
        self.hasher, self.offset = hashlib.sha256(), 0
        self.progress.set(0)


def _check_status(st: _State, r: requests.Response, asked: int) -> None:

    code = r.status_code
    if code == 416:
        st.restart("server answered 416 to the resume request (stale partial)")
        raise Retry("416 Range Not Satisfiable", wait=0)
    if code in RETRY_STATUS or code >= 500:
        raise retry_for_status(code, r.headers)
    if 400 <= code < 500:
        raise UserError(f"cannot download {st.final.name} from {st.url}: {http_hint(code, st.final.name)}")
    if code == 200 and asked:
        st.restart("server ignored the Range request (200 instead of 206)")
    if code == 200:
        length = r.headers.get("Content-Length")
        # Longer than the file cannot be right; shorter may be a truncation, resumed afterwards.
        if length and length.isdigit() and int(length) > st.size:
            raise UserError(
                f"{st.url} is {int(length)} bytes but {st.final.name} should be {st.size}: "
                "the lock (or the Hub's metadata) and the server disagree; check `invoke lock-models --check`"
            )
    elif code == 206:
        m = _CONTENT_RANGE.match(r.headers.get("Content-Range", ""))
        if not m or int(m[1]) != asked or int(m[2]) >= st.size or m[3] not in ("*", str(st.size)):
            st.restart(
                f"bad Content-Range {r.headers.get('Content-Range')!r} for a request from byte {asked}"
            )
            raise Retry("wrong Content-Range", wait=0)
    else:
        raise Retry(f"unexpected HTTP {code}")


class _Writer:
    """Writes chunks in a helper thread while the caller receives and hashes the next ones.

    Socket reads, sha256 of large buffers and file writes all release the GIL, so with two cores a download
    costs about max(receive + hash, write) rather than the sum.
    """

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.exc: OSError | None = None
        self.q: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (chunk := self.q.get()) is not None:
            if self.exc is not None:
                continue  # drain after a failure; close() reports it
            try:
                self.f.write(chunk)
            except OSError as exc:
                self.exc = exc

    def write(self, chunk: bytes) -> None:
        if self.exc is not None:
            raise self.exc
        self.q.put(chunk)

    def close(self) -> None:
        """Wait until every queued chunk is written; raise the writer's error, if any."""
        self.q.put(None)
        self.thread.join()
        if self.exc is not None:
            raise self.exc


class _Watchdog:
    """Ends a body read that was cancelled or that is too slow, by shutting the socket down.

    A blocked read cannot be interrupted from its own thread, and a socket timeout resets with every byte;
    urllib3's ``HTTPResponse.shutdown()`` (thread-safe, made for this) wakes the reader at once.
    """

    def __init__(self, raw: Any, policy: Policy, cancel: threading.Event | None, remaining: int) -> None:
        self.raw, self.policy, self.cancel = raw, policy, cancel
        self.need = min(policy.stall_bytes, remaining)
        self.received = 0  # written by the reader only; an int store is atomic
        self.reason: Retry | Cancelled | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        tick = min(0.25, self.policy.stall / 4)
        samples = collections.deque([(time.monotonic(), 0)])
        while not self._done.wait(tick):
            now = time.monotonic()
            samples.append((now, self.received))
            if self.cancel is not None and self.cancel.is_set():
                return self._trip(Cancelled())
            while len(samples) > 1 and samples[1][0] <= now - self.policy.stall:
                samples.popleft()
            start, then = samples[0]
            if now - start >= self.policy.stall and self.received - then < self.need:
                got = self.received - then
                return self._trip(
                    Retry(f"stalled: {got} bytes in the last {now - start:.1f} s (fewer than {self.need})")
                )

    def _trip(self, reason: Retry | Cancelled) -> None:
        self.reason = reason
        with contextlib.suppress(Exception):  # already closed or released: the reader ends anyway
            self.raw.shutdown()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def _pump(st: _State, raw: Any, writer: _Writer, watch: _Watchdog) -> None:
    """Move the body into the writer, piece by piece; Retry/Cancelled when the watchdog ended it."""
    import requests
    import urllib3.exceptions

    try:
        while chunk := raw.read1(st.policy.chunk, decode_content=True):
            if st.offset + len(chunk) > st.size:
                raise UserError(
                    f"{st.url} sent more than the {st.size} bytes expected for {st.final.name}; "
                    "the lock and the server disagree: check `invoke lock-models --check`"
                )
            writer.write(chunk)
            st.hasher.update(chunk)
            st.offset += len(chunk)
            watch.received += len(chunk)
            st.progress.advance(len(chunk))
            if st.cancel is not None and st.cancel.is_set():
                raise Cancelled()
    except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
        if watch.reason is not None:
            raise watch.reason from None
        raise Retry(f"{type(exc).__name__}: {exc}") from None
    if watch.reason is not None:
        raise watch.reason


def _stream(st: _State, r: requests.Response) -> None:
    watch = _Watchdog(r.raw, st.policy, st.cancel, st.size - st.offset)
    try:
        with store.open_part(st.final, new=False) as f:
            f.seek(st.offset)
            f.truncate()
            writer = _Writer(f)
            try:
                _pump(st, r.raw, writer, watch)
            finally:
                writer.close()  # every counted byte is in the file before anyone looks at it
    except OSError as exc:  # the partial file's errors (network errors arrive as urllib3's)
        raise store.io_error(exc, st.final.name) from None
    finally:
        watch.stop()


def _attempt(st: _State) -> None:
    import requests
    import urllib3.exceptions

    if st.cancel is not None and st.cancel.is_set():
        raise Cancelled()
    asked = st.offset
    headers = {"Range": f"bytes={asked}-"} if asked else {}
    # The socket timeout is the backstop (no answer at all); during the body the watchdog's window decides.
    timeout = (st.policy.connect, 2 * st.policy.stall)
    try:
        with st.sess.get(st.url, headers=headers, stream=True, timeout=timeout) as r:
            _check_status(st, r, asked)
            _stream(st, r)
    except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
        raise Retry(f"{type(exc).__name__}: {exc}") from None
    if st.offset < st.size:
        raise Retry(f"body ended at byte {st.offset} of {st.size}")


def download(
    url: str,
    final: Path,
    *,
    size: int,
    sha256: str,
    sess: requests.Session,
    policy: Policy | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> str:
    """Download ``url`` to ``final``; returns "downloaded" or "resumed". UserError on a fatal problem.

    The caller holds the per-file lock. ``final`` is replaced only by bytes whose size and sha256 match.
    """
    policy = policy or Policy()
    progress = progress or _Quiet()
    store.ensure_folder(final.parent)
    store.check_layout(final)
    hasher, offset = _adopt(final, size, sha256, progress, cancel)
    status = "resumed" if offset else "downloaded"
    store.check_space(final.parent, size - offset + policy.margin, final.name)
    st = _State(final, url, size, sha256, sess, policy, progress, cancel, hasher, offset)
    hint = f"the partial file is kept and the next run resumes it. Check the network and {url}"
    tries = Attempts(policy, final.name, progress.note, cancel, hint)
    mismatched = False
    while True:
        if st.offset == size:
            got = st.hasher.hexdigest()
            if got != sha256 and not mismatched:
                mismatched = True  # one corrupt transfer is retried from zero; the second is the answer
                st.restart(f"sha256 mismatch ({got}, expected {sha256})")
                continue
            store.publish(final, size=size, sha256=sha256, got=got, what=f"as downloaded (twice) from {url}",
                          fix="The server serves other content than the lock names: check "
                          "`invoke lock-models --check` and HF_ENDPOINT")  # fmt: skip
            return status
        before = st.offset
        try:
            _attempt(st)
        except Retry as exc:
            tries.failed(exc, progressed=st.offset > before)
