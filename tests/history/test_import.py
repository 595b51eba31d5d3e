"""``specsuite history import`` against hostile documents (issue 35, items 1, 2, 5 and 6): every document is
checked as strictly as a live run's record, one error line and exit 2 for each refused file, nothing of the
call entered; a device, a FIFO or a run id that is not a name refused at once; one run id never names two
runs. The exit codes and lines come from real ``specsuite`` processes."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from testdata import DATA_ROOT

from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.history import baseline, recording
from specsuite.results.document import decode_run

REAL = DATA_ROOT / "results" / "synthetic-real-1" / "results.json"  # a real run of four cases
CASE = "tiny-mtp-random"


def specsuite(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A real ``specsuite`` process, its address space capped at 2 GiB: /dev/zero read whole would take
    all the machine's memory (13.5 GB in 60 s when this was found), here it fails fast instead."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    cmd = [sys.executable, "-m", "specsuite", *args]
    return subprocess.run(
        cmd, cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=timeout, preexec_fn=cap
    )


def real() -> dict[str, Any]:
    return json.loads(REAL.read_text(encoding="utf-8"))


def _set(doc: dict[str, Any], key: str, value: Any) -> None:
    doc["cases"][CASE][key] = value


def _rename(doc: dict[str, Any]) -> None:
    doc["cases"]["another-case"] = doc["cases"].pop(CASE)  # the record still names tiny-mtp-random


# What the round found entered with exit 0 (or a traceback), and the line that now refuses each.
HOSTILE: dict[str, tuple[Any, str]] = {
    "rate-7": (lambda d: _set(d, "accept_rate", 7.0), "accept_rate 7 is outside [0, 1]"),
    "negative": (lambda d: _set(d, "drafted", -5), "drafted -5 is not a counter"),
    "accepted>drafted": (
        lambda d: _set(d, "accepted", d["cases"][CASE]["drafted"] + 1),
        "counter sanity: accepted",
    ),
    "fraction": (lambda d: _set(d, "drafts", 2.5), "drafts must be a whole number or null, got 2.5"),
    "2^80": (lambda d: _set(d, "drafted", 2**80), "drafted 1208925819614629174706176 is not a counter"),
    "rising-positions": (
        lambda d: _set(d, "per_position", list(reversed(d["cases"][CASE]["per_position"]))),
        "increase with position",
    ),
    "round-insane": (
        lambda d: d["cases"][CASE]["rounds"][0].update(accepted=10**6),
        "rounds[0]: counter sanity",
    ),
    "yesterday": (lambda d: d.update(started="yesterday"), "started 'yesterday' is not an ISO 8601 time"),
    "no-start": (lambda d: d.pop("started"), "started None is not an ISO 8601 time"),
    "future": (lambda d: d.update(started="9999-12-31T23:59:59+00:00"), "is in the future"),
    "ends-first": (lambda d: d.update(finished="2020-01-01T00:00:00+00:00"), "finished 2020-01-01T00:00:00"),
    "status": (
        lambda d: _set(d, "status", "excellent"),
        "status must be one of passed, failed, skipped, not_in_build, known_bug, error, interrupted, got "
        "'excellent'",
    ),
    "binary-commit-html": (
        lambda d: d["binary"].update(commit="<img src=x onerror=alert(1)>\n## injected"),
        "binary.commit '<img src=x onerror=alert(1)>\\... (43 characters) is not a git commit (7 to 40 hex",
    ),
    "binary-backend": (
        lambda d: d["binary"].update(backend="## INJECTED"),
        "binary.backend '## INJECTED' is not one of cpu, cuda, rocm, vulkan, metal, sycl",
    ),
    "schema-99": (lambda d: d.update(schema=99), "schema 99 is not one this specsuite reads"),
    "renamed": (_rename, "case 'another-case': its record names another case ('tiny-mtp-random')"),
    "id-300": (lambda d: d.update(run_id="r" * 300), "is not a plain name"),
    "id-path": (lambda d: d.update(run_id="../../etc"), "run_id '../../etc' is not a plain name"),
    "id-newline": (lambda d: d.update(run_id="a\nb"), "is not a plain name"),
    "id-slash": (lambda d: d.update(run_id="a/b"), "run_id 'a/b' is not a plain name"),
    # round five: the fields added since (per-block cost, concurrency, memory, configuration)
    "block-ratio-negative": (lambda d: _set(d, "block_ratio", -5.0), "block_ratio -5 is negative"),
    "crossover-2^80": (
        lambda d: _set(d, "concurrency", {"parallel": 2, "streams": 2, "crossover_np": 2**80}),
        "concurrency.crossover_np 1208925819614629174706176 is not an amount",
    ),
    "crossover-10^9": (
        lambda d: _set(d, "concurrency", {"parallel": 2, "streams": 2, "crossover_np": 10**9}),
        "concurrency.crossover_np 1000000000 is not a slot count from 0 to 64",
    ),
    "np1-rate-7": (
        lambda d: _set(d, "concurrency", {"np1": {"source": "x", "accept_rate": 7.0}}),
        "concurrency.np1.accept_rate 7 is outside [0, 1]",
    ),
    "streams-10^9": (lambda d: _set(d, "streams", 10**9), "streams 1000000000 is not a slot count from 1"),
    "memory-negative": (
        lambda d: _set(d, "memory", {"peak_rss_mib": -100.0}),
        "memory.peak_rss_mib -100 is negative",
    ),
    "temperature": (lambda d: _set(d, "temperature", -1.0), "temperature -1 is outside [0, 2]"),
    "config-escape": (
        lambda d: d.update(config={"defaults": {"--poll": "\x1b[2J50"}}),
        "config.defaults.--poll '\\x1b[2J50' holds control characters",
    ),
    "config-1mb": (
        lambda d: d.update(config={"defaults": {"--poll": "5" * 2**20}}),
        "is 1048576 characters long (at most 200)",
    ),
    # issue 47: a rate or length its own counters (53 accepted of 111 drafted, 38 drafts) do not give
    "rate-1": (
        lambda d: _set(d, "accept_rate", 1.0),
        "accept_rate 1 disagrees with its counters: accepted 53 / drafted 111 = 0.4775",
    ),
    "len-4": (
        lambda d: _set(d, "accept_len", 4.0),
        "accept_len 4 disagrees with its counters: 1 + accepted 53 / drafts 38 = 2.3947",
    ),
    "pos0-1": (
        lambda d: _set(d, "pos0_rate", 1.0),
        "pos0_rate 1 disagrees with its counters: per_position[0] 34 / drafts 38 = 0.8947",
    ),
    "position-rate": (
        lambda d: _set(d, "per_position_rate", [0.8947, 0.9, 0.0263]),
        "per_position_rate[1] 0.9 disagrees with its counters: per_position[1] 18 / drafts 38 = 0.4737",
    ),
    "rate-of-nothing": (
        lambda d: d["cases"][CASE].update(drafted=0, accepted=0, drafts=0, per_position=[0, 0, 0]),
        "accept_rate 0.4775 disagrees with its counters: accepted 0 / drafted 0 = none",
    ),
    "category-rate": (
        lambda d: _set(
            d, "categories", {"words": {"drafted": 54, "accepted": 43, "drafts": 19, "accept_rate": 0.9}}
        ),
        "categories.words.accept_rate 0.9 disagrees with its counters: accepted 43 / drafted 54 = 0.7963",
    ),
    "identical-1": (
        lambda d: d["cases"][CASE]["prompts"][0].update(identical=False, first_diff=3),
        "identical_fraction 1 disagrees with its prompts: 2 of 3 identical = 0.6667",
    ),
}
# NaN and infinities (strict JSON has none, json.loads reads them) and half a character: written as text
RAW: dict[str, tuple[str, str, str]] = {
    "nan": ("accept_rate", "NaN", "accept_rate is nan, not a finite number"),
    "infinity": ("speedup", "Infinity", "speedup is inf, not a finite number"),
    "minus-infinity": ("decode_tps", "-Infinity", "decode_tps is -inf, not a finite number"),
    "surrogate": ("message", '"\\ud800"', "holds text that is not Unicode"),
}


def _write(folder: Path, name: str, doc: dict[str, Any]) -> Path:
    path = folder / f"{name}.json"
    text = json.dumps(doc, indent=1)
    if name in RAW:
        key, raw, _ = RAW[name]
        _set(doc, key, "@RAW@")
        text = json.dumps(doc, indent=1).replace('"@RAW@"', raw)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("hostile")
    files = {}
    for name, (edit, _) in HOSTILE.items():
        doc = real()
        edit(doc)
        files[name] = _write(folder, name, doc)
    for name in RAW:
        files[name] = _write(folder, name, real())
    return files


@pytest.mark.parametrize("name", [*HOSTILE, *RAW])
def test_an_impossible_document_is_refused_with_its_reason(
    hostile: dict[str, Path], tmp_path: Path, name: str
) -> None:
    why = {**{k: v[1] for k, v in HOSTILE.items()}, **{k: v[2] for k, v in RAW.items()}}[name]
    with pytest.raises(UserError) as exc:
        recording.import_runs([hostile[name]], tmp_path / "h.sqlite")
    assert str(exc.value).startswith(f"{hostile[name]}: ") and why in str(exc.value), str(exc.value)
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 400
    assert not (tmp_path / "h.sqlite").exists()


def test_the_command_refuses_each_bad_file_in_one_line_and_enters_none(
    hostile: dict[str, Path], tmp_path: Path
) -> None:
    good = tmp_path / "good.json"
    good.write_text(REAL.read_text())
    db = tmp_path / "h.sqlite"
    bad = [hostile[n] for n in ("rate-7", "2^80", "nan", "schema-99", "renamed", "id-300")]
    proc = specsuite("history", "import", str(good), *map(str, bad), "--db", str(db))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == len(bad) and "Traceback" not in proc.stderr
    assert [line.split(": ")[1] for line in lines] == list(map(str, bad))  # one line per file, in order
    assert all(line.startswith("error: ") for line in lines)
    assert "nothing entered: all or nothing, so the other 1 file(s) were not entered either" in lines[-1]
    assert not db.exists() and proc.stdout == ""  # the good one is not entered either: one transaction
    ok = specsuite("history", "import", str(good), "--db", str(db))
    assert ok.returncode == 0 and "1 of 1 run(s) entered" in ok.stdout


def test_an_imported_baseline_with_rate_7_cannot_judge_a_live_run(
    hostile: dict[str, Path], tmp_path: Path
) -> None:
    """The round's attack: the import of accept_rate 7.0 made the next live run `regressed`. Refused, it
    is no baseline: the lookup finds nothing."""
    db = tmp_path / "h.sqlite"
    assert specsuite("history", "import", str(hostile["rate-7"]), "--db", str(db)).returncode == 2
    doc = decode_run(real(), "real")
    assert not db.exists() or baseline.find_baseline(
        db, case=CASE, device_class=str(doc.device_class), backend=str(doc.binary.backend),
        cases_sha256=str(doc.cases_sha256), commit="f" * 40, ancestors=None,
    ) is None  # fmt: skip


def test_a_record_whose_rates_its_counters_do_not_give_is_no_baseline(tmp_path: Path) -> None:
    """Issue 47, item 4: accept_rate 1.0 and accept_len 4.0 over 27 accepted of 36 drafted were entered, and
    the next live run with those counters was `regressed … 25.0 % below 1.0000`. Refused in one line naming
    the file, the case, the field, its value and the counters' value; nothing entered, no baseline."""
    doc = real()
    doc["cases"][CASE].update(drafted=36, accepted=27, drafts=12, per_position=[12, 10, 5],
                              per_position_rate=[1.0, 0.8333, 0.4167], pos0_rate=1.0,
                              accept_rate=1.0, accept_len=4.0)  # fmt: skip
    path, db = tmp_path / "stated.json", tmp_path / "h.sqlite"
    path.write_text(json.dumps(doc), encoding="utf-8")
    proc = specsuite("history", "import", str(path), "--db", str(db))
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr == (
        f"error: {path}: case {CASE!r}: accept_rate 1 disagrees with its counters: accepted 27 / drafted 36 "
        "= 0.75 (and 1 more problem(s)); not a run the suite wrote, nothing of it entered\n"
    )
    assert not db.exists()


