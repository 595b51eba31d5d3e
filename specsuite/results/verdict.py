"""Whether a run may be called green, and everything that weakens it: computed once, when the run ends.

Green only if some selected case ran (passed or failed) and none failed, errored or was interrupted. An
interrupted run says so first (``INTERRUPTED: 6 of 8 case(s) finished; stopped in ...; not run: ...``). The
``attention`` lines (an impossible speed, skips, strict off, uncalibrated cases, missing counters, a GPU
tier without a GPU, a GPU build on the CPU, the relative gate off, an unrecorded history) follow the
headline, and a green
headline names them too (``PASSED, with warnings (STRICT OFF: 1 skipped; 1 UNCALIBRATED): ...``).
"""

from __future__ import annotations

import re

import msgspec

from specsuite.cases.schema import GATE_ROUNDS, GPU_TIERS
from specsuite.results.document import Run
from specsuite.results.merge import NOT_RUN
from specsuite.results.names import SHOWN, all_but, names_phrase
from specsuite.results.record import (
    KNOWN_BUG,
    NOT_IN_BUILD,
    STATUSES,
    CaseRecord,
    KnownBugRef,
    Status,
    bug_name,
)

ByStatus = dict[Status, list[CaseRecord]]
Weakening = tuple[str | None, list[str]]  # (its tag in a green headline or None, its attention lines)


class Verdict(msgspec.Struct, frozen=True):
    green: bool
    headline: str  # PASSED / FAILED with counts; a green one names what weakens it
    attention: list[str]  # what a run must still say loudly: skips, report-only cases, warnings


def verdict(run: Run) -> Verdict:
    """Green only if every selected case ran and none failed; whatever weakens a green is listed."""
    recs = list(run.cases.values())
    by = {s: [r for r in recs if r.status == s] for s in STATUSES}
    bad = by["failed"] + by["error"] + by["interrupted"]
    ran = by["passed"] + by["failed"] + by[KNOWN_BUG]
    weakening = _weakening(run, by)
    attention = [line for _, lines in weakening for line in lines]
    scope = f" ({'; '.join(s)})" if (s := _scope(run)) else ""
    failed = f"FAILED{scope}"
    if by["interrupted"]:
        return Verdict(False, _interrupted(f"INTERRUPTED{scope}", recs, by), attention)
    if not recs or not ran:
        why = "no case was selected" if not recs else "no selected case ran"
        return Verdict(False, f"{failed}: {why} ({_counts(by)})", attention)
    if bad:
        return Verdict(False, f"{failed}: {len(bad)} of {len(recs)} case(s): {_named(bad)}", attention)
    weak = [tag for tag, _ in weakening if tag]
    flag = f", with warnings ({'; '.join(weak)})" if weak else ""
    return Verdict(True, f"PASSED{flag}: {_counts(by)}", attention)


def _named(recs: list[CaseRecord]) -> str:
    """Failed or skipped cases with their reasons: each by name when few, else by reason, counted."""
    if len(recs) <= SHOWN:
        return ", ".join(f"{r.name} ({_why(r)})" for r in recs)
    by: dict[str, list[str]] = {}
    for r in recs:
        by.setdefault(r.reason or "?", []).append(r.name)
    return "; ".join(f"{why}: {names_phrase(names)}" for why, names in by.items())


def _why(r: CaseRecord) -> str:
    """A failed case's reason and, for a number that moved, what moved: ``regressed: block cost 3.27 ->
    26.93 ms per block, +720.2 % in plain decode steps, 4 rounds vs 4`` (history.regress, the most specific
    first) or ``speed: prefill 0.66x of plain < floor 0.80`` (a speed floor, measure.judge)."""
    moved = r.baseline.moved if r.reason == "regressed" and r.baseline is not None else []
    if moved:
        return f"{r.reason}: {moved[0]}" + (f"; and {len(moved) - 1} more" if len(moved) > 1 else "")
    said = next((x for x in (r.message or "").splitlines() if x.startswith("- [speed] ")), None)
    if r.reason == "speed" and said is not None:
        return f"{r.reason}: {said.removeprefix('- [speed] ').split(' (', 1)[0]}"
    return str(r.reason)


