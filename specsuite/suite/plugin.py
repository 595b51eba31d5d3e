"""The suite's pytest plugin: cases from SPEC_METHODS as tests, one run per session, its verdict as the
session's exit status, one line per case as it starts and ends (``progress``).

``SPEC_METHODS`` is a tier (smoke, synthetic, compact, nightly, all) or a comma list of case names; unset
or empty selects nothing, an unknown name is a usage error naming the nearest valid one. ``specsuite
run-tier`` sets it (and SPEC_RESULTS_DIR and the run's options) and runs ``test_speculative.py`` of this
package with the suite's own ``pytest.ini``, which loads this plugin (``-p``): it is no entry point, so
no other pytest run of an environment with specsuite in it loads it or reads its SPEC_* variables.
``SPEC_SHARD`` (K/N) keeps shard K of the plan ``SPEC_PLAN`` names (or of one made from the history).

Without ``-v`` pytest's own lines stay out (its header, the collected count, the xml file, its "N passed"
footer: verbosity -2); the case lines say where the run is and the verdict says how it ended, as its last
line: printed when pytest is done (``VerdictLines``, at unconfigure, after a Ctrl-C's banner). run-tier prints
it itself, after summary.md, and leaves this one out (``-p no:specsuite-verdict``).

A parallel run (``run-tier --gpus`` on a CUDA build, ``--workers`` on a CPU build) is a pytest-xdist
session. The cases of one target are one ``xdist_group`` (``--dist loadgroup``: its baseline server starts
once), longest target first (``--no-loadscope-reorder`` keeps the plan's order). xdist 3.8 finds a test's
group in a suffix it writes into the node id, which pytest 9.2 no longer lets it write (pytest-xdist issue
1386, open): the groups are then silently ignored. So the suite hands xdist its own loadgroup scheduler
(the ``pytest_xdist_make_scheduler`` hook) whose group of a test is its case's target.

Each worker opens its own Engine on its place (its GPUs and ports) and writes its records to
``parts/<worker>.json`` as it goes. The controller runs no case: when the workers are done it merges their
parts into the run's one results.json (``results.merge``), judges it once, and writes the history record,
bench.json and summary.md, exactly as a serial run does when its session ends; pytest itself writes the
one junit.xml from the workers' reports.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from specsuite.cases.schema import Case, load_cases, select_cases
from specsuite.common import paths, procs, settings
from specsuite.common.errors import UserError
from specsuite.measure.engine import Engine
from specsuite.measure.outcome import spec_result_line
from specsuite.models.lock import load_lock
from specsuite.results.document import RunResults, claim_results_dir, load_run, utc_now
from specsuite.results.merge import check_parts, merge_runs, not_run
from specsuite.results.verdict import Verdict
from specsuite.suite import plan
from specsuite.suite.progress import HEARTBEAT_S, CaseLines, WorkerLines, case_name
from specsuite.suite.session import Shape, earlier_run, finish_run, finish_session, open_session

GPU_TIMEOUT_S = 3600  # a 41 GiB target loads for minutes; the suite's default (900 s) is for CPU tiers
SUITE_MODULE = "specsuite.suite.test_speculative"
_CASES = pytest.StashKey[list[Case]]()
_SELECTOR = pytest.StashKey[str]()
_SHAPE = pytest.StashKey[Shape]()
_FINISHED = pytest.StashKey["Finished"]()
_T0 = pytest.StashKey[float]()
_COLLECTED = pytest.StashKey[list[str]]()
MARKERS = (
    "suite: the speculative-decoding suite itself, selected by SPEC_METHODS",
    "heavy: needs a GPU and multi-GiB models (compact, nightly, all tiers)",
)


@dataclass
class Finished:
    """A judged run, for the terminal summary and the exit status."""

    dir: Path
    verdict: Verdict | None
    lines: list[str] = field(default_factory=list)


def _worker(config: pytest.Config) -> str | None:
    """This process's xdist worker name (gw0, ...), or None in a serial run or the controller."""
    found = getattr(config, "workerinput", None)
    return str(found["workerid"]) if found else None


