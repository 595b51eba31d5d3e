"""A fake Hugging Face Hub on 127.0.0.1 for the fetcher's tests and benchmark (a real HTTP server).

Also the fetcher tests' fixtures (imported by those test modules; tests/conftest.py is not ours).

Routes, as the real Hub answers them (huggingface_hub's file_download and HfApi.get_paths_info):
- ``HEAD|GET /{repo}/resolve/{revision}/{path}`` (``/datasets/{repo}/...`` for a hub of
  ``repo_type="dataset"``): X-Repo-Commit, X-Linked-Size, X-Linked-Etag; either a
  302 to a second "CDN" server (``cdn=``) or the bytes themselves, with ``Range: bytes=A-`` and
  ``bytes=A-B`` support (the Content-Range of a bounded range names exactly A-B).
- ``GET /cdn/{sha256}``: the bytes, on the CDN server.
- ``POST /api/models/{repo}/paths-info/{revision}`` (``/api/datasets/...`` for a dataset; form: paths,
  expand): lfs.oid and lfs.size per path.

``rate=`` serves every data response at that many bytes per second, each connection on its own (a CDN edge
that caps each connection, not the client).

Faults are queued per file and consumed one per data request (``hub.fault(path, "drop:1000", ...)``); a
queue named ``PATH@A`` (or ``SHA256@A``) is consumed first, by a request whose range starts at byte A, so a
fault can hit one range of a parallel download:
``drop:K`` close the connection after K body bytes; ``flip:K`` flip byte K of the file; ``truncate:K`` a
clean response that ends at file byte K (Content-Length says so); ``status:N[:retry_after]``; ``stall:K:S``
send K bytes then go silent for S seconds; ``trickle:K:R`` send K bytes, then R bytes per second (one at a
time) until the client hangs up; ``ignore_range`` answer 200 with the whole file; ``bad_range`` a 206
whose Content-Range (and body) starts 100 bytes before the asked offset (after it, when that is below 100);
``slow:R`` at most R bytes/s; or a callable run before the body (e.g. to fill the disk).

Metadata requests have their own queue per method (``hub.fault("HEAD", ...)``, ``hub.fault("POST", ...)``),
consumed one per HEAD on a resolve URL or per paths-info POST: ``status:N[:retry_after]`` or ``drop``
(close the connection without an answer).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote

import pytest

from specsuite.models.http import Policy

REVISION = "0123456789abcdef0123456789abcdef01234567"
REPO = "test-org/test-GGUF"
_CHUNK = 1 << 20


class _File:
    def __init__(self, content: bytes | Path) -> None:
        self.content = content
        if isinstance(content, Path):
            self.size = content.stat().st_size
            h = hashlib.sha256()
            with open(content, "rb") as f:
                while b := f.read(8 << 20):
                    h.update(b)
            self.sha256 = h.hexdigest()
        else:
            self.size = len(content)
            self.sha256 = hashlib.sha256(content).hexdigest()

    def read(self, start: int, end: int) -> bytes:
        if isinstance(self.content, bytes):
            return self.content[start:end]
        with open(self.content, "rb") as f:
            f.seek(start)
            return f.read(end - start)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A client hanging up mid-request is what the fault tests do; anything else is reported."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeHub:
    def __init__(
        self,
        files: dict[str, bytes | Path] | None = None,
        *,
        repo: str = REPO,
        revision: str = REVISION,
        token: str | None = None,
        cdn: FakeHub | None = None,
        rate: float | None = None,
        repo_type: str = "model",
    ) -> None:
        self.repo, self.revision, self.token, self.cdn, self.rate = repo, revision, token, cdn, rate
        self.repo_type = repo_type  # "dataset": the Hub's URLs of a dataset repository
        self.files: dict[str, _File] = {}
        self.by_sha: dict[str, _File] = {}
        self.faults: dict[str, list] = {}
        self.log: list[dict] = []
        self.lock = threading.Lock()
        for path, content in (files or {}).items():
            self.add(path, content)
        self.server = _Server(("127.0.0.1", 0), _make_handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, path: str, content: bytes | Path) -> _File:
        f = _File(content)
        self.files[path] = f
        self.by_sha[f.sha256] = f
        if self.cdn is not None:
            self.cdn.by_sha[f.sha256] = f
        return f

    def fault(self, key: str, *faults: str | Callable[[], None]) -> None:
        """Queue faults for a file (its repo path, or its sha256 on a CDN server)."""
        with self.lock:
            self.faults.setdefault(key, []).extend(faults)

    def next_fault(self, keys: list[str]):
        with self.lock:
            for k in keys:
                if self.faults.get(k):
                    return self.faults[k].pop(0)
        return None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def data_requests(self, method: str = "GET") -> list[dict]:
        return [r for r in self.log if r["method"] == method and r["kind"] == "data"]

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _make_handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output quiet
            pass

        def _record(self, kind: str) -> None:
            with hub.lock:
                hub.log.append({"method": self.command, "path": self.path, "kind": kind,
                                "headers": dict(self.headers)})  # fmt: skip

        def _send(self, code: int, body: bytes = b"", headers: dict | None = None) -> None:
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, str(v))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _meta_fault(self) -> bool:
            """Apply a queued HEAD/POST fault; True when it answered (or dropped) the request."""
            fault = hub.next_fault([self.command])
            if fault is None:
                return False
            kind, _, arg = fault.partition(":")
            if kind == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return True
            code, _, retry = arg.partition(":")
            self._send(int(code), b"fault", {"Retry-After": retry} if retry else None)
            return True

        def do_POST(self) -> None:
            m = re.match(rf"^/api/{hub.repo_type}s/(.+)/paths-info/([^/]+)$", self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            self._record("api")
            if self._meta_fault():
                return
            if not m or m[1] != hub.repo or m[2] != hub.revision:
                return self._send(404, b'{"error":"Repository or revision not found"}')
            if not self._authorized():
                return self._send(401, b'{"error":"Invalid credentials"}')
            form = parse_qs(body)
            out = [
                {"type": "file", "path": p, "oid": "0" * 40, "size": f.size,
                 "lfs": {"oid": f.sha256, "size": f.size, "pointerSize": 134}}
                for p in form.get("paths", []) if (f := hub.files.get(p))
            ]  # fmt: skip
            self._send(200, json.dumps(out).encode(), {"Content-Type": "application/json"})

        def _authorized(self) -> bool:
            return hub.token is None or self.headers.get("Authorization") == f"Bearer {hub.token}"

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            if self.path.startswith("/cdn/"):
                f = hub.by_sha.get(self.path[5:])
                self._record("data")
                if f is None:
                    return self._send(404)
                return self._serve(f, [f.sha256])
            prefix = "/datasets" if hub.repo_type == "dataset" else ""
            m = re.match(rf"^{prefix}/(\w[\w.-]*/[\w.-]+)/resolve/([^/]+)/(.+)$", self.path)
            if not m:
                self._record("other")
                return self._send(404)
            repo, rev, path = m[1], m[2], unquote(m[3])
            f = hub.files.get(path) if (repo, rev) == (hub.repo, hub.revision) else None
            meta = {"X-Repo-Commit": hub.revision}
            if f is None:
                self._record("resolve")
                return self._send(404, b"Entry not found", meta)
            if not self._authorized():
                self._record("resolve")
                return self._send(401, b"Invalid credentials", meta)
            if self.command == "HEAD" and hub.faults.get("HEAD"):
                self._record("resolve")  # before answering: the client may act on the answer at once
                self._meta_fault()
                return None
            meta.update({"X-Linked-Size": f.size, "X-Linked-Etag": f'"{f.sha256}"', "ETag": f'"{f.sha256}"'})
            if hub.cdn is not None:
                self._record("resolve")
                return self._send(302, b"", {**meta, "Location": f"{hub.cdn.url}/cdn/{f.sha256}"})
            self._record("data")
            self._serve(f, [path, f.sha256], meta)

        def _range(self, f: _File) -> tuple[int, int] | None:
            """The asked (start, end) of ``Range: bytes=A-[B]``, end exclusive; None when absent."""
            rng = re.match(r"^bytes=(\d+)-(\d*)$", self.headers.get("Range", ""))
            if not rng:
                return None
            return int(rng[1]), min(f.size, int(rng[2]) + 1) if rng[2] else f.size

        def _serve(self, f: _File, keys: list[str], extra: dict | None = None) -> None:
            asked = self._range(f)
            at = [f"{k}@{asked[0] if asked else 0}" for k in keys]
            fault = hub.next_fault(at + keys) if self.command == "GET" else None
            if callable(fault):
                fault()
                fault = None
            kind, _, arg = (fault or "").partition(":")
            if kind == "status":
                code, _, retry = arg.partition(":")
                return self._send(int(code), b"fault", {"Retry-After": retry} if retry else None)
            rng = None if kind == "ignore_range" else asked
            start, end = rng or (0, f.size)
            if start >= f.size:
                return self._send(416, b"", {"Content-Range": f"bytes */{f.size}"})
            if kind == "bad_range":  # the lie: another start than the one asked, body to match
                start = start - 100 if start >= 100 else start + 100
            if kind == "truncate":
                end = min(end, int(arg))
            headers = {**(extra or {}), "Accept-Ranges": "bytes", "Content-Length": max(0, end - start)}
            self.send_response(206 if rng else 200)
            if rng:
                headers["Content-Range"] = f"bytes {start}-{rng[1] - 1}/{f.size}"  # truncate: a short body
            for k, v in headers.items():
                self.send_header(k, str(v))
            self.end_headers()
            if self.command == "HEAD":
                return
            self._body(f, start, end, kind, arg)

        def _body(self, f: _File, start: int, end: int, kind: str, arg: str) -> None:
            limit, rate, stall = end, hub.rate, None
            if kind == "drop":
                limit = min(end, start + int(arg))
            elif kind == "stall":
                k, _, secs = arg.partition(":")
                limit, stall = min(end, start + int(k)), float(secs)
            elif kind == "slow":
                rate = float(arg)
            elif kind == "trickle":
                k, _, per_s = arg.partition(":")
                return self._trickle(f, start, end, int(k), float(per_s))
            if kind in ("", "slow", "ignore_range", "bad_range", "truncate") and isinstance(f.content, Path):
                return self._sendfile(f.content, start, limit, rate)
            pos, t0 = start, time.monotonic()
            step = _CHUNK if rate is None else max(1, int(rate / 20))
            while pos < limit:
                chunk = bytearray(f.read(pos, min(limit, pos + step)))
                if kind == "flip" and pos <= int(arg) < pos + len(chunk):
                    chunk[int(arg) - pos] ^= 0xFF
                try:
                    self.wfile.write(chunk)
                except OSError:
                    return
                pos += len(chunk)
                if rate is not None:
                    time.sleep(max(0.0, (pos - start) / rate - (time.monotonic() - t0)))
            if stall is not None:
                time.sleep(stall)
            if limit < end:  # the fault: the peer sees the connection die mid-body
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

        def _trickle(self, f: _File, start: int, end: int, first: int, per_s: float) -> None:
            """``first`` bytes at once, then one byte every 1/per_s seconds until the client hangs up."""
            pos = min(end, start + first)
            try:
                self.wfile.write(f.read(start, pos))
                while pos < end:
                    time.sleep(1 / per_s)
                    self.wfile.write(f.read(pos, pos + 1))
                    self.wfile.flush()
                    pos += 1
            except OSError:
                return

        def _sendfile(self, path: Path, start: int, end: int, rate: float | None) -> None:
            """The kernel copies the file to the socket; at ``rate`` bytes/s, in twentieths of a second."""
            step, t0 = (1 << 30) if rate is None else max(1, int(rate / 20)), time.monotonic()
            with open(path, "rb") as src:
                pos = start
                while pos < end:
                    try:
                        sent = os.sendfile(self.connection.fileno(), src.fileno(), pos, min(end - pos, step))
                    except OSError:
                        return
                    if sent == 0:
                        return
                    pos += sent
                    if rate is not None:
                        time.sleep(max(0.0, (pos - start) / rate - (time.monotonic() - t0)))

    return Handler


# ---------------------------------------------------------------- pytest fixtures

# Small blocks and short delays so fault tests run in well under a second each.
FAST = Policy(
    attempts=4,
    backoff=0.01,
    max_backoff=0.05,
    stall=0.5,
    stall_bytes=16 << 10,
    connect=2.0,
    chunk=64 << 10,
    margin=0,
)


@pytest.fixture
def fast_policy() -> Policy:
    return Policy(**FAST.__dict__)


@pytest.fixture
def payload() -> bytes:
    return os.urandom(2_000_000)


# Hugging Face's variables and the knobs of the fetcher: a test sets what it needs, nothing leaks in from the
# machine (a token file or a cache in ~/.cache/huggingface would otherwise take part).
HF_VARS = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_TOKEN_PATH",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "LLAMA_CACHE",
    "HF_HUB_OFFLINE",
    "SPEC_HF_CACHE",
    "SPEC_FETCH_CONNECTIONS",
    "XDG_CACHE_HOME",
)


@pytest.fixture
def hf_home(monkeypatch, tmp_path) -> Path:
    """An empty HF_HOME of the test's own (its hub cache is ``hf_home / "hub"``)."""
    for name in HF_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return tmp_path / "hf-home"


@pytest.fixture
def fakehub(monkeypatch, payload, hf_home):
    with FakeHub({"m.gguf": payload}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs (needs root and `mount`); the disk-full tests need a really full filesystem."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount a tmpfs for the disk-full test: {proc.stderr.decode().strip()}")
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def ro_fs(tmp_path):
    """A read-only tmpfs (needs root and `mount`): a model folder nobody can write to, even root."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mnt)], capture_output=True
    )
    if proc.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount a read-only tmpfs: {proc.stderr.decode().strip()}")
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
