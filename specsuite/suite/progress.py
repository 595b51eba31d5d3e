"""One line per case as it starts and one as it ends (its name, how long it took, its verdict), on a
terminal and in a CI log alike: pytest's dots say neither which case runs nor for how long, and a case of
the smoke tier takes minutes on a loaded machine. The dots are left out (the lines say it); with ``-v``
pytest's own line per test stays and these are not printed.

    [ 3/38] tiny-mtp-fixed ...
    [ 3/38] tiny-mtp-fixed: passed in 0.4 s (accept rate 1.0000, speedup 2.79)
    [ 4/38] tiny-eagle3-fixed: failed in 0.5 s (floor)

In a parallel run the controller prints them as its workers report, each line naming its case.
"""

from __future__ import annotations

import re
import time
from collections.abc import Generator
from typing import Any

import pytest

_TAG = re.compile(r"\[([a-z0-9_-]+)\]")  # test_speculative's "[reason] message"
_SHOWN = (("accept_rate", "accept rate", ".4f"), ("speedup", "speedup", ".2f"))


def case_name(nodeid: str) -> str | None:
    """The case a node id runs (``...::test_speculative[NAME]``), or None for any other test."""
    _, found, rest = nodeid.partition("::test_speculative[")
    return rest.removesuffix("]") if found else None


def elapsed(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60)} s"


NOT_IN_BUILD_MARK = "not in this build:"  # what test_speculative's skip of a not_in_build case says
KNOWN_BUG_MARK = "known upstream bug:"  # ... and of a known_bug case (measure.known)


def _reason(report: pytest.TestReport) -> str:
    found = _TAG.search(report.longreprtext)
    return f"({found[1]})" if found else ""


def verdict(report: pytest.TestReport) -> tuple[str, str]:
    """How a case ended, from its report, and what to add after its time: passed (its numbers), failed or
    skipped (the reason), an error in setup or teardown (a step of the harness broke: pytest shows it)."""
    if report.passed:
        props = dict(report.user_properties)
        shown = [f"{label} {props[key]:{fmt}}" for key, label, fmt in _SHOWN if key in props]
        return "passed", f"({', '.join(shown)})" if shown else ""
    if report.skipped:
        said = "not in this build" if NOT_IN_BUILD_MARK in report.longreprtext else "skipped"
        said = "known bug, still present" if KNOWN_BUG_MARK in report.longreprtext else said
        return said, _reason(report)
    if report.when == "call":
        return "failed", _reason(report)
    return f"error in {report.when}", ""


class CaseLines:
    """The pytest plugin that prints the lines (registered by ``plugin`` for the suite's own runs)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.total = 0
        self.started: dict[str, tuple[str, float]] = {}  # node id -> (its counter, when it started)
        self.ended: dict[str, tuple[str, str]] = {}  # node id -> its verdict so far
        self.count = 0

    def _write(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)
            reporter.flush()  # a CI log gets each line as it happens, not when a buffer fills

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.showfspath = False  # no "test_speculative.py" before the dots that are not written

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = sum(case_name(i.nodeid) is not None for i in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.total = sum(case_name(i) is not None for i in ids)

    @pytest.hookimpl(wrapper=True)
    def pytest_report_teststatus(
        self, report: pytest.TestReport
    ) -> Generator[None, tuple[str, str, str], tuple[str, str, str]]:
        """pytest's own status, without its letter for a case: the case's line says it."""
        status = yield
        if status and case_name(report.nodeid):
            return (status[0], "", status[2])
        return status

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if (name := case_name(nodeid)) is None:
            return
        self.count += 1
        width = len(str(self.total or self.count))
        counter = f"[{self.count:>{width}}/{self.total or '?'}]"
        self.started[nodeid] = (counter, time.monotonic())
        self._write(f"{counter} {name} ...")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """The call's outcome, or the first step that did not pass (a failed setup, a failed teardown)."""
        if report.nodeid not in self.started or (report.when != "call" and report.passed):
            return
        prior = self.ended.get(report.nodeid)
        if prior is None or (prior[0] == "passed" and report.failed):
            self.ended[report.nodeid] = verdict(report)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        if nodeid not in self.started:
            return
        counter, t0 = self.started.pop(nodeid)
        said, detail = self.ended.pop(nodeid, ("ended", ""))
        took = elapsed(time.monotonic() - t0)
        self._write(f"{counter} {case_name(nodeid)}: {said} in {took}" + (f" {detail}" if detail else ""))

    def pytest_keyboard_interrupt(self) -> None:
        """The case a Ctrl-C (or SIGTERM) stopped: its line too, before pytest's own summary."""
        for nodeid, (counter, t0) in list(self.started.items()):
            self._write(f"{counter} {case_name(nodeid)}: interrupted after {elapsed(time.monotonic() - t0)}")
        self.started.clear()
