"""download(): against the fake Hub with injected faults; each ends with the right file or a clear error."""

from __future__ import annotations

import hashlib
import json
import os
import threading

import pytest

from specsuite.common.errors import UserError
from specsuite.models import hub, stamps
from specsuite.models.download import Cancelled, download
from specsuite.models.http import Policy
from specsuite.models.ranges import Ranges
from specsuite.models.store import meta_path, part_path, read_meta

pytest_plugins = ["fakehub"]  # fixtures: fakehub, payload, fast_policy, small_fs
FAKE_REPO, FAKE_REVISION = (
    "test-org/test-GGUF",
    "0123456789abcdef0123456789abcdef01234567",
)  # fakehub defaults


class Notes:
    """A progress sink that keeps the retry messages."""

    def __init__(self) -> None:
        self.msgs: list[str] = []
        self.pos = 0

    def advance(self, n: int) -> None:
        self.pos += n

    def set(self, n: int) -> None:
        self.pos = n

    def note(self, msg: str) -> None:
        self.msgs.append(msg)


def _get(tmp_path, payload, policy, notes=None, size=None, sha=None, cancel=None):
    with hub.session() as sess:
        url = hub.resolve_url(FAKE_REPO, FAKE_REVISION, "m.gguf")
        sha = sha or hashlib.sha256(payload).hexdigest()
        size = size or len(payload)
        return download(url, tmp_path / "m.gguf", size=size, sha256=sha, sess=sess, policy=policy,
                        progress=notes or Notes(), cancel=cancel)  # fmt: skip


def _assert_good(tmp_path, payload):
    final = tmp_path / "m.gguf"
    assert final.read_bytes() == payload
    assert stamps.read_stamp(final) == hashlib.sha256(payload).hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.gguf.stamp", "m.gguf"]


def _ranges(fakehub):
    return [r["headers"].get("Range") for r in fakehub.data_requests()]


def test_clean_download(tmp_path, fakehub, payload, fast_policy):
    assert _get(tmp_path, payload, fast_policy) == "downloaded"
    _assert_good(tmp_path, payload)
    assert fakehub.data_requests()[0]["headers"]["Accept-Encoding"] == "identity"


def test_connection_dropped_mid_body_resumes_with_range(tmp_path, fakehub, payload, fast_policy):
    fakehub.fault("m.gguf", "drop:700000")
    _get(tmp_path, payload, fast_policy)
    _assert_good(tmp_path, payload)
    first, second = _ranges(fakehub)
    assert first is None
    offset = int(second.removeprefix("bytes=").rstrip("-"))
    assert 0 < offset <= 700000  # every byte that arrived was kept


def test_truncated_body_resumes(tmp_path, fakehub, payload, fast_policy):
    fakehub.fault("m.gguf", "truncate:1234567")
    _get(tmp_path, payload, fast_policy)
    _assert_good(tmp_path, payload)
    assert _ranges(fakehub) == [None, "bytes=1234567-"]


def test_flipped_byte_restarts_from_zero(tmp_path, fakehub, payload, fast_policy):
    notes = Notes()
    fakehub.fault("m.gguf", "flip:1000")
    _get(tmp_path, payload, fast_policy, notes)
    _assert_good(tmp_path, payload)
    assert _ranges(fakehub) == [None, None]
    assert any("sha256 mismatch" in m for m in notes.msgs)


def test_persistent_corruption_is_an_error_and_publishes_nothing(tmp_path, fakehub, payload, fast_policy):
    fakehub.fault("m.gguf", "flip:5", "flip:5")
    with pytest.raises(UserError, match=r"m.gguf as downloaded \(twice\) from .* were expected; nothing was"):
        _get(tmp_path, payload, fast_policy)
    assert list(tmp_path.iterdir()) == []


def test_404_is_immediate_and_clear(tmp_path, fakehub, payload, fast_policy):
    fakehub.fault("m.gguf", "status:404")
    with pytest.raises(
        UserError, match=r"HTTP 404 for m.gguf: check repo, revision and path in models\.lock"
    ):
        _get(tmp_path, payload, fast_policy)
    assert len(fakehub.data_requests()) == 1
    assert not (tmp_path / "m.gguf").exists()


