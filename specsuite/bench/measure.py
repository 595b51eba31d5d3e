"""The measurements of ``specsuite bench``: each mode resolved, each distinct configuration measured once.

A mode is resolved by the front end's resolver (probe + GGUF metadata), so the bench runs exactly what a
user of that mode gets. Two modes that resolve to the same flags (``mtp`` on a model without heads falls
back to ``--spec-default`` like ``auto``) would start the same command: it is measured once and both rows
point at that one measurement. Per configuration: one server; its cold pass (the prompt set on the fresh
server: acceptance, counted by ``/metrics`` exactly as the suite's cases count it, ``measure.cold``), which
also warms it; then N rounds of the prompt set, tokens/s per round from the server's own ``timings``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsuite.cases.schema import Case
from specsuite.measure import engaged
from specsuite.measure.argv import server_command
from specsuite.measure.cold import cold_pass
from specsuite.measure.outcome import Prompts, decode_tps, run_prompts
from specsuite.measure.plain import without_speculation
from specsuite.server import metrics
from specsuite.server.probe import Capabilities, MissingFlag
from specsuite.server.process import LlamaServer, ServerFailed, start_server
from specsuite.server.resolver import Resolution, caps_from_probe, resolve_for_model

Say = Callable[[str], None]
DRAFT_FLAG = "--model-draft"  # the resolver's spelling of a separate MTP drafter
INTERRUPTED = "interrupted"  # the reason of a row Ctrl-C or SIGTERM ended the bench in, or before


@dataclass(frozen=True)
class Workload:
    """What every configuration is measured on: the same target, prompts, length and rounds."""

    caps: Capabilities
    target: Path
    prompts: Prompts
    n_predict: int
    repeat: int
    logs: Path
    drafter: Path | None = None  # a separate MTP drafter, handed to the resolver


@dataclass
class Measurement:
    """One configuration's numbers, or why there are none (``reason``: failure.classify's vocabulary)."""

    flags: tuple[str, ...]
    tps: list[float] = field(default_factory=list)  # decode tokens/s of each round, after the cold pass
    delta: metrics.Delta | None = None  # the cold pass's counters
    command: list[str] | None = None
    log: Path | None = None
    reason: str | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None and bool(self.tps)

    @property
    def status(self) -> str:
        """measured, interrupted (its rounds so far are kept, but judge nothing), or failed."""
        return "measured" if self.ok else INTERRUPTED if self.reason == INTERRUPTED else "failed"

    @property
    def median(self) -> float | None:
        return statistics.median(self.tps) if self.ok else None

    @property
    def spread(self) -> float | None:
        """max - min over the rounds: the whole range a repeat landed in."""
        return max(self.tps) - min(self.tps) if self.ok else None

    @property
    def accept_rate(self) -> float | None:
        return self.delta.accept_rate if self.delta is not None else None

    @property
    def accept_len(self) -> float | None:
        return self.delta.accept_len if self.delta is not None else None

    def numbers(self) -> dict[str, Any]:
        d = self.delta
        counters: dict[str, Any] = {"drafted": None, "accepted": None, "drafts": None, "per_position": []}
        if d is not None:
            per_pos = list(d.per_position) if d.per_position_exported else []
            counters = {
                "drafted": d.drafted,
                "accepted": d.accepted,
                "drafts": d.drafts,
                "per_position": per_pos,
            }
        return {
            "tps": self.tps,
            "tps_median": self.median,
            "tps_spread": self.spread,
            "tps_min": min(self.tps) if self.ok else None,
            "tps_max": max(self.tps) if self.ok else None,
            **counters,
            "accept_rate": self.accept_rate,
            "accept_len": self.accept_len,
            "sanity_errors": d.sanity_errors() if d is not None else [],
        }


@dataclass
class ModeRun:
    """One row of the bench: a mode, its resolution, and the measurement it got (maybe shared)."""

    mode: str
    resolution: Resolution
    measurement: Measurement
    shares_with: str | None = None  # the earlier mode whose measurement this row reuses


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM ended the measurements (its server already stopped): ``runs`` holds a row for
    every mode, the one in progress and those not reached with the reason ``interrupted``. Still a
    KeyboardInterrupt: once the report is written it goes on up to ``cli``, which says so and exits 130."""

    def __init__(self, runs: list[ModeRun], mode: str) -> None:
        super().__init__(f"interrupted while measuring {mode}")
        self.runs, self.mode = runs, mode


def resolve_modes(
    modes: list[str], caps: Capabilities, target: Path, gpu: bool, drafter: Path | None = None
) -> list[tuple[str, Resolution]]:
    """Every mode's flags, as the front end resolves them for this binary, model, drafter and device."""
    rcaps = caps_from_probe(caps)
    return [
        (m, resolve_for_model(m, caps=rcaps, model_path=target, gpu=gpu, mtp_draft_path=drafter))
        for m in modes
    ]


