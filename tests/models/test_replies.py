"""models.replies as a table: what each answer to a download request means (real requests.Response
objects, filled in by hand; the same answers from a real server are in test_download.py)."""

from __future__ import annotations

import pytest
import requests

from specsuite.common.errors import UserError
from specsuite.models.http import Retry
from specsuite.models.replies import File, OneConnection, Part, StartOver, body_end

HUB = "http://hub.test/org/repo/resolve/rev/m.gguf"
CDN = "http://cdn.test/signed"
SIZE = 1000


def _answer(code: int, **headers: str) -> requests.Response:
    r = requests.Response()
    r.status_code = code
    r.headers.update({k.replace("_", "-"): v for k, v in headers.items()})
    return r


def _file(bounded: bool) -> File:
    return File(HUB, "m.gguf", SIZE, bounded)


# fmt: off
ENDS = [  # (what, answer, part (start, end, pos), bounded, where the body ends)
    ("the whole file", _answer(200, Content_Length="1000"), (0, SIZE, 0), False, SIZE),
    ("a shorter whole file: resumed after", _answer(200, Content_Length="10"), (0, SIZE, 0), False, SIZE),
    ("the range asked", _answer(206, Content_Range="bytes 100-199/1000"), (100, 200, 100), True, 200),
    ("less than asked", _answer(206, Content_Range="bytes 100-149/1000"), (100, 200, 100), True, 150),
    ("a total the server does not know", _answer(206, Content_Range="bytes 100-199/*"), (100, 200, 100), True,
     200),
    ("a resume", _answer(206, Content_Range="bytes 500-999/1000"), (0, SIZE, 500), False, SIZE),
]
MEANS = [  # (what, answer, part, bounded, asked at, what it raises, its message)
    ("416 to a range", _answer(416), (0, 100, 0), True, HUB, OneConnection, "answered 416 to bytes=0-99"),
    ("416 to a resume", _answer(416), (0, SIZE, 10), False, HUB, StartOver, "stale partial"),
    ("a busy server", _answer(503), (0, SIZE, 0), False, HUB, Retry, "503"),
    ("an expired signed URL", _answer(403), (0, SIZE, 0), False, CDN, Retry, "asking the Hub"),
    ("the Hub refuses", _answer(403), (0, SIZE, 0), False, HUB, UserError, "cannot download m.gguf from"),
    ("a range ignored", _answer(200), (0, 100, 0), True, HUB, OneConnection, "ignored the Range request"),
    ("a resume ignored", _answer(200), (0, SIZE, 10), False, HUB, StartOver, "ignored the Range request"),
    ("a longer file", _answer(200, Content_Length="1001"), (0, SIZE, 0), False, HUB, UserError,
     "is 1001 bytes but m.gguf should be 1000"),
    ("another range", _answer(206, Content_Range="bytes 0-99/1000"), (100, 200, 100), True, HUB,
     OneConnection, "with Content-Range 'bytes 0-99/1000'"),
    ("beyond the range asked", _answer(206, Content_Range="bytes 100-200/1000"), (100, 200, 100), True, HUB,
     OneConnection, "with Content-Range"),
    ("another file's size", _answer(206, Content_Range="bytes 10-999/2000"), (0, SIZE, 10), False, HUB,
     StartOver, "bad Content-Range 'bytes 10-999/2000'"),
    ("no Content-Range", _answer(206), (0, SIZE, 10), False, HUB, StartOver, "bad Content-Range ''"),
    ("a status of no meaning here", _answer(304), (0, SIZE, 0), False, HUB, Retry, "unexpected HTTP 304"),
]
# fmt: on


@pytest.mark.parametrize(
    ("answer", "span", "bounded", "end"), [t[1:] for t in ENDS], ids=[t[0] for t in ENDS]
)
def test_where_the_body_ends(
    answer: requests.Response, span: tuple[int, int, int], bounded: bool, end: int
) -> None:
    assert body_end(answer, Part(*span), HUB, _file(bounded)) == end


@pytest.mark.parametrize(
    ("answer", "span", "bounded", "url", "raised", "message"),
    [t[1:] for t in MEANS],
    ids=[t[0] for t in MEANS],
)
def test_what_an_answer_means_otherwise(
    answer: requests.Response,
    span: tuple[int, int, int],
    bounded: bool,
    url: str,
    raised: type[Exception],
    message: str,
) -> None:
    part = Part(*span)
    with pytest.raises(raised) as exc:
        body_end(answer, part, url, _file(bounded))
    assert message in str(exc.value)
    assert part.via_hub == (url == CDN)  # only an expired redirect target sends the next request to the Hub
