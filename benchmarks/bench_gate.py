#!/usr/bin/env python3
"""The gate's error rates: how often it fails an unchanged binary (A/A) and how often it catches a known
slowdown (A/B), side by side with a plain fixed-threshold gate on the same runs.

    LLAMA_SERVER_BIN_PATH=build/bin/llama-server python benchmarks/bench_gate.py

    [--runs 6] [--cv 0.03] [--sizes 0.05,0.10,0.20] [--fake-repeat 4]   the fake server (0 runs: skip it)
    [--real-runs 5] [--real-cases synthetic] [--speed-runs 12]  the real CPU build (0 runs of both: skip it)
    [--drafter all,np2] [--slowdowns 1.5,2,4] [--np-slowdowns 2]   the real build's B runs
    [--repeat N] [--rtol 0.05] [--block-rtol 0.2] [--window 10] [--workdir DIR]

1. Fake server (tests/fakellama.py: a real HTTP server whose /completion timings are scripted): every
   request's time drawn with ``--cv`` × 1.22 around its mean (the speedup of a round, a ratio of two
   3-request sums, then varies by about ``--cv``), on both servers. A: ``--runs`` runs of
   ``specsuite run-tier`` over the synthetic cases in FAKE_CASES; B: as many runs with the speculative
   server slowed by each size.
2. Real CPU build (LLAMA_SERVER_BIN_PATH, else build/bin/llama-server) on ``--real-cases`` (the synthetic
   tier): A = ``--real-runs`` runs of the build; B = as many runs for each of ``--slowdowns``, the same
   build behind a wrapper that puts only the speculating server (a ``--spec-*`` flag) under a CPU quota of
   1/k of one CPU (cpuquota.py: cgroup v1 ``cpu.cfs_quota_us``, or v2 ``cpu.max``; needs root), so its
   counters stay identical and its decoding is about k times slower. Every server of A and B runs in a
   cgroup of its side (the baselines' and A's speculating servers at a whole CPU), so the two differ only in
   the quota. A quota is a cap: on a machine loaded past it the server gets less than its quota anyway and
   the slowdown shrinks; the table says how much slower the speculative server really decoded. ``--drafter``
   adds B runs whose slowdown is more work, not a cap, so any load keeps it (tests/slowdraft.py: the case's
   own target as its draft model, llama.cpp #25117's class; at np >= 2 only, #27342's); no root needed
   when no quota is asked for (``--slowdowns '' --np-slowdowns ''``). Runs are
   interleaved (A, B at each slowdown, A, ...) so that a machine whose load changes favours no side. Then
   ``--speed-runs`` more of each with the speed cases alone (the cases with their own ``repeat``), for more
   A/A pairs where it counts. The speed cases and the tiny cases are reported apart: the tiny models decode
   at thousands of tokens a second, where a round measures the machine more than the method. Each speed case
   (a sweep's members too) has rows of its own. ``--np-slowdowns``: B runs where only a speculating server
   of 2 slots or more is under the quota (speculation slower than plain only at np >= 2: llama.cpp #27342).
   Without ``--repeat`` every run-tier runs at its tier's default rounds (cases.schema.TIER_REPEAT, raised
   by a case's own ``repeat``): the error rates of the gate as a plain ``nox -s test_synthetic`` arms it.
Every comparison is one case of one run judged against the same case of another: A/A every later A run
against every earlier one, A/B every B run against every A run, by the relative gate
(``history.regress.regressions``: a speed drop beyond ``--rtol`` (or the case's own ``speed_rtol``,
``decode_rtol``), and the per-block overhead's rise beyond ``--block-rtol``, each with Mann–Whitney p < 0.05
over the rounds) and by the plain gate (a median speedup drop beyond rtol, as github-action-benchmark and
compare-llama-bench judge: no noise model). The drift gate judges each A run as the last of a window of the
A runs before it. The spread is gatecheck's (CV of the rounds within a run, of the run medians between runs)
for the speedup and the block ratio; the load is the 1-minute load average before each run (min-max). Prints
a markdown table and calibrate's gate check (tools/gatecheck.py) of the real A runs; ``--workdir`` keeps
every run's results.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from cpuquota import NoQuota, QuotaGroup, slowed_binary  # noqa: E402
from fakellama import fake_llama  # noqa: E402
from slowdraft import costly_drafter  # noqa: E402

from specsuite.cases.schema import TIER_REPEAT, load_cases, select_cases  # noqa: E402
from specsuite.common import paths, table  # noqa: E402
from specsuite.history import regress  # noqa: E402
from specsuite.results.document import Run, load_run  # noqa: E402
from specsuite.results.record import CaseRecord, finite  # noqa: E402
from specsuite.tools import gatecheck  # noqa: E402

FAKE_CASES = (
    "tiny-simple-random,tiny-simple-fixed,tiny-mtp-random,tiny-mtp-fixed,tiny-eagle3-fixed,tiny-dflash-fixed,"
    "tiny-dspark-fixed,tiny-dspark-random"
)  # n_max 3, floors at most accept len 3.875: the fake's counters (every draft accepted) pass them all
SPEED = ("speedup", "decode_tps", "block_ratio")
SPEED_RTOLS = {c.name: c.speed_rtol for c in load_cases() if c.speed_rtol is not None}
DECODE_RTOLS = {c.name: c.decode_rtol for c in load_cases() if c.decode_rtol is not None}
Pair = tuple[CaseRecord, CaseRecord]


@dataclass
class Measured:
    """One setup's runs: A, B per slowdown, and the load average before each run."""

    a: list[Run] = field(default_factory=list)
    b: dict[str, list[Run]] = field(default_factory=dict)
    loads: list[float] = field(default_factory=list)


