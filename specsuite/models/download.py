"""Resumable, verified HTTP download of one file, over several connections at once when it is large.

Hand-written on requests because no library does all of it: pooch cannot resume and re-hashes every call,
huggingface_hub checks only the size and restarts from zero, aria2c fetches ranges in parallel but hashes
nothing while it downloads and knows nothing of the Hub's token or of our retry policy (``models.http``).

A file over ``Policy.parallel_min`` bytes is cut into parts fetched in file order by ``Policy.connections``
threads with bounded ``Range: bytes=A-B`` requests, each written at its offset into the one partial file
(``os.pwrite``). A hashing thread follows the contiguous prefix of what arrived, reading it back while it is
still in the page cache (hashlib releases the GIL), so the file is never read a second time after the
download. A checkpoint thread flushes the partial every ``Policy.checkpoint`` seconds and then records the
ranges it holds in ``.NAME.part.json``: a SIGKILL loses at most that much, a resume asks only for what is
missing, and the final fsync finds little left to write. Smaller files, ``connections = 1``, and a server
that ignores ranges or answers one with a wrong ``Content-Range`` use one connection (``Range: bytes=N-``
to resume), whose partial is written in order, so its size says what arrived.

Per connection, a watchdog (``models.watchdog``) drops it when the user cancels or when fewer than
``stall_bytes`` arrived in the last ``stall`` seconds; what arrived is kept, and the retry policy decides
when to give up. What each answer means (its status, ``Content-Range`` and length) is ``models.replies``'.
The bytes become the final file only through ``store.publish`` (size and sha256 checked).
"""

from __future__ import annotations

import collections
import hashlib
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from specsuite.common.errors import UserError
from specsuite.models import store
from specsuite.models.http import Attempts, Policy, Retry, transport_error
from specsuite.models.ranges import Range, Ranges, parts
from specsuite.models.replies import File, OneConnection, Part, StartOver, body_end
from specsuite.models.store import Cancelled
from specsuite.models.watchdog import Watchdog

if TYPE_CHECKING:  # requests is imported on first download only: warm runs stay fast
    import requests

__all__ = ["Cancelled", "download"]

_HASH_BLOCK = 8 << 20
_FRESH = 64 << 20  # received pieces kept for the hasher: at most this much, and this far ahead of it
_MIN_PART = 1 << 20
_fdatasync = getattr(os, "fdatasync", os.fsync)


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


class _Serial:
    """Progress reported from several threads, one call at a time (bars and counters are not thread-safe)."""

    def __init__(self, inner: Progress) -> None:
        self.inner, self.lock = inner, threading.Lock()

    def advance(self, n: int) -> None:
        with self.lock:
            self.inner.advance(n)

    def set(self, n: int) -> None:
        with self.lock:
            self.inner.set(n)

    def note(self, msg: str) -> None:
        with self.lock:
            self.inner.note(msg)


# ---------------------------------------------------------------- the state of one download


def _adopt(final: Path, size: int, sha256: str) -> Ranges:
    """The ranges a kept partial for the same (size, sha256) holds; anything else starts a new partial."""
    part = store.regular_or_absent(store.part_path(final))
    meta = store.read_meta(final) or {}
    done = None
    if part is not None and part.st_size <= size and (meta.get("size"), meta.get("sha256")) == (size, sha256):
        # Without recorded ranges the partial was written in order, by one connection: all of it arrived.
        done = Ranges.from_json(meta["done"], part.st_size) if "done" in meta else Ranges([(0, part.st_size)])
    if done is None:
        store.new_part(final, {"size": size, "sha256": sha256}).close()
        return Ranges()
    return done


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
    done: Ranges
    hasher: Any = field(default_factory=hashlib.sha256)
    hashed: int = 0  # the hasher has seen bytes [0, hashed)
    restarts: int = 0

    @property
    def name(self) -> str:
        return self.final.name

    def meta(self, ranges: Ranges | None) -> dict[str, object]:
        meta: dict[str, object] = {"size": self.size, "sha256": self.sha256}
        if ranges is not None:
            meta["done"] = ranges.to_json()
        return meta

    def start_over(self, why: str) -> None:
        self.restarts += 1
        if self.restarts > 3:  # bytes keep arriving, so the failure counter alone would never stop this
            raise UserError(
                f"{self.name}: had to start over {self.restarts} times (last: {why}); {self.url} does "
                f"not serve one consistent file of {self.size} bytes. Check HF_ENDPOINT and the lock entry"
            )
        self.progress.note(f"{self.name}: {why}; starting over from byte 0")
        try:
            with store.open_part(self.final, new=False) as f:
                f.truncate(0)
            store.write_meta(self.final, self.meta(None))
        except OSError as exc:
            raise store.io_error(exc, self.name) from None
        self.done, self.hasher, self.hashed = Ranges(), hashlib.sha256(), 0
        self.progress.set(0)