@pytest.mark.parametrize("code", [401, 403])
def test_auth_errors_name_hf_token(tmp_path, fakehub, payload, fast_policy, code):
    fakehub.fault("m.gguf", f"status:{code}")
    with pytest.raises(UserError, match="set HF_TOKEN"):
        _get(tmp_path, payload, fast_policy)
    assert len(fakehub.data_requests()) == 1


def test_429_honours_retry_after(tmp_path, fakehub, payload, fast_policy):
    notes = Notes()
    fakehub.fault("m.gguf", "status:429:1")
    _get(tmp_path, payload, fast_policy, notes)
    _assert_good(tmp_path, payload)
    assert notes.msgs == ["m.gguf: HTTP 429; retry 1/4 in 1.0 s"]


def test_500_then_success(tmp_path, fakehub, payload, fast_policy):
    fakehub.fault("m.gguf", "status:500", "status:503")
    _get(tmp_path, payload, fast_policy)
    _assert_good(tmp_path, payload)
    assert len(fakehub.data_requests()) == 3


def test_server_errors_give_up_after_attempts_keeping_partial(tmp_path, fakehub, payload, fast_policy):
    fakehub.fault("m.gguf", "drop:300000", *["status:500"] * 5)
    with pytest.raises(UserError, match=r"giving up on m.gguf after 4 retries .*the partial file is kept"):
        _get(tmp_path, payload, fast_policy)
    assert not (tmp_path / "m.gguf").exists()
    kept = part_path(tmp_path / "m.gguf").read_bytes()
    assert kept and payload.startswith(kept)
    # the next run re-hashes the kept prefix and asks only for the rest
    assert _get(tmp_path, payload, fast_policy) == "resumed"
    _assert_good(tmp_path, payload)
    assert _ranges(fakehub)[-1] == f"bytes={len(kept)}-"


def test_stall_watchdog_drops_and_resumes(tmp_path, fakehub, payload, fast_policy):
    fakehub.fault("m.gguf", "stall:500000:5")
    notes = Notes()
    _get(tmp_path, payload, fast_policy, notes)
    _assert_good(tmp_path, payload)
    assert "stalled: 0 bytes in the last" in notes.msgs[0]
    assert _ranges(fakehub)[1] == "bytes=500000-"


@pytest.mark.timeout(60)  # the old fetcher never stalled here: it would wait for the whole file at 20 B/s
def test_trickling_server_is_a_stall(tmp_path, fakehub, payload, fast_policy):
    fakehub.fault(
        "m.gguf", "trickle:300000:20"
    )  # a byte every 50 ms: each read succeeds, far below the floor
    notes = Notes()
    _get(tmp_path, payload, fast_policy, notes)
    _assert_good(tmp_path, payload)
    assert notes.msgs[0].startswith("m.gguf: stalled: ") and "(fewer than 16384)" in notes.msgs[0]
    resumed_at = int(_ranges(fakehub)[1].removeprefix("bytes=").rstrip("-"))
    assert 300000 <= resumed_at < 300000 + 100  # the trickled bytes were kept too


@pytest.mark.timeout(60)  # the old fetcher blocked in the read until the server spoke again (120 s)
def test_cancel_mid_body_stops_and_keeps_what_arrived(tmp_path, fakehub, payload, fast_policy):
    policy = Policy(**{**fast_policy.__dict__, "stall": 600.0})  # only the cancel can end this read
    fakehub.fault("m.gguf", "stall:300000:120")
    cancel, outcome = threading.Event(), []

    def run() -> None:
        try:
            outcome.append(_get(tmp_path, payload, policy, cancel=cancel))
        except Cancelled as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    part = part_path(tmp_path / "m.gguf")
    while not (part.exists() and part.stat().st_size == 300000):
        worker.join(0.02)
    cancel.set()
    worker.join()
    assert isinstance(outcome[0], Cancelled)
    assert part.read_bytes() == payload[:300000] and not (tmp_path / "m.gguf").exists()
    assert _get(tmp_path, payload, fast_policy) == "resumed"
    _assert_good(tmp_path, payload)
    assert _ranges(fakehub)[-1] == "bytes=300000-"