def run_tier(
    binary: Path, cases: str, repeat: int | None, out: Path, loads: list[float] | None = None
) -> Run:
    """One run-tier of ``cases`` (``repeat`` None: the tier's default rounds), no history."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEC_") or k in ("SPEC_MODEL_DIR",)}
    env.update(LLAMA_SERVER_BIN_PATH=str(binary), SPEC_RESULTS_DIR=str(out), SPEC_NO_HISTORY="1")
    env.pop("GITHUB_STEP_SUMMARY", None)
    rounds = ["--repeat", str(repeat)] if repeat else []
    cmd = [sys.executable, "-m", "specsuite", "run-tier", cases, *rounds, "--allow-missing"]
    load = os.getloadavg()[0]
    if loads is not None:
        loads.append(load)
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if not (out / "results.json").is_file():
        raise SystemExit(
            f"run-tier wrote no results ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    print(f"  {out.name}: exit {proc.returncode} (load {load:.1f})", flush=True)
    return load_run(out)


def _samples(rec: CaseRecord) -> list[float]:
    return [v for v in (finite(x) for x in rec.speed_samples or []) if v is not None]


def _median_drop(cur: CaseRecord, base: CaseRecord) -> float | None:
    s_cur, s_base = _samples(cur), _samples(base)
    if not s_cur or not s_base:
        return None
    return 1 - statistics.median(s_cur) / statistics.median(s_base)


@dataclass
class Judged:
    pairs: int = 0
    speedup: int = 0  # pairs the relative gate failed on the speedup
    decode: int = 0  # ... on the speculative server's own decode tokens/s
    block: int = 0  # ... on the per-block overhead
    either: int = 0
    plain: int = 0  # pairs a plain median-drop gate at rtol would fail


def judge(pairs: Sequence[Pair], rtol: float, block_rtol: float) -> Judged:
    """The gate as run-tier applies it: with each case's own ``speed_rtol`` and ``decode_rtol``."""
    j = Judged(pairs=len(pairs))
    for cur, base in pairs:
        regs = regress.regressions(cur, base, rtol=rtol, block_rtol=block_rtol,
                                   speed_rtol=SPEED_RTOLS.get(cur.name),
                                   decode_rtol=DECODE_RTOLS.get(cur.name), baseline_commit="a")  # fmt: skip
        failed = {r.metric for r in regs}
        j.speedup += "speedup" in failed
        j.decode += "decode_tps" in failed
        j.block += "block_ratio" in failed
        j.either += bool(failed & set(SPEED))
        drop = _median_drop(cur, base)
        j.plain += drop is not None and drop > rtol
    return j