# --- item 6: a device or a FIFO is refused at once, a file read no further than the limit -----------------


def test_dev_zero_is_refused_at_once() -> None:
    proc = specsuite("history", "import", "/dev/zero", timeout=30)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert (
        proc.stderr
        == "error: /dev/zero: not a regular file (a device, FIFO or socket); give a results.json file\n"
    )


@pytest.mark.parametrize("where", ["file", "folder"])
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path, where: str) -> None:
    fifo = tmp_path / ("results.json" if where == "folder" else "run.json")
    os.mkfifo(fifo)
    proc = specsuite("history", "import", str(tmp_path if where == "folder" else fifo), "--db",
                     str(tmp_path / "h.sqlite"), timeout=30)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {fifo}: not a regular file"), proc.stderr


def test_a_document_over_the_limit_is_refused_reading_no_more(tmp_path: Path, monkeypatch) -> None:
    from specsuite.results import document

    big = tmp_path / "big.json"
    big.write_text(REAL.read_text())
    monkeypatch.setattr(document, "_MAX_RESULTS_BYTES", 1000)
    with pytest.raises(UserError, match=r"big.json: more than 1000 bytes is too big for a results.json"):
        recording.import_runs([big], tmp_path / "h.sqlite")


# --- item 2: one run id never names two runs --------------------------------------------------------------


