#!/usr/bin/env python3
"""What the run history costs: recording a run, and the ``history`` command over a long history.

    python benchmarks/bench_history.py [--runs 10000] [--repeats 20] [--command-repeats 5] [--workdir DIR]

1. ``record_run`` of a real smoke-tier document (tests/data/results/smoke-real-cal-1, the current tier's
   results.json, schema 2) into a history that already holds ``--runs`` runs, and into
   a new file (creation, WAL, schema): median of ``--repeats``, as a fraction of that run's own wall_s.
   Goal: < 1 %.
2. ``history_command`` over ``--runs`` stored runs (each with that document's cases: the smoke tier's 8),
   output to /dev/null: all rows, one case, the last 20 runs, JSON; median of ``--command-repeats``,
   against the bare SQL query that fetches the same rows (what any tool must pay). Goal: < 1 s.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specsuite.common import paths, table
from specsuite.common.filehash import sha256_file
from specsuite.history import queries, recording, schema
from specsuite.history.command import history_command
from specsuite.results.document import load_run

START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SMOKE = paths.REPO_ROOT / "tests" / "data" / "results" / "smoke-real-cal-1"  # a real schema-2 smoke run


def schema2(doc: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 smoke run as schema 2 writes it: device, harness, cases hash, options, speed samples."""
    out = copy.deepcopy(doc)
    out.update(
        schema=2,
        harness={"commit": "0" * 40, "version": "0.1.0"},
        cases_sha256=sha256_file(paths.CASES_FILE),
        device={"name": "cpu", "class": f"cpu-{platform.machine()}", "driver": None, "cuda": None},
        options={"strict": False, "repeat": 3, "rtol": 0.05, "history": True},
    )
    out["binary"]["source"] = {"kind": "pinned-sdist", "mirror": None}
    for name, rec in out["cases"].items():
        spec = [rec["decode_tps"] * f for f in (0.99, 1.0, 1.01)]
        base = [rec["baseline_decode_tps"]] * 3
        ups = [s / b for s, b in zip(spec, base, strict=True)]
        rec.update(name=name, pos0_rate=rec["per_position_rate"][0])
        rec["speed"] = {
            "repeat": 3, "spec_tps": spec, "base_tps": base, "speedups": ups,
            "speedup_median": statistics.median(ups), "speedup_spread": max(ups) - min(ups),
        }  # fmt: skip
    return out


def variant(doc: dict[str, Any], i: int, rng: random.Random) -> dict[str, Any]:
    """Run ``i`` of a long history: its own commit, run id and start time, acceptance jittered."""
    out = copy.deepcopy(doc)
    out["binary"]["commit"] = f"{rng.getrandbits(160):040x}"
    out["run_id"] = f"bench-{i:06d}"
    out["started"] = (START + dt.timedelta(hours=i)).isoformat(timespec="seconds")
    for rec in out["cases"].values():
        if isinstance(rec.get("accept_rate"), float):
            rec["accept_rate"] = round(rec["accept_rate"] * rng.uniform(0.97, 1.0), 4)
    return out


def fill(db: Path, doc: dict[str, Any], runs: int) -> float:
    rng, t = random.Random(1), time.perf_counter()
    with contextlib.closing(schema.connect(db)) as conn, schema.transaction(conn):
        for i in range(runs):
            recording.insert_run(conn, variant(doc, i, rng))
    return time.perf_counter() - t


def median_s(fn: Callable[[int], object], repeats: int) -> float:
    times = []
    for i in range(repeats):
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def quiet(**kw: Any) -> Callable[[int], object]:
    def call(_: int) -> object:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            return history_command(plot=None, **kw)

    return call


def bare_query(db: Path) -> Callable[[int], object]:
    return lambda _: queries.case_rows(db)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10_000, help="runs stored before timing (10000)")
    ap.add_argument("--repeats", type=int, default=20, help="record_run timings per row (20)")
    ap.add_argument("--command-repeats", type=int, default=5, help="history command timings per row (5)")
    ap.add_argument("--workdir", type=Path, help="where the temporary history goes (default: $TMPDIR)")
    args = ap.parse_args()
    doc = load_run(SMOKE)
    doc = doc if doc.get("schema") == 2 else schema2(doc)
    wall = float(doc["wall_s"])
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        db = Path(tmp) / "history.sqlite"
        fill_s = fill(db, doc, args.runs)
        size = db.stat().st_size >> 20
        print(f"filled {args.runs} runs x {len(doc['cases'])} cases in {fill_s:.1f} s; {size} MiB")
        rng = random.Random(2)
        more = [variant(doc, args.runs + i, rng) for i in range(args.repeats)]  # built outside the timing
        rec_full = median_s(lambda i: recording.record_run(more[i], db), args.repeats)
        rec_new = median_s(lambda i: recording.record_run(doc, Path(tmp) / f"new-{i}.sqlite"), args.repeats)
        base = {"path": db, "case": None, "device": None, "last": None, "as_json": False}
        plain = median_s(bare_query(db), args.command_repeats)
        rows = [
            ["record_run, smoke run, into the long history", f"{rec_full * 1e3:.1f} ms",
             f"{rec_full / wall * 100:.5f} % of the run's {wall:.0f} s", "< 1 %"],
            ["record_run, smoke run, new history file", f"{rec_new * 1e3:.1f} ms",
             f"{rec_new / wall * 100:.5f} % of the run's {wall:.0f} s", "< 1 %"],
            ["bare SQL: the same rows, fetched (no formatting)", f"{plain:.3f} s", "1.00", ""],
        ]  # fmt: skip
        commands: list[tuple[str, dict[str, Any]]] = [
            (f"history (all {args.runs} runs, every case)", {}),
            (f"history --case ngram-mod ({args.runs} runs)", {"case": "ngram-mod"}),
            ("history --last 20", {"last": 20}),
            (f"history --json ({args.runs} runs)", {"as_json": True}),
        ]
        for label, kw in commands:
            s = median_s(quiet(**{**base, **kw}), args.command_repeats)
            rows.append([label, f"{s:.3f} s", f"{s / plain:.2f} x bare SQL", "< 1 s"])
    print(f"\nmedians: record {args.repeats} repeats, history {args.command_repeats} repeats\n")
    print(table.render(["command", "median", "ratio", "goal"], rows, markdown=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
