#!/usr/bin/env python3
"""The gate's error rates: how often it fails an unchanged binary (A/A) and how often it catches a known
slowdown (A/B), side by side with a plain fixed-threshold gate on the same runs.

    python benchmarks/bench_gate.py [--runs 6] [--repeat 4] [--cv 0.03] [--sizes 0.05,0.10,0.20]
                                    [--real-runs 4] [--real-cases ngram-mod,draft-simple] [--workdir DIR]

1. Fake server (tests/fakellama.py: a real HTTP server whose /completion timings are scripted): every
   request's time drawn with ``--cv`` × 1.22 around its mean (the speedup of a round, a ratio of two
   3-request means, then varies by about ``--cv``), on both servers. A: ``--runs`` runs of
   ``specsuite run-tier`` over the synthetic cases in FAKE_CASES (each case one more measurement of the same
   fake); B: as many runs with the speculative server slowed by each size.
2. Real CPU build (LLAMA_SERVER_BIN_PATH, else build/bin/llama-server) on the smoke tier's
   ``--real-cases``: A = the build as it is, B = the same build with the speculative server held to
   1 thread (a wrapper adds ``--threads 1``, the baseline server keeps the default): a real slowdown
   of whatever size this machine gives it.
Every comparison is one case of one run judged against the same case of another: A/A every later A run
against every earlier one, A/B every B run against every A run, by the relative gate
(``history.regress.regressions`` at ``--rtol``: Mann–Whitney p < 0.05 over the rounds and a median drop
beyond rtol) and by the plain gate (a median drop beyond rtol, as github-action-benchmark and
compare-llama-bench judge: no noise model). The drift gate judges each A run as the last of a window of
the A runs before it. The spread is gatecheck's: CV of the speedup rounds within a run and of the run
medians between runs, and the drop the gate catches in 95 % of comparisons at that spread.
Prints a markdown table; ``--workdir`` keeps every run's results.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fakellama import fake_llama  # noqa: E402

from specsuite.common import paths, table  # noqa: E402
from specsuite.history import regress  # noqa: E402
from specsuite.results.document import Run, load_run  # noqa: E402
from specsuite.results.record import CaseRecord, finite  # noqa: E402
from specsuite.tools import gatecheck  # noqa: E402

FAKE_CASES = (
    "tiny-simple-random,tiny-simple-fixed,tiny-mtp-random,tiny-mtp-fixed,tiny-eagle3-fixed,tiny-dflash-fixed,"
    "tiny-dspark-fixed,tiny-dspark-random"
)  # n_max 3, floors at most accept len 3.875: the fake's counters (every draft accepted) pass them all
WRAPPER = """#!/bin/sh
# the speculative server (a --spec-* flag) on 1 thread; the baseline server and the probe as they are
for a in "$@"; do
  case "$a" in --spec-type|--spec-default) exec {binary} "$@" --threads 1;; esac
done
exec {binary} "$@"
"""


def run_tier(binary: Path, cases: str, repeat: int, out: Path) -> Run:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEC_") or k in ("SPEC_MODEL_DIR",)}
    env.update(LLAMA_SERVER_BIN_PATH=str(binary), SPEC_RESULTS_DIR=str(out), SPEC_NO_HISTORY="1")
    env.pop("GITHUB_STEP_SUMMARY", None)
    cmd = [sys.executable, "-m", "specsuite", "run-tier", cases, "--repeat", str(repeat), "--allow-missing"]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if not (out / "results.json").is_file():
        raise SystemExit(
            f"run-tier wrote no results ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    print(f"  {out.name}: exit {proc.returncode}", flush=True)
    return load_run(out)


def _median_drop(cur: CaseRecord, base: CaseRecord) -> float | None:
    s_cur = [v for v in (finite(x) for x in cur.speed_samples or []) if v is not None]
    s_base = [v for v in (finite(x) for x in base.speed_samples or []) if v is not None]
    if not s_cur or not s_base:
        return None
    return 1 - statistics.median(s_cur) / statistics.median(s_base)


def judge(pairs: list[tuple[CaseRecord, CaseRecord]], rtol: float) -> tuple[int, int, int]:
    """(comparisons, the gate's speed failures, the plain gate's)."""
    gate = plain = 0
    for cur, base in pairs:
        regs = regress.regressions(cur, base, rtol=rtol, baseline_commit="a")
        gate += any(r.metric == "speedup" for r in regs)
        drop = _median_drop(cur, base)
        plain += drop is not None and drop > rtol
    return len(pairs), gate, plain


def _pairs(cur: Run, base: Run) -> list[tuple[CaseRecord, CaseRecord]]:
    """The cases both runs measured, as (current, baseline)."""
    both = [n for n in cur.cases if n in base.cases and cur.cases[n].measured and base.cases[n].measured]
    return [(cur.cases[n], base.cases[n]) for n in both]


def aa_pairs(runs: list[Run]) -> list[tuple[CaseRecord, CaseRecord]]:
    return [p for j, later in enumerate(runs) for earlier in runs[:j] for p in _pairs(later, earlier)]


def ab_pairs(a: list[Run], b: list[Run]) -> list[tuple[CaseRecord, CaseRecord]]:
    return [p for rb in b for ra in a for p in _pairs(rb, ra)]


def _rate(hits: int, n: int) -> str:
    return f"{hits}/{n} ({100 * hits / n:.1f} %)" if n else "–"


def measured_slowdown(a: list[Run], b: list[Run]) -> float:
    """How much slower B's speculative rounds really were (median speedup, B against A)."""
    med = lambda runs: statistics.median(  # noqa: E731
        v for r in runs for c in r.cases.values() for v in (finite(x) for x in c.speed_samples or []) if v
    )
    return 1 - med(b) / med(a)


