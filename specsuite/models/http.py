"""The one HTTP policy every model request follows (file bodies and Hub metadata alike): which failures are
worth a retry, how long to wait, when to give up, and what a refused request means to the user.

The policy is urllib3's ``Retry`` (``Policy.retry``): statuses 408, 429 and 5xx, timeouts and resets are
retried, with exponential backoff and jitter or the server's ``Retry-After``, up to ``attempts`` in a row.
A connection refused and a host name that does not resolve are not retried at all: no server answers there,
and waiting minutes for one to appear only hides a wrong ``HF_ENDPOINT`` or a machine without network
(``unreachable``); nor is a URL no request can be made of (a ``file:`` link, no host: requests refuses
it before sending a byte). Other 4xx than 408 and 429 are not retried either: ``send`` returns them to its
caller, the downloader stops on them. urllib3's Retry is not mounted on the session's adapter, because it
cannot see what fails after the adapter returned (a body that stalls, resets or ends early: the download
resumes it from the byte it reached, and bytes arriving start the count afresh), and its sleeps cannot be
cancelled by Ctrl-C from another thread nor say what they wait for. So it decides and counts
(``Retry.increment``) and says how long (``get_retry_after``, ``get_backoff_time``); ``Attempts`` waits,
says so and tries again."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specsuite.common import settings
from specsuite.common.errors import UserError
from specsuite.models.store import Cancelled

if TYPE_CHECKING:  # urllib3 is imported with the first request: a warm run makes none
    import requests
    import urllib3

RETRY_STATUS = frozenset({408, 429, *range(500, 600)})
FATAL_STATUS = frozenset({401, 403, 404})
# Refusals a retry cannot change: nothing listens there, or there is no route to the network at all.
_UNREACHABLE_ERRNO = {errno.ECONNREFUSED: "connection refused", errno.ENETUNREACH: "network unreachable"}


@dataclass
class Policy:
    """Retry and timing knobs, shared by every request; tests shrink them (also SPEC_FETCH_* variables)."""

    attempts: int = 10  # retries after consecutive failures without new bytes, then give up
    backoff: float = 1.0  # urllib3's backoff_factor (and jitter): 0, 2, 4, 8 ... s, up to max_backoff
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

    def retry(self) -> urllib3.util.Retry:
        """The policy as urllib3 states it: ``attempts`` retries in a row, of any kind (every request here
        reads, POST paths-info included), on 408, 429 and 5xx, with backoff, jitter (parallel fetchers do
        not retry in step) and Retry-After up to ``max_retry_after``."""
        from urllib3.util import Retry as Urllib3Retry

        return Urllib3Retry(
            total=self.attempts,
            redirect=False,
            allowed_methods=None,
            status_forcelist=RETRY_STATUS,
            backoff_factor=self.backoff,
            backoff_max=self.max_backoff,
            backoff_jitter=self.backoff,
            respect_retry_after_header=True,
            retry_after_max=int(self.max_retry_after),
            raise_on_status=False,
        )


class Retry(Exception):
    """A failure that may be transient: the urllib3 error or response that urllib3's Retry judges, and a
    wait of our own choosing (0: at once), if any."""

    def __init__(
        self,
        reason: str,
        wait: float | None = None,
        *,
        error: Exception | None = None,
        response: urllib3.BaseHTTPResponse | None = None,
    ) -> None:
        super().__init__(reason)
        self.wait, self.error, self.response = wait, error, response


def transport_error(exc: Exception) -> Retry:
    """A requests or urllib3 exception as a Retry carrying urllib3's own error (requests wraps it, inside a
    MaxRetryError for a connection that was never made)."""
    import urllib3.exceptions

    inner: BaseException | None = exc
    while inner is not None and not isinstance(inner, urllib3.exceptions.HTTPError):
        inner = inner.args[0] if inner.args and isinstance(inner.args[0], BaseException) else None
    if isinstance(inner, urllib3.exceptions.MaxRetryError):
        inner = inner.reason
    error = inner if isinstance(inner, Exception) else exc
    return Retry(f"{type(exc).__name__}: {exc}", error=error)


def retry_for_status(r: Any) -> Retry:
    """An answer with a retryable status (a requests Response): urllib3's Retry reads its Retry-After."""
    return Retry(f"HTTP {r.status_code}", response=r.raw)


