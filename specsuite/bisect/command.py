"""``specsuite bisect --good SHA --bad SHA --case NAME``: the llama.cpp commit that made a case worse.

Everything is checked before the first build (both commits in the mirror, good an ancestor of bad, the
case, the metric, rtol). Then the good commit is measured (its record is the reference of the relative
rule), the bad one (it must be bad), and ``git bisect run`` tests the commits between, one build and one
run of the case each (bisect_step). ``git bisect reset`` always ends it, Ctrl-C included. Exit 0 when the
first bad commit was found, 1 when the bisect could not decide, 2 for bad input; ``results/bisect-<id>/``
holds every step's folder, ``bisect.json`` and ``summary.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock, Timeout

from specsuite.bisect import builds, night
from specsuite.bisect import git as bisect_git
from specsuite.bisect.build import DEFAULT_BUILDER, load_builder, parse_build_argv, preflight
from specsuite.bisect.judge import METRICS, SPEED_METRICS
from specsuite.bisect.report import Report, log2_bound
from specsuite.bisect.step import STOPPED_FILE, Params, reference_record, run_step, step_command, step_lock
from specsuite.cases.schema import TIERS, Case, load_cases, suggest
from specsuite.common import atomic, paths
from specsuite.common.argtypes import CommandParser, repeat_count
from specsuite.common.errors import UserError
from specsuite.llamacpp import toolchain
from specsuite.llamacpp.source import BUILD_REF_RE, load_pin
from specsuite.models.fetch import FetchOptions, fetch_models
from specsuite.results.document import new_run_id
from specsuite.results.summary import append_step_summary

# `git bisect run` runs the step in the worktree: `python -m` would put that llama.cpp checkout first on
# sys.path, so the step drops it before importing anything of ours.
STEP_BOOT = (
    "import sys; del sys.path[0]; sys.argv[1:] = ['bisect', '--step', sys.argv[1]]; "
    "from specsuite.cli import entry; entry()"
)
STEP_GRACE_S = 120.0  # after Ctrl-C: how long the running step may take to stop its servers


def parser() -> CommandParser:
    p = CommandParser(
        "bisect",
        "Find the llama.cpp commit that made a speculative-decoding case worse (git bisect run).\n"
        "`specsuite bisect --plan RESULTS.json...` prints which failed cases of a run to bisect, between "
        "which commits; `specsuite bisect --from-plan JSON [--max-steps N] [--budget-min M]` bisects them "
        "in turn.",
        epilog="Build flags (--cpu, --cuda, -DNAME=VALUE) are passed to every step's build.",
    )
    p.add_argument("--good", required=True, metavar="SHA", help="a commit where the case is good")
    p.add_argument("--bad", required=True, metavar="SHA", help="a later commit where it is worse")
    p.add_argument("--case", required=True, metavar="NAME", help="one case of cases.toml")
    p.add_argument("--metric", default="accept_rate", help=f"{', '.join(METRICS)} (default accept_rate)")
    p.add_argument("--rtol", default="0.05", help="relative drop against the good commit that is bad (0.05)")
    p.add_argument(
        "--repeat", type=repeat_count, help="speed rounds per run, <= 100 (--metric speedup needs 4 or more)"
    )
    p.add_argument("--allow-cpu", action="store_true", help="run a GPU case on a CPU build")
    p.add_argument(
        "--max-steps", type=int, metavar="N", help="stop after N bisect steps and report the range left"
    )
    p.add_argument(
        "--budget-min",
        type=float,
        metavar="M",
        help="start no step after M minutes (the endpoints included) and report the range left",
    )
    p.add_argument("--out", type=Path, help="results folder (default results/bisect-<id>)")
    p.add_argument("--builder", default=DEFAULT_BUILDER, help=argparse.SUPPRESS)  # module:function (tests)
    return p


def plan_parser() -> CommandParser:
    p = CommandParser(
        "bisect --from-plan",
        "Bisect every case of a plan (`specsuite bisect --plan RESULTS.json...`) in turn.",
    )
    p.add_argument("--from-plan", required=True, metavar="JSON", help="the plan, as --plan printed it")
    p.add_argument("--max-steps", type=int, metavar="N", help="bisect steps per case before it stops")
    p.add_argument("--budget-min", type=float, metavar="M", help="minutes for all the bisects together")
    p.add_argument("--allow-cpu", action="store_true", help="run a GPU case on a CPU build")
    p.add_argument("--builder", default=DEFAULT_BUILDER, help=argparse.SUPPRESS)
    return p


def main(argv: list[str]) -> int:
    if argv[:1] == ["--step"]:  # the hidden entry point `git bisect run` calls
        if len(argv) != 2:
            raise UserError("usage: specsuite bisect --step BISECT_JSON (run by git bisect, not by hand)")
        return step_command(Path(argv[1]))
    if argv[:1] == ["--plan"]:  # a red night's cases to bisect, from its results
        if len(argv) < 2:
            raise UserError("usage: specsuite bisect --plan RESULTS.json... (results/<run> folders or files)")
        return night.plan_command([Path(a) for a in argv[1:]])
    if any(a == "--from-plan" or a.startswith("--from-plan=") for a in argv):
        args, rest = plan_parser().parse_known_args(argv)
        check_bounds(args)
        return night.from_plan(night.parse_plan(args.from_plan), args, parse_build_argv(rest), run_bisect)
    args, rest = parser().parse_known_args(argv)
    return run_bisect(args, parse_build_argv(rest))


# --- validation ------------------------------------------------------------------------------------------


def check_case(name: str) -> Case:
    cases = {c.name: c for c in load_cases()}
    if name in cases:
        return cases[name]
    if name in TIERS:
        raise UserError(f"--case {name!r} is a tier; bisect takes one case name{suggest(name, list(cases))}")
    raise UserError(f"--case {name!r} is not a case of {paths.CASES_FILE.name}{suggest(name, list(cases))}")


def check_options(args: argparse.Namespace) -> float:
    """--metric, --rtol and --repeat; the rtol as a number."""
    if args.metric not in METRICS:
        raise UserError(f"--metric {args.metric!r}: choose one of {', '.join(METRICS)}")
    try:
        rtol = float(args.rtol)
    except ValueError:
        rtol = float("nan")
    if not 0 < rtol < 1:
        raise UserError(f"--rtol {args.rtol!r}: give a fraction between 0 and 1 (0.05 = a 5 % drop is bad)")
    check_bounds(args)
    if args.metric in SPEED_METRICS and (args.repeat or 1) < 4:
        raise UserError(
            f"--metric {args.metric} needs --repeat 4 or more: a speed drop counts only when it is "
            "significant over the rounds (Mann–Whitney, as the history gate); or bisect an acceptance metric"
        )
    return rtol


def check_bounds(args: argparse.Namespace) -> None:
    if args.max_steps is not None and args.max_steps < 1:
        raise UserError(f"--max-steps {args.max_steps}: give 1 or more steps")
    if args.budget_min is not None and not 0 < args.budget_min < 1e6:
        raise UserError(f"--budget-min {args.budget_min:g}: give a number of minutes above 0")


def repository() -> str:
    return os.environ.get("LLAMA_CPP_REPO") or load_pin().repository


# --- the bisect ------------------------------------------------------------------------------------------


def run_bisect(args: argparse.Namespace, build_argv: list[str]) -> int:
    rtol = check_options(args)
    case = check_case(args.case)
    numbers = [BUILD_REF_RE.match(args.good.strip()), BUILD_REF_RE.match(args.bad.strip())]
    if all(numbers):
        return _bisect_builds(args, build_argv, case, rtol, [int(m.group(1)) for m in numbers if m])
    if any(numbers):
        raise UserError(
            f"--good {args.good} and --bad {args.bad}: give both as upstream builds (b9113, b9246: PyPI's "
            "builds, no git) or both as commits (git)"
        )
    out = _out_path(args.out, case)
    load_builder(args.builder)
    repo, cache = repository(), paths.cache_dir()
    mirror = bisect_git.mirror(cache, repo)
    good = bisect_git.resolve_commit(mirror, args.good, repo, "--good")
    bad = bisect_git.resolve_commit(mirror, args.bad, repo, "--bad")
    n_commits = bisect_git.check_range(mirror, good, bad)
    tree = bisect_git.tree_path(cache, repo)
    with bisect_git.exclusive(tree):
        bisect_git.worktree(tree, mirror, good)
        if args.builder == DEFAULT_BUILDER:
            preflight(tree, build_argv, case, args.allow_cpu)
        _fetch_models(case)
        out.mkdir(parents=True, exist_ok=True)
        params = Params(
            case=case.name,
            metric=args.metric,
            rtol=rtol,
            good=good,
            bad=bad,
            tree=str(tree),
            out=str(out),
            builder=args.builder,
            build_argv=build_argv,
            run_argv=_run_argv(args),
            max_steps=args.max_steps,
            deadline=time.time() + args.budget_min * 60 if args.budget_min else None,
            repository=repo,
        )
        report = Report(params, n_commits, bisect_git.history(mirror, good, bad))
        print(
            f"bisect: {case.name} by {args.metric} (rtol {rtol:g}) over {n_commits} commits "
            f"{good[:10]}..{bad[:10]}: good, bad, then about {log2_bound(n_commits)} steps; results in {out}",
            flush=True,
        )
        return _bisect(report, tree)


def _out_path(given: Path | None, case: Case) -> Path:
    """A new results folder: a bisect's steps are counted from its folders, so never one in use."""
    out = (given or paths.RESULTS_DIR / f"bisect-{new_run_id(case.name)}").resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out} exists and is not an empty folder; give a new one (one per bisect)")
    return out


