"""common.declared: msgspec's errors become one line naming the file, the entry and the field."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec
import pytest
from msgspec import Meta

from specsuite.common.declared import Segment, convert
from specsuite.common.errors import UserError


class _Base(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="source", kw_only=True):
    name: str


class Hub(_Base, tag="hf", frozen=True, kw_only=True):
    repo: Annotated[str, Meta(pattern=r"^\w+/\w+$", description="of the form 'owner/name'")]
    size: Annotated[int, Meta(gt=0)] | None = None


class Made(_Base, tag="generated", frozen=True, kw_only=True):
    recipe: str
    weight: Literal["fixed", "random"] = "fixed"

    def __post_init__(self) -> None:
        if self.recipe == self.name:
            raise ValueError("recipe and name must differ")


class File(msgspec.Struct, forbid_unknown_fields=True):
    version: int
    model: list[Hub | Made] = []


def _error(*entries: dict[str, Any], type_: Any = File, data: Any = None) -> str:
    with pytest.raises(UserError) as exc:
        convert(data if data is not None else {"version": 1, "model": list(entries)}, type_, "m.lock")
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


GOOD = {"name": "a", "source": "hf", "repo": "o/r"}


def test_good_data_converts_to_the_declared_type() -> None:
    got = convert(
        {"version": 1, "model": [GOOD, {"name": "b", "source": "generated", "recipe": "x"}]}, File, "f"
    )
    assert got.model == [Hub(name="a", repo="o/r"), Made(name="b", recipe="x")]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # a wrong type: the field, msgspec's expected type (no "null" for an optional key) and the value
        ({"size": "big"}, "m.lock: [[model]] 'a': size must be int, got 'big'"),
        ({"size": True}, "m.lock: [[model]] 'a': size must be int, got True"),
        ({"size": 0}, "m.lock: [[model]] 'a': size must be int >= 1, got 0"),
        # a constraint with a description says it in words
        ({"repo": "x"}, "m.lock: [[model]] 'a': repo must be of the form 'owner/name', got 'x'"),
        # an unknown key: every unknown one, and the valid keys for this source
        (
            {"colour": 1, "shade": 2},
            "m.lock: [[model]] 'a': unknown key(s) colour, shade for source 'hf'; "
            "valid keys: name, repo, size",
        ),
        # a bad tag: the sources there are
        ({"source": "ftp"}, "m.lock: [[model]] 'a': source must be one of hf, generated, got 'ftp'"),
        ({"source": 3}, "m.lock: [[model]] 'a': source must be one of hf, generated, got 3"),
    ],
)
def test_one_line_names_file_entry_and_field(change: dict[str, Any], expected: str) -> None:
    assert _error(GOOD, {**GOOD, "name": "b"} | change) == expected.replace("'a'", "'b'")


def test_missing_key() -> None:
    assert _error({"name": "a", "source": "hf"}) == "m.lock: [[model]] 'a': missing key `repo`"
    assert _error({"name": "a"}) == "m.lock: [[model]] 'a': missing key `source` (one of hf, generated)"
    # an entry without a usable name is named by its position
    assert _error(GOOD, {"source": "hf", "repo": "o/r"}) == "m.lock: [[model]] #2: missing key `name`"
    assert _error(GOOD, {**GOOD, "name": "", "repo": "x"}).startswith("m.lock: [[model]] #2: repo must be")


def test_literal_and_rule_of_the_type() -> None:
    made = {"name": "a", "source": "generated", "recipe": "r"}
    assert _error({**made, "weight": "heavy"}) == (
        "m.lock: [[model]] 'a': weight must be one of fixed, random, got 'heavy'"
    )
    assert _error({**made, "recipe": "a"}) == "m.lock: [[model]] 'a': recipe and name must differ"


def test_outside_any_entry() -> None:
    assert _error(data={"version": "1"}) == "m.lock: version must be int, got '1'"
    assert _error(data={"version": 1, "model": 3}) == "m.lock: model must be array, got 3"
    assert _error(data={"version": 1, "model": [3]}) == "m.lock: [[model]] #1: must be object, got 3"
    long = "x" * 200
    assert _error(data={"version": long}).endswith("got '" + "x" * 76 + "...")


class Record(msgspec.Struct, forbid_unknown_fields=True):
    rate: Annotated[float, Meta(ge=0, le=1, description="a number in [0, 1]")]
    tags: list[str] = []


class Results(msgspec.Struct):
    cases: dict[str, Record]


def _by_case(path: Sequence[Segment], data: Any) -> tuple[str, int]:
    """A JSON document's own naming: its cases are an object keyed by name."""
    return (f"case {path[1]!r}", 2) if len(path) >= 2 and path[0] == "cases" else ("", 0)


def test_a_dict_key_is_found_and_the_namer_is_the_callers() -> None:
    data = {"cases": {"ok": {"rate": 0.5}, "mtp": {"rate": 0.5, "tags": ["a", 7]}}}
    with pytest.raises(UserError) as exc:
        convert(data, Results, "results.json", entry=_by_case)
    assert str(exc.value) == "results.json: case 'mtp': tags[1] must be str, got 7"
    data = {"cases": {"ok": {"rate": 0.5}, "mtp": {"rate": 1.5}}}
    with pytest.raises(UserError) as exc:
        convert(data, Results, "results.json", entry=_by_case)
    assert str(exc.value) == "results.json: case 'mtp': rate must be a number in [0, 1], got 1.5"
