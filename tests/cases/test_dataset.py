"""A dataset-backed prompt set's subset (cases.dataset): JSON Lines and Parquet, the first rows of each
category in file order, and one clear error for every way a file can fail to give it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsuite.cases.dataset import read_rows, select, with_prompts
from specsuite.cases.schema import DatasetSource, parse_case_file
from specsuite.common.errors import UserError

ROWS = [
    {"qid": "1", "cat": "math", "turns": ["one", "follow-up"]},
    {"qid": "2", "cat": "code", "turns": ["two"]},
    {"qid": "3", "cat": "math", "turns": ["three"]},
    {"qid": "4", "cat": "code", "turns": ["four"]},
    {"qid": "5", "cat": "math", "turns": ["five"]},
    {"qid": "6", "cat": "rag", "turns": ["six"]},
]
# SPEED-Bench's text for a row whose prompt lives in another dataset (its throughput splits, some qualitative)
PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"


def _src(**kw) -> DatasetSource:
    return DatasetSource(**{"file": "d", "format": "jsonl", "text": "turns", "id": "qid", "category": "cat",
                            "per_category": 2, **kw})  # fmt: skip


def _jsonl(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    return path


def test_first_rows_of_each_category_in_file_order(tmp_path) -> None:
    path = _jsonl(tmp_path, ROWS)
    src = _src(per_category=1)
    # every category, in the order of its first row; a list of turns sends its first
    assert select(path, src, read_rows(path, src)) == [
        ("1", "one", "math"),
        ("2", "two", "code"),
        ("6", "six", "rag"),
    ]
    src = _src(categories=("code", "math"))
    got = select(path, src, read_rows(path, src))
    assert got == [("2", "two", "code"), ("4", "four", "code"), ("1", "one", "math"), ("3", "three", "math")]


@pytest.mark.parametrize(
    ("rows", "src", "needle"),
    [
        (ROWS, _src(categories=("rag",)), "fewer than 2 rows (per_category) in 'cat': 'rag': 1"),
        (ROWS, _src(category="nope", per_category=1), "no rows with a category"),
        ([{**ROWS[0], "turns": []}, *ROWS[1:]], _src(per_category=1), "row '1' has no text in 'turns'"),
        ([{**ROWS[0], "turns": None}, *ROWS[1:]], _src(per_category=1), "must be rebuilt from other sources"),
        ([*ROWS, {**ROWS[1], "cat": "new"}], _src(per_category=1), "values are not unique"),
        (
            [{**ROWS[0], "turns": [PLACEHOLDER]}],
            _src(per_category=1),
            "row '1' holds a placeholder, not a prompt",
        ),
    ],
)
def test_a_subset_the_file_cannot_give_is_one_error(tmp_path, rows, src, needle) -> None:
    path = _jsonl(tmp_path, rows)
    with pytest.raises(UserError, match=r"d\.jsonl: ") as exc:
        select(path, src, read_rows(path, src))
    assert needle in str(exc.value)


def test_a_line_that_is_not_a_json_object(tmp_path) -> None:
    path = tmp_path / "d.jsonl"
    for text, needle in (
        ('{"a": 1}\n{oops\n', "line 2 is not JSON"),
        ("[1]\n", "line 1 is not a JSON object"),
    ):
        path.write_text(text)
        with pytest.raises(UserError, match=needle):
            read_rows(path, _src())


def test_a_file_that_is_not_utf8_is_one_error(tmp_path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"id": "a", "text": "\\u00e9 ok", "category": "x"}\n{"id": "b", "text": "\xff\xfe"}\n')
    with pytest.raises(UserError, match=r"d\.jsonl: not UTF-8 \(invalid start byte at byte \d+\)"):
        read_rows(path, _src())


def test_parquet(tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    src = _src(format="parquet", per_category=1)
    assert select(path, src, read_rows(path, src))[0] == ("1", "one", "math")
    with pytest.raises(UserError, match="not a Parquet file with the columns qid, nope, cat"):
        read_rows(path, _src(format="parquet", text="nope"))
    (tmp_path / "x.parquet").write_bytes(b"not parquet")
    with pytest.raises(UserError, match=r"x\.parquet: not a Parquet file"):
        read_rows(tmp_path / "x.parquet", src)


def test_a_case_gets_its_texts_and_categories(tmp_path) -> None:
    (case,) = parse_case_file(
        'version = 1\n[[prompt_set]]\nname = "d"\n'
        'dataset = { file = "d.jsonl", format = "jsonl", text = "turns", id = "qid", category = "cat", '
        'per_category = 1, categories = ["code", "math"] }\n'
        '[[case]]\nname = "c"\ntier = "nightly"\ntarget = "t.gguf"\nspec_type = "ngram-mod"\nn_max = 3\n'
        'prompts = "d"\nuncalibrated = true\ncategory_floors = { code = { min_accept_rate = 0.5 } }\n'
    ).cases
    assert case.models == ["t.gguf", "d.jsonl"] and case.prompt_texts == ()
    ready = with_prompts(case, _jsonl(tmp_path, ROWS))
    assert ready.prompt_texts == (("2", "two"), ("1", "one")) and ready.prompt_categories == ("code", "math")


def test_an_inline_set_with_categories_runs_category_by_category() -> None:
    (case,) = parse_case_file(
        'version = 1\n[[prompt_set]]\nname = "p"\nprompts = [{ id = "a", text = "1", category = "x" }, '
        '{ id = "b", text = "2", category = "y" }, { id = "c", text = "3", category = "x" }]\n'
        '[[case]]\nname = "c"\ntier = "synthetic"\ntarget = "t.gguf"\nspec_type = "ngram-mod"\nn_max = 3\n'
        'prompts = "p"\nuncalibrated = true\n'
    ).cases
    assert [i for i, _ in case.prompt_texts] == ["a", "c", "b"] and case.prompt_categories == ("x", "x", "y")