def _run_argv(args: argparse.Namespace) -> list[str]:
    """The run-tier options every step passes on."""
    return (["--allow-cpu"] if args.allow_cpu else []) + (
        ["--repeat", str(args.repeat)] if args.repeat else []
    )


def _fetch_models(case: Case) -> None:
    """The case's models, fetched and verified once before any build (steps then only check stamps)."""
    fetch_models(FetchOptions(methods=[case.name]))


def _bisect_builds(
    args: argparse.Namespace, build_argv: list[str], case: Case, rtol: float, ends: list[int]
) -> int:
    """The bisect over PyPI's builds (``bisect.builds``): no git, no mirror."""
    found = builds.candidates(ends[0], ends[1], builds.index_url())
    out = _out_path(args.out, case)
    params = builds.build_params(args, case, rtol, build_argv)
    params.out, params.run_argv = str(out), _run_argv(args)
    search = builds.BuildBisect(params, found)
    if params.builder == builds.DEFAULT_BUILDER:
        toolchain.ensure_build_tools()
        toolchain.ensure_ccache()
    _fetch_models(case)
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"bisect: {case.name} by {args.metric} (rtol {rtol:g}) over the {len(found)} builds PyPI has in "
        f"b{ends[0]}..b{ends[1]}: good, bad, then about {log2_bound(len(found) - 1)} steps; results in {out}",
        flush=True,
    )
    return _finish(search.report, search.run)


