"""The metric registry (results.metrics): each row names what exists (a record's field, a cases.toml key, an
option, a history column), reads a real record, and is all the relative gate needs of a metric."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from testdata import DATA_ROOT

from specsuite.cases.schema import CaseTable
from specsuite.common.errors import UserError
from specsuite.common.settings import Settings
from specsuite.history import changes, regress, schema
from specsuite.results import metrics
from specsuite.results.document import load_run
from specsuite.results.metrics import Metric
from specsuite.results.record import CaseRecord, Prefill

PREFILL = load_run(DATA_ROOT / "results" / "prefill-real-1" / "results.json").cases["tiny-mtp-long-prompt"]


def test_every_name_is_one_row_and_every_reference_exists() -> None:
    names = [m.name for m in metrics.REGISTRY]
    assert len(names) == len(set(names)) and metrics.BY_NAME.keys() == set(names)
    case_keys = set(CaseTable.__struct_fields__)
    run_options = set(Settings.__struct_fields__)
    for m in metrics.REGISTRY:
        assert m.floor is None or m.floor in case_keys, m.name  # a cases.toml key
        assert all(k in case_keys or k in run_options for k in m.tolerance), m.name  # a case's key or option
        assert m.shown_as is None or m.shown_as in metrics.BY_NAME, m.name
        assert (m.gate == "rounds") == (m.rounds is not None), m.name  # rounds: the gate's samples
        assert m.label and m.source and m.digits >= 0


def test_the_columns_a_history_kept_them_in_exist_in_that_schema(tmp_path: Path) -> None:
    """A reader of an older history reads these columns; each existed from its ``since`` on."""
    for m in metrics.REGISTRY:
        if m.column is None:
            continue
        conn = sqlite3.connect(tmp_path / f"{m.name}.sqlite", isolation_level=None)
        schema.migrate(conn, schema.MIGRATIONS[: m.since])
        conn.execute(f"SELECT {m.column} FROM cases c")  # fails where a column is missing
        conn.close()


def test_a_real_record_gives_every_number_at_its_path() -> None:
    rec = PREFILL
    assert rec.prefill is not None and rec.blocks is not None and rec.speed is not None
    got = metrics.values(rec)
    assert got["prefill_ratio"] == rec.prefill.ratio == 0.5588
    assert got["ttft_ratio"] == rec.prefill.ttft_ratio
    assert got["speedup"] == rec.speed.speedup_median and got["pos0_rate"] == rec.pos0
    assert got["block_ratio"] == rec.block_ratio and got["block_ms"] == rec.block_ms
    assert metrics.get("prefill_ratio").samples(rec) == rec.prefill.ratio_rounds
    assert metrics.get("block_ratio").samples(rec) == rec.blocks.ratios
    assert len(metrics.get("prefill_ratio").samples(rec) or []) == 8  # one per round


def test_only_finite_numbers_are_values_and_alternatives_are_tried_in_order() -> None:
    rec = CaseRecord(name="x", accept_rate=float("nan"), speedup=1.5, prefill=Prefill(ratio=None))
    assert metrics.values(rec) == {"speedup": 1.5}  # no speed samples: the speedup itself
    assert metrics.get("accept_rate").raw(rec) != metrics.get("accept_rate").raw(rec)  # NaN, as recorded
    assert metrics.get("prefill_ratio").samples(rec) == []


def test_a_line_writes_the_number_with_its_unit() -> None:
    assert metrics.get("prefill_ratio").text(0.6612) == "0.66x of plain"
    assert metrics.get("block_ms").text(26.934) == "26.93 ms per block"
    assert metrics.get("speedup").text(1.5) == "1.500x" and metrics.get("accept_rate").text(0.8) == "0.8000"
    assert metrics.get("decode_tps").text(None) == "–"


def test_the_first_option_given_sets_the_tolerance() -> None:
    decode = metrics.get("decode_tps")
    assert decode.tolerance_of({"rtol": 0.05}) == ("rtol", 0.05)
    assert decode.tolerance_of({"rtol": 0.05, "speed_rtol": 0.15}) == ("speed_rtol", 0.15)
    assert decode.tolerance_of({"rtol": 0.05, "speed_rtol": 0.15, "decode_rtol": 0.35}) == (
        "decode_rtol",
        0.35,
    )
    assert metrics.get("block_ratio").tolerance_of({}) == ("block_rtol", metrics.BLOCK_RTOL)
    with pytest.raises(UserError, match="none of rtol was given"):
        metrics.get("accept_rate").tolerance_of({"rtol": None})


def test_an_unknown_metric_names_the_gated_ones() -> None:
    with pytest.raises(UserError, match=r"no metric 'prefil': choose one of accept_rate, .*prefill_ratio"):
        metrics.get("prefil")


def test_the_readers_take_their_metrics_from_the_registry() -> None:
    assert tuple(m.name for m in metrics.GATED) == changes.METRICS
    assert {"accept_rate", "accept_len", "pos0_rate"} == changes.DETERMINISTIC
    assert regress.METRICS == ("accept_rate", "accept_len", "pos0_rate")
    assert {"prefill_ratio", "ttft_ratio", "block_ratio"} <= set(changes.METRICS)


def test_a_new_gated_metric_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row the registry did not have (the plain server's own prompt tokens/s, which the record holds per
    round): the relative gate judges it from that row alone, its line written as the row says."""
    row = Metric("plain_prefill", "plain prefill", "prefill.base_prompt_tps", "a test", unit="tokens/s",
                 gate="rounds", rounds="prefill.base_prompt_tps_rounds", digits=1, rank=0)  # fmt: skip
    monkeypatch.setattr(metrics, "GATED", (*metrics.GATED, row))
    monkeypatch.setitem(metrics.BY_NAME, row.name, row)
    base = CaseRecord(name="c", prefill=Prefill(base_prompt_tps=100.0, base_prompt_tps_rounds=[100.0] * 4))
    slow = CaseRecord(name="c", prefill=Prefill(base_prompt_tps=50.0, base_prompt_tps_rounds=[50.0] * 4))
    assert regress.regressions(base, slow, baseline_commit="0c1e570") == []  # faster never fails
    [found] = regress.regressions(slow, base, baseline_commit="0c1e570")
    assert found.metric == "plain_prefill" and "rtol 5 %" in found.message  # no option of its own: rtol
    assert found.line == "plain prefill 100.0 -> 50.0 tokens/s, -50.0 %, 4 rounds vs 4"
    assert regress.first_lines([found]) == [found.line]