def test_server_ignoring_range_restarts_cleanly(tmp_path, fakehub, payload, fast_policy):
    notes = Notes()
    fakehub.fault("m.gguf", "drop:300000", "ignore_range")
    _get(tmp_path, payload, fast_policy, notes)
    _assert_good(tmp_path, payload)
    assert _ranges(fakehub)[1] is not None
    assert any("ignored the Range request" in m for m in notes.msgs)


def test_wrong_content_range_is_rejected(tmp_path, fakehub, payload, fast_policy):
    notes = Notes()
    fakehub.fault("m.gguf", "drop:300000", "bad_range")
    _get(tmp_path, payload, fast_policy, notes)
    _assert_good(tmp_path, payload)
    assert _ranges(fakehub)[1] is not None and _ranges(fakehub)[2] is None
    assert any("bad Content-Range" in m for m in notes.msgs)


def test_416_discards_the_partial(tmp_path, fakehub, payload, fast_policy):
    fakehub.fault("m.gguf", "drop:300000", "status:416")
    _get(tmp_path, payload, fast_policy)
    _assert_good(tmp_path, payload)
    assert _ranges(fakehub)[2] is None


def test_partial_for_other_content_is_not_adopted(tmp_path, fakehub, payload, fast_policy):
    final = tmp_path / "m.gguf"
    part_path(final).write_bytes(b"x" * 1000)
    final.with_name(".m.gguf.part.json").write_text(json.dumps({"size": 5, "sha256": "0" * 64}))
    assert _get(tmp_path, payload, fast_policy) == "downloaded"
    _assert_good(tmp_path, payload)
    assert _ranges(fakehub) == [None]


def test_corrupt_kept_prefix_is_caught_by_the_hash(tmp_path, fakehub, payload, fast_policy):
    final = tmp_path / "m.gguf"
    sha = hashlib.sha256(payload).hexdigest()
    part_path(final).write_bytes(b"y" + payload[1:500000])  # right length, wrong first byte
    final.with_name(".m.gguf.part.json").write_text(json.dumps({"size": len(payload), "sha256": sha}))
    _get(tmp_path, payload, fast_policy)
    _assert_good(tmp_path, payload)
    assert _ranges(fakehub) == ["bytes=500000-", None]


def test_server_file_of_other_size_is_refused(tmp_path, fakehub, payload, fast_policy):
    with pytest.raises(UserError, match=r"is 2000000 bytes but m\.gguf should be 1000"):
        _get(tmp_path, payload, fast_policy, size=1000)
    assert not (tmp_path / "m.gguf").exists()


def test_free_space_checked_before_downloading(small_fs, fakehub, fast_policy):
    fakehub.add("m.gguf", b"z" * (6 << 20))
    with pytest.raises(UserError, match=r"not enough free space in .* for m.gguf: need 0.01 GiB"):
        _get(small_fs, b"z" * (6 << 20), fast_policy)
    assert fakehub.data_requests() == []
    assert not (small_fs / "m.gguf").exists()


def test_disk_full_mid_download_is_immediate_and_clear(small_fs, fakehub, fast_policy):
    data = b"q" * (3 << 20)
    fakehub.add("m.gguf", data)
    filler = small_fs / "filler"
    fakehub.fault("m.gguf", lambda: filler.write_bytes(b"\0" * (2 << 20)))  # another process fills the disk
    with pytest.raises(
        UserError, match=r"disk full while writing m.gguf .*free space there or use --model-dir"
    ):
        _get(small_fs, data, fast_policy)
    assert len(fakehub.data_requests()) == 1
    assert not (small_fs / "m.gguf").exists()


