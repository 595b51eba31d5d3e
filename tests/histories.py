"""Histories made of real results: the synthetic tier's results.json documents (tests/data/results/
synthetic-real-*, runs of one commit of the real CPU build), one per commit of a made-up line of llama.cpp
commits, with a change injected: the acceptance counters (accepted, per position, every round) and the
speed (every round's tokens/s and speedup) scaled by a factor per commit. The counters are first made 100
times larger (``magnify``: the rates stay the measured ones) so that a 3 % step is whole tokens. Everything
else, and all the noise, is what the real runs measured.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

from testdata import DATA_ROOT

from specsuite.results.document import Run, decode_run

REAL = sorted((DATA_ROOT / "results").glob("synthetic-real-*/results.json"))
CASES = ("tiny-simple-random", "tiny-mtp-random", "tiny-dspark-random", "tiny-dflash-fixed")
START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
N = 12
MAGNIFY = 100
FLAT = [1.0] * N
SHAPES = {
    "noise": FLAT,
    "step": [1.0] * 6 + [0.8] * 6,  # one 20 % step at commit 6
    "drift": [1.0] * 6 + [0.97**k for k in range(1, 7)],  # 3 % a commit over commits 6 to 11
}


def commit(i: int) -> str:
    return f"{i + 1:02x}" * 20


def real_docs() -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in REAL]


def _counts(per_position: list[int], f: float, total: int) -> list[int]:
    """Per-position counts scaled, summing to the scaled accepted count (the server's own invariant)."""
    out = [round(c * f) for c in per_position]
    if out:
        out[0] += total - sum(out)
    return out


def magnify(rec: dict[str, Any], k: int = MAGNIFY) -> None:
    """Every counter ``k`` times (as if each round had ``k`` times the prompts): the rates stay what the run
    measured, and a step of a few percent is a whole number of tokens at every position (the real counts,
    24 tokens at a position, cannot lose 3 % a commit)."""
    for counters in [rec, *rec.get("rounds", [])]:
        for key in ("drafted", "accepted", "drafts"):
            counters[key] *= k
        counters["per_position"] = [c * k for c in counters["per_position"]]


def scale_acceptance(rec: dict[str, Any], f: float) -> None:
    """The counters of every round as if the target had accepted ``f`` times the tokens it did."""
    for counters in [rec, *rec.get("rounds", [])]:
        accepted = round(counters["accepted"] * f)
        counters["per_position"] = _counts(counters["per_position"], f, accepted)
        counters["accepted"] = accepted
    drafted, drafts = rec["drafted"], rec["drafts"]
    rec["accept_rate"] = round(rec["accepted"] / drafted, 4)
    rec["accept_len"] = round(1 + rec["accepted"] / drafts, 4)
    rec["per_position_rate"] = [round(c / drafts, 4) for c in rec["per_position"]]
    rec["pos0_rate"] = rec["per_position_rate"][0]


def scale_speed(rec: dict[str, Any], f: float) -> None:
    """Every round of the speculative server ``f`` times as fast, the baseline server as it was."""
    speed = rec["speed"]
    speed["spec_tps"] = [round(x * f, 2) for x in speed["spec_tps"]]
    speed["speedups"] = [round(x * f, 4) for x in speed["speedups"]]
    for key in ("speedup_median", "speedup_spread"):
        speed[key] = round(speed[key] * f, 4)
    rec["decode_tps"] = round(rec["decode_tps"] * f, 2)
    rec["speedup"] = round(rec["speedup"] * f, 3)


def one_round_of_speed(rec: dict[str, Any]) -> None:
    """Only the first round's speed, as a run with --repeat 1 has: the gates then leave speed alone."""
    speed = rec["speed"]
    for key in ("spec_tps", "base_tps", "speedups"):
        speed[key] = speed[key][:1]
    speed.update(repeat=1, speedup_median=speed["speedups"][0], speedup_spread=0.0)


def history_docs(
    accept: list[float], speed: list[float] | None = None, *, speed_gated: bool = True
) -> list[dict[str, Any]]:
    """One document per commit, oldest first: commit ``i`` is real run ``i mod len(REAL)`` of the cases
    in CASES, with its own commit, run id and start time, acceptance scaled by ``accept[i]`` and speed by
    ``speed[i]``. ``speed_gated=False``: one round of speed only (see ``one_round_of_speed``)."""
    real = real_docs()
    out = []
    for i, f in enumerate(accept):
        doc = copy.deepcopy(real[i % len(real)])
        doc["binary"]["commit"] = commit(i)
        doc["run_id"] = f"h{i:02d}"
        doc["started"] = (START + dt.timedelta(hours=i)).isoformat(timespec="seconds")
        doc["cases"] = {name: doc["cases"][name] for name in CASES}
        for rec in doc["cases"].values():
            magnify(rec)
            scale_acceptance(rec, f)
            scale_speed(rec, (speed or FLAT)[i])
            if not speed_gated:
                one_round_of_speed(rec)
        out.append(doc)
    return out


def run_out_of_order(docs: list[dict[str, Any]], shas: list[str], seed: int = 3) -> list[dict[str, Any]]:
    """The documents at these commits, oldest first, their start times shuffled: runs recorded out of
    commit order, which only the mirror's ancestry puts right."""
    when = [doc["started"] for doc in docs]
    random.Random(seed).shuffle(when)
    for doc, sha, started in zip(docs, shas, when, strict=True):
        doc["binary"]["commit"], doc["started"] = sha, started
    return docs


def as_run(doc: dict[str, Any]) -> Run:
    return decode_run(doc, doc["run_id"])


def write(docs: list[dict[str, Any]], folder: Path) -> list[Path]:
    """Each document as ``<folder>/<run id>/results.json``."""
    out = []
    for doc in docs:
        path = folder / doc["run_id"] / "results.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
        out.append(path)
    return out