def _pairs(cur: Run, base: Run, names: set[str]) -> list[Pair]:
    """The cases of ``names`` both runs measured, as (current, baseline)."""
    both = [n for n in cur.cases if n in names and n in base.cases]
    return [(cur.cases[n], base.cases[n]) for n in both if cur.cases[n].measured and base.cases[n].measured]


def aa_pairs(runs: Sequence[Run], names: set[str]) -> list[Pair]:
    return [p for j, later in enumerate(runs) for earlier in runs[:j] for p in _pairs(later, earlier, names)]


def ab_pairs(a: Sequence[Run], b: Sequence[Run], names: set[str]) -> list[Pair]:
    return [p for rb in b for ra in a for p in _pairs(rb, ra, names)]


def _rate(hits: int, n: int) -> str:
    return f"{hits}/{n} ({100 * hits / n:.1f} %)" if n else "–"


def _recs(runs: Sequence[Run], names: set[str]) -> list[CaseRecord]:
    return [c for r in runs for n, c in r.cases.items() if n in names and c.measured]


def spec_slowdown(a: Sequence[Run], b: Sequence[Run], names: set[str]) -> str:
    """How much slower B's speculative server decoded (median tokens/s, B against A), and its speedup."""
    med = lambda runs, key: statistics.median(  # noqa: E731
        v for c in _recs(runs, names) if (v := finite(getattr(c, key))) is not None
    )
    try:
        tps, up = med(a, "decode_tps") / med(b, "decode_tps"), med(b, "speedup") / med(a, "speedup")
    except statistics.StatisticsError:
        return "–"
    return f"spec decode {tps:.2f}x slower, speedup x{up:.2f}"


def counters_kept(a: Sequence[Run], b: Sequence[Run], names: set[str]) -> str:
    """Whether every B run counted what the first A run counted (the quota changes time, not tokens)."""
    if not a:
        return "–"
    ref = {n: (c.drafted, c.accepted, c.drafts) for n, c in a[0].cases.items() if n in names}
    got = [(n, (c.drafted, c.accepted, c.drafts)) for r in b for n, c in r.cases.items() if n in ref]
    differ = sum(ref[n] != counts for n, counts in got)
    return "identical" if not differ else f"{differ} of {len(got)} differ"


def _cv(checks: Sequence[gatecheck.CaseCheck], within: str, between: str) -> str:
    def med(key: str) -> str:
        vals = [v for c in checks if (v := getattr(c, key)) is not None]
        return f"{statistics.median(vals) * 100:.1f} %" if vals else "–"

    return f"{med(within)} / {med(between)}"


def _implausible(runs: Sequence[Run], names: set[str]) -> str:
    recs = [c for r in runs for n, c in r.cases.items() if n in names and c.speed is not None]
    return _rate(sum(c.implausible_speed is not None for c in recs), len(recs))


def section(setup: str, got: Measured, names: set[str], args: argparse.Namespace) -> list[list[str]]:
    """The rows of one setup and case group: A/A, then A/B per slowdown."""
    a = [r for r in got.a if names & set(r.cases)]
    checks = gatecheck.check(a, sorted(names), args.rtol, args.window, args.block_rtol, SPEED_RTOLS,
                             DECODE_RTOLS)  # fmt: skip
    repeat = min((c.repeat for c in checks if c.repeat), default=0)
    load = f"{min(got.loads):.1f}-{max(got.loads):.1f}" if got.loads else "–"
    j = judge(aa_pairs(a, names), args.rtol, args.block_rtol)
    drift = _rate(sum(c.drift_alarms for c in checks), sum(c.windows for c in checks))
    spreads = [_cv(checks, "cv_within", "cv_between"), _cv(checks, "block_cv_within", "block_cv_between")]
    by = f"{j.speedup} / {j.decode} / {j.block}"
    rows = [[setup, str(repeat), "A/A (no change)", str(j.pairs), _rate(j.either, j.pairs), by,
             _rate(j.plain, j.pairs), drift, *spreads, _implausible(a, names), load]]  # fmt: skip
    for size, runs in got.b.items():
        b = [r for r in runs if names & set(r.cases)]
        j = judge(ab_pairs(a, b, names), args.rtol, args.block_rtol)
        what = f"A/B {size} ({spec_slowdown(a, b, names)}; counters {counters_kept(a, b, names)})"
        by = f"{j.speedup} / {j.decode} / {j.block}"
        rows.append([setup, str(repeat), what, str(j.pairs), _rate(j.either, j.pairs), by,
                     _rate(j.plain, j.pairs), "", "", "", _implausible(b, names), ""])  # fmt: skip
    return rows