def _interrupted(head: str, recs: list[CaseRecord], by: ByStatus) -> str:
    """An interrupted run's headline: how far it got, the case it stopped in, the cases it never ran, and
    what failed before."""
    stopped = [r.name for r in by["interrupted"] if r.reason != NOT_RUN]
    never = [r.name for r in by["interrupted"] if r.reason == NOT_RUN]
    said = [f"{len(recs) - len(stopped) - len(never)} of {len(recs)} case(s) finished"]
    if stopped:
        said.append(f"stopped in {', '.join(stopped)}")
    if never:
        said.append(f"not run: {', '.join(never)}")
    if bad := by["failed"] + by["error"]:
        said.append(f"failed: {', '.join(f'{r.name} ({r.reason})' for r in bad)}")
    return f"{head}: {'; '.join(said)}"


def _scope(run: Run) -> list[str]:
    """What a red headline says too: the run is not a whole measured run."""
    return (["ACCEPTANCE ONLY"] if not run.run_options.speed else []) + (
        [f"SHARD {run.shard}"] if run.shard else []
    )


def _counts(by: ByStatus) -> str:
    return ", ".join(f"{len(v)} {k.replace('_', ' ')}" for k, v in by.items() if v) or "0 cases"


def _not_in_build(run: Run, by: ByStatus) -> list[Weakening]:
    """Cases an older build cannot run yet, and what a build could not give the cases it ran (counters
    from the timings, say): said once each, with the cases, not as failures."""
    out: list[Weakening] = []
    everyone = list(run.cases)
    if absent := by[NOT_IN_BUILD]:
        line = f"NOT IN THIS BUILD {len(absent)} (the build predates them; not failures): {_named(absent)}"
        out.append((f"{len(absent)} NOT IN THIS BUILD", [line]))
    lacks: dict[str, list[str]] = {}
    for r in run.cases.values():
        for what in r.not_in_build:
            lacks.setdefault(what, []).append(r.name)
    for what, names in lacks.items():
        out.append((None, [f"NOT IN THIS BUILD: {what}, in {all_but(names, everyone)}"]))
    return out


def _counter_warnings(recs: list[CaseRecord]) -> dict[str, list[str]]:
    """Per case, the warnings about counters the binary does not export."""
    found = {r.name: [w for w in r.warnings if "counter" in w] for r in recs}
    return {name: ws for name, ws in found.items() if ws}


def _gpu_tier_without_gpu(run: Run) -> bool:
    """--allow-cpu let a GPU tier run where the device is not a GPU (or the run does not say which).

    The cases' own tiers count too: a selector of case names records its tiers joined ("compact,smoke"),
    and "all" records GPU-tier cases."""
    tiers = {*str(run.tier or "").split(","), *(r.tier for r in run.cases.values())}
    on_cpu = run.device is None or str(run.device.device_class or "cpu").startswith("cpu")
    return run.run_options.allow_cpu and bool(tiers & set(GPU_TIERS)) and on_cpu


def gpu_binary_on_cpu(run: Run) -> str | None:
    """The backend of a GPU build (``cuda``, …) that ran on the CPU: it saw no GPU, ggml's init failed
    (``ggml_cuda_init: failed to initialize CUDA``) and every case ran on the CPU; None otherwise."""
    backend = run.binary.backend or "cpu"
    on_cpu = str(run.device_class or "").startswith("cpu")
    return backend if backend != "cpu" and on_cpu else None


def _implausible(run: Run) -> list[str]:
    """One line per case whose speed was impossible (measure.plausible): measured wrong, so not gated."""
    return [
        f"IMPLAUSIBLE SPEED, not gated (the measurement is wrong, not the method): {r.name}: "
        f"{r.implausible_speed.removeprefix('implausible_speed: ')}"
        for r in run.cases.values()
        if r.implausible_speed
    ]


# Failures that say what every other number of their case means, named in the first lines with their
# message (measure.engaged): the run is red already; these lines say why its speed is not a speed.
LIFE = {
    "baseline_speculated": "BASELINE SPECULATED, speed not gated",
    "spec_disengaged": "SPECULATION DISENGAGED, speed not gated",
}


