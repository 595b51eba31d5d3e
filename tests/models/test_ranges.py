"""ranges: the set of byte ranges a partial holds, what is missing, and what a .part.json may say."""

from __future__ import annotations

import pytest

from specsuite.models.ranges import Ranges, parts


def test_adding_merges_touching_and_overlapping_ranges():
    r = Ranges()
    for a, b in [(10, 20), (30, 40), (20, 25), (35, 50), (0, 5), (5, 5)]:
        r.add(a, b)
    assert list(r) == [(0, 5), (10, 25), (30, 50)]
    r.add(4, 31)
    assert list(r) == [(0, 50)] and r.total() == 50 and r.prefix() == 50


def test_prefix_missing_and_clip():
    r = Ranges([(3, 10), (20, 30)])
    assert r.prefix() == 0
    assert r.missing(40) == [(0, 3), (10, 20), (30, 40)]
    r.add(0, 3)
    assert r.prefix() == 10 and r.missing(30) == [(10, 20)]
    r.clip(25)
    assert list(r) == [(0, 10), (20, 25)]
    r.clip(10)
    assert list(r) == [(0, 10)]


def test_parts_cut_the_missing_ranges_in_file_order():
    assert parts([(0, 10), (15, 17), (20, 45)], 10) == [(0, 10), (15, 17), (20, 30), (30, 40), (40, 45)]


def test_json_round_trip():
    r = Ranges([(0, 7), (9, 12)])
    assert list(Ranges.from_json(r.to_json(), 12)) == list(r)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "0-7",
        [[0, 7, 9]],
        [[7, 3]],
        [[0, 7], [5, 9]],
        [[5, 9], [0, 2]],
        [[0, 13]],
        [[-1, 2]],
        [[0, 1.0]],
        [[0, True]],
    ],
)
def test_json_that_makes_no_sense_is_refused(raw):
    assert Ranges.from_json(raw, 12) is None
