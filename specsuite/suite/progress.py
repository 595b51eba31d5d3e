"""What a run says while it runs: one line per case as it starts and one as it ends (its name, how long it
took, its verdict), and in between what the case is doing now (the engine's ``phase`` hook): which server
is loading, which request of the cold pass or of a round is in flight. pytest's dots say neither which case
runs nor for how long, and a case of the smoke tier took minutes on a loaded machine with nothing on screen
but its first line. With ``-v`` pytest's own line per test stays and these are not printed.

On a terminal the case's line is rewritten in place every second; in a log (not a terminal: CI) the
case's line is printed again every ``HEARTBEAT_S`` seconds once the case has run that long, so a fast case
adds nothing and a slow one shows it is alive::

    [ 3/38] tiny-mtp-fixed ...
    [ 3/38] tiny-mtp-fixed: passed in 0.4 s (accept rate 1.0000, speedup 2.79)
    [1/8] ngram-simple ... cold pass, request 2 of 3 (30.1 s)
    [1/8] ngram-simple ... round 1 of 1, request 4 of 6 (1 min 0 s)

In a parallel run the controller prints the start and end lines as its workers report, each naming its
case, and each worker prints its own case's line every ``HEARTBEAT_S`` seconds (several workers cannot
share one line that is rewritten).

The lines go to a copy of the standard output (or, in a worker, of the standard error) taken when the run
is configured: while a case runs pytest captures the process's own, and a line written there would land in
the case's captured output instead of on screen.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

import pytest

_TAG = re.compile(r"\[([a-z0-9_-]+)\]")  # test_speculative's "[reason] message"
_SHOWN = (("accept_rate", "accept rate", ".4f"), ("speedup", "speedup", ".2f"))
HEARTBEAT_S = 30.0  # a log's line while a case runs: a 9-minute case adds 18 lines, a 1-second one none
TICK_S = 1.0  # a terminal's line: rewritten this often


class Counted(Protocol):
    """A server whose answered requests a step counts (``server.process.LlamaServer``)."""

    answered: int


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


@dataclass
class Step:
    """What a case is doing now: a step's words, and the requests it sends (``requests``, 0: not counted)
    to ``servers``, counted from their answers since the step began (``marks``)."""

    what: str
    servers: Sequence[Counted] = ()
    requests: int = 0
    marks: list[int] = field(default_factory=list)

    @classmethod
    def begin(cls, what: str, servers: Sequence[Counted] = (), requests: int = 0) -> Step:
        return cls(what, tuple(servers), requests, [s.answered for s in servers])

    def text(self) -> str:
        """``cold pass, request 3 of 12``: the request in flight, never past the last."""
        if self.requests <= 1:  # one request (the chat request, a warm-up): its words say it
            return self.what
        done = sum(s.answered for s in self.servers) - sum(self.marks)
        return f"{self.what}, request {min(done + 1, self.requests)} of {self.requests}"


@dataclass
class Running:
    """The case in progress: its counter, its name, when it started, its step."""

    counter: str
    name: str
    t0: float
    step: Step | None = None
    said: float = 0.0  # when a log last got its line

    def line(self, now: float) -> str:
        doing = f" {self.step.text()}" if self.step else ""
        return f"{self.counter} {self.name} ...{doing} ({elapsed(now - self.t0)})"


class Screen:
    """Where the lines go: a copy of the standard output (``fd`` 1, or 2 in a worker), taken before pytest
    captures it; on a terminal the running case's line is rewritten in place, in a log printed whole."""

    def __init__(self, fd: int) -> None:
        copy = os.dup(fd)
        self._file: TextIO = open(copy, "w", encoding="utf-8", errors="replace")  # noqa: SIM115 (close())
        self.tty = os.isatty(self._file.fileno()) and os.environ.get("TERM") != "dumb"
        self._lock = threading.Lock()
        self._pending = False  # a rewritten line is on screen, not yet ended
        self._gone = False  # the reader went away (a closed pipe): the run goes on, unseen

    def _width(self) -> int:
        """The terminal's columns (COLUMNS, else its size, else 80), less one: a line that fills the last
        column wraps on some terminals. Not shutil's: it asks file descriptor 1, which pytest captures."""
        columns = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else 0
        if not columns:
            try:
                columns = os.get_terminal_size(self._file.fileno()).columns
            except OSError:
                columns = 0
        return max((columns or 80) - 1, 20)

    def _write(self, text: str) -> None:
        if self._gone:
            return
        try:
            self._file.write(text)
            self._file.flush()
        except (OSError, ValueError):
            self._gone = True

    def line(self, text: str) -> None:
        """A line of its own (on a terminal: in place of the rewritten one)."""
        with self._lock:
            self._write(("\r\x1b[K" if self._pending else "") + text + "\n")
            self._pending = False

    def status(self, text: str) -> None:
        """The running case's line: rewritten on a terminal (cut to its width: a wrapped line cannot be),
        a line of its own in a log."""
        if not self.tty:
            self.line(text)
            return
        with self._lock:
            self._write("\r\x1b[K" + text[: self._width()])
            self._pending = True

    def close(self) -> None:
        with self._lock:
            if self._pending:
                self._write("\n")
            self._pending = False
            with contextlib.suppress(OSError):
                self._file.close()