def _finish(report: Report, work: Callable[[], object], cleanup: Callable[[], None] = lambda: None) -> int:
    """Run the bisect's ``work``; whatever happens, its report written, printed and in the job summary."""
    try:
        report.write()
        work()
    except KeyboardInterrupt:
        report.status = "interrupted"
        raise
    except UserError as exc:
        if report.status == "running":
            report.status = "failed"
        report.message = str(exc)
        raise
    finally:
        cleanup()
        steps = report.write()
        print(report.text(steps), flush=True)
        if (report.out / "summary.md").is_file():
            append_step_summary(report.out / "summary.md")
    return 0 if report.status == "found" else 1


def _bisect(report: Report, tree: Path) -> int:
    started = False

    def work() -> None:
        nonlocal started
        _endpoints(report, tree)
        bisect_git.start(tree, report.params.bad, report.params.good)
        started = True
        _git_run(report, tree)

    def cleanup() -> None:
        if report.status == "interrupted":
            _wait_for_step(tree)  # a step may still be stopping its servers
        if started:
            _save_log(report, tree)
        bisect_git.reset(tree)

    return _finish(report, work, cleanup)


def _endpoints(report: Report, tree: Path) -> None:
    """Measure good (the reference) and bad; UserError (exit 1) when they do not bracket a regression."""
    p = report.params
    bisect_git.checkout(tree, p.good)
    good = run_step(p, "good", "good")
    if good.verdict != "good":
        report.status = "not_bracketed"
        raise UserError(
            f"--good {p.good[:10]} is not good for {p.case}: {good.verdict} ({good.rule}: {good.detail}); "
            f"pick a good commit where the case passes (see {p.out}/{good.folder})",
            code=1,
        )
    p.reference = reference_record(Path(p.out) / good.folder, p.case)
    report.write()  # the steps read the reference from bisect.json
    bisect_git.checkout(tree, p.bad)
    bad = run_step(p, "bad", "bad")
    if bad.verdict != "bad":
        report.status = "not_bracketed"
        why = "nothing to bisect" if bad.verdict == "good" else "it could not be measured"
        raise UserError(
            f"--bad {p.bad[:10]} is not bad for {p.case} ({why}): {bad.verdict} ({bad.rule}: {bad.detail}); "
            f"see {p.out}/{bad.folder}",
            code=1,
        )


def _git_run(report: Report, tree: Path) -> None:
    outcome = bisect_git.outcome(bisect_git.log(tree))
    if outcome.first_bad is None:  # git decides at start when bad is good's child
        state = str(report.out / "bisect.json")
        pythonpath = [str(paths.REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
        code = bisect_git.bisect_run(tree, [sys.executable, "-c", STEP_BOOT, state], env)
        outcome = bisect_git.outcome(bisect_git.log(tree))
        if outcome.first_bad is None and not outcome.candidates:
            _stopped(report, tree, code)
            return
    report.candidates = outcome.candidates
    report.first_bad = outcome.first_bad
    if outcome.first_bad:
        report.status = "found"
        report.first_bad_subject = bisect_git.subject(tree, outcome.first_bad)
    else:
        report.status = "undecided"


def _stopped(report: Report, tree: Path, code: int) -> None:
    """git bisect run ended without an answer: a bound reached (the range left said), or a broken step."""
    stopped = report.out / STOPPED_FILE
    if not stopped.is_file():
        report.status = "failed"
        report.message = f"git bisect run stopped (exit {code}); its output is above"
        return
    report.status = "stopped"
    report.message = stopped.read_text(encoding="utf-8").strip()
    left = bisect_git.range_left(bisect_git.log(tree))
    if left is not None:
        report.range_left = (left[0], left[1], bisect_git.count(tree, left[0], left[1]))


def _save_log(report: Report, tree: Path) -> None:

    atomic.write_text(report.out / "bisect.log", bisect_git.log(tree))


def _wait_for_step(tree: Path) -> None:
    """A step may still be stopping its servers: wait for its lock before the checkout changes under it."""
    try:
        with FileLock(step_lock(tree), timeout=STEP_GRACE_S):
            pass
    except Timeout:
        print(
            f"bisect: the running step did not stop within {STEP_GRACE_S:.0f} s; resetting anyway", flush=True
        )