def _shape(
    chosen: list[Case], options: settings.Settings, selector: str, worker: str | None
) -> tuple[list[Case], Shape]:
    """The cases this session runs, in the plan's order (longest target first), and the run's shape."""
    entries = plan.read_plan(Path(options.plan)) if options.plan else None
    if options.shard:
        if entries is None:
            entries = plan.entries(plan.make_plan(selector, plan.parse_shard(options.shard)[1]))
        order = plan.shard_entry(entries, selector, options.shard, None)["cases"].split(",")
    else:
        order = [n for e in entries or [] for n in e["cases"].split(",")]
    by_name = {c.name: c for c in chosen}
    if unknown := [n for n in order if n not in by_name]:
        raise UserError(
            f"the plan names {', '.join(unknown)}, not cases of {selector!r} in this cases file: "
            "make the plan again (`specsuite plan`)"
        )
    rest = [] if options.shard else [c for c in chosen if c.name not in order]
    cases = [by_name[n] for n in order] + rest
    label = "{}/{}".format(*plan.parse_shard(options.shard)) if options.shard else None
    return cases, Shape(shard=label, planned=tuple(c.name for c in chosen), part=worker)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "spec_progress_s",
        "in a log (not a terminal), a running case's line is printed again every this many seconds",
        default=str(HEARTBEAT_S),
    )


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    try:
        options = settings.load()
        selector = options.methods.strip()
        lock = load_lock().names() if selector and paths.MODELS_LOCK.is_file() else None
        chosen = select_cases(load_cases(lock_names=lock), selector) if selector else []
        cases, shape = _shape(chosen, options, selector, _worker(config)) if chosen else ([], Shape())
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_CASES], config.stash[_SELECTOR], config.stash[_SHAPE] = cases, selector, shape
    runs = not (config.option.collectonly or config.option.help)  # only a run gets (and makes) a folder
    given = Path(options.results_dir) if options.results_dir else None
    if cases and runs and given and not shape.part and (found := earlier_run(given)):
        raise pytest.UsageError(found)  # a bare pytest's (run-tier refuses it before it starts pytest)
    if cases and runs and not options.results_dir and not shape.part:
        # one folder for the run, whoever writes into it: the workers xdist starts inherit it; claimed, so
        # that a run started in the same second never shares it (nor its run id)
        os.environ["SPEC_RESULTS_DIR"] = str(claim_results_dir(selector))
    if cases and runs:
        _lines(config, options)


def _lines(config: pytest.Config, options: settings.Settings) -> None:
    """What the run says while it runs (``progress``) and, last, its verdict; pytest's plumbing left out
    where the case lines replace it (no -v)."""
    if _worker(config):
        config.pluginmanager.register(WorkerLines(config), "specsuite-worker-lines")
        return
    config.pluginmanager.register(VerdictLines(), "specsuite-verdict")  # None where -p no:specsuite-verdict
    if config.getoption("verbose") > 0:
        return
    config.option.verbose = -2  # pytest's header, collected count, xml line and footer: the lines say it
    lines = CaseLines(config)
    lines.header = budget_lines(options)
    config.pluginmanager.register(lines, "specsuite-case-lines")


def pytest_report_header(config: pytest.Config) -> list[str]:
    """How long a case may take (the header's pytest-timeout lines hold only with budgets off)."""
    if not config.stash.get(_CASES, None):
        return []
    return budget_lines(settings.load())


def budget_lines(options: settings.Settings) -> list[str]:
    if options.budget_factor <= 0:
        return ["time budget: off (SPEC_BUDGET_FACTOR=0): pytest-timeout's limit per case"]
    return [
        f"time budget per case: {options.budget_min_s:g} s + {options.budget_factor:g} × its requests' time "
        "at its baseline's measured rates (run-tier --budget-factor, SPEC_BUDGET_FACTOR, SPEC_BUDGET_MIN_S)"
    ]


def _marks(case: Case, budgeted: bool) -> list[Any]:
    """Its xdist group; with a time budget (measure.budget) no pytest-timeout (one SIGALRM per process),
    without one pytest-timeout's limit, longer for a GPU case."""
    marks = [pytest.mark.suite, pytest.mark.xdist_group(case.target)]
    if case.gpu:
        marks.append(pytest.mark.heavy)
    if budgeted or case.gpu:
        marks.append(pytest.mark.timeout(0 if budgeted else GPU_TIMEOUT_S))
    return marks


def _is_suite(module: Any) -> bool:
    return getattr(module, "__name__", "") == SUITE_MODULE


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if _is_suite(metafunc.module) and "spec_case" in metafunc.fixturenames:
        cases = metafunc.config.stash[_CASES]
        budgeted = settings.load().budget_factor > 0
        params = [pytest.param(c, id=c.name, marks=_marks(c, budgeted)) for c in cases]
        metafunc.parametrize("spec_case", params)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Nothing selected: deselect the suite's test rather than show an empty-parameter skip. Only the
    suite's own items: the hook sees every test of the session."""
    if config.stash[_CASES]:
        return
    dropped = [i for i in items if _is_suite(getattr(i, "module", None))]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i not in dropped]