def unreachable(error: Exception | None) -> str | None:
    """Why no retry can help (a refused connection, a name that does not resolve, a URL no request can be
    made of: another scheme than http(s), no host, no scheme at all), or None."""
    import requests
    import urllib3.exceptions

    # Raised before any byte is sent: the URL itself is wrong, and ten retries (six minutes) fix nothing.
    bad_url = (
        requests.exceptions.InvalidSchema,
        requests.exceptions.InvalidURL,
        requests.exceptions.MissingSchema,
        urllib3.exceptions.LocationValueError,
    )
    if isinstance(error, bad_url):
        return f"no request can be made of it ({type(error).__name__}: {' '.join(str(error).split())})"
    if isinstance(error, urllib3.exceptions.NameResolutionError):
        return f"the host name {getattr(error.conn, 'host', '?')!r} does not resolve"
    if isinstance(error, urllib3.exceptions.NewConnectionError):
        cause = error.__cause__
        if isinstance(cause, OSError) and cause.errno in _UNREACHABLE_ERRNO:
            pool = getattr(error, "conn", None)
            where = f" at {pool.host}:{pool.port}" if pool is not None else ""
            return f"{_UNREACHABLE_ERRNO[cause.errno]}{where}"
    return None


class Attempts:
    """One job's consecutive failed attempts, counted by urllib3's Retry; waits (backoff or Retry-After)
    before the next, saying so."""

    def __init__(
        self,
        policy: Policy,
        what: str,
        note: Callable[[str], None],
        cancel: threading.Event | None,
        hint: str,
        method: str = "GET",
    ) -> None:
        self.policy, self.what, self.note, self.cancel, self.hint = policy, what, note, cancel, hint
        self.method, self.fresh = method, policy.retry()
        self.retry = self.fresh

    def failed(self, exc: Retry, progressed: bool = False) -> None:
        """Wait before the next attempt; UserError at once for an unreachable server, and once
        ``policy.attempts`` attempts failed in a row."""
        import urllib3.exceptions

        if (why := unreachable(exc.error)) is not None:
            raise UserError(f"{self.what}: {why} (not retried); {self.hint}")
        if progressed:  # bytes arrived: the link works, count afresh
            self.retry = self.fresh
        try:
            self.retry = self.retry.increment(self.method, None, response=exc.response, error=exc.error)
        except urllib3.exceptions.MaxRetryError:
            raise UserError(
                f"giving up on {self.what} after {self.policy.attempts} retries (last: {exc}); {self.hint}"
            ) from None
        wait = exc.wait if exc.wait is not None else self._wait(exc)
        tries = len(self.retry.history)
        self.note(f"{self.what}: {exc}; retry {tries}/{self.policy.attempts} in {wait:.1f} s")
        sleep(wait, self.cancel)

    def _wait(self, exc: Retry) -> float:
        """The server's Retry-After when it sent one, else urllib3's backoff for this many failures."""
        import urllib3.exceptions

        if exc.response is not None:
            try:
                after = self.retry.get_retry_after(exc.response)
            except urllib3.exceptions.InvalidHeader:
                after = None
            if after is not None:
                return after
        return self.retry.get_backoff_time()


def sleep(seconds: float, cancel: threading.Event | None) -> None:
    if cancel is None:
        time.sleep(seconds)
    elif cancel.wait(seconds):
        raise Cancelled()


def send(
    sess: requests.Session,
    method: str,
    url: str,
    *,
    what: str,
    hint: str,
    refused: Callable[[int, str], str],
    note: Callable[[str], None],
    policy: Policy | None = None,
    cancel: threading.Event | None = None,
    **kwargs: Any,
) -> requests.Response:
    """One request under the retry policy: timeouts, resets, 408, 429 and 5xx are retried with backoff and
    jitter (honouring Retry-After); a refused connection, a name that does not resolve and 401/403/404 are
    one UserError at once (``refused(status, what)`` words the last). ``hint``: what to check when it gives
    up. Returns the first other answer."""
    import requests
    import urllib3.exceptions

    policy = policy or Policy.from_env()
    tries = Attempts(policy, what, note, cancel, hint, method)
    while True:
        try:
            r = sess.request(method, url, timeout=(policy.connect, policy.stall), **kwargs)
        except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
            tries.failed(transport_error(exc))
            continue
        if r.status_code in FATAL_STATUS:
            r.close()
            raise UserError(refused(r.status_code, what))
        if r.status_code in RETRY_STATUS:
            r.close()
            tries.failed(retry_for_status(r))
            continue
        return r


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
