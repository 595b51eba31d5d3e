"""Calibrate the floors of cases.toml from repeated runs of a tier.

Per case the new floors are the minimum over the runs minus a margin (3 percentage points of accept rate,
0.2 of accept length), written with tomlkit so the file keeps its comments and layout, with provenance in a
``[case.calibration]`` table. A case whose runs spread wider than its margin is UNSTABLE: its floor would
flake. Its floors are still written (they are the best estimate there is and the diff shows them), but the
command exits 1 unless ``--allow-unstable``, so a calibration that cannot be trusted never passes silently.
The same runs then measure the gates' error rates (``gatecheck``): false alarms, speed spread, and the
smallest speed drop caught. A speed floor (``min_speedup``, and every other floor of a metric the registry
gates over rounds, results.metrics: ``min_prefill_ratio``) is written only where the case has its key.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import msgspec
import tomlkit
from tomlkit.items import Comment, Float, Table, Trivia, Whitespace

from specsuite.cases.schema import GPU_TIERS, Case, parse_cases, read_text, select_cases
from specsuite.common import atomic, paths, settings
from specsuite.common.argtypes import CommandParser, positive_int
from specsuite.common.errors import UserError
from specsuite.llamacpp.posargs import split_posargs
from specsuite.results import checks, metrics
from specsuite.results.document import Run, load_run
from specsuite.results.record import CaseRecord, finite, is_finite
from specsuite.tools import gatecheck

RATE_MARGIN = 0.03
LEN_MARGIN = 0.2
# Speed is noisier than acceptance (clocks, other jobs): the floor is the slowest observed median speedup
# minus 20 % of it, written only for cases that opt into a speed floor (a min_speedup key). The same rule
# for the other floors of speeds the registry names (results.metrics: min_prefill_ratio).
SPEED_MARGIN = 0.2
_SPEED_FLOORS = tuple(
    m
    for m in metrics.REGISTRY
    if m.floor and m.gate == "rounds" and m.higher_is_better and m.name != "speedup"
)  # min_speedup has rules of its own (GPU_MIN_SPEEDUP)
# On the GPU tiers speculation must never be slower than plain decoding: their speed floor is at least 1.0,
# whatever a slow calibration run measured.
GPU_MIN_SPEEDUP = 1.0
# A case that failed only because it fell below its old floor still measured real numbers: exactly the
# runs a recalibration is for. Any other failure (spec inactive, crash, wrong tokens) says nothing.
_USABLE_FAILURES = {"floor"}


@dataclass
class CaseCalibration:
    name: str
    rates: list[float] = field(default_factory=list)
    lens: list[float] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)  # median speedup of each run (when measured)
    run_ids: list[str] = field(default_factory=list)  # the runs the floors come from
    excluded: list[str] = field(default_factory=list)  # "run-id: why", one per unusable run
    tier: str = ""  # the case's tier: a GPU tier's speed floor never goes below GPU_MIN_SPEEDUP
    # per prompt category: (accept rates, accept lengths), one of each per usable run that measured it
    categories: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    # each other speed with a floor (_SPEED_FLOORS), by metric: its value in each run that measured it
    speeds: dict[str, list[float]] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        """The runs observed (a sweep's table: each run once, however many of its members it holds)."""
        return len(self.run_ids)

    def spread(self, values: list[float]) -> float:
        return max(values) - min(values)

    @property
    def rate_floor(self) -> float:
        return _floor4(max(0.0, min(self.rates) - RATE_MARGIN))

    @property
    def len_floor(self) -> float:
        return _floor4(max(0.0, min(self.lens) - LEN_MARGIN))

    @property
    def measured_speed_floor(self) -> float | None:
        """The slowest median speedup minus the margin, before any clamp."""
        if len(self.speedups) != self.runs or not self.speedups:
            return None  # a run without a speed measurement: keep the old floor
        return _floor4(min(self.speedups) * (1 - SPEED_MARGIN))

    @property
    def speed_floor(self) -> float | None:
        measured = self.measured_speed_floor
        if measured is not None and self.tier in GPU_TIERS:
            return max(GPU_MIN_SPEEDUP, measured)
        return measured

    @property
    def speed_clamped(self) -> bool:
        return self.speed_floor != self.measured_speed_floor

    def floor_of(self, metric: str) -> float | None:
        """Another speed's floor (_SPEED_FLOORS) by the speedup's rule; None unless every run measured it."""
        got = self.speeds.get(metric, [])
        return _floor4(min(got) * (1 - SPEED_MARGIN)) if got and len(got) == self.runs else None

    def category_floors(self) -> dict[str, dict[str, float]]:
        """The same rule per category, for the categories every usable run measured (both numbers)."""
        return {
            name: {"min_accept_rate": _floor4(max(0.0, min(rates) - RATE_MARGIN)),
                   "min_accept_len": _floor4(max(0.0, min(lens) - LEN_MARGIN))}
            for name, (rates, lens) in self.categories.items()
            if len(rates) == len(lens) == self.runs
        }  # fmt: skip

    @property
    def unstable(self) -> list[str]:
        why = []
        if self.spread(self.rates) > RATE_MARGIN + 1e-12:
            why.append(f"accept rate spread {self.spread(self.rates):.4f} > margin {RATE_MARGIN}")
        if self.spread(self.lens) > LEN_MARGIN + 1e-12:
            why.append(f"accept len spread {self.spread(self.lens):.4f} > margin {LEN_MARGIN}")
        return why


def by_table(cals: dict[str, CaseCalibration], sweeps: dict[str, str]) -> dict[str, CaseCalibration]:
    """A sweep's members as the one table they come from (``sweeps``: member -> sweep name): every member's
    runs together, so that the floors written hold at every np of the sweep."""
    out: dict[str, CaseCalibration] = {}
    for name, cal in cals.items():
        table = sweeps.get(name, name)
        into = out.setdefault(table, CaseCalibration(table, tier=cal.tier))
        into.rates += cal.rates
        into.lens += cal.lens
        into.speedups += cal.speedups
        for metric, got in cal.speeds.items():
            into.speeds.setdefault(metric, []).extend(got)
        # each run once however many members it holds (the most any member saw of a run id: two machines'
        # runs may share one)
        times = Counter(into.run_ids) | Counter(cal.run_ids)
        into.run_ids = [i for i in dict.fromkeys([*into.run_ids, *cal.run_ids]) for _ in range(times[i])]
        into.excluded += [f"{name}: {why}" if table != name else why for why in cal.excluded]
    return out


def _floor4(x: float) -> float:
    """Round down to 4 decimals (a floor must never round up past what was observed)."""
    return math.floor(round(x * 10_000, 6)) / 10_000


def _unusable_reason(rec: CaseRecord) -> str | None:
    if rec.status != "passed" and not (rec.status == "failed" and rec.reason in _USABLE_FAILURES):
        first_line = (rec.message or "").strip().splitlines()[:1]
        return f"{rec.status} ({rec.reason or 'no reason'}): {''.join(first_line)}".rstrip(": ")
    if not is_finite(rec.accept_rate) or not is_finite(rec.accept_len):
        return "no accept rate/len recorded (nothing drafted?)"
    return None


def collect(
    runs: list[Run], names: list[str] | None = None, tiers: dict[str, str] | None = None
) -> dict[str, CaseCalibration]:
    """Gather each case's observations over the runs; ``names`` limits (and orders) the cases; ``tiers``
    (the cases file's, by name) overrides the tier a run recorded."""
    out: dict[str, CaseCalibration] = {}
    for run in runs:
        for name, rec in run.cases.items():
            if names is not None and name not in names:
                continue
            cal = out.setdefault(name, CaseCalibration(name, tier=(tiers or {}).get(name, rec.tier)))
            if why := _unusable_reason(rec):
                cal.excluded.append(f"{run.run_id or '?'}: {why}")
                continue
            cal.run_ids.append(run.run_id or "?")
            cal.rates.append(finite(rec.accept_rate) or 0.0)  # finite: _unusable_reason checked
            cal.lens.append(finite(rec.accept_len) or 0.0)
            if (speedup := finite(rec.speedup)) is not None:
                cal.speedups.append(speedup)
            for m in _SPEED_FLOORS:
                if (value := m.of(rec)) is not None:
                    cal.speeds.setdefault(m.name, []).append(value)
            _collect_categories(cal, rec)
    for name in names or []:
        tier = (tiers or {}).get(name, "")
        out.setdefault(name, CaseCalibration(name, excluded=["not in any run's results"], tier=tier))
    return out


def check_runs(runs: list[Run], names: list[str], selector: str | None, cases: dict[str, Case]) -> None:
    """Refuse (UserError) runs a floor must not come from: one run given twice (by run id, or the same case
    records under another id: a spread of 0 would hide any instability), runs of another tier or of
    several, runs that measured a case otherwise than the cases file says (another cases file), or with a
    number no server reports (an accept rate of -5 would write a floor of 0)."""
    seen: dict[str, str] = {}
    ids: set[tuple[str, str, str | None]] = set()
    for run in runs:
        key = (run.run_id, run.device_name, run.binary.sha256)  # two machines may start in the same second
        if key in ids:
            raise UserError(f"calibrate: run {run.run_id} is given twice; give each run once")
        ids.add(key)
        content = hashlib.sha256(msgspec.json.encode(run.cases)).hexdigest()
        if content in seen:
            raise UserError(
                f"calibrate: run {run.run_id} holds the same case records as run {seen[content]}: one run "
                "copied; give each run once"
            )
        seen[content] = run.run_id
    _check_tiers(runs, names, selector, {n: c.tier for n, c in cases.items()})
    for run in runs:
        for name in names:
            if (rec := run.cases.get(name)) is None:
                continue
            if whys := checks.record_problems(rec):  # the same checks as `history import`
                raise UserError(f"calibrate: run {run.run_id}: case {name!r}: {whys[0]}; not a measurement")
            if name in cases and (why := _measured_otherwise(rec, cases[name])):
                raise UserError(
                    f"calibrate: run {run.run_id}: case {name!r} was measured with {why}: a run of another "
                    "cases file; calibrate from runs of this one"
                )


def _measured_otherwise(rec: CaseRecord, case: Case) -> str | None:
    """What the record says the case ran with, where it differs from the case (the method and target only
    where the record has them: schema-1 records have no method)."""
    ours = {"method": case.method, "n_max": case.n_max, "target": case.target, "draft": case.draft}
    theirs = {
        "method": rec.method or None,
        "n_max": rec.n_max,
        "target": rec.target or None,
        "draft": rec.draft,
    }
    for key, value in theirs.items():
        if (value is not None or key in ("n_max", "draft")) and value != ours[key]:
            return f"{key} {value!r}; cases.toml has {ours[key]!r}"
    return None


def _check_tiers(runs: list[Run], names: list[str], selector: str | None, tiers: dict[str, str]) -> None:
    """One tier for every run; with ``--tier``, the tier selected (for case names: their tiers)."""
    found = sorted({str(r.tier) for r in runs})
    if len(found) > 1:
        raise UserError(f"calibrate: the runs are of several tiers ({', '.join(found)}); give runs of one")
    allowed = {selector, *(tiers[n] for n in names if n in tiers)} if selector else None
    for run in runs:
        if allowed is not None and run.tier not in allowed:
            raise UserError(f"calibrate: run {run.run_id} is of the {run.tier} tier, not {selector}")
    for run in runs:
        for name in names:
            rec = run.cases.get(name)
            if rec is not None and rec.tier and name in tiers and rec.tier != tiers[name]:
                raise UserError(
                    f"calibrate: run {run.run_id}: case {name!r} ran in the {rec.tier} tier; cases.toml has "
                    f"it in {tiers[name]}"
                )


def provenance(runs: list[Run], across_machines: bool = False) -> dict[str, str]:
    """The commit and device every run shares; calibrating across binaries or devices is refused.

    A binary's sha256 identifies it; the commit is compared by prefix because the recorded form may be
    the short (--version) or the full hash of the same commit. ``across_machines``: builds of one commit
    on several machines (a CPU tier's numbers depend on the CPU's vector ISA), so that the floors hold on
    each; the commit must still be one, and every machine is named.
    """
    commits = sorted({r.binary.key or "unknown" for r in runs}, key=len)
    shas = {r.binary.sha256 for r in runs} - {None}
    devices = {r.device_name for r in runs}
    shas_text = sorted(str(s) for s in shas)
    same_commit = all(commits[-1].startswith(c) for c in commits)
    if not same_commit:
        raise UserError(f"the runs differ in llama.cpp commit {commits}; calibrate from runs of one commit")
    if not across_machines and (len(shas) > 1 or len(devices) > 1):
        raise UserError(
            f"the runs differ in binary sha256 {shas_text} or device {sorted(devices)}; calibrate from runs "
            "of one binary on one machine, or --across-machines for builds of one commit on several"
        )
    return {"commit": commits[-1], "device": "; ".join(sorted(devices))}


def _set_keeping_trailer(container: Any, key: str, value: Any) -> None:
    """Set ``key`` in a tomlkit container; a new key goes before the container's trailing comments.

    tomlkit attaches the comments and blank lines that precede the next ``[[case]]`` to the end of the
    previous table, so a plain append would slide new keys under a comment meant for the next case.
    tomlkit has no public insert-before, hence the trailing body items are popped and put back.
    """
    if key in container:
        container[key] = value
        return
    body = container.body
    trailer = []
    while body and body[-1][0] is None and isinstance(body[-1][1], (Comment, Whitespace)):
        trailer.append(body.pop()[1])
    container.append(key, value)
    for item in reversed(trailer):
        container.append(None, item)


def _collect_categories(cal: CaseCalibration, rec: CaseRecord) -> None:
    for name, c in rec.categories.items():
        rate, length = finite(c.accept_rate), finite(c.accept_len)
        if rate is not None and length is not None:  # a category that drafted nothing has no floor
            rates, lens = cal.categories.setdefault(name, ([], []))
            rates.append(rate)
            lens.append(length)


def _write_category_floors(table: Any, cal: CaseCalibration) -> None:
    """``category_floors = { NAME = { min_accept_rate = ..., min_accept_len = ... }, ... }``."""
    floors = cal.category_floors()
    if not floors:
        return
    outer = tomlkit.inline_table()
    for name, values in floors.items():
        inner = tomlkit.inline_table()
        inner.update({k: _float4(v) for k, v in values.items()})
        outer[name] = inner
    _set_keeping_trailer(table.value, "category_floors", outer)


def _float4(x: float) -> Float:
    """A TOML float written with 4 decimals (0.9700, not 0.97), as the floors in cases.toml are."""
    return Float(x, Trivia(), f"{x:.4f}")


def _rounded(values: list[float]) -> dict[str, float]:
    lo, hi = min(values), max(values)
    return {"min": round(lo, 4), "max": round(hi, 4), "spread": round(hi - lo, 4)}


def apply(text: str, cals: dict[str, CaseCalibration], prov: dict[str, str], date: str) -> str:
    """Return the cases file text with new floors and provenance for every calibrated case."""
    doc = tomlkit.parse(text)
    tables = {str(t.get("name")): t for t in doc.get("case", [])}
    for name, cal in cals.items():
        if not cal.runs or name not in tables:
            continue
        table = tables[name]
        _set_keeping_trailer(table.value, "min_accept_rate", _float4(cal.rate_floor))
        _set_keeping_trailer(table.value, "min_accept_len", _float4(cal.len_floor))
        if "min_speedup" in table and cal.speed_floor is not None:
            _set_keeping_trailer(table.value, "min_speedup", _float4(cal.speed_floor))
        for m in _SPEED_FLOORS:
            if m.floor and m.floor in table and (floor := cal.floor_of(m.name)) is not None:
                _set_keeping_trailer(table.value, m.floor, _float4(floor))
        _write_category_floors(table, cal)
        if "uncalibrated" in table:  # floors measured: no longer report-only
            del table["uncalibrated"]
        fields: dict[str, Any] = {
            "date": date,
            "commit": prov["commit"],
            "device": prov["device"],
            "runs": cal.runs,
            "run_ids": cal.run_ids,
            "accept_rate": _rounded(cal.rates),
            "accept_len": _rounded(cal.lens),
            **({"speedup": _rounded(cal.speedups)} if cal.speedups else {}),
            **{metric: _rounded(got) for metric, got in cal.speeds.items() if got},
        }
        sub = table.get("calibration")
        if not isinstance(sub, Table):
            sub = tomlkit.table()
            _set_keeping_trailer(table.value, "calibration", sub)
        for key, value in fields.items():
            if isinstance(value, dict):
                inline = tomlkit.inline_table()
                inline.update(value)
                value = inline
            _set_keeping_trailer(sub.value, key, value)
    return tomlkit.dumps(doc)


def machine_groups(runs: list[Run]) -> list[list[Run]]:
    """The runs per machine (device and binary): a floor must be stable on each machine, not across them."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.device_name, str(r.binary.sha256)), []).append(r)
    return list(groups.values())


def _report(
    cals: dict[str, CaseCalibration], old: dict[str, Any], per_machine: list[dict[str, CaseCalibration]]
) -> list[str]:
    """Print one line per case; return the UNSTABLE messages (a spread within one machine's runs)."""
    unstable = []
    for name, cal in cals.items():
        for why in cal.excluded:
            print(f"  {name}: run not used: {why}")
        if not cal.runs:
            print(f"NOT CALIBRATED {name}: no usable run (floors kept)")
            continue
        prev = old.get(name, {})
        print(
            f"{name}: {cal.runs} run(s); accept rate {min(cal.rates):.4f}..{max(cal.rates):.4f} -> "
            f"floor {cal.rate_floor:.4f} (was {prev.get('min_accept_rate')}); accept len "
            f"{min(cal.lens):.4f}..{max(cal.lens):.4f} -> floor {cal.len_floor:.4f} "
            f"(was {prev.get('min_accept_len')})"
        )
        if prev.get("min_speedup") is not None and cal.speed_floor is not None:
            print(_speed_line(cal, prev["min_speedup"]))
        for m in _SPEED_FLOORS:
            if prev.get(m.floor) is not None and (floor := cal.floor_of(m.name)) is not None:
                got = cal.speeds[m.name]
                print(f"  {name}: {m.label} {min(got):.4f}..{max(got):.4f} -> floor {floor:.4f} "
                      f"(was {prev[m.floor]})")  # fmt: skip
        if cal.runs == 1:
            print(f"  {name}: a single run says nothing about stability; use --runs 3")
        if len(per_machine) > 1 and cal.unstable:
            print(f"  {name}: the machines differ ({'; '.join(cal.unstable)}): the floor holds on each")
        reasons = [r for m in per_machine if name in m for r in m[name].unstable]
        if reasons:
            msg = f"UNSTABLE {name}: {'; '.join(dict.fromkeys(reasons))}: this floor would flake"
            print(msg)
            unstable.append(msg)
    return unstable


def _speed_line(cal: CaseCalibration, was: Any) -> str:
    line = (
        f"  {cal.name}: speedup {min(cal.speedups):.4f}..{max(cal.speedups):.4f} -> floor "
        f"{cal.speed_floor:.4f} (was {was})"
    )
    if cal.speed_clamped:
        line += (
            f"; CLAMPED to {GPU_MIN_SPEEDUP:.4f} from {cal.measured_speed_floor:.4f}: on the {cal.tier} tier "
            "speculation must not be slower than plain decoding"
        )
    return line


def _run_tier_n(tier: str, runs: int, tier_args: list[str]) -> list[Path]:
    # the suite's runner, imported here: --from-results needs none of it
    # defers requests, urllib3
    from specsuite.suite.tier import RunFolder, run_tier
    from specsuite.suite.tier import parser as tier_parser

    # Calibration runs are not history: a floor must not be judged against the run that sets it.
    args, pytest_args = tier_parser().parse_known_args([tier, "--no-history", *tier_args])
    out = []
    for i in range(1, runs + 1):
        print(f"calibration run {i}/{runs}: tier {tier}", flush=True)
        # results/<time>-calibrate-<tier>-<i>, claimed for this run alone (a calibration started in the same
        # second elsewhere gets another folder)
        folder = RunFolder(None)
        code = run_tier(args, folder, pytest_args, f"calibrate-{tier}-{i}")
        run_dir = folder.claim("")  # the folder run_tier claimed
        if not (run_dir / "results.json").is_file():
            raise UserError(
                f"calibration run {i} (exit {code}) wrote no {run_dir / 'results.json'}; see its log"
            )
        out.append(run_dir)
    return out


def parser() -> CommandParser:
    p = CommandParser("calibrate", "Run a tier N times and write floors (min - margin) into cases.toml.")
    p.add_argument("--tier", help="tier to run and calibrate (smoke, synthetic, compact, nightly, all)")
    p.add_argument(
        "--runs", type=positive_int, default=3, help="number of runs, each with a fresh server (default 3)"
    )
    p.add_argument("--dry-run", action="store_true", help="print the diff of cases.toml, write nothing")
    p.add_argument("--cases", type=Path, default=paths.CASES_FILE, help="cases file (default: cases.toml)")
    p.add_argument(
        "--from-results",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="calibrate from these results/<run> folders (or results.json files) instead of running",
    )
    p.add_argument("--allow-unstable", action="store_true", help="exit 0 even when a case is UNSTABLE")
    p.add_argument(
        "--across-machines",
        action="store_true",
        help="the runs are builds of one commit on several machines: floors that hold on each",
    )
    return p


def _validated(
    text: str, cals: dict[str, CaseCalibration], prov: dict[str, str], date: str
) -> tuple[str, list[str]]:
    """The new text, never one the suite would reject: a case whose floors fail the suite's own
    validation (e.g. accept len above n_max + 1) keeps its old floors and is reported NOT WRITTEN."""
    rejected: list[str] = []
    while True:
        new = apply(text, cals, prov, date)
        try:
            parse_cases(new)
            return new, rejected
        except UserError as exc:
            bad = next((n for n, c in cals.items() if c.runs and f"[[case]] {n!r}:" in str(exc)), None)
            if bad is None:
                raise UserError(
                    f"calibrate: the new floors do not validate, nothing written: {exc}"
                ) from None
            print(f"NOT WRITTEN {bad}: {exc}")
            rejected.append(bad)
            cals = {n: c for n, c in cals.items() if n != bad}


def _gate_check(runs: list[Run], names: list[str], cases: list[Any]) -> None:
    """The gates' error rates on these runs of one commit, at the configured rtol and drift window (and a
    case's own tolerances: speed_rtol, decode_rtol, prefill_rtol)."""
    opts = settings.load()
    own = {c.name: c.rtols for c in cases}
    checks = gatecheck.check(runs, names, opts.rtol, opts.drift_window, opts.block_rtol, rtols=own)
    print(gatecheck.render(checks, opts.rtol), flush=True)


def _case_names(cases: list[Any], tier: str | None) -> list[str]:
    """Cases with floors (a tier's, or all); cases that must not draft have none to calibrate."""
    chosen = select_cases(cases, tier) if tier else cases
    return [c.name for c in chosen if not c.expect_no_drafts]


def main(argv: list[str]) -> int:
    rest, _ = split_posargs(argv)  # nox hands build flags to every session
    args, pytest_args = parser().parse_known_args(rest)
    if not args.from_results and not args.tier:
        raise UserError("calibrate: give --tier TIER to run, or --from-results DIR... to use finished runs")
    text = read_text(args.cases)

    cases = parse_cases(text)
    names = _case_names(cases, args.tier) if args.tier else None  # before running: a bad tier fails fast
    if pytest_args:
        print(f"passing to pytest: {' '.join(pytest_args)}")
    run_dirs = args.from_results or _run_tier_n(args.tier, args.runs, pytest_args)
    runs = [load_run(d) for d in run_dirs]
    if names is None:  # --from-results without --tier: the cases the runs hold
        known = _case_names(cases, None)
        names = [n for n in dict.fromkeys(k for r in runs for k in r.cases) if n in known]
    if not names:
        raise UserError("calibrate: no case to calibrate (check --tier and the results given)")

    tiers: dict[str, str] = {c.name: c.tier for c in cases}
    prov = provenance(runs, args.across_machines)  # one commit (and binary): before any floor is computed
    check_runs(runs, names, args.tier, {c.name: c for c in cases})
    cals = collect(runs, names, tiers)
    old = {c.name: c.floors for c in cases}
    groups = machine_groups(runs) if args.across_machines else [runs]
    per_machine = [collect(g, names, tiers) for g in groups] if len(groups) > 1 else [cals]
    unstable = _report(cals, old, per_machine)
    _gate_check(runs, names, cases)
    if not any(c.runs for c in cals.values()):
        raise UserError("calibrate: no case had a usable run; nothing written")
    date = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    sweeps = {c.name: c.table for c in cases if c.table != c.name}  # a sweep's or a KV axis's members
    new, rejected = _validated(text, by_table(cals, sweeps), prov, date)
    diff = difflib.unified_diff(
        text.splitlines(keepends=True), new.splitlines(keepends=True), str(args.cases), f"{args.cases} (new)"
    )
    sys.stdout.writelines(diff)
    if not args.from_results:
        print(f"runs kept in: {' '.join(map(str, run_dirs))} (re-use them with --from-results)")
    if args.dry_run:
        print("dry run: nothing written")
    elif new != text:
        atomic.write_text(args.cases, new)
        print(f"wrote {args.cases}")
    if rejected:
        done = "shown" if args.dry_run else "written"
        print(
            f"{len(rejected)} case(s) NOT WRITTEN (see above); the other floors were {done}", file=sys.stderr
        )
        return 1
    if unstable and not args.allow_unstable:
        done = "floors shown, not written" if args.dry_run else "floors written anyway"
        print(f"{len(unstable)} case(s) UNSTABLE ({done}); --allow-unstable to accept", file=sys.stderr)
        return 1
    return 0