def command(work: Workload, flags: tuple[str, ...], port: int) -> list[str]:
    """The server of one configuration, as the suite runs a ``mode`` case: speculative flags make it a case
    (on a GPU build its draft or MTP head is offloaded like the target; a drafter gets the CPU build's
    no-polling rule), no flags is the suite's speculation-off baseline, exactly."""
    # A report-only mode case; with resolved flags, server_command reads only its (empty) server_args.
    case = None
    if flags:
        case = Case(name="bench", tier="smoke", target=work.target.name, mode="auto", uncalibrated=True)
    draft = work.drafter if DRAFT_FLAG in flags else None
    argv = server_command(work.caps, work.target, port, case, draft, flags)
    return argv if flags else without_speculation(work.caps, argv)  # off: the build's word for it too


def measure_modes(plans: list[tuple[str, Resolution]], work: Workload, say: Say) -> list[ModeRun]:
    """Measure each distinct flag set once, in the order the modes were given; BenchInterrupted (every
    row so far) on Ctrl-C or SIGTERM."""
    done: Done = {}
    runs: list[ModeRun] = []
    for i, (mode, res) in enumerate(plans):
        if (row := _shared(mode, res, done)) is not None:
            say(f"bench: {mode} resolves to the same flags as {row.shares_with}: sharing its measurement")
            runs.append(row)
            continue
        say(f"bench: {mode} -> {' '.join(res.flags) or '(no speculative flags)'}")
        got = Measurement(res.flags, log=work.logs / f"{mode.replace('+', '-')}.log")
        done[res.flags] = (mode, got)
        runs.append(ModeRun(mode, res, got))
        try:
            measure(got, work, say)
        except KeyboardInterrupt:
            got.reason, got.message = INTERRUPTED, "the bench was interrupted while measuring this mode"
            raise BenchInterrupted(runs + _not_reached(plans[i + 1 :], done), mode) from None
    return runs


Done = dict[tuple[str, ...], tuple[str, Measurement]]  # flags -> the first mode with them, its measurement


def _shared(mode: str, res: Resolution, done: Done) -> ModeRun | None:
    """The row of a mode whose flags an earlier mode's server already ran: that measurement, shared."""
    if res.flags not in done:
        return None
    first, shared = done[res.flags]
    return ModeRun(mode, res, shared, shares_with=first)


def _not_reached(plans: list[tuple[str, Resolution]], done: Done) -> list[ModeRun]:
    """The rows of the modes an interrupted bench did not reach (one with a started server's flags shares
    its measurement, as it would have)."""
    why = "the bench was interrupted before this mode"
    return [
        _shared(mode, res, done)
        or ModeRun(mode, res, Measurement(res.flags, reason=INTERRUPTED, message=why))
        for mode, res in plans
    ]


def measure(got: Measurement, work: Workload, say: Say) -> None:
    """One server with ``got.flags``: the cold pass (acceptance), N rounds (speed), into ``got``; a failure
    becomes its reason. Ctrl-C or SIGTERM (see procs.interrupt_on_sigterm) stops the server on its way up."""
    flags, log = got.flags, got.log
    assert log is not None
    try:
        command(work, flags, 0)  # a flag the binary lacks ends it here, before a server
        srv = start_server(lambda port: command(work, flags, port), log)
        try:
            got.command = srv.command
            _rounds(srv, work, got, say)
        finally:
            srv.stop()
    except (MissingFlag, ServerFailed) as exc:
        got.reason, got.message = exc.reason, str(exc)
    except metrics.MetricsError as exc:
        got.reason, got.message = "metrics", str(exc)
    if got.reason is not None:
        say(f"bench:   failed: {got.reason} (log: {log})")


def _rounds(srv: LlamaServer, work: Workload, got: Measurement, say: Say) -> None:
    got.delta = cold_pass(srv, [(None, work.prompts)], work.n_predict, 1, 0.0).delta  # acceptance
    mark, done = srv.metrics(), []
    for r in range(work.repeat):
        done += (answers := run_prompts(srv.post, work.prompts, work.n_predict))
        tps = decode_tps(answers)
        if tps is None:  # no timings: a number made up here would be worse than none
            got.reason, got.message = "no_tokens", "the server reported no decode time (timings.predicted_ms)"
            return
        got.tps.append(tps)
        say(f"bench:   round {r + 1}/{work.repeat}: {tps:.1f} tokens/s")
    if not got.flags:  # off: its counters decide whether it was plain decoding, not its flags
        counted = [got.delta, engaged.plain_counters(mark, srv.metrics(), done)]  # cold pass, rounds
        if found := next((f for d in counted if (f := engaged.baseline_speculated(d))), None):
            got.reason, got.message = found.reason, found.message
