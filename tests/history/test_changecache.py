"""The change-point cache (history.changecache): a series' key covers everything its splits come from, a hit
gives what the detector gives, and the file is read and written safely (a corrupt, foreign or linked file is
ignored with a warning; writes are atomic and replace a link rather than write through it)."""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path

import pytest

from specsuite.history import changecache, changes
from specsuite.history.changecache import SplitCache, series_key
from specsuite.history.changes import Point, cached_splits, splits

PARAMS = (changes.ALGORITHM, changes.ALPHA, changes.RESAMPLES)


def noisy(n: int = 40, shift_at: int | None = 20, seed: int = 1) -> list[Point]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        level = 0.7 if shift_at is not None and i >= shift_at else 1.0
        out.append(Point(f"r{i}", f"{i:07x}", "", level * rng.uniform(0.95, 1.05)))
    return out


def key(points: list[Point], metric: str = "speedup", params: tuple = PARAMS) -> str:
    return series_key(params, metric, [(p.commit, p.value, p.nondeterministic) for p in points])


def test_the_key_changes_with_every_input_of_the_splits() -> None:
    pts = noisy()
    base = key(pts)
    assert key(list(pts)) == base  # the same series: the same key
    swapped = [pts[1], pts[0], *pts[2:]]
    bumped = [*pts[:-1], Point(pts[-1].run_id, pts[-1].commit, "", math.nextafter(pts[-1].value, 2.0))]
    flagged = [*pts[:-1], Point(pts[-1].run_id, pts[-1].commit, "", pts[-1].value, True)]
    recommitted = [
        *pts[:-1],
        Point(pts[-1].run_id, pts[-2].commit, "", pts[-1].value),
    ]  # two runs, one commit
    others = [
        key([*pts, Point("new", "f" * 7, "", 1.0)]),  # gained a run
        key(pts[1:]),  # lost one
        key(swapped),  # its order changed
        key(bumped),  # a value moved by one ulp
        key(flagged),  # a run became nondeterministic
        key(recommitted),  # a split may no longer fall there
        key(pts, metric="decode_tps"),
        key(pts, params=(changes.ALGORITHM + 1, changes.ALPHA, changes.RESAMPLES)),
    ]
    assert len({base, *others}) == len(others) + 1


def test_a_hit_is_what_the_detector_computes(tmp_path: Path) -> None:
    path = tmp_path / "c" / "changes.json"
    pts = noisy()
    fresh = splits(pts, "speedup")
    assert len(fresh) == 1 and fresh[0].index == 20 and fresh[0].p_value < changes.ALPHA
    first = SplitCache(path)
    assert cached_splits(pts, "speedup", first) == fresh and (first.hits, first.misses) == (0, 1)
    first.save()
    again = SplitCache(path)
    assert cached_splits(pts, "speedup", again) == fresh and (again.hits, again.misses) == (1, 0)
    # deterministic series are computed, never stored: their splits cost one pass
    exact = [Point(f"r{i}", f"{i:07x}", "", 0.5 if i < 3 else 0.4) for i in range(6)]
    assert cached_splits(exact, "accept_rate", again) == splits(exact, "accept_rate")
    assert (again.hits, again.misses) == (1, 0)


def _build(path: Path, pts: list[Point]) -> SplitCache:
    cache = SplitCache(path)
    cached_splits(pts, "speedup", cache)
    cache.save()
    return cache


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"\x00\xff not json", "is not one this version wrote"),
        (b'{"format": "specsuite change points", "version": 1, "entries": {"k": [1, "x"]}}', "not one"),
        (b'{"format": "something else", "version": 1, "entries": {}}', "is 'something else' version 1"),
        (b'{"format": "specsuite change points", "version": 99, "entries": {}}', "version 99: ignored"),
        (b"[]", "is not one this version wrote"),
    ],
)
def test_a_corrupt_or_foreign_file_is_ignored_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, why: str
) -> None:
    path = tmp_path / "changes.json"
    path.write_bytes(content)
    cache = _build(path, noisy())
    assert (cache.hits, cache.misses) == (0, 1)
    err = capsys.readouterr().err
    assert f"warning: report: the change-point cache {path}" in err and why in err
    doc = json.loads(path.read_text())  # replaced by a good one
    assert doc["format"] == changecache.FORMAT and len(doc["entries"]) == 1
    assert _build(path, noisy()).hits == 1 and capsys.readouterr().err == ""


def test_a_link_is_neither_read_nor_written_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.json"
    _build(good, noisy())
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    path = tmp_path / "changes.json"
    os.symlink(good, path)  # a cache that would hit, through a link: not read
    assert _build(path, noisy()).hits == 0
    assert "is not one this version wrote (a symbolic link)" in capsys.readouterr().err
    assert not path.is_symlink() and json.loads(path.read_text())["entries"]  # a file of its own now
    path.unlink()
    os.symlink(victim, path)
    _build(path, noisy())
    assert victim.read_text() == "keep me" and not path.is_symlink()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left
    os.mkfifo(tmp_path / "fifo")  # not a file: reported, never waited on
    assert _build(tmp_path / "fifo", noisy()).misses == 1
    assert "not a file" in capsys.readouterr().err


def test_an_unwritable_folder_costs_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    _build(tmp_path / "file" / "changes.json", noisy())  # its folder is a file
    assert "could not be written" in capsys.readouterr().err


def test_old_entries_go_and_the_file_stays_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "changes.json"
    series = [noisy(seed=s) for s in range(4)]
    for pts in series:
        _build(path, pts)
    assert len(json.loads(path.read_text())["entries"]) == 4
    doc = json.loads(path.read_text())
    stale = key(series[0])
    doc["entries"][stale][0] = time.time() - (changecache.KEEP_DAYS + 1) * 86400  # unused for too long
    path.write_text(json.dumps(doc))
    _build(path, series[1])
    kept = json.loads(path.read_text())["entries"]
    assert stale not in kept and len(kept) == 3
    monkeypatch.setattr(changecache, "MAX_ENTRIES", 2)
    cache = _build(path, series[3])  # what this build used stays; then the most recently used
    kept = json.loads(path.read_text())["entries"]
    assert key(series[3]) in kept and len(kept) == 2 and cache.hits == 1
