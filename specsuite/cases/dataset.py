"""A dataset-backed prompt set: its fixed subset, read from the pinned file (JSON Lines or Parquet).

The subset is the first ``per_category`` rows of each category, in the file's row order, categories in the
order the prompt set lists them (else in the order of each one's first row). The file is pinned by size and
sha256 in models.lock (``source = "hf-dataset"``), so the subset is the same bytes on every machine. A row's
prompt is its ``text`` field, sent byte for byte; a list there (a conversation's turns, as SPEED-Bench and
Spec-Bench store them) sends its first turn. A selected row without text is an error, never skipped: a
dataset whose rows must first be rebuilt from other sources is not usable as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from specsuite.cases.schema import Case, DatasetSource
from specsuite.common.errors import UserError

# What SPEED-Bench (nvidia/SPEED-Bench) stores in place of a prompt whose text comes from another dataset
# (its throughput splits throughout, some qualitative rows): the rows must first be rebuilt with NVIDIA's
# specdec_bench tools (Model-Optimizer's examples/specdec_bench/prepare_data.py). Sent as a prompt, it would
# measure this sentence instead of the benchmark, and pass.
UNRESOLVED_MARKERS = ("FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE",)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    try:  # JSON Lines are UTF-8 (RFC 8259): a prompt of other bytes is no text to send
        lines = path.read_bytes().decode("utf-8").split("\n")  # not splitlines: U+2028 may be in a string
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{path}: not UTF-8 ({exc.reason} at byte {exc.start}): not a JSON Lines file"
        ) from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise UserError(f"{path}: line {n} is not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise UserError(f"{path}: line {n} is not a JSON object")
        rows.append(row)
    return rows


def _parquet(path: Path, columns: list[str]) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq  # heavy, and only a dataset in Parquet needs it
    except ImportError:
        raise UserError(
            f"{path}: reading a Parquet prompt set needs pyarrow: pip install 'specsuite[datasets]'"
        ) from None
    try:
        table = pq.read_table(path, columns=columns)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid/ArrowKeyError (and OSError) on bad files
        raise UserError(f"{path}: not a Parquet file with the columns {', '.join(columns)} ({exc})") from None
    return table.to_pylist()


def read_rows(path: Path, src: DatasetSource) -> list[dict[str, Any]]:
    cols = list(dict.fromkeys([src.id, src.text, src.category]))
    return _parquet(path, cols) if src.format == "parquet" else _jsonl(path)


def _text(path: Path, src: DatasetSource, row: dict[str, Any], rid: str) -> str:
    value = row.get(src.text)
    if isinstance(value, list) and value:
        value = value[0]
    if not isinstance(value, str) or not value:
        raise UserError(
            f"{path}: row {rid!r} has no text in {src.text!r} (got {type(value).__name__}); a dataset whose "
            "rows must be rebuilt from other sources first is not usable as it is"
        )
    if any(marker in value for marker in UNRESOLVED_MARKERS):
        raise UserError(
            f"{path}: row {rid!r} holds a placeholder, not a prompt ({value[:60]!r}...): its text must be "
            "rebuilt from the source dataset first (SPEED-Bench: specdec_bench's prepare_data.py); pin the "
            "prepared file instead"
        )
    return value


def select(path: Path, src: DatasetSource, rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The subset as (id, text, category), category by category."""
    chosen: dict[str, list[tuple[str, str, str]]] = {c: [] for c in src.categories}
    for row in rows:
        cat = row.get(src.category)
        if not isinstance(cat, str) or (src.categories and cat not in chosen):
            continue
        taken = chosen.setdefault(cat, [])
        if len(taken) < src.per_category:
            rid = str(row.get(src.id))
            taken.append((rid, _text(path, src, row, rid), cat))
    short = {c: len(t) for c, t in chosen.items() if len(t) < src.per_category}
    if short or not chosen:
        have = ", ".join(f"{c!r}: {n}" for c, n in short.items()) or "no rows with a category"
        raise UserError(
            f"{path}: fewer than {src.per_category} rows (per_category) in {src.category!r}: {have}"
        )
    out = [p for taken in chosen.values() for p in taken]
    ids = [i for i, _, _ in out]
    if len(set(ids)) != len(ids):
        raise UserError(f"{path}: the selected rows' {src.id!r} values are not unique")
    return out


def with_prompts(case: Case, path: Path) -> Case:
    """The case with its dataset-backed prompt set's texts and categories, read from ``path``."""
    assert case.dataset is not None
    chosen = select(path, case.dataset, read_rows(path, case.dataset))
    return msgspec.structs.replace(
        case,
        prompt_texts=tuple((i, t) for i, t, _ in chosen),
        prompt_categories=tuple(c for _, _, c in chosen),
    )
