"""``specsuite run-tier SELECTOR [options] [pytest args]``: check the binary, fetch the models, run the suite.

SELECTOR is a tier or a comma list of case names (bisect runs one case).

Order matters: the binary is probed and the GPU gate applied before anything is downloaded, so a CPU build
asked for a GPU tier costs a second, not 6 GiB. nox passes the same posargs to every session of one
invocation (``nox -s build test_smoke -- --cpu -x``): build flags (``llamacpp.posargs`` asks build's own
parser) are dropped here, the run's options are read, and the rest goes to pytest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from specsuite.cases.schema import TIER_REPEAT, TIERS, Case, load_cases, select_cases
from specsuite.common import errors, paths, procs, settings
from specsuite.common.argtypes import CommandParser, fraction, positive_int, repeat_count
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.common.table import markdown_plain
from specsuite.llamacpp import info as buildinfo
from specsuite.llamacpp.posargs import split_posargs
from specsuite.models.fetch import FetchOptions, fetch_models
from specsuite.results.document import claim_results_dir, load_run, make_results_dir
from specsuite.results.summary import append_step_summary
from specsuite.results.verdict import speed_gate_lines
from specsuite.server import gpus, workers
from specsuite.server.device import device_info
from specsuite.server.probe import Capabilities, hand_over, probe
from specsuite.suite import plan
from specsuite.suite.session import check_device, earlier_run


def parser() -> CommandParser:
    # CommandParser takes no abbreviations: pytest's own options must never be taken for ours.
    p = CommandParser(
        "run-tier",
        "Fetch a tier's models, run its cases against the built llama-server, write results/.",
        epilog="Every other argument goes to pytest: -x stops at the first failed case, -k EXPR picks cases, "
        "-v shows pytest's own line per case instead of the suite's start and end lines, --lf runs again the "
        "cases that failed last, -o spec_progress_s=N says a running case's step in a log every N s (30). "
        "A case's time budget is SPEC_BUDGET_MIN_S (60 s) + --budget-factor × the time its requests (the "
        "tokens they decode, their prompts) take at the rates its baseline server measured in this run; "
        "past it the case fails over_budget, naming the rate it decoded at.",
    )
    p.add_argument(
        "tier", metavar="SELECTOR", help=f"a tier ({', '.join(TIERS)}) or a comma list of case names"
    )
    p.add_argument(
        "--allow-missing",
        action="store_true",
        help="skip (not fail) cases whose method or flag the binary lacks; said in the summary",
    )
    p.add_argument(
        "--allow-cpu",
        action="store_true",
        help="run a GPU tier on a CPU build or with no GPU visible; flagged in the summary",
    )
    p.add_argument(
        "--repeat",
        type=repeat_count,
        help=f"A-B-B-A speed rounds per case (SPEC_REPEAT; <= 100); default: the tier's ({_tier_rounds()}), "
        "raised by a case's own repeat; the relative gate judges speed from 4",
    )
    p.add_argument(
        "--budget-factor",
        type=budget_factor,
        metavar="F",
        help="a case may take F times its baseline's time for its requests before it fails over_budget "
        "(SPEC_BUDGET_FACTOR, default 10; 0: no budget, pytest-timeout's 900 s)",
    )
    p.add_argument("--no-history", action="store_true", help="no history record and no relative gate")
    p.add_argument(
        "--rtol", type=fraction, help="relative drop that fails against the history baseline (0.05)"
    )
    p.add_argument(
        "--block-rtol",
        type=fraction,
        help="relative rise in per-block overhead that fails against the history (SPEC_BLOCK_RTOL, 0.2)",
    )
    p.add_argument(
        "--drift-window",
        type=window,
        metavar="N",
        help="runs the drift gate judges together, this one included (SPEC_DRIFT_WINDOW, default 10)",
    )
    p.add_argument(
        "--gpus",
        metavar="all|N|0,2,5",
        help="a CUDA build: one worker per GPU (SPEC_GPUS; default all); one GPU by index: 2,",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        help="a CPU build: N cases side by side, acceptance only (SPEC_WORKERS; default 1)",
    )
    p.add_argument("--shard", metavar="K/N", help="run shard K of N of the plan (SPEC_SHARD)")
    p.add_argument(
        "--plan", type=Path, help="take the shard from this saved `specsuite plan --json` (SPEC_PLAN)"
    )
    return p


def _tier_rounds() -> str:
    """The tiers' default rounds, as --repeat's help says them: ``smoke 1, synthetic 1, ...``."""
    return ", ".join(f"{tier} {n}" for tier, n in TIER_REPEAT.items())


def budget_factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1e6:
        raise argparse.ArgumentTypeError(f"{value:g} must be >= 0 (0: no budget)")
    return value


def window(text: str) -> int:
    value = positive_int(text)
    if value < 3:
        raise argparse.ArgumentTypeError(f"{value} must be >= 3: a drift is more than one step")
    return value


def _env(args: argparse.Namespace, tier: str, binary: Path) -> dict[str, str]:
    """The pytest child's environment: ours, with the run's settings (the command line's over SPEC_*)."""
    given = {
        "strict": False if args.allow_missing else None,
        "allow_cpu": True if args.allow_cpu else None,
        "repeat": args.repeat,
        "budget_factor": args.budget_factor,
        "no_history": True if args.no_history else None,
        "rtol": args.rtol,
        "block_rtol": args.block_rtol,
        "drift_window": args.drift_window,
        "gpus": args.gpus,
        "workers": args.workers,
        "shard": args.shard,
        "plan": str(args.plan.resolve()) if args.plan else None,
    }
    options = msgspec.structs.replace(settings.load(), **{k: v for k, v in given.items() if v is not None})
    env = {**procs.child_env(), **options.to_env()}  # the pytest child fetches nothing: no Hub token
    env.update(SPEC_METHODS=tier, LLAMA_SERVER_BIN_PATH=str(binary))
    return env


def pytest_command(results_dir: Path, pytest_args: list[str], name: str = "specsuite") -> list[str]:
    """pytest over the suite's module with the suite's own settings (this package's pytest.ini); ``name``
    is junit.xml's suite (the tier). pytest's cache (what ``--lf`` reads) is kept in the
    per-user cache, not beside the suite's module (an installed package's folder); the verdict is printed
    by run-tier, after summary.md, not by the suite's plugin (``plugin.VerdictLines``)."""
    here = Path(__file__).parent  # the suite's folder (not imported here: it imports pytest, the child's)
    return [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(here / "pytest.ini"),
        "--rootdir",
        str(here),
        "-o",
        f"junit_suite_name={name}",
        "-o",
        f"cache_dir={pytest_cache_dir()}",
        "-p",
        "no:specsuite-verdict",
        str(here / "test_speculative.py"),
        f"--junitxml={results_dir / 'junit.xml'}",
        *pytest_args,
    ]


def pytest_cache_dir() -> Path:
    """Where the suite's pytest keeps its cache: ``<cache>/pytest`` (``--lf``: the cases that failed in the
    last run of the suite on this machine)."""
    return paths.cache_dir() / "pytest"


def suite_name(selector: str, cases: list[Case], shard: str | None) -> str:
    """junit.xml's suite: the tier (a list of cases: their tiers), and the shard."""
    tiers = selector if selector in TIERS else ",".join(sorted({c.tier for c in cases}))
    return f"{tiers} shard {shard}" if shard else tiers


def preflight(tier: str, env: dict[str, str]) -> Capabilities:
    """Before any download: a binary that is a speculative llama-server, on a device that suits the tier."""
    binary = paths.server_binary()
    cases = select_cases(load_cases(), tier)  # an unknown tier or case is one clear error, before anything
    if not binary.is_file():
        raise UserError(
            f"llama-server not found at {binary}; build it first with `specsuite build` "
            "(or point LLAMA_SERVER_BIN_PATH at one)"
        )
    caps = probe(binary)
    check_device(caps, cases, settings.load(env).allow_cpu)
    buildinfo.for_binary(binary, sha256_file(binary))  # a forged or broken build record: refused here
    return caps


def device_class(caps: Capabilities) -> str | None:

    return device_info(caps)["class"]


def shard_cases(tier: str, options: settings.Settings, caps: Capabilities) -> list[dict[str, Any]]:
    """The plan entry this run takes (with ``--shard``): from ``--plan``, else made here from the history
    on this machine's device class. [] without a shard."""
    if not options.shard:
        return []
    mine = device_class(caps)
    if options.plan:
        found = plan.read_plan(Path(options.plan))
    else:
        found = plan.entries(plan.make_plan(tier, plan.parse_shard(options.shard)[1], device_class=mine))
    return [plan.shard_entry(found, tier, options.shard, mine)]


def spread(caps: Capabilities, cases: list[Case], options: settings.Settings) -> workers.Layout:
    """How the run spreads over this machine: the GPUs of a CUDA build, or --workers of a CPU build."""
    found = gpus.available(caps)
    if options.workers > 1 and caps.backend != "cpu":
        raise UserError(
            f"--workers {options.workers}: this is a {caps.backend} build; --workers runs a CPU build's "
            "cases side by side (acceptance only). A CUDA build takes --gpus (one worker per GPU)"
        )
    if options.gpus and not found.gpus:
        why = "it is a CPU build" if caps.backend == "cpu" else f"it is a {caps.backend} build"
        raise UserError(
            f"--gpus {options.gpus}: {why} with no CUDA GPU to give each worker; a CPU build runs cases "
            "side by side with --workers N (acceptance only)"
        )
    return workers.layout(gpus.select(options.gpus, found) if found.gpus else found, cases, options.workers)


def _parallel(lay: workers.Layout) -> list[str]:
    """pytest-xdist: a worker per place, a target's cases on one worker, in the plan's order."""
    if lay.workers < 2:
        return []
    return ["-n", str(lay.workers), "--dist", "loadgroup", "--no-loadscope-reorder"]


@dataclass
class RunFolder:
    """Where a run writes: the folder given (SPEC_RESULTS_DIR: this run's own, new or holding no run), or
    ``results/<run-id>`` claimed for this run alone once it is past its checks (``claim``: a refused run
    leaves no folder; of two runs started in the same second each gets its own, and so its own run id)."""

    path: Path | None
    claimed: bool = False  # made by this run (``discard`` may remove it)

    def claim(self, label: str) -> Path:
        if self.path is None:
            self.path, self.claimed = claim_results_dir(label), True
        self.path = Path(self.path).resolve()
        return self.path

    def discard(self) -> None:
        """A run that ran no case (pytest refused its arguments): the folder this run claimed, holding only
        what run-tier put there for pytest (``HANDED``), is removed; a folder given is left as it was."""
        if not self.claimed or self.path is None or not self.path.is_dir():
            return
        if all(p.name in HANDED for p in self.path.iterdir()):
            shutil.rmtree(self.path, ignore_errors=True)


HANDED = ("probe.json", "plan.json", "junit.xml")  # what run-tier and pytest write before any case runs


def run_tier(args: argparse.Namespace, folder: RunFolder, pytest_args: list[str], label: str) -> int:
    """Probe and gate, fetch and verify the tier's models, then run the suite on it; pytest's exit code.
    The results go to ``folder`` (claimed here, named from ``label``, when none was given)."""
    env = _env(args, args.tier, paths.server_binary())
    caps = preflight(args.tier, env)
    options = settings.load(env)
    chosen = shard_cases(args.tier, options, caps)
    cases = select_cases(load_cases(), args.tier)
    if chosen:
        names = set(chosen[0]["cases"].split(","))
        cases = [c for c in cases if c.name in names]
    lay = spread(caps, cases, options)
    results_dir = folder.claim(label)
    make_results_dir(results_dir)  # an unwritable SPEC_RESULTS_DIR is found before any download
    if held := earlier_run(results_dir):  # never two runs' files in one folder
        raise UserError(held)
    env["SPEC_RESULTS_DIR"] = str(results_dir)

    if args.tier in TIERS and not chosen:
        fetch_models(FetchOptions(tier=args.tier))
    else:
        fetch_models(FetchOptions(methods=[c.name for c in cases]))
    if chosen or lay.workers > 1:  # the run's own plan: its shard, or its targets longest first
        found = chosen or plan.entries(plan.make_plan(args.tier, 1, device_class=device_class(caps)))
        plan.write_plan(results_dir / "plan.json", found)
        env["SPEC_PLAN"] = str(results_dir / "plan.json")
    env["LLAMA_SERVER_BIN_PATH"] = caps.binary
    hand_over(caps, results_dir / "probe.json")  # the child takes it: the binary probed once a run
    env["SPEC_PROBED"] = str(results_dir / "probe.json")
    where = f" (shard {chosen[0]['shard']}: {len(cases)} cases)" if chosen else ""
    print(f"running the {args.tier} tier{where} with {caps.binary}; results in {results_dir}", flush=True)
    if line := lay.describe():
        print(line, flush=True)
    name = suite_name(args.tier, cases, chosen[0]["shard"] if chosen else None)
    cmd = pytest_command(results_dir, [*_parallel(lay), *pytest_args], name)
    return procs.run_forwarding(cmd, env=env, cwd=paths.WORK_DIR)


# pytest's exit codes (pytest.ExitCode) as the suite's (common.errors): a pytest usage or internal error
# must never read as a regression, nor a run that ended without a verdict (no summary.md) as green or red.
_FROM_PYTEST = {2: errors.INTERRUPTED, 3: errors.INTERNAL, 4: errors.BAD_INPUT, 5: errors.BAD_INPUT}
PYTEST_USAGE_ERROR, PYTEST_NO_TESTS = 4, 5  # pytest.ExitCode's (pytest is the child's, not imported here)


def exit_code(pytest_code: int, has_verdict: bool) -> int:
    """run-tier's exit code from pytest's and whether this run wrote its verdict (summary.md)."""
    if pytest_code in _FROM_PYTEST:
        return _FROM_PYTEST[pytest_code]
    if pytest_code in (errors.OK, errors.FAILED) and has_verdict:
        return pytest_code
    return errors.INTERNAL  # killed by a signal, or ended without a verdict: the suite did not answer


def main(argv: list[str]) -> int:
    rest, dropped = split_posargs(argv)
    args, pytest_args = parser().parse_known_args(rest)
    if dropped:
        print(f"note: build flags {' '.join(dropped)} are for `specsuite build`; not passed to pytest")
    if line := llama_arg_warning(os.environ):
        print(line, file=sys.stderr, flush=True)
    shard = args.shard or settings.load().shard
    name = f"{args.tier}-shard-{shard.replace('/', 'of')}" if shard else args.tier
    given = settings.load().results_dir
    folder = RunFolder(Path(given) if given else None)
    try:
        code = run_tier(args, folder, pytest_args, name)
    except KeyboardInterrupt:  # what was measured before Ctrl-C, its first line saying INTERRUPTED
        if folder.path is None or not finish(folder.path):
            raise
        return errors.INTERRUPTED
    results_dir = folder.claim(name)  # claimed by run_tier: this returns it
    if code in (PYTEST_USAGE_ERROR, PYTEST_NO_TESTS):  # pytest's arguments: no case ran
        folder.discard()
        if code == PYTEST_NO_TESTS:
            raise UserError(nothing_selected(args.tier, pytest_args))
        return exit_code(code, False)
    has_verdict = finish(results_dir)
    if not has_verdict and code in (errors.OK, errors.FAILED):
        missing = results_dir / "summary.md"
        print(f"error: the suite ended without a verdict (no {missing}); see pytest's output above")
    return exit_code(code, has_verdict)


def nothing_selected(selector: str, pytest_args: list[str]) -> str:
    """What a run whose pytest arguments (``-k``, ``-m``, ``--deselect``) left no case says."""
    names = [c.name for c in select_cases(load_cases(), selector)]
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return (
        f"`{' '.join(pytest_args)}` selects none of the {len(names)} case(s) of {selector!r} ({shown}); "
        "-k matches case names: -k mtp, -k 'ngram and not mod'"
    )


# llama-server reads LLAMA_ARG_<FLAG> as the flag itself: hidden flags that would change what a case
# measures behind the command line results.json records (common.procs.child_env drops them).
LLAMA_ARG = "LLAMA_ARG_"


def llama_arg_warning(env: Mapping[str, str]) -> str | None:
    """One line naming the LLAMA_ARG_* variables set here, which no server of the run sees, and why."""
    found = sorted(k for k in env if k.startswith(LLAMA_ARG))
    if not found:
        return None
    return (
        f"warning: {', '.join(found)} not passed to llama-server: LLAMA_ARG_* variables are flags the "
        "server would take behind the command line a run records; a case's flags go in cases.toml "
        "(server_args)"
    )


def finish(results_dir: Path) -> bool:
    """The run's summary.md printed (and appended to the CI's step summary), then its last lines: where
    its results are and its verdict. False when the suite wrote no summary.md."""
    if not report(results_dir):
        return False
    print(f"results: {results_dir} (results.json, summary.md, junit.xml, bench.json, logs/)")
    run = load_run(results_dir)
    if run.verdict:
        print(f"verdict: {run.verdict}", flush=True)
        for line in speed_gate_lines(run):  # what a green says nothing of: speed not gated at these rounds
            print(f"  {line}", flush=True)
    return True


def report(results_dir: Path) -> bool:
    """Print the run's summary.md and append it to the CI's step summary; False when there is none."""
    summary = results_dir / "summary.md"  # written by the suite when its session ends
    if not summary.is_file():
        return False
    print(markdown_plain(summary.read_text(encoding="utf-8")))  # a terminal shows the text, not escapes
    append_step_summary(summary)
    return True
