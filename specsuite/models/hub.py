"""Hugging Face Hub access: endpoint, token, resolve URLs and file metadata (size and sha256).

``HF_ENDPOINT`` (the variable huggingface_hub honours) replaces https://huggingface.co everywhere, and the
token (read as huggingface_hub reads it: ``HF_TOKEN``, else the file at ``HF_TOKEN_PATH``, else
``$HF_HOME/token``) is sent as a bearer token to that host only; it is never printed, logged, or put into
a child's environment. requests itself drops ``Authorization`` when a redirect leaves the host
(``Session.should_strip_auth``), so a signed CDN URL never sees the token. ``HF_HUB_OFFLINE=1`` allows no
request at all.

Every request goes through ``send``: the same retry policy as the body downloads (``models.http``).
requests is imported on first use, so that checking the endpoint costs nothing on a warm run.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from specsuite import __version__
from specsuite.common.errors import UserError
from specsuite.common.procs import TOKEN_VARS
from specsuite.models import hfcache
from specsuite.models.http import http_hint
from specsuite.models.http import send as http_send

if TYPE_CHECKING:
    import requests

DEFAULT_ENDPOINT = "https://huggingface.co"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HOST = re.compile(r"^[a-z0-9._~%:-]+$")  # urlsplit's hostname: lower case, an IPv6 address unbracketed


def endpoint() -> str:
    """``HF_ENDPOINT`` without a trailing slash (default the Hub); UserError unless http(s)://host[:port][/path]."""
    raw = os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    value = raw.strip().rstrip("/")
    try:
        parts = urlsplit(value)  # raises ValueError itself on an unclosed "[" (http://[::1)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
        ok = (
            parts.scheme in ("http", "https")
            and _HOST.match(parts.hostname or "") is not None
            and not (parts.query or parts.fragment or "@" in parts.netloc or any(c.isspace() for c in value))
        )
    except ValueError:
        ok = False
    if not ok:
        raise UserError(
            f"HF_ENDPOINT={raw!r} is not an http(s)://host[:port][/path] URL; fix it or unset it "
            f"(the default is {DEFAULT_ENDPOINT})"
        )
    return value


def token() -> str | None:
    env = next((os.environ[v] for v in TOKEN_VARS if os.environ.get(v)), "")
    return env.strip() or hfcache.read_token_file()


class _HubBearer:
    """Adds the bearer token only to requests whose scheme, host and port are the endpoint's."""

    def __init__(self, base: str, tok: str) -> None:
        parts = urlsplit(base)
        self.origin = (parts.scheme, parts.hostname, parts.port)
        self.tok = tok

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        parts = urlsplit(r.url or "")
        if (parts.scheme, parts.hostname, parts.port) == self.origin:
            r.headers["Authorization"] = f"Bearer {self.tok}"
        return r


def session() -> requests.Session:
    """A requests session for the Hub: identity encoding (honest sizes), the token for the Hub host only."""
    import requests

    if hfcache.offline():
        raise UserError(
            "HF_HUB_OFFLINE is set: no request to the Hub is allowed; unset it (or set it to 0) to reach "
            f"{endpoint()}"
        )
    base = endpoint()
    s = requests.Session()
    s.headers["User-Agent"] = f"specsuite/{__version__} (+requests)"
    s.headers["Accept-Encoding"] = "identity"
    if tok := token():
        s.auth = _HubBearer(base, tok)
    return s


# The Hub's URL prefix and API collection per kind of repository (a model's URLs have no prefix).
_URL_PREFIX = {"model": "", "dataset": "datasets/"}
_API = {"model": "models", "dataset": "datasets"}


def resolve_url(repo: str, revision: str, path: str, repo_type: str = "model") -> str:
    return f"{endpoint()}/{_URL_PREFIX[repo_type]}{repo}/resolve/{revision}/{quote(path)}"


@dataclass(frozen=True)
class FileMeta:
    size: int
    sha256: str
    commit: str | None = None


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def send(sess: requests.Session, method: str, url: str, *, what: str, **kwargs: Any) -> requests.Response:
    """One Hub request under the retry policy (``models.http.send``: ``policy``, ``note``, ``cancel`` and
    requests' own keywords pass through), refusals worded for the Hub, notes on stderr by default."""
    if kwargs.get("note") is None:
        kwargs["note"] = _stderr
    hint = f"check the network and HF_ENDPOINT ({endpoint()})"
    return http_send(sess, method, url, what=what, hint=hint, refused=http_hint, **kwargs)


def _etag(value: str | None) -> str | None:
    if not value:
        return None
    value = value.strip().removeprefix("W/").strip('"').lower()
    return value if _HEX64.match(value) else None


def head_meta(
    sess: requests.Session, repo: str, revision: str, path: str, repo_type: str = "model", **kw: Any
) -> FileMeta | None:
    """Size and sha256 from a HEAD on the resolve URL (X-Linked-Size/X-Linked-Etag); None if absent.

    Redirects are not followed: the headers are on the Hub's own reply, not on the CDN's. ``kw`` goes to
    ``send`` (policy, note, cancel).
    """
    url = resolve_url(repo, revision, path, repo_type)
    r = send(sess, "HEAD", url, what=f"{repo}/{path} at {revision}", allow_redirects=False, **kw)
    if r.status_code >= 400:
        return None
    size = r.headers.get("X-Linked-Size") or (None if r.is_redirect else r.headers.get("Content-Length"))
    sha = _etag(r.headers.get("X-Linked-Etag")) or _etag(r.headers.get("ETag"))
    if not size or not size.isdigit() or sha is None:
        return None
    return FileMeta(int(size), sha, r.headers.get("X-Repo-Commit"))


def paths_info(
    sess: requests.Session, repo: str, revision: str, paths: list[str], repo_type: str = "model", **kw: Any
) -> dict[str, FileMeta]:
    """``POST /api/{models|datasets}/{repo}/paths-info/{revision}``: lfs.size and lfs.oid of each path.

    The Hub silently omits paths that do not exist; a missing one is an error here. A file without ``lfs``
    metadata has no sha256 on the Hub (only a git sha1), which is an error too.
    """
    url = f"{endpoint()}/api/{_API[repo_type]}/{repo}/paths-info/{revision}"
    what = f"paths-info of {repo} at {revision}"
    r = send(sess, "POST", url, what=what, data={"paths": paths, "expand": "true"}, **kw)
    if r.status_code != 200:
        raise UserError(http_hint(r.status_code, what))
    try:
        answer = {item["path"]: item for item in r.json() if isinstance(item, dict) and "path" in item}
    except (ValueError, TypeError) as exc:
        raise UserError(f"{what}: not a JSON list of entries ({exc})") from None
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


def file_meta(
    sess: requests.Session, repo: str, revision: str, path: str, repo_type: str = "model", **kw: Any
) -> FileMeta:
    """Size and sha256 the Hub reports for a file: resolve HEAD first (resolver quota), else paths-info."""
    meta = head_meta(sess, repo, revision, path, repo_type, **kw)
    return meta or paths_info(sess, repo, revision, [path], repo_type, **kw)[path]