def section(name: str, a: list[Run], bs: dict[str, list[Run]], rtol: float, window: int) -> list[list[str]]:
    rows = []
    n, gate, plain = judge(aa_pairs(a), rtol)
    checks = gatecheck.check(a, sorted({c for r in a for c in r.cases}), rtol, window)
    drift_n, drift = sum(c.windows for c in checks), sum(c.drift_alarms for c in checks)
    within = statistics.median(c.cv_within for c in checks if c.cv_within is not None)
    between = statistics.median(c.cv_between for c in checks if c.cv_between is not None)
    mde = gatecheck.smallest_drop(within, between, min(c.repeat for c in checks), rtol)
    spread = f"{within * 100:.1f} % in a run, {between * 100:.1f} % between runs"
    mde_text = "–" if mde is None else f"{mde * 100:.1f} %"
    rows.append(
        [name, "A/A (no change)", _rate(gate, n), _rate(plain, n), _rate(drift, drift_n), spread, mde_text]
    )
    for size, b in bs.items():
        n, gate, plain = judge(ab_pairs(a, b), rtol)
        real = f"{size} (measured {measured_slowdown(a, b) * 100:.1f} %)"
        rows.append([name, f"A/B slower by {real}", _rate(gate, n), _rate(plain, n), "", "", ""])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=6, help="runs of A and of each B on the fake server")
    ap.add_argument("--repeat", type=int, default=4, help="A-B-B-A rounds per case")
    ap.add_argument("--cv", type=float, default=0.03, help="the fake's speedup spread per round")
    ap.add_argument("--sizes", default="0.05,0.10,0.20", help="the fake's slowdowns")
    ap.add_argument("--real-runs", type=int, default=4, help="runs of A and of B on the real build (0: none)")
    ap.add_argument("--real-cases", default="ngram-mod,draft-simple", help="smoke cases on the real build")
    ap.add_argument("--rtol", type=float, default=0.05)
    ap.add_argument("--window", type=int, default=10, help="the drift gate's window")
    ap.add_argument("--workdir", type=Path, help="keep the runs here (default: a temporary folder)")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-gate-"))
    rows: list[list[str]] = []

    print(
        f"fake server: {args.runs} A runs and {args.runs} B runs per size, repeat {args.repeat}", flush=True
    )
    per_request = args.cv * (3 / 2) ** 0.5  # a round's speedup: a ratio of two means of 3 requests
    fake = lambda folder, slow: fake_llama(  # noqa: E731
        work / folder,
        spec_ms_per_token=10.0 / (1 - slow),
        base_ms_per_token=20.0,
        ms_cv=per_request,
        drafted=12,
        accepted=12,
        drafts=4,
        per_pos=[4, 4, 4],
    )
    a_bin = fake("fake-a", 0.0)
    a = [run_tier(a_bin, FAKE_CASES, args.repeat, work / f"fake-a-{i}") for i in range(args.runs)]
    bs = {}
    for size in [float(s) for s in args.sizes.split(",")]:
        b_bin = fake(f"fake-b{size:g}", size)
        bs[f"{size * 100:g} %"] = [
            run_tier(b_bin, FAKE_CASES, args.repeat, work / f"fake-b{size:g}-{i}") for i in range(args.runs)
        ]
    rows += section(f"fake server (CV {args.cv * 100:g} % set)", a, bs, args.rtol, args.window)

    if args.real_runs:
        binary = paths.server_binary()  # LLAMA_SERVER_BIN_PATH, else build/bin
        wrapper = work / "one-thread" / "llama-server"
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        wrapper.write_text(WRAPPER.format(binary=binary))
        wrapper.chmod(0o755)
        print(f"real CPU build: {args.real_runs} A and B runs of {args.real_cases}", flush=True)
        a, b = [], []
        for i in range(args.real_runs):  # interleaved: a machine that slows down over time favours neither
            a.append(run_tier(binary, args.real_cases, args.repeat, work / f"real-a-{i}"))
            b.append(run_tier(wrapper, args.real_cases, args.repeat, work / f"real-b-{i}"))
        rows += section("real CPU build, 2 cores", a, {"1 thread instead of 2": b}, args.rtol, args.window)

    plain = f"plain {args.rtol * 100:g} % gate fails"
    header = ("setup", "comparison", "gate fails (rtol + Mann–Whitney)", plain, "drift gate fails",
              "speedup CV", "drop caught 95 %")  # fmt: skip
    print(table.render(header, rows, markdown=True))
    print(f"runs kept in {work}")


if __name__ == "__main__":
    main()
