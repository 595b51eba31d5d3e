"""What every case of one run shares: the binary, the results document, its servers (each started and
stopped here, the speculation-off one kept while consecutive cases share it), the np-1 references, and what
the harness hands in (the history gate, whether what the binary lacks is in it yet).
``runner.run_case(case, engine)`` measures one case with it; nothing here knows pytest.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from specsuite.cases.schema import Case
from specsuite.common.errors import UserError
from specsuite.common.settings import Settings
from specsuite.measure import judge, observe
from specsuite.measure.argv import runs_on_cpu
from specsuite.measure.cold import of_case as cold_of_case
from specsuite.measure.concurrency import Reference
from specsuite.measure.outcome import Completion
from specsuite.measure.plain import PlainServer
from specsuite.measure.streams import warm_up
from specsuite.models.store import locate
from specsuite.results.document import RunResults
from specsuite.results.record import NOT_IN_BUILD, CaseRecord, Status
from specsuite.results.verdict import Verdict
from specsuite.server.metrics import Delta
from specsuite.server.probe import Capabilities
from specsuite.server.process import Command, LlamaServer, ServerFailed, start_server
from specsuite.server.resolver import ResolverCaps, caps_from_probe
from specsuite.server.workers import Place

# On a CPU build llama.cpp's threads meet at an OpenMP barrier hundreds of times a token, and the first one
# there spins up to libgomp's 300000 rounds (about 15 ms) before it sleeps. On a machine busier than its
# cores the thread it waits for is off the CPU meanwhile: a smoke case took up to 40 times its idle time
# (issue 51), and `--poll 0` does not reach it (an OpenMP build compiles ggml's own polling out). 1000
# rounds is what libgomp spins when threads outnumber CPUs; idle it measured as fast as the default, under
# load as fast as one thread (docs/benchmarks.md). Every server of a run gets it, both sides of a
# comparison alike; a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
CPU_SPIN = {"GOMP_SPINCOUNT": "1000"}
OMP_WAITS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

# What an np-1 reference is the output of: the one-slot command (port 0), the prompt set, n_predict.
Np1Key = tuple[tuple[str, ...], str, int]
# A speculation-off server: the non-speculative argv (port 0), the GPUs, the pinned CPUs (measure.plain).
PlainKey = tuple[tuple[str, ...], int, tuple[int, ...]]


class CaseEnd(Exception):
    """How a case ended when not passed: status (failed, skipped, error), reason, message."""

    def __init__(self, status: Status, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


# What a server's failure makes of the case, by the server's role. The speculative path under test failing
# (the case's own server, its np-1 reference, a server of its sequence) is the case's failure; the
# speculation-off server failing leaves nothing to compare against: an error of the measurement, not a
# verdict on speculation. (A binary that predates the case's model ends it as not in this build:
# Engine.start.)
SERVER_ROLES: dict[str, tuple[Status, str]] = {
    "case": ("failed", ""),
    "reference": ("failed", "the np-1 reference server failed: "),
    "sequence": ("failed", "a server of the case's sequence failed: "),
    "plain": ("error", "the speculation-off server failed: "),
}


def server_end(exc: ServerFailed, role: str) -> CaseEnd:
    """The one place a ``ServerFailed`` becomes a case's end."""
    status, prefix = SERVER_ROLES[role]
    return CaseEnd(status, exc.reason, f"{prefix}{exc}")


# The gate against history: (case, record, whether the case already failed) -> failures; the harness
# installs it when it has one (suite.gate).
Gate = Callable[[Case, CaseRecord, bool], list[judge.Failure]]
# Whether what the binary lacks is not in its build yet: (case name, what) -> (yes, what to say); the
# harness hands it in (suite.vintage: it reads the history).
Vintage = Callable[[str, str], tuple[bool, str]]


class Phase(Protocol):
    """What a case is doing now, for whoever shows it (the harness hands in suite.progress's): the step,
    and the ``requests`` it sends to ``servers`` (counted from their answers; 0: not counted)."""

    def __call__(self, what: str, servers: Sequence[LlamaServer] = (), requests: int = 0) -> None: ...