def test_a_second_run_under_one_id_is_refused_by_the_import(tmp_path: Path) -> None:
    db, first, second = tmp_path / "h.sqlite", tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(REAL.read_text())
    doc = real()
    doc.update(
        started="2026-12-04T21:13:07+00:00", finished="2026-12-04T21:14:07+00:00"
    )  # another run, its id
    second.write_text(json.dumps(doc))
    assert recording.import_runs([first], db) == [doc["run_id"]]
    assert recording.import_runs([first], db) == []  # the same run again: already there
    with pytest.raises(UserError, match=r"b.json: run id 'sub-1' already names another run in the history"):
        recording.import_runs([second], db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT run_id, started FROM runs").fetchall() == [("sub-1", real()["started"])]


def test_two_runs_under_one_id_in_one_call_are_refused(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(REAL.read_text())
    second.write_text(json.dumps({**real(), "started": "2026-12-04T21:13:07+00:00", "finished": None}))
    with pytest.raises(UserError, match=r"b.json: run id 'sub-1' already names another run"):
        recording.import_runs([first, second], tmp_path / "h.sqlite")
    with sqlite3.connect(tmp_path / "h.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]


def test_a_live_run_under_a_taken_id_is_not_recorded_and_says_why(tmp_path: Path) -> None:
    """Two runs recording at the same moment under one id (a reused SPEC_RESULTS_DIR): one is recorded,
    the other's record is refused with one line; the history never holds two runs with one id."""
    db = tmp_path / "h.sqlite"
    docs = [
        decode_run({**real(), "started": f"2026-12-04T21:13:0{i}+00:00", "finished": None}, "real")
        for i in range(2)
    ]
    problems: list[str | None] = []
    threads = [
        threading.Thread(target=lambda d=d: problems.append(recording.try_record(d, db)[1])) for d in docs
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(problems, key=str)[0] is None
    (problem,) = [p for p in problems if p is not None]
    assert "run id 'sub-1' already names another run in the history" in problem and "\n" not in problem
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT run_id, count(*) FROM runs GROUP BY run_id").fetchall() == [("sub-1", 1)]
