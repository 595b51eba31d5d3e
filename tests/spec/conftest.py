"""The suite's pytest session: case selection from SPEC_METHODS, one Session for the run, its verdict.

``SPEC_METHODS`` is a tier (smoke, synthetic, compact, nightly, all) or a comma list of case names; unset
selects nothing, an unknown name is a usage error listing the valid ones. ``specsuite run-tier`` sets it
(and SPEC_RESULTS_DIR and the run's options); a direct ``pytest tests/spec`` run works the same way. All
the work is in the package (specsuite.suite.session, specsuite.suite.runner); this file maps it onto pytest.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specsuite.cases.schema import Case, load_cases, select_cases
from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.suite.runner import Session

GPU_TIMEOUT_S = 3600  # a 41 GiB target loads for minutes; the project default (900 s) is for CPU tiers
_CASES = pytest.StashKey[list[Case]]()
_SELECTOR = pytest.StashKey[str]()
_SESSION = pytest.StashKey[Session]()


def _lock_names() -> set[str] | None:
    if not paths.MODELS_LOCK.is_file():
        return None
    from specsuite.models.lock import load_lock

    return load_lock().names()


def _sigterm_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    selector = os.environ.get("SPEC_METHODS", "").strip()
    try:
        config.stash[_CASES] = select_cases(load_cases(lock_names=_lock_names()), selector)
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_SELECTOR] = selector
    if config.stash[_CASES]:
        # SIGTERM (a runner cancelling the job) ends the run like Ctrl-C: the interrupted case is recorded,
        # servers are stopped, results.json and summary.md are written.
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)


def _marks(case: Case) -> list[Any]:
    marks = [pytest.mark.suite, pytest.mark.integration]
    if case.gpu:
        marks += [pytest.mark.heavy, pytest.mark.slow, pytest.mark.timeout(GPU_TIMEOUT_S)]
    return marks


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = metafunc.config.stash[_CASES]
        metafunc.parametrize("case", [pytest.param(c, id=c.name, marks=_marks(c)) for c in cases])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """SPEC_METHODS unset (or empty) selects nothing: deselect rather than show an empty-parameter skip."""
    if not config.stash[_CASES]:
        # Only this folder's suite items: the hook sees every test of the session, and the project's own
        # parametrized tests must never be dropped with them.
        here = Path(__file__).parent
        dropped = [
            i for i in items if i.path.is_relative_to(here) and "case" in getattr(i, "fixturenames", ())
        ]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [i for i in items if i not in dropped]


@pytest.fixture(scope="session")
def session(request: pytest.FixtureRequest) -> Iterator[Session]:
    from specsuite.suite.session import finish_session, open_session

    try:
        s = open_session(request.config.stash[_SELECTOR], request.config.stash[_CASES])
    except UserError as exc:
        pytest.exit(f"error: {exc}", returncode=2)
    request.config.stash[_SESSION] = s
    yield s
    finish_session(s)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run is green only if some selected case ran and none failed: all-skipped is a failure."""
    s = session.config.stash.get(_SESSION, None)
    if s is None:
        return
    from specsuite.results.document import verdict

    v = verdict(s.results.doc)
    if not v.green and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    s = config.stash.get(_SESSION, None)
    if s is None:
        return
    from specsuite.results.document import verdict

    if s.result_lines:
        terminalreporter.section("speculative decoding results")
        for line in s.result_lines:
            terminalreporter.write_line(line)
    v = verdict(s.results.doc)
    terminalreporter.write_line(f"verdict: {v.headline}")
    for line in v.attention:
        terminalreporter.write_line(f"  ! {line}")
    terminalreporter.write_line(f"results: {s.results.dir}")