_CRASH = re.compile(
    r"\[crashed: ([^\]\n]+)\]"
)  # server.process: "[crashed: killed by signal SIGABRT at f:l: m]"


def _crashes(run: Run) -> list[str]:
    """One line per case whose server was killed by a signal, with its abort line (file:line and message)
    where the log had one: a crash is named where it happened, not only as a reason."""
    out = []
    for r in run.cases.values():
        if r.reason == "crashed" and (m := _CRASH.search(r.message or "")) is not None:
            said = "known bug, still present" if r.status == KNOWN_BUG else r.status
            out.append(f"CRASHED ({said}): {r.name}: {m[1]}")
    return out


def _life(run: Run) -> list[str]:
    """One line per case a server's life failed (``LIFE``): the case and the failure's own message."""
    out = []
    for r in run.cases.values():
        for reason, head in LIFE.items():
            said = next((x for x in (r.message or "").splitlines() if x.startswith(f"- [{reason}] ")), None)
            if said is not None:
                out.append(f"{head}: {r.name}: {said.removeprefix(f'- [{reason}] ')}")
    return out


# (a green headline's tag, the attention line's head) per state of a known bug, in the order said
KNOWN_HEADS = {
    "fixed": ("FIXED", "FIXED upstream (the case passes)"),
    "present": ("KNOWN BUG", "KNOWN BUG, still present (not a failure)"),
    "not_seen": ("NOT SEEN", "KNOWN BUG not seen this run"),
    "absent": ("NOT YET", "KNOWN BUG not in this build yet (an older build than the pin; the case passes)"),
}


def _known_bugs(run: Run) -> list[Weakening]:
    """The upstream bugs the run's cases reproduce (measure.known): fixed first (a green worth knowing),
    then still present, then intermittent ones not seen this run; each bug once, with its cases."""
    by: dict[str, dict[tuple[int | None, str], list[tuple[str, KnownBugRef]]]] = {}
    for r in run.cases.values():
        if (ref := r.known_bug) is not None and ref.state != "other":
            by.setdefault(ref.state, {}).setdefault((ref.issue, ref.title), []).append((r.name, ref))
    out: list[Weakening] = []
    for state, (tag, head) in KNOWN_HEADS.items():
        bugs = by.get(state, {})
        lines = [f"{head}: {bug_name(issue, title)}: {', '.join(_seen(n, ref) for n, ref in cases)}"
                 for (issue, title), cases in bugs.items()]  # fmt: skip
        if lines:
            out.append((f"{len(lines)} {tag}", lines))
    return out


def _seen(name: str, ref: KnownBugRef) -> str:
    """A case of a known bug; an intermittent one's record of how often it showed and the clean streak."""
    if ref.seen is None or ref.clean_runs is None:
        return name
    k, n = ref.seen
    return (f"{name} (seen in {k} of {n} servers when measured; {ref.clean_runs} clean run(s) in a row, "
            f"FIXED after {ref.clean_needed})")  # fmt: skip


def _rounds(counts: list[int]) -> str:
    lo, hi = min(counts), max(counts)
    return f"{hi} round{'s' if hi > 1 else ''}" if lo == hi else f"{lo} to {hi} rounds"


def speed_gate_lines(run: Run) -> list[str]:
    """Whether the relative gate could judge any case's speed: it needs ``GATE_ROUNDS`` rounds a side
    (cases.schema.TIER_REPEAT, docs/speed.md). None gated: said first (``SPEED NOT GATED: 1 round``); some:
    which. Nothing where speed was not measured or the gate is off (their own lines say so)."""
    opts = run.run_options
    if not opts.speed or (run.options is not None and not opts.history):
        return []
    timed = {r.name: r.speed.repeat for r in run.cases.values() if r.speed is not None and r.speed.repeat}
    gated = [n for n, k in timed.items() if k >= GATE_ROUNDS and not run.cases[n].implausible_speed]
    rest = [k for n, k in timed.items() if n not in gated]
    if not timed or not rest:
        return []
    floors = [r.name for r in run.cases.values() if r.name in timed and r.floors.get("min_speedup")]
    held = f"; only min_speedup floors judge it ({names_phrase(floors, len(timed))})" if floors else ""
    if not gated:
        return [
            f"SPEED NOT GATED: {_rounds(rest)} a case; the relative gate judges speed from {GATE_ROUNDS} "
            f"(--repeat {GATE_ROUNDS}){held}"
        ]
    said = _rounds([timed[n] for n in gated])
    return [
        f"speed gated in {names_phrase(gated, len(run.cases))} ({said}); recorded, not gated, in "
        f"the other {f'{len(rest)} cases' if len(rest) > 1 else 'case'} ({_rounds(rest)} a case)"
    ]