def unwatched(what: str, servers: Sequence[LlamaServer] = (), requests: int = 0) -> None:
    """No one shows the steps (an Engine the harness did not hand a Phase: bench, the tests)."""


@dataclass
class Engine:
    """What every case of one run shares: the binary, the results document, the speculation-off server."""

    caps: Capabilities
    results: RunResults
    options: Settings = field(default_factory=Settings)  # how the run judges (strict, repeat, rtol, ...)
    gate: Gate | None = None
    result_lines: list[str] = field(default_factory=list)
    verdict: Verdict | None = None  # set once, when the run ends
    place: Place | None = None  # a parallel run: this worker's GPUs and ports
    part: str | None = None  # a worker of a parallel run: its results are a part of the run's
    _base: tuple[PlainKey, LlamaServer] | None = None
    _base_tokens: dict[tuple[PlainKey, str, int, float, int], list[Completion]] = field(default_factory=dict)
    np1: dict[Np1Key, Reference] = field(default_factory=dict)  # the np-1 cold passes of this run
    # the f16 cold passes of this run's KV axes (measure.kvaxis: its Key)
    kv_refs: dict[tuple[tuple[str, ...], str, int, int], Reference] = field(default_factory=dict)
    vintage: Vintage | None = None  # the binary against the pin: what it lacks may not exist yet
    # a case's earlier statuses on this setup, newest first (the harness's history): whether an
    # intermittent known bug that did not show has stayed away long enough to be called fixed
    known_history: Callable[[str], list[str]] | None = None
    # the binary is an older build than the pin the cases (and their known bugs) are written against: a
    # known bug that does not show there is not there yet, not fixed
    older_than_pin: bool = False
    phase: Phase = unwatched  # the case's steps as they begin (suite.progress shows them)
    # what every case asks of the binary and the machine, worked out once a run
    resolver_caps: ResolverCaps = field(init=False)  # the front ends' view of the probe (mode cases)
    pinned_cpu: frozenset[int] | None = field(init=False)  # where a pin_cpu case's servers run (cpus)

    def __post_init__(self) -> None:
        self.resolver_caps = caps_from_probe(self.caps)
        on_cpu = self.speed and runs_on_cpu(self.caps)
        self.pinned_cpu = frozenset({max(os.sched_getaffinity(0))}) if on_cpu else None

    @property
    def flag_keys(self) -> dict[str, str]:
        """Every spelling of a configuration flag -> its key (a case's config.passed)."""
        return observe.spellings(self.caps.defaults)

    @property
    def gpu(self) -> bool:
        return self.caps.backend != "cpu" and bool(self.caps.gpus)

    @property
    def speed(self) -> bool:
        """Whether speed is measured: not when cases run side by side on shared cores (--workers)."""
        return self.options.workers == 1

    def server_env(self, case: Case) -> dict[str, str]:
        """What a case's servers see: the first ``case.gpus`` GPUs of this worker's place; on a CPU build
        OpenMP's short spin (``CPU_SPIN``)."""
        env = self.place.env(case.gpus) if self.place is not None else {}
        if runs_on_cpu(self.caps) and not any(k in os.environ for k in OMP_WAITS):
            env = {**env, **CPU_SPIN}
        return env

    def start(self, command: Command, log: Path, case: Case) -> LlamaServer:
        """A server of ``case`` on this worker's GPUs and ports (and on its one CPU: ``pin_cpu``).

        One that did not start because its binary knows no such model architecture (``binary_outdated``:
        the binary predates the target or the draft) ends the case as not in this build where the build
        predates the pin and no lower build measured the case here (``vintage``); any other failure is
        the caller's to judge (``ServerFailed``)."""
        ports = self.place.ports if self.place is not None else None
        try:
            return start_server(command, log, env=self.server_env(case), ports=ports, cpus=self.cpus(case))
        except ServerFailed as exc:
            if exc.reason == "binary_outdated" and self.vintage is not None:
                fresh, said = self.vintage(case.name, "model architecture")
                if fresh:
                    raise CaseEnd(NOT_IN_BUILD, exc.reason, f"{exc}{said}") from None
            raise

    @contextmanager
    def serving(self, command: Command, log: Path, case: Case) -> Iterator[LlamaServer]:
        """A server of ``case`` (``start``) for the length of a ``with``, stopped after it; one that did not
        start fails the case."""
        try:
            srv = self.start(command, log, case)
        except ServerFailed as exc:
            raise server_end(exc, "case") from None
        try:
            yield srv
        finally:
            srv.stop()

    def cpus(self, case: Case) -> frozenset[int] | None:
        """The one CPU both servers of a ``pin_cpu`` case run on, where speed is measured on the CPU: the
        last this process may use. Measured on the loaded 2-core machine (docs/speed.md): with both servers
        on one CPU the speed case's run medians varied by CV 8 %, free 21 % (one server of a run kept on
        the busier core); None: any CPU."""
        return self.pinned_cpu if case.pin_cpu else None

    def verify(self, case: Case) -> None:
        """The case's files in the model folder (models and dataset) are the locked ones, from their stamps
        (no hashing, no network): each recorded in the run's results; else the case ends here."""
        try:
            found = locate(case.models)
        except UserError as exc:  # its message ends with the command that fixes it
            raise CaseEnd("error", "model_missing_or_invalid", str(exc)) from None
        for m in found.values():
            self.results.add_model(m.name, m.sha256, m.size)

    def plain_server(self, base: PlainServer, case: Case) -> LlamaServer:
        """The speculation-off server of ``base`` (the case's command without its speculative flags, slots
        and context included, on as many GPUs as the case): started once, kept while consecutive cases
        share it.

        Warmed up once when started, like every case's server, so that no round measures a cold baseline
        (with one round the baseline goes first: a cold one would inflate the speedup)."""
        if self._base is not None and self._base[0] == base.key:
            return self._base[1]
        self.close()
        self.phase("loading the speculation-off server")
        srv = self.start(base.command, self.results.logs / f"baseline-{base.label}.log", case)
        self._base = (base.key, srv)
        self.results.add_plain_server(base.label, srv.command, self.results.rel(srv.log_path))
        self.phase("warm-up of the speculation-off server", (srv,), case.streams)
        try:
            warm_up(srv.connection, case.prompt_texts, case.streams)
        except BaseException:  # a baseline that fails its warm-up is not kept for the next case
            self.close()
            raise
        return srv

    def plain_tokens(self, base: PlainServer, case: Case, got: list[Completion]) -> list[Completion]:
        """The reference tokens of (baseline, prompt set, n_predict, temperature, streams): the first
        baseline round that ran."""
        key = (base.key, case.prompts, case.n_predict, case.temperature, case.streams)
        return self._base_tokens.setdefault(key, got)

    def np1_reference(
        self, case: Case, one_slot: Command, cold: Delta, comps: list[Completion]
    ) -> Reference | None:
        """A case with several slots: the np-1 output of its command (``one_slot``: its one-slot command),
        this run's, else measured now. A case with one slot is such an output: kept for the cases after it
        (the np-1 member of a sweep runs before its other members)."""
        key: Np1Key = (tuple(one_slot(0)), case.prompts, case.n_predict)
        if case.parallel == 1:
            self.np1.setdefault(key, Reference(f"{case.name} (this run)", comps, cold))
            return None
        if key not in self.np1:
            self.np1[key] = self._measure_np1(case, one_slot)
        return self.np1[key]

    def _measure_np1(self, case: Case, command: Command) -> Reference:
        """The cold pass of the case's command with one slot and one stream, on a fresh server (after the
        case's own stopped: one server of a case at a time)."""
        log = self.results.logs / f"{case.name}-np1.log"
        self.phase("loading the np-1 reference server")
        with self.serving(command, log, case) as srv:
            self.phase("np-1 reference: cold pass", (srv,), len(case.prompt_texts))
            try:
                got = cold_of_case(srv, case, streams=1)
            except ServerFailed as exc:
                raise server_end(exc, "reference") from None
        return Reference(
            f"measured for {case.name}: {self.results.rel(log)}", got.done.completions, got.delta
        )

    def close(self) -> None:
        if self._base is not None:
            self._base[1].stop()
            self._base = None
