"""The suite's pytest plugin (entry point ``pytest11``): cases from SPEC_METHODS as tests, one Session for
the run, its verdict as the session's exit status.

``SPEC_METHODS`` is a tier (smoke, synthetic, compact, nightly, all) or a comma list of case names; unset
or empty selects nothing, an unknown name is a usage error listing the valid ones. ``specsuite run-tier``
sets it (and SPEC_RESULTS_DIR and the run's options) and runs ``test_speculative.py`` of this package. The
plugin is loaded into every pytest session of an environment that has specsuite installed, so it touches
only its own test (``spec_case``, ``spec_session``) and reads the cases file only when a run selects cases.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from specsuite.cases.schema import Case, load_cases, select_cases
from specsuite.common import paths, settings
from specsuite.common.errors import UserError
from specsuite.models.lock import load_lock
from specsuite.suite.runner import Session
from specsuite.suite.session import finish_session, open_session

GPU_TIMEOUT_S = 3600  # a 41 GiB target loads for minutes; the suite's default (900 s) is for CPU tiers
SUITE_MODULE = "specsuite.suite.test_speculative"
_CASES = pytest.StashKey[list[Case]]()
_SELECTOR = pytest.StashKey[str]()
_SESSION = pytest.StashKey[Session]()
MARKERS = (
    "suite: the speculative-decoding suite itself, selected by SPEC_METHODS",
    "heavy: needs a GPU and multi-GiB models (compact, nightly, all tiers)",
)


def _sigterm_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    try:
        selector = settings.load().methods.strip()
        lock = load_lock().names() if selector and paths.MODELS_LOCK.is_file() else None
        config.stash[_CASES] = select_cases(load_cases(lock_names=lock), selector) if selector else []
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_SELECTOR] = selector
    if config.stash[_CASES]:
        # SIGTERM (a runner cancelling the job) ends the run like Ctrl-C: the interrupted case is recorded,
        # servers are stopped, results.json and summary.md are written.
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)


def _marks(case: Case) -> list[Any]:
    marks = [pytest.mark.suite]
    if case.gpu:
        marks += [pytest.mark.heavy, pytest.mark.timeout(GPU_TIMEOUT_S)]
    return marks


def _is_suite(module: Any) -> bool:
    return getattr(module, "__name__", "") == SUITE_MODULE


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if _is_suite(metafunc.module) and "spec_case" in metafunc.fixturenames:
        cases = metafunc.config.stash[_CASES]
        metafunc.parametrize("spec_case", [pytest.param(c, id=c.name, marks=_marks(c)) for c in cases])


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
def spec_session(request: pytest.FixtureRequest) -> Iterator[Session]:
    try:
        s = open_session(request.config.stash[_SELECTOR], request.config.stash[_CASES])
    except UserError as exc:
        pytest.exit(f"error: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)  # run-tier: bad input (2)
    request.config.stash[_SESSION] = s
    yield s
    finish_session(s)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run is green only if some selected case ran and none failed: all-skipped is a failure."""
    s = session.config.stash.get(_SESSION, None)
    if s is not None and s.verdict is not None and not s.verdict.green and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    s = config.stash.get(_SESSION, None)
    if s is None:
        return
    if s.result_lines:
        terminalreporter.section("speculative decoding results")
        for line in s.result_lines:
            terminalreporter.write_line(line)
    if s.verdict is not None:
        terminalreporter.write_line(f"verdict: {s.verdict.headline}")
        for line in s.verdict.attention:
            terminalreporter.write_line(f"  ! {line}")
    terminalreporter.write_line(f"results: {s.results.dir}")