@pytest.fixture(scope="session")
def spec_session(request: pytest.FixtureRequest) -> Iterator[Engine]:
    config = request.config
    try:
        s = open_session(config.stash[_SELECTOR], config.stash[_CASES], shape=config.stash[_SHAPE])
    except UserError as exc:
        pytest.exit(f"error: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)  # run-tier: bad input (2)
    watching = config.pluginmanager.get_plugin("specsuite-case-lines") or config.pluginmanager.get_plugin(
        "specsuite-worker-lines"
    )
    if watching is not None:
        s.phase = watching.heartbeat.phase  # the case's steps, as its line says them
    yield s
    finish_session(s, _unstarted(request, s))
    if s.part is None:
        config.stash[_FINISHED] = Finished(s.results.dir, s.verdict, s.result_lines)


def _unstarted(request: pytest.FixtureRequest, s: Engine) -> list[str]:
    """The cases an interrupted run collected and never reached (a parallel run's: the controller's merge
    finds them)."""
    if s.part is not None or request.session.exitstatus != pytest.ExitCode.INTERRUPTED:
        return []
    done = s.results.run.cases
    return [n for n in request.config.stash.get(_COLLECTED, []) if n not in done]


def pytest_collection_finish(session: pytest.Session) -> None:
    """The cases this session runs, after -k and the like (a parallel run's controller hears them from
    its workers: ``pytest_xdist_node_collection_finished``)."""
    names = [n for i in session.items if (n := case_name(i.nodeid)) is not None]
    session.config.stash[_COLLECTED] = names


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's LoadGroupScheduling, told the group of each case (its target) rather than reading it from a
    node id suffix that pytest 9.2 drops (pytest-xdist issue 1386)."""
    cases = config.stash.get(_CASES, None)
    if not cases or config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    target = {c.name: c.target for c in cases}

    class ByTarget(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            name = nodeid.rpartition("[")[2].partition("]")[0]
            return target.get(name) or super()._split_scope(nodeid)

    return ByTarget(config, log)


def _controller(config: pytest.Config) -> bool:
    return config.pluginmanager.has_plugin("dsession") and bool(config.stash.get(_CASES, None))


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_T0] = time.monotonic()
    if session.config.stash[_CASES]:
        # SIGTERM (a runner cancelling the job) ends the run like Ctrl-C: the interrupted case is recorded,
        # servers are stopped, results.json and summary.md are written. At session start, after every
        # plugin's configure: pytest's own sys.unraisablehook, which ours passes on to, is in place by then.
        procs.interrupt_on_sigterm()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """The cases the workers collected (after -k and the like): each must be in the merged run."""
    node.config.stash[_COLLECTED] = [n for i in ids if (n := case_name(i)) is not None]


def _result_lines(run: Any) -> list[str]:
    return [spec_result_line(r) for r in run.cases.values() if r.drafted is not None]


def merge_workers(config: pytest.Config, interrupted: bool) -> Finished | None:
    """The controller's end of a parallel run: the workers' parts as one run, judged once."""
    options = settings.load()
    out = Path(str(options.results_dir))
    found = sorted((out / "parts").glob("*.json"))
    if not found:
        return None
    parts = [(f.name, load_run(f)) for f in found]
    check_parts(parts)
    why = (
        "the run was interrupted before this case finished"
        if interrupted
        else "no worker reported this case: its worker died (see the pytest log)"
    )
    ran = config.stash.get(_COLLECTED, None) or [c.name for c in config.stash[_CASES]]
    expected = [n for n in config.stash[_SHAPE].planned if n in ran]  # the selection's order, as a serial run
    run = merge_runs(
        [r for _, r in parts],
        run_id=parts[0][1].run_id,
        shard=parts[0][1].shard,
        expected=expected,
        missing=lambda n: not_run(n, why, interrupted=interrupted),
    )
    run.finished, run.wall_s = utc_now(), round(time.monotonic() - config.stash[_T0], 2)
    judged = finish_run(RunResults(out, run, timed=False), options)
    shutil.rmtree(out / "parts", ignore_errors=True)
    return Finished(out, judged, _result_lines(run))


@pytest.hookimpl(trylast=True)  # after xdist's own: its workers are down and their parts written
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run is green only if some selected case ran and none failed: all-skipped is a failure."""
    config = session.config
    if _controller(config):
        try:
            done = merge_workers(config, interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            done = None
        if done is not None:
            config.stash[_FINISHED] = done
    f = config.stash.get(_FINISHED, None)
    if f is not None and f.verdict is not None and not f.verdict.green and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    f = config.stash.get(_FINISHED, None)
    if f is None:
        return
    if f.lines:
        terminalreporter.section("speculative decoding results")
        for line in f.lines:
            terminalreporter.write_line(line)


class VerdictLines:
    """The run's last lines: where its results are and its verdict, after everything pytest prints (its
    summary, a Ctrl-C's banner): a plugin of its own, so that run-tier, which prints them after summary.md,
    can leave it out (``-p no:specsuite-verdict``)."""

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        f = config.stash.get(_FINISHED, None)
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if f is None or reporter is None:
            return
        reporter.write_line(f"results: {f.dir}")
        if f.verdict is not None:
            reporter.write_line(f"verdict: {f.verdict.headline}")
            for line in f.verdict.attention:
                reporter.write_line(f"  ! {line}")
