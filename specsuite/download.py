"""Resumable, verified HTTP download of one file, published only after size and sha256 match.

Hand-written on requests because no library does all of it (research/model-fetching.md §1): pooch cannot
resume and re-hashes every call, huggingface_hub checks only the size and restarts from zero.

Layout beside the final file (never ending in .gguf, never mistaken for a model):
``.<name>.part`` (bytes so far), ``.<name>.part.json`` (what the partial is for), ``.<name>.stamp``.
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
import hashlib
import json
import os
import queue
import random
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from . import stamps
from .errors import UserError

if TYPE_CHECKING:  # requests is imported on first download only: warm runs stay fast
    import requests

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_RETRY_STATUS = {408, 429, 500, 502, 503, 504}
_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


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
        print(msg, flush=True)


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    try:
        return float(value) if value else default
    except ValueError:
        raise UserError(f"{name}={value!r} is not a number") from None


@dataclass
class Policy:
    """Retry and timing knobs; tests shrink the delays (also settable through SPEC_FETCH_* variables)."""

    attempts: int = 10  # consecutive failed attempts without new bytes before giving up
    backoff: float = 1.0  # first delay; doubles per failure, with jitter, up to max_backoff
    max_backoff: float = 60.0
    max_retry_after: float = 900.0
    stall: float = 60.0  # no byte received for this long -> drop the connection and resume
    connect: float = 20.0
    chunk: int = 8 << 20  # large reads: 1-byte or 1-KiB chunks are the classic slow-download bug
    margin: int = 256 << 20  # free space kept on top of the missing bytes

    @classmethod
    def from_env(cls) -> Policy:
        return cls(
            attempts=int(_env_float("SPEC_FETCH_ATTEMPTS", cls.attempts)),
            backoff=_env_float("SPEC_FETCH_BACKOFF_S", cls.backoff),
            stall=_env_float("SPEC_FETCH_STALL_S", cls.stall),
        )

    def delay(self, failures: int) -> float:
        base = min(self.max_backoff, self.backoff * 2 ** max(0, failures - 1))
        return base / 2 + random.uniform(0, base / 2)  # jitter so parallel fetchers do not retry in step


class Cancelled(Exception):
    """Another file failed or the user pressed Ctrl-C; the partial is kept for a later resume."""


class _Retry(Exception):
    def __init__(self, reason: str, wait: float | None = None) -> None:
        super().__init__(reason)
        self.wait = wait


def part_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.part")


def _meta_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.part.json")


def discard_partial(final: Path) -> None:
    for p in (part_path(final), _meta_path(final)):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(part: Path, final: Path, sha256: str) -> None:
    """Make a verified partial the final file: fsync it, rename atomically, fsync the folder, stamp it."""
    with open(part, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(part, final)
    fsync_dir(final.parent)
    with contextlib.suppress(FileNotFoundError):
        _meta_path(final).unlink()
    stamps.write_stamp(final, sha256)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_space(folder: Path, need: int, what: str) -> None:
    free = shutil.disk_usage(folder).free
    if free < need:
        raise UserError(
            f"not enough free space in {folder} for {what}: need {_gib(need)} (missing bytes plus margin), "
            f"have {_gib(free)}; free some space or point --model-dir / SPEC_MODEL_DIR at a bigger disk"
        )


def disk_full(exc: OSError, part: Path, what: str) -> UserError:
    return UserError(
        f"disk full while writing {what} ({part}): {exc.strerror}; free space in {part.parent} or use "
        "--model-dir / SPEC_MODEL_DIR on a bigger disk, then rerun (the partial file is kept and resumed)"
    )


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    return None


def _adopt(final: Path, size: int, sha256: str, progress: Progress) -> tuple[hashlib._Hash, int]:  # type: ignore[name-defined]
    """Re-hash a kept partial meant for the same (size, sha256); anything else is discarded."""
    part, meta = part_path(final), _meta_path(final)
    try:
        info = json.loads(meta.read_text(encoding="utf-8"))
        have = part.stat().st_size
    except (OSError, ValueError):
        info, have = None, 0
    if info != {"size": size, "sha256": sha256} or have > size:
        discard_partial(final)
        meta.write_text(json.dumps({"size": size, "sha256": sha256}), encoding="utf-8")
        part.write_bytes(b"")
        return hashlib.sha256(), 0
    # hashlib objects cannot be pickled, so the only way to continue the hash is to re-read the prefix.
    hasher = stamps.hash_file(part, progress=progress.advance)
    return hasher, have


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
    hasher: hashlib._Hash  # type: ignore[name-defined]
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
        with open(part_path(self.final), "r+b") as f:
            f.truncate(0)
        self.hasher, self.offset = hashlib.sha256(), 0
        self.progress.set(0)


def _check_status(st: _State, r: requests.Response, asked: int) -> None:
    from .hub import http_hint

    code = r.status_code
    if code == 416:
        st.restart("server answered 416 to the resume request (stale partial)")
        raise _Retry("416 Range Not Satisfiable", wait=0)
    if code in _RETRY_STATUS:
        raise _Retry(
            f"HTTP {code}", _retry_after(r.headers.get("Retry-After")) if code in (429, 503) else None
        )
    if code in (401, 403, 404) or (400 <= code < 500):
        raise UserError(f"cannot download {st.final.name} from {st.url}: {http_hint(code, st.final.name)}")
    if code >= 500:
        raise _Retry(f"HTTP {code}")
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
            raise _Retry("wrong Content-Range", wait=0)
    else:
        raise _Retry(f"unexpected HTTP {code}")


class _Writer:
    """Writes chunks in a helper thread while the caller receives and hashes the next ones.

    Socket reads, sha256 of large buffers and file writes all release the GIL, so with two cores a download
    costs about max(receive + hash, write) rather than the sum.
    """

    def __init__(self, f) -> None:
        self.f, self.exc = f, None
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


def _stream(st: _State, r: requests.Response) -> None:
    part = part_path(st.final)
    try:
        with open(part, "r+b") as f:
            f.seek(st.offset)
            f.truncate()
            writer = _Writer(f)
            try:
                for chunk in r.iter_content(st.policy.chunk):
                    if st.cancel is not None and st.cancel.is_set():
                        raise Cancelled()
                    if st.offset + len(chunk) > st.size:
                        raise UserError(
                            f"{st.url} sent more than the {st.size} bytes expected for {st.final.name}; "
                            "the lock and the server disagree: check `invoke lock-models --check`"
                        )
                    writer.write(chunk)
                    st.hasher.update(chunk)
                    st.offset += len(chunk)
                    st.progress.advance(len(chunk))
            finally:
                writer.close()  # every counted byte is in the file before anyone looks at it
    except OSError as exc:
        if exc.errno in _DISK_FULL:
            raise disk_full(exc, part, st.final.name) from None
        raise


def _attempt(st: _State) -> None:
    import requests
    import urllib3.exceptions

    asked = st.offset
    headers = {"Range": f"bytes={asked}-"} if asked else {}
    timeout = (st.policy.connect, st.policy.stall)  # the read timeout is the stall watchdog: no byte for N s
    try:
        with st.sess.get(st.url, headers=headers, stream=True, timeout=timeout) as r:
            _check_status(st, r, asked)
            _stream(st, r)
    except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
        raise _Retry(f"{type(exc).__name__}: {exc}") from None
    if st.offset < st.size:
        raise _Retry(f"body ended at byte {st.offset} of {st.size}")


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
    final.parent.mkdir(parents=True, exist_ok=True)
    hasher, offset = _adopt(final, size, sha256, progress)
    status = "resumed" if offset else "downloaded"
    check_space(final.parent, size - offset + policy.margin, final.name)
    st = _State(final, url, size, sha256, sess, policy, progress, cancel, hasher, offset)
    failures = mismatches = 0
    while True:
        if st.offset == size:
            if st.hasher.hexdigest() == sha256:
                publish(part_path(final), final, sha256)
                return status
            mismatches += 1
            got = st.hasher.hexdigest()
            if mismatches > 1:
                discard_partial(final)
                raise UserError(
                    f"{final.name}: downloaded bytes have sha256 {got}, expected {sha256} (twice); "
                    f"nothing was published. The server at {url} serves other content than the lock names: "
                    "check `invoke lock-models --check` and HF_ENDPOINT"
                )
            st.restart(f"sha256 mismatch ({got}, expected {sha256})")
        before = st.offset
        try:
            _attempt(st)
        except _Retry as exc:
            failures = 1 if st.offset > before else failures + 1  # bytes arrived: the link works, reset
            if failures > policy.attempts:
                raise UserError(
                    f"giving up on {final.name} after {policy.attempts} failed attempts ({exc}); the partial "
                    f"file is kept and the next run resumes it. Check the network and {url}"
                ) from None
            wait = policy.delay(failures) if exc.wait is None else min(exc.wait, policy.max_retry_after)
            progress.note(f"{final.name}: {exc}; retry {failures}/{policy.attempts} in {wait:.1f} s")
            _sleep(wait, cancel)


def _sleep(seconds: float, cancel: threading.Event | None) -> None:
    if cancel is None:
        time.sleep(seconds)
    elif cancel.wait(seconds):
        raise Cancelled()
