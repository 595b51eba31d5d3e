"""What the answer to one download request means: where its body ends, or what to do instead.

A request asks for ``Range: bytes=A-B`` (several connections), ``bytes=A-`` (one connection resuming) or
the whole file. The status, ``Content-Range`` and ``Content-Length`` of the answer decide: read the body up
to a byte (a server may send less than asked; the rest is asked for next); retry (408, 429, 5xx, an expired
signed URL); start the file over (a stale partial, a resume answered with the whole file); continue over
one connection (a server that does not serve bounded ranges faithfully); or stop (any other 4xx, a file
longer than it should be).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from specsuite.common.errors import UserError
from specsuite.models.http import RETRY_STATUS, Retry, http_hint, retry_for_status

if TYPE_CHECKING:
    import requests

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class StartOver(Exception):
    """What arrived cannot be continued: truncate the partial and start again from byte 0."""


class OneConnection(Exception):
    """The server does not serve bounded ranges faithfully: continue over one connection."""


@dataclass(frozen=True)
class File:
    """The file the requests are for."""

    hub_url: str  # where the first request goes (the Hub, which redirects)
    name: str
    size: int
    bounded: bool  # requests ask for bounded ranges (several connections)


@dataclass
class Part:
    start: int
    end: int
    pos: int
    via_hub: bool = False  # the next request asks the Hub again (the redirect target refused it)


def body_end(r: requests.Response, part: Part, url: str, file: File) -> int:
    """Where the body of the answer to the request of ``part`` (sent to ``url``) ends; raises what the
    answer means otherwise."""
    code, bounded, asked, end = r.status_code, file.bounded, part.pos, part.end
    if code == 416:
        if bounded:
            raise OneConnection(f"the server answered 416 to bytes={asked}-{end - 1}")
        raise StartOver("server answered 416 to the resume request (stale partial)")
    if code in RETRY_STATUS:
        raise retry_for_status(r)
    if code in (401, 403) and url != file.hub_url:
        part.via_hub = True  # a signed redirect target that expired: ask the Hub for a fresh one
        raise Retry(f"HTTP {code} from {urlsplit(url).hostname}; asking the Hub for the file again", wait=0)
    if 400 <= code < 500:
        raise UserError(f"cannot download {file.name} from {file.hub_url}: {http_hint(code, file.name)}")
    if code == 200:
        if bounded or asked:
            why = "server ignored the Range request (200 instead of 206)"
            raise OneConnection(f"the {why}") if bounded else StartOver(why)
        length = r.headers.get("Content-Length")
        # Longer than the file cannot be right; shorter may be a truncation, resumed afterwards.
        if length and length.isdigit() and int(length) > file.size:
            raise UserError(
                f"{file.hub_url} is {int(length)} bytes but {file.name} should be {file.size}: the lock (or "
                "the Hub's metadata) and the server disagree; check `specsuite lock-models --check`"
            )
        return file.size
    if code == 206:
        value = r.headers.get("Content-Range", "")
        m = _CONTENT_RANGE.match(value)
        if m and int(m[1]) == asked and int(m[2]) < end and m[3] in ("*", str(file.size)):
            return int(m[2]) + 1  # a server may send less than asked; the rest is asked for next
        if bounded:
            raise OneConnection(f"the server answered bytes={asked}-{end - 1} with Content-Range {value!r}")
        raise StartOver(f"bad Content-Range {value!r} for a request from byte {asked}")
    raise Retry(f"unexpected HTTP {code}")