@pytest.mark.parametrize("parallel", [False, True])
def test_planted_partial_link_is_refused_and_never_written_through(tmp_path, fakehub, payload, fast_policy,
                                                                   parallel):  # fmt: skip
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    models = tmp_path / "models"
    models.mkdir()
    final = models / "m.gguf"
    part_path(final).symlink_to(victim)
    meta = {"size": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    if parallel:
        meta["done"] = [[0, 8]]
    meta_path(final).write_text(json.dumps(meta))  # as if resuming: the old fetcher wrote through the link
    with pytest.raises(UserError, match=r"m\.gguf\.part is a symbolic link, .*Move it away"):
        _get(models, payload, _par(fast_policy) if parallel else fast_policy)
    assert victim.read_bytes() == b"precious"
    assert part_path(final).is_symlink() and not final.exists()
    assert fakehub.data_requests() == []


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SPEC_FETCH_STALL_S", "nan", "must be a finite number > 0"),
        ("SPEC_FETCH_STALL_S", "inf", "must be a finite number > 0"),
        ("SPEC_FETCH_STALL_S", "-5", "must be a finite number > 0"),
        ("SPEC_FETCH_BACKOFF_S", "0", "must be a finite number > 0"),
        ("SPEC_FETCH_BACKOFF_S", "soon", "must be a finite number > 0"),
        ("SPEC_FETCH_ATTEMPTS", "0", "must be a whole number from 1"),
        ("SPEC_FETCH_ATTEMPTS", "2.5", "must be a whole number from 1"),
        ("SPEC_FETCH_CONNECTIONS", "0", "must be a whole number from 1"),
        ("SPEC_FETCH_CONNECTIONS", "many", "must be a whole number from 1"),
    ],
)
def test_bad_fetch_variables_are_one_clear_error(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(UserError) as exc:
        Policy.from_env()
    assert str(exc.value).startswith(f"{name}={value!r} ") and message in str(exc.value)
    assert "unset it" in str(exc.value)


def test_fetch_variables_are_read(monkeypatch):
    for name, value in {
        "SPEC_FETCH_STALL_S": "7.5",
        "SPEC_FETCH_BACKOFF_S": "0.2",
        "SPEC_FETCH_ATTEMPTS": "3",
        "SPEC_FETCH_CONNECTIONS": "2",
    }.items():
        monkeypatch.setenv(name, value)
    got = Policy.from_env()
    assert (got.stall, got.backoff, got.attempts, got.connections) == (7.5, 0.2, 3, 2)
    monkeypatch.delenv("SPEC_FETCH_ATTEMPTS")
    assert Policy.from_env().attempts == Policy.attempts and os.environ.get("SPEC_FETCH_ATTEMPTS") is None


# ---------------------------------------------------------------- parallel ranges

PART = 256 << 10  # the parallel tests' part size: 2 000 000 bytes are 8 parts, the last one shorter


def _par(fast_policy, **kw) -> Policy:
    return Policy(**{**fast_policy.__dict__, "connections": 4, "parallel_min": 0, "part": PART,
                     "checkpoint": 0.05, **kw})  # fmt: skip


def _parts(size: int) -> list[tuple[int, int]]:
    return [(a, min(a + PART, size)) for a in range(0, size, PART)]


def _asked(fakehub) -> list[tuple[int, int]]:
    """Every bounded range asked for, as [start, end)."""
    out = []
    for r in _ranges(fakehub):
        a, _, b = r.removeprefix("bytes=").partition("-")
        if b:
            out.append((int(a), int(b) + 1))
    return out


def test_parallel_download_asks_each_part_once(tmp_path, fakehub, payload, fast_policy):
    assert _get(tmp_path, payload, _par(fast_policy)) == "downloaded"
    _assert_good(tmp_path, payload)
    assert sorted(_asked(fakehub)) == _parts(len(payload)) and len(_ranges(fakehub)) == 8


THIRD = 3 * PART  # the fault hits the fourth part only


@pytest.mark.parametrize(
    ("fault", "again_from", "note"),
    [
        ("drop:1000", THIRD + 1000, "IncompleteRead(1000 bytes read"),
        ("truncate:800000", 800000, "body ended at byte 800000 of 1048576; retry 1/4"),
        ("stall:1000:5", THIRD + 1000, "(fewer than 16384)"),
        ("trickle:1000:20", THIRD + 1000, "(fewer than 16384)"),
        ("status:429:1", THIRD, "HTTP 429; retry 1/4 in 1.0 s"),
        ("status:500", THIRD, "HTTP 500; retry 1/4 in"),
    ],
)
def test_a_fault_on_one_range_is_retried_for_that_range(tmp_path, fakehub, payload, fast_policy, fault,
                                                        again_from, note):  # fmt: skip
    fakehub.fault(f"m.gguf@{THIRD}", fault)
    notes = Notes()
    _get(tmp_path, payload, _par(fast_policy), notes)
    _assert_good(tmp_path, payload)
    # the fourth part once more, from the first byte that did not arrive (a trickle's few bytes are kept)
    extra = [r for r in _asked(fakehub) if r not in _parts(len(payload))] or [(THIRD, THIRD + PART)]
    assert sorted(_asked(fakehub)) == sorted(_parts(len(payload)) + extra)
    assert len(extra) == 1 and again_from <= extra[0][0] < again_from + 100 and extra[0][1] == THIRD + PART
    assert len(notes.msgs) == 1 and notes.msgs[0].startswith(f"m.gguf bytes {THIRD}-{THIRD + PART - 1}: ")
    assert note in notes.msgs[0]


def test_a_flipped_byte_in_one_range_starts_the_file_over(tmp_path, fakehub, payload, fast_policy):
    notes = Notes()
    fakehub.fault(f"m.gguf@{THIRD}", f"flip:{THIRD + 5}")
    _get(tmp_path, payload, _par(fast_policy), notes)
    _assert_good(tmp_path, payload)
    assert sorted(_asked(fakehub)) == sorted(_parts(len(payload)) * 2)
    assert [m.split(" (")[0] for m in notes.msgs] == ["m.gguf: sha256 mismatch"]


@pytest.mark.parametrize("at", [0, THIRD])  # the first answer, or one in the middle
@pytest.mark.parametrize("fault", ["bad_range", "ignore_range"])
def test_a_server_lying_about_a_range_is_fetched_over_one_connection(tmp_path, fakehub, payload, fast_policy,
                                                                     fault, at):  # fmt: skip
    notes = Notes()
    fakehub.fault(f"m.gguf@{at}", fault)
    _get(tmp_path, payload, _par(fast_policy), notes)
    _assert_good(tmp_path, payload)
    assert len(notes.msgs) == 1 and notes.msgs[0].endswith("; continuing over one connection")
    lied = "with Content-Range 'bytes " if fault == "bad_range" else "ignored the Range request (200 instead"
    assert notes.msgs[0].startswith("m.gguf: the server ") and lied in notes.msgs[0]
    open_ended = [r for r in _ranges(fakehub) if r is None or r.endswith("-")]
    assert len(open_ended) == 1  # one connection from the contiguous prefix on, to the end
    if open_ended[0] is not None:
        assert int(open_ended[0].removeprefix("bytes=").rstrip("-")) < at + PART


def _plant_partial(final, payload, have):
    with open(part_path(final), "wb") as f:
        for a, b in have:
            f.seek(a)
            f.write(payload[a:b])
    meta = {
        "size": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "done": [list(r) for r in have],
    }
    meta_path(final).write_text(json.dumps(meta))


def test_resume_fetches_only_the_missing_ranges(tmp_path, fakehub, payload, fast_policy):
    have = [(0, 300000), (THIRD, THIRD + PART), (1500000, 1600000)]
    _plant_partial(tmp_path / "m.gguf", payload, have)
    assert _get(tmp_path, payload, _par(fast_policy)) == "resumed"
    _assert_good(tmp_path, payload)
    asked = Ranges(_asked(fakehub))
    assert asked.total() == len(payload) - sum(b - a for a, b in have)  # nothing asked twice
    assert Ranges([*have, *_asked(fakehub)]).missing(len(payload)) == []  # and nothing missed


@pytest.mark.parametrize("done", [[[5, 3]], [[0, 10], [5, 20]], [[0, 3_000_000]], "all", [[0, 1.5]]])
def test_recorded_ranges_that_make_no_sense_are_not_resumed(tmp_path, fakehub, payload, fast_policy, done):
    final = tmp_path / "m.gguf"
    _plant_partial(final, payload, [(0, 100)])
    meta = json.loads(meta_path(final).read_text())
    meta_path(final).write_text(json.dumps({**meta, "done": done}))
    assert _get(tmp_path, payload, _par(fast_policy)) == "downloaded"
    _assert_good(tmp_path, payload)
    assert sorted(_asked(fakehub)) == _parts(len(payload))


def test_a_recorded_range_with_wrong_bytes_is_caught_by_the_hash(tmp_path, fakehub, payload, fast_policy):
    final = tmp_path / "m.gguf"
    _plant_partial(final, payload, [(0, 1000), (THIRD, THIRD + PART)])
    with open(part_path(final), "r+b") as f:
        f.seek(THIRD + 7)
        f.write(bytes([payload[THIRD + 7] ^ 1]))
    notes = Notes()
    _get(tmp_path, payload, _par(fast_policy), notes)
    _assert_good(tmp_path, payload)
    assert any(m.startswith("m.gguf: sha256 mismatch") for m in notes.msgs)


@pytest.mark.timeout(60)  # a cancel that did not reach every connection would wait for the server (120 s)
def test_cancel_stops_every_connection_and_keeps_their_ranges(tmp_path, fakehub, payload, fast_policy):
    policy = _par(fast_policy, stall=600.0)  # only the cancel can end these reads
    for a, _ in _parts(len(payload)):
        fakehub.fault(f"m.gguf@{a}", "stall:1000:120")
    cancel, outcome = threading.Event(), []

    def run() -> None:
        try:
            outcome.append(_get(tmp_path, payload, policy, cancel=cancel))
        except Cancelled as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    final = tmp_path / "m.gguf"

    def recorded() -> int:
        meta = read_meta(final) or {}
        return len(meta.get("done", [])) if isinstance(meta.get("done"), list) else 0

    while recorded() < 4:  # four connections, 1000 bytes each, all on disk and recorded
        worker.join(0.02)
    cancel.set()
    worker.join()
    assert isinstance(outcome[0], Cancelled) and not final.exists()
    kept = [tuple(r) for r in read_meta(final)["done"]]
    assert kept == [(a, a + 1000) for a, _ in _parts(len(payload))[:4]]
    assert _get(tmp_path, payload, _par(fast_policy)) == "resumed"
    _assert_good(tmp_path, payload)
    again = _asked(fakehub)[4:]
    assert (
        Ranges(again).total() == len(payload) - 4000 and Ranges([*kept, *again]).missing(len(payload)) == []
    )


def test_disk_full_in_a_parallel_download_is_one_clear_error(small_fs, fakehub, fast_policy):
    data = os.urandom(3 << 20)
    fakehub.add("m.gguf", data)
    filler = small_fs / "filler"
    fakehub.fault("m.gguf@0", lambda: filler.write_bytes(b"\0" * (2 << 20)))
    with pytest.raises(
        UserError, match=r"^disk full while writing m.gguf .*free space there or use --model-dir"
    ):
        _get(small_fs, data, _par(fast_policy))
    assert not (small_fs / "m.gguf").exists()


def test_an_expired_signed_url_is_resolved_again_through_the_hub(tmp_path, hf_home, monkeypatch, payload,
                                                                 fast_policy):  # fmt: skip
    from fakehub import FakeHub

    sha = hashlib.sha256(payload).hexdigest()
    with FakeHub() as cdn, FakeHub({"m.gguf": payload}, cdn=cdn) as hf:
        monkeypatch.setenv("HF_ENDPOINT", hf.url)
        cdn.fault(f"{sha}@{THIRD}", "status:403")  # the CDN refuses one range: its signature expired
        notes = Notes()
        _get(tmp_path, payload, _par(fast_policy), notes)
        _assert_good(tmp_path, payload)
        assert [r["kind"] for r in hf.log] == ["resolve", "resolve"]  # the first request, and once again
        assert notes.msgs == [
            f"m.gguf bytes {THIRD}-{THIRD + PART - 1}: HTTP 403 from 127.0.0.1; asking the Hub for the file "
            "again; retry 1/4 in 0.0 s"
        ]
        assert sorted(_asked(cdn)) == sorted([*_parts(len(payload)), (THIRD, THIRD + PART)])