class Heartbeat:
    """The running case's line, said again while it runs: every ``TICK_S`` on a terminal, every
    ``HEARTBEAT_S`` in a log. One daemon thread a session; ``phase`` is the engine's hook."""

    def __init__(self, screen: Screen, every_s: float) -> None:
        self.screen = screen
        self.every_s = every_s
        self.running: Running | None = None
        self._said = threading.Lock()  # a case's line is never said after the case ended
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, counter: str, name: str) -> None:
        now = time.monotonic()
        self.running = Running(counter, name, now, said=now)
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="specsuite-progress", daemon=True)
            self._thread.start()

    def end(self) -> Running | None:
        with self._said:
            running, self.running = self.running, None
        return running

    def phase(self, what: str, servers: Sequence[Counted] = (), requests: int = 0) -> None:
        """The engine's ``phase`` hook (measure.engine): what the case does from now on."""
        running = self.running
        if running is not None:
            running.step = Step.begin(what, servers, requests)

    def _beat(self) -> None:
        while not self._stop.wait(min(self.every_s, TICK_S)):
            with self._said:
                running, now = self.running, time.monotonic()
                if running is None or now - running.said < self.every_s:
                    continue
                running.said = now
                self.screen.status(running.line(now))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def every_s(config: pytest.Config) -> float:
    """How often a log gets a running case's line: the ``spec_progress_s`` ini option (plugin; ``-o
    spec_progress_s=10``), else ``HEARTBEAT_S``."""
    try:
        value = float(config.getini("spec_progress_s"))
    except (ValueError, TypeError):
        raise pytest.UsageError(
            "spec_progress_s must be a number of seconds, e.g. -o spec_progress_s=30"
        ) from None
    if not 0 < value < 1e6:
        raise pytest.UsageError("spec_progress_s must be a number of seconds > 0, e.g. -o spec_progress_s=30")
    return value


def screen_fd(config: pytest.Config) -> int:
    """A worker's standard output goes nowhere (xdist keeps it); its standard error reaches the run's."""
    return 2 if hasattr(config, "workerinput") else 1


class CaseLines:
    """The pytest plugin that prints the lines (registered by ``plugin`` for the suite's own runs)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.total = 0
        self.started: dict[str, tuple[str, float]] = {}  # node id -> (its counter, when it started)
        self.ended: dict[str, tuple[str, str]] = {}  # node id -> its verdict so far
        self.count = 0
        self.screen = Screen(screen_fd(config))
        self.heartbeat = Heartbeat(self.screen, TICK_S if self.screen.tty else every_s(config))
        self.header: list[str] = []  # said once, as the first case starts (plugin: the time budget)

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
        for line in self.header:  # before the first case (none: -k selected nothing, nothing is said)
            self.screen.line(line)
        self.header = []
        self.count += 1
        width = len(str(self.total or self.count))
        counter = f"[{self.count:>{width}}/{self.total or '?'}]"
        self.started[nodeid] = (counter, time.monotonic())
        if self._controller():  # several cases at once: whole lines, each naming its case
            self.screen.line(f"{counter} {name} ...")
            return
        self.heartbeat.start(counter, name)
        (self.screen.status if self.screen.tty else self.screen.line)(f"{counter} {name} ...")

    def _controller(self) -> bool:
        """An xdist controller runs no case: its workers say what theirs do."""
        return self.config.pluginmanager.has_plugin("dsession")

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
        self.heartbeat.end()
        counter, t0 = self.started.pop(nodeid)
        said, detail = self.ended.pop(nodeid, ("ended", ""))
        took = elapsed(time.monotonic() - t0)
        self.screen.line(f"{counter} {case_name(nodeid)}: {said} in {took}{f' {detail}' if detail else ''}")

    def pytest_keyboard_interrupt(self) -> None:
        """The case a Ctrl-C (or SIGTERM) stopped: its line too, before pytest's own summary."""
        self.heartbeat.end()
        for nodeid, (counter, t0) in list(self.started.items()):
            took = elapsed(time.monotonic() - t0)
            self.screen.line(f"{counter} {case_name(nodeid)}: interrupted after {took}")
        self.started.clear()

    def pytest_unconfigure(self) -> None:
        self.heartbeat.stop()
        self.screen.close()


class WorkerLines:
    """A worker of a parallel run: its running case's line every ``HEARTBEAT_S`` on the run's standard
    error (the controller prints the start and end lines)."""

    def __init__(self, config: pytest.Config) -> None:
        self.screen = Screen(screen_fd(config))
        self.screen.tty = False  # several workers share the screen: whole lines only
        self.heartbeat = Heartbeat(self.screen, every_s(config))
        self.worker = str(config.workerinput["workerid"]) if hasattr(config, "workerinput") else ""

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if (name := case_name(nodeid)) is not None:
            self.heartbeat.start(f"[{self.worker}]", name)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.heartbeat.end()

    def pytest_unconfigure(self) -> None:
        self.heartbeat.stop()
        self.screen.close()