def fake_part(args: argparse.Namespace, work: Path) -> list[list[str]]:
    print(
        f"fake server: {args.runs} A runs and {args.runs} B runs per size, repeat {args.fake_repeat}",
        flush=True,
    )
    per_request = args.cv * (3 / 2) ** 0.5  # a round's speedup: a ratio of two sums of 3 requests
    fake = lambda folder, slow: fake_llama(  # noqa: E731
        work / folder, spec_ms_per_token=10.0 / (1 - slow), base_ms_per_token=20.0, ms_cv=per_request,
        drafted=12, accepted=12, drafts=4, per_pos=[4, 4, 4],
    )  # fmt: skip
    got = Measured()
    a_bin = fake("fake-a", 0.0)
    got.a = [
        run_tier(a_bin, FAKE_CASES, args.fake_repeat, work / f"fake-a-{i}", got.loads)
        for i in range(args.runs)
    ]
    for size in [float(s) for s in args.sizes.split(",")]:
        b_bin = fake(f"fake-b{size:g}", size)
        got.b[f"slower by {size * 100:g} %"] = [
            run_tier(b_bin, FAKE_CASES, args.fake_repeat, work / f"fake-b{size:g}-{i}", got.loads)
            for i in range(args.runs)
        ]
    return section(f"fake server (CV {args.cv * 100:g} % set)", got, set(FAKE_CASES.split(",")), args)


def _interleaved(binary: Path, slowed: dict[str, tuple[str, Path]], cases: str, n: int, tag: str, work: Path,
                 got: Measured, args: argparse.Namespace) -> None:  # fmt: skip
    """``slowed``: per B setup's label, (a short tag for its folders, its binary)."""
    for i in range(n):  # A, then each B: a machine whose load changes over time favours no side
        got.a.append(run_tier(binary, cases, args.repeat, work / f"{tag}-a-{i}", got.loads))
        for label, (short, exe) in slowed.items():
            runs = got.b.setdefault(label, [])
            runs.append(run_tier(exe, cases, args.repeat, work / f"{tag}-b{short}-{i}", got.loads))


def _sizes(text: str) -> list[float]:
    return [float(s) for s in text.split(",") if s.strip()]