# ---------------------------------------------------------------- one round of transfers


class _Job:
    """What the threads of one round share: the parts left, the partial's descriptor, the first error."""

    def __init__(self, st: _State, f: IO[bytes], conns: int, todo: list[Range]) -> None:
        self.st, self.fd, self.conns = st, f.fileno(), conns
        self.todo = collections.deque(todo)
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.url = st.url  # after the first answer: where the Hub redirected to (a signed CDN URL)
        self.resolved = threading.Event()
        self.synced = -1
        self.fresh: dict[int, bytes] = {}  # offset -> piece just written, for the hasher to take as it is
        self.fresh_bytes = 0
        self.watch = Watchdog(st.policy, self.stop)
        self.file = File(st.url, st.name, st.size, bounded=conns > 1)  # what the answers are checked against
        self.hint = f"the partial file is kept and the next run resumes it. Check the network and {st.url}"

    def take(self) -> Range | None:
        with self.cond:
            return self.todo.popleft() if self.todo and not self.stop.is_set() else None

    def wrote(self, a: int, piece: bytes) -> None:
        """``piece`` is on disk at ``a``; near the hash position, the hasher takes it from memory."""
        with self.cond:
            self.st.done.add(a, a + len(piece))
            if a - self.st.hashed < _FRESH and self.fresh_bytes < _FRESH:
                self.fresh[a] = piece
                self.fresh_bytes += len(piece)
            self.cond.notify_all()
        self.st.progress.advance(len(piece))

    def next_for_hash(self, pos: int, end: int) -> tuple[bytes | None, int]:
        """(the piece written at ``pos``, or None and where the next kept piece begins, at most ``end``).

        Pieces behind ``pos`` were read back from the file instead: dropped. The caller holds ``cond``."""
        for a in [a for a in self.fresh if a < pos]:
            self.fresh_bytes -= len(self.fresh.pop(a))
        piece = self.fresh.pop(pos, None)
        if piece is not None:
            self.fresh_bytes -= len(piece)
            return piece, pos + len(piece)
        return None, min([a for a in self.fresh if a < end], default=end)

    def answered(self, asked: str, got: str) -> None:
        """Later requests go straight to where the Hub redirected the first one (one resolve per file)."""
        if asked == self.st.url:
            self.url = got
        self.resolved.set()

    def fail(self, exc: BaseException) -> None:
        """Stop the round; the first error is the one it ends with (the others follow from the stop)."""
        with self.cond:
            if self.error is None:
                self.error = exc
            self.stop.set()
            self.cond.notify_all()

    def sync(self) -> None:
        """Flush the partial, then record the ranges it now holds (one connection writes in order)."""
        with self.cond:
            snapshot = self.st.done.copy()
        if snapshot.total() == self.synced:
            return
        _fdatasync(self.fd)
        if self.conns > 1:
            store.write_meta(self.st.final, self.st.meta(snapshot))
        self.synced = snapshot.total()


# ---------------------------------------------------------------- one request


def _write(job: _Job, data: bytes, pos: int) -> None:
    view = memoryview(data)
    try:
        while view:
            n = os.pwrite(job.fd, view, pos)
            view, pos = view[n:], pos + n
    except OSError as exc:  # the partial file's errors (network errors arrive as urllib3's)
        raise store.io_error(exc, job.st.name) from None


