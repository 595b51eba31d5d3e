"""Hugging Face Hub access: endpoint, token, resolve URLs and file metadata (size and sha256).

``HF_ENDPOINT`` (the variable huggingface_hub honours) replaces https://huggingface.co everywhere, and
``HF_TOKEN`` is sent as a bearer token to that host only. requests itself drops ``Authorization`` when a
redirect leaves the host (``Session.should_strip_auth``), so a signed CDN URL never sees the token.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import requests

from . import __version__
from .errors import UserError

DEFAULT_ENDPOINT = "https://huggingface.co"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_META_TIMEOUT = (20, 60)


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token() -> str | None:
    return os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") or None


class _HubBearer(requests.auth.AuthBase):
    """Adds the bearer token only to requests whose scheme, host and port are the endpoint's."""

    def __init__(self, base: str, tok: str) -> None:
        parts = urlsplit(base)
        self.origin = (parts.scheme, parts.hostname, parts.port)
        self.tok = tok

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        parts = urlsplit(r.url)
        if (parts.scheme, parts.hostname, parts.port) == self.origin:
            r.headers["Authorization"] = f"Bearer {self.tok}"
        return r


def session() -> requests.Session:
    """A requests session for the Hub: identity encoding (honest sizes), the token for the Hub host only."""
    s = requests.Session()
    s.headers["User-Agent"] = f"specsuite/{__version__} (+requests)"
    s.headers["Accept-Encoding"] = "identity"
    if tok := token():
        s.auth = _HubBearer(endpoint(), tok)
    return s


def resolve_url(repo: str, revision: str, path: str) -> str:
    return f"{endpoint()}/{repo}/resolve/{revision}/{quote(path)}"


@dataclass(frozen=True)
class FileMeta:
    size: int
    sha256: str
    commit: str | None = None


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


def _etag(value: str | None) -> str | None:
    if not value:
        return None
    value = value.strip().removeprefix("W/").strip('"').lower()
    return value if _HEX64.match(value) else None


def head_meta(sess: requests.Session, repo: str, revision: str, path: str) -> FileMeta | None:
    """Size and sha256 from a HEAD on the resolve URL (X-Linked-Size/X-Linked-Etag); None if absent.

    Redirects are not followed: the headers are on the Hub's own reply, not on the CDN's.
    """
    url = resolve_url(repo, revision, path)
    try:
        r = sess.head(url, allow_redirects=False, timeout=_META_TIMEOUT)
    except requests.RequestException as exc:
        raise UserError(f"cannot reach {endpoint()} for {repo}/{path}: {exc}") from None
    if r.status_code in (401, 403, 404):
        raise UserError(http_hint(r.status_code, f"{repo}/{path} at {revision}"))
    if r.status_code >= 400:
        return None
    size = r.headers.get("X-Linked-Size") or (None if r.is_redirect else r.headers.get("Content-Length"))
    sha = _etag(r.headers.get("X-Linked-Etag")) or _etag(r.headers.get("ETag"))
    if not size or not size.isdigit() or sha is None:
        return None
    return FileMeta(int(size), sha, r.headers.get("X-Repo-Commit"))


def paths_info(sess: requests.Session, repo: str, revision: str, paths: list[str]) -> dict[str, FileMeta]:
    """``POST /api/models/{repo}/paths-info/{revision}``: lfs.size and lfs.oid of each path.

    The Hub silently omits paths that do not exist; a missing one is an error here. A file without ``lfs``
    metadata has no sha256 on the Hub (only a git sha1), which is an error too.
    """
    url = f"{endpoint()}/api/models/{repo}/paths-info/{revision}"
    try:
        r = sess.post(url, data={"paths": paths, "expand": "true"}, timeout=_META_TIMEOUT)
    except requests.RequestException as exc:
        raise UserError(f"cannot reach {endpoint()} for {repo} paths-info: {exc}") from None
    if r.status_code != 200:
        raise UserError(http_hint(r.status_code, f"paths-info of {repo} at {revision}"))
    try:
        answer = {item["path"]: item for item in r.json() if isinstance(item, dict) and "path" in item}
    except (ValueError, TypeError) as exc:
        raise UserError(f"paths-info of {repo} at {revision}: not a JSON list of entries ({exc})") from None
    out: dict[str, FileMeta] = {}
    for p in paths:
        item = answer.get(p)
        if item is None:
            raise UserError(
                f"{repo} has no file {p!r} at revision {revision}: fix `path` or `revision` in the lock"
            )
        lfs = item.get("lfs") or {}
        oid, size = str(lfs.get("oid", "")).lower(), lfs.get("size")
        if not _HEX64.match(oid) or not isinstance(size, int):
            raise UserError(f"{repo}/{p} at {revision} has no LFS sha256 (lfs.oid/lfs.size) in paths-info")
        out[p] = FileMeta(size, oid)
    return out


def file_meta(sess: requests.Session, repo: str, revision: str, path: str) -> FileMeta:
    """Size and sha256 the Hub reports for a file: resolve HEAD first (resolver quota), else paths-info."""
    meta = head_meta(sess, repo, revision, path)
    return meta or paths_info(sess, repo, revision, [path])[path]