def _weakening(run: Run, by: ByStatus) -> list[Weakening]:
    """What weakens the run, each as (its tag in a green headline or None, its attention lines)."""
    out: list[Weakening] = []
    opts = run.run_options
    out += _known_bugs(run)
    if life := _life(run) + _crashes(run):
        out.append((None, life))
    out += _not_in_build(run, by)
    if implausible := _implausible(run):
        out.append((f"IMPLAUSIBLE SPEED in {len(implausible)} case(s)", implausible))
    strict_off, skipped = run.options is not None and not opts.strict, by["skipped"]
    if skipped:
        line = f"SKIPPED {len(skipped)}: {_named(skipped)}"
        out.append((None if strict_off else f"{len(skipped)} SKIPPED", [line]))
    if strict_off:
        line = (
            "STRICT OFF (--allow-missing / SPEC_STRICT=0): a case whose method or flag the binary lacks is "
        )
        out.append((f"STRICT OFF: {len(skipped)} skipped", [line + "skipped, not failed"]))
    if report_only := [r.name for r in run.cases.values() if r.uncalibrated and r.status == "passed"]:
        said = names_phrase(report_only, len(run.cases))
        line = f"UNCALIBRATED (acceptance floors not enforced; a min_speedup is): {said}"
        out.append((f"{len(report_only)} UNCALIBRATED", [line]))
    if counters := _counter_warnings(list(run.cases.values())):
        warned = sorted({w for ws in counters.values() for w in ws})
        out.append(
            (f"MISSING COUNTERS in {len(counters)} case(s)", [f"MISSING COUNTERS: {w}" for w in warned])
        )
    if _gpu_tier_without_gpu(run):
        line = "GPU TIER ON A CPU BUILD OR WITHOUT A GPU (--allow-cpu): floors were measured on GPUs"
        out.append(("GPU TIER WITHOUT A GPU", [line]))
    if backend := gpu_binary_on_cpu(run):
        line = (
            f"{backend.upper()} BINARY ON THE CPU: this {backend} build saw no GPU (ggml_{backend}_init "
            f"failed) and ran every case on the CPU ({run.device_name}): these are CPU numbers"
        )
        out.append((f"{backend.upper()} BINARY ON THE CPU", [line]))
    if run.options is not None and not opts.history:  # floors only: a drop that clears them is not caught
        line = "RELATIVE GATE OFF (--no-history / SPEC_NO_HISTORY=1): no case was compared with its history "
        out.append(("RELATIVE GATE OFF", [line + "baseline, and the run was not recorded"]))
    if not opts.speed:
        line = "ACCEPTANCE ONLY (--workers on a CPU build): cases ran side by side, speed was not measured "
        out.append(("ACCEPTANCE ONLY", [line + "or gated, and the run was not recorded in the history"]))
    if run.shard:
        line = (
            f"SHARD {run.shard} of the {run.tier} run: `specsuite merge` judges the whole run and records it"
        )
        out.append((f"SHARD {run.shard}", [line]))
    if run.history is not None and run.history.broken:  # the gate judged against an older run, or none
        line = f"BROKEN BASELINE RECORD(S) in the history, skipped: {', '.join(run.history.broken)}"
        out.append((None, [line]))
    if run.history is not None and run.history.recorded is False:
        out.append((None, ["HISTORY NOT RECORDED: the database could not be written (see the run's log)"]))
    if speed := speed_gate_lines(run):
        out.append((None, speed))
    return out