def _receive(job: _Job, r: requests.Response, part: Part, limit: int) -> None:
    """Write the body at its offsets, piece by piece; Retry/Cancelled when the watchdog ended it."""
    import requests
    import urllib3.exceptions

    watched = job.watch.add(r.raw, limit - part.pos)
    try:
        while part.pos < limit:
            chunk = r.raw.read1(min(job.st.policy.chunk, limit - part.pos), decode_content=True)
            if not chunk:
                break
            _write(job, chunk, part.pos)
            job.wrote(part.pos, chunk)
            part.pos += len(chunk)
            watched.received += len(chunk)
            if job.stop.is_set():
                raise Cancelled()
    except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
        if watched.reason is not None:
            raise watched.reason from None
        raise transport_error(exc) from None
    finally:
        job.watch.remove(watched)
    if watched.reason is not None:
        raise watched.reason
    if part.pos < limit:
        raise Retry(f"body ended at byte {part.pos} of {limit}")


def _request(job: _Job, sess: requests.Session, part: Part) -> None:
    import requests
    import urllib3.exceptions

    if job.stop.is_set():
        raise Cancelled()
    asked, url = part.pos, job.st.url if part.via_hub else job.url
    part.via_hub = False
    if job.conns > 1:
        headers = {"Range": f"bytes={asked}-{part.end - 1}"}
    else:
        headers = {"Range": f"bytes={asked}-"} if asked else {}
    # The socket timeout is the backstop (no answer at all); during the body the watchdog's window decides.
    timeout = (job.st.policy.connect, 2 * job.st.policy.stall)
    try:
        with sess.get(url, headers=headers, stream=True, timeout=timeout) as r:
            job.answered(url, r.url)
            _receive(job, r, part, body_end(r, part, url, job.file))
    except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
        raise transport_error(exc) from None


def _fetch_part(job: _Job, sess: requests.Session, rng: Range) -> None:
    part = Part(rng[0], rng[1], rng[0])
    what = job.st.name if job.conns == 1 else f"{job.st.name} bytes {part.start}-{part.end - 1}"
    tries = Attempts(job.st.policy, what, job.st.progress.note, job.stop, job.hint)
    while part.pos < part.end:
        before = part.pos
        try:
            _request(job, sess, part)
        except Retry as exc:
            tries.failed(exc, progressed=part.pos > before)


def _session_like(sess: requests.Session) -> requests.Session:
    """A session of its own for each connection (one session shared by threads is not documented safe)."""
    import requests

    s = requests.Session()
    s.headers.update(sess.headers)
    s.auth, s.proxies, s.verify, s.cert, s.trust_env = (
        sess.auth,
        sess.proxies,
        sess.verify,
        sess.cert,
        sess.trust_env,
    )
    return s


def _worker(job: _Job, first: bool) -> None:
    sess = job.st.sess if job.conns == 1 else _session_like(job.st.sess)
    try:
        if not first:
            while not (job.resolved.wait(0.1) or job.stop.is_set()):
                pass
        while (rng := job.take()) is not None:
            _fetch_part(job, sess, rng)
    except BaseException as exc:  # the round ends with it, re-raised by the supervisor
        job.fail(exc)
    finally:
        job.resolved.set()
        if sess is not job.st.sess:
            sess.close()


# ---------------------------------------------------------------- the helpers of a round


def _hash(job: _Job) -> None:
    """Follow the contiguous prefix: each piece as it was received when it is at hand (always, over one
    connection), else read back from the file while it is still in the page cache."""
    st = job.st
    buf = memoryview(bytearray(_HASH_BLOCK))
    while st.hashed < st.size:
        with job.cond:
            while (end := st.done.prefix()) <= st.hashed and not job.stop.is_set():
                job.cond.wait()
            if job.stop.is_set():
                return
            piece, upto = job.next_for_hash(st.hashed, end)
        if piece is not None:
            st.hasher.update(piece)
            st.hashed = upto
            continue
        n = os.preadv(job.fd, [buf[: min(len(buf), upto - st.hashed)]], st.hashed)
        if n <= 0:
            raise StartOver("the partial file is shorter than the ranges recorded for it")
        st.hasher.update(buf[:n])
        st.hashed += n


def _checkpoint(job: _Job) -> None:
    while not job.stop.wait(job.st.policy.checkpoint):
        job.sync()


def _guarded(job: _Job, fn: Callable[[_Job], None]) -> threading.Thread:
    def run() -> None:
        try:
            fn(job)
        except OSError as exc:
            job.fail(store.io_error(exc, job.st.name))
        except BaseException as exc:  # the round ends with it
            job.fail(exc)

    return threading.Thread(target=run, daemon=True)