def real_part(args: argparse.Namespace, work: Path) -> tuple[list[list[str]], Measured, list[str]]:
    binary = paths.server_binary()  # LLAMA_SERVER_BIN_PATH, else build/bin
    selected = select_cases(load_cases(), args.real_cases)
    speed = [c.name for c in selected if c.repeat > 1]
    tiny = {c.name for c in selected} - set(speed)
    got = Measured()
    with contextlib.ExitStack() as stack:
        group = lambda name, share: stack.enter_context(  # noqa: E731
            QuotaGroup(f"specsuite-bench-{os.getpid()}-{name}", share)
        )
        slowed: dict[str, tuple[str, Path]] = {}
        plain = binary
        if _sizes(args.slowdowns) or _sizes(args.np_slowdowns):  # a quota: every side in a group
            base = group("base", 1.0)  # every baseline server: a whole CPU, as in the A runs
            whole = group("spec-1x", 1.0)
            plain = slowed_binary(binary, whole, base, work / "slow-1x")  # A: the same groups
        for setup in [s.strip() for s in args.drafter.split(",") if s.strip()]:
            np = {"all": 1, "np2": 2}[setup]
            exe = costly_drafter(work / f"drafter-{setup}", plain, min_parallel=np)
            where = "at every np" if np == 1 else "at np >= 2 only"
            slowed[f"drafter as costly as the target {where} (its own target drafts)"] = (f"d{setup}", exe)
        for k in _sizes(args.slowdowns):
            exe = slowed_binary(binary, group(f"spec-{k:g}x", 1 / k), base, work / f"slow-{k:g}x")
            slowed[f"spec {k:g}x slower (quota 1/{k:g} CPU)"] = (f"{k:g}x", exe)
        for k in _sizes(args.np_slowdowns):
            exe = slowed_binary(binary, group(f"np-{k:g}x", 1 / k), base, work / f"np-{k:g}x", 2, whole)
            slowed[f"spec {k:g}x slower at np >= 2 only (quota 1/{k:g} CPU there)"] = (f"np{k:g}x", exe)
        print(f"real CPU build: {args.real_runs} A runs of {args.real_cases} and as many of each B "
              f"({'; '.join(slowed)}), then {args.speed_runs} of {','.join(speed)}", flush=True)  # fmt: skip
        _interleaved(plain, slowed, args.real_cases, args.real_runs, "real", work, got, args)
        if speed and args.speed_runs:
            _interleaved(plain, slowed, ",".join(speed), args.speed_runs, "speed", work, got, args)
    cores = os.cpu_count()
    rows = [
        row for name in speed for row in section(f"real CPU build, {cores} cores: {name}", got, {name}, args)
    ]
    if tiny:
        rows += section(f"real CPU build, {cores} cores: the {len(tiny)} tiny cases", got, tiny, args)
    return rows, got, sorted(tiny | set(speed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--runs", type=int, default=6, help="runs of A and of each B on the fake server (0: none)"
    )
    ap.add_argument("--cv", type=float, default=0.03, help="the fake's speedup spread per round")
    ap.add_argument("--sizes", default="0.05,0.10,0.20", help="the fake's slowdowns")
    ap.add_argument(
        "--real-runs", type=int, default=5, help="runs of A and of each B on the real build (0: none)"
    )
    ap.add_argument("--real-cases", default="synthetic", help="the tier (or cases) on the real build")
    ap.add_argument(
        "--speed-runs", type=int, default=12, help="more runs of A and B with the speed cases alone"
    )
    ap.add_argument(
        "--drafter",
        default="all,np2",
        help="B runs whose drafter is the target itself (tests/slowdraft.py): at every np (all), at np >= 2 "
        "only (np2); '': none",
    )
    ap.add_argument("--slowdowns", default="1.5,2,4", help="the speculating server's slowdowns (CPU quota)")
    ap.add_argument(
        "--np-slowdowns", default="2", help="slowdowns of a speculating server at np >= 2 only ('': none)"
    )
    ap.add_argument(
        "--repeat", type=int, help="A-B-B-A rounds per case on the real build (default: each tier's own)"
    )
    ap.add_argument(
        "--fake-repeat",
        type=int,
        default=TIER_REPEAT["compact"],
        help="rounds per case on the fake server (default: the GPU tiers' own, which it stands in for)",
    )
    ap.add_argument("--rtol", type=float, default=0.05)
    ap.add_argument("--block-rtol", type=float, default=regress.BLOCK_RTOL)
    ap.add_argument("--window", type=int, default=10, help="the drift gate's window")
    ap.add_argument("--workdir", type=Path, help="keep the runs here (default: a temporary folder)")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-gate-"))
    rows: list[list[str]] = []
    if args.runs:
        rows += fake_part(args, work)
    real: tuple[list[list[str]], Measured, list[str]] | None = None
    if args.real_runs or args.speed_runs:
        try:
            real = real_part(args, work)
        except NoQuota as exc:
            raise SystemExit(f"bench_gate: no CPU quota for the slowed runs: {exc}") from None
        rows += real[0]
    header = ("setup", "repeat", "comparison", "pairs", "gate fails (a speed metric)",
              "… by speedup / decode tps / block ratio", f"plain {args.rtol * 100:g} % gate fails",
              "drift gate fails",
              "speedup CV in run / between", "block ratio CV in run / between", "implausible speed",
              "load")  # fmt: skip
    print(table.render(header, rows, markdown=True))
    if real is not None:
        checks = gatecheck.check(real[1].a, real[2], args.rtol, args.window, args.block_rtol, SPEED_RTOLS,
                                 DECODE_RTOLS)  # fmt: skip
        print("\ncalibrate's gate check of the real A runs:\n" + gatecheck.render(checks, args.rtol))
    print(f"runs kept in {work}")


if __name__ == "__main__":
    main()