def _part_size(st: _State, conns: int) -> int:
    """The policy's part, smaller for a file under ``4 * conns`` of them: every connection gets a few."""
    return min(st.policy.part, max(_MIN_PART, st.size // (4 * conns)))


def _plan(st: _State, f: IO[bytes], conns: int) -> list[Range]:
    """The parts this round fetches; the partial's metadata first says how it will be written."""
    if conns > 1:
        store.write_meta(st.final, st.meta(st.done))  # before the first write out of order
        return parts(st.done.missing(st.size), _part_size(st, conns))
    start = st.done.prefix()  # one connection writes in order: keep the prefix, drop what lies beyond
    f.truncate(start)
    st.done.clip(start)
    store.write_meta(st.final, st.meta(None))
    return [(start, st.size)] if start < st.size else []


def _wait(job: _Job, threads: list[threading.Thread], cancel: threading.Event | None) -> None:
    """Join ``threads``, passing the user's cancel on to the round within a tenth of a second."""
    for t in threads:
        while t.is_alive():
            t.join(0.1)
            if cancel is not None and cancel.is_set():
                job.fail(Cancelled())


def _round(st: _State, conns: int) -> None:
    """Fetch every missing byte over ``conns`` connections and hash the file; raises what ended it early."""
    with store.open_part(st.final, new=False) as f:
        todo = _plan(st, f, conns)
        st.progress.set(st.done.total())
        job = _Job(st, f, conns, todo)
        hasher, checkpoint = _guarded(job, _hash), _guarded(job, _checkpoint)
        workers = [
            threading.Thread(target=_worker, args=(job, i == 0), daemon=True)
            for i in range(min(conns, len(todo)))
        ]
        for t in (hasher, checkpoint, *workers):
            t.start()
        try:
            _wait(job, workers, st.cancel)
            _wait(job, [hasher], st.cancel)  # ends once every byte is hashed, or at the first error
        finally:
            job.stop.set()
            with job.cond:
                job.cond.notify_all()
            _wait(job, [hasher, checkpoint, *workers], None)
            job.watch.close()
            try:
                job.sync()  # what arrived survives a failure too
            except OSError as exc:
                job.fail(store.io_error(exc, st.name))
    if job.error is not None:
        raise job.error


HUB_MISMATCH_FIX = (
    "The server serves other content than the lock names: check `specsuite lock-models --check` and "
    "HF_ENDPOINT"
)


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
    origin: str | None = None,
    mismatch_fix: str = HUB_MISMATCH_FIX,
) -> str:
    """Download ``url`` to ``final``; returns "downloaded" or "resumed". UserError on a fatal problem.

    The caller holds the per-file lock. ``final`` is replaced only by bytes whose size and sha256 match;
    its stamp records ``origin`` (what the sha256 came from); ``mismatch_fix``: what to do when the bytes
    served twice are not the ones named (the Hub's advice by default).
    """
    policy = policy or Policy()
    progress = _Serial(progress or _Quiet())
    store.ensure_folder(final.parent)
    store.check_layout(final)
    done = _adopt(final, size, sha256)
    status = "resumed" if done.total() else "downloaded"
    store.check_space(final.parent, size - done.total() + policy.margin, final.name)
    st = _State(final, url, size, sha256, sess, policy, progress, cancel, done)
    conns = policy.connections if size > policy.parallel_min else 1
    mismatched = False
    while True:
        try:
            _round(st, conns)
        except StartOver as exc:
            st.start_over(str(exc))
            continue
        except OneConnection as exc:
            progress.note(f"{final.name}: {exc}; continuing over one connection")
            conns = 1
            continue
        except OSError as exc:  # the partial or its metadata (network errors end as Retry in the workers)
            raise store.io_error(exc, final.name) from None
        got = st.hasher.hexdigest()
        if got != sha256 and not mismatched:
            mismatched = True  # one corrupt transfer is retried from zero; the second is the answer
            st.start_over(f"sha256 mismatch ({got}, expected {sha256})")
            continue
        store.publish(final, size=size, sha256=sha256, got=got, what=f"as downloaded (twice) from {url}",
                      fix=mismatch_fix, origin=origin)  # fmt: skip
        return status
