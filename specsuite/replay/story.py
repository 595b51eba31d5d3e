"""The end of a replay: which build changed what, by how much, and why, from the runs it made. Pure but
for reading the runs' results.json.

Each build is set beside the build before it in the replay, directly: their configurations
(``results.config.changes``: defaults, across renamed flags, and build options), which cases arrived
(``not_in_build`` before, measured now) or left, and the acceptance of every case both measured (the
counters' accept rate, exact: a change of one accepted token shows). The run's own verdict, judged against
its history baseline (the nearest lower build), is quoted with it: that is the suite's answer; the
side-by-side is its explanation. The cases that turned red, were fixed or whose counters moved get their
suspects: the upstream changes between the two builds' trees that touch what the case exercises
(``suspects.runlines.between``; the sdists' trees are on disk where the replay built them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specsuite.common import table
from specsuite.common.errors import UserError
from specsuite.replay.state import BUILD_FAILED, DONE, Entry, Replay
from specsuite.results import config
from specsuite.results.document import Run, load_run
from specsuite.results.names import names_phrase
from specsuite.results.record import KNOWN_BUG, NOT_IN_BUILD, CaseRecord, bug_name, finite
from specsuite.server.metrics import METRICS, TIMINGS
from specsuite.suspects.runlines import head_tree, safe_between

SHOWN = 5  # cases named per line before "and N more"


@dataclass
class Step:
    """One build against the build before it in the replay."""

    entry: Entry
    run: Run | None
    lines: list[str] = field(default_factory=list)  # what changed, the cause first


def _load(entry: Entry) -> Run | None:
    if entry.status != DONE or not entry.results:
        return None
    try:
        return load_run(Path(entry.results))
    except UserError:
        return None


def _measured(run: Run) -> dict[str, CaseRecord]:
    return {n: r for n, r in run.cases.items() if r.status in ("passed", "failed") and r.drafted is not None}


def _rate(r: CaseRecord) -> float | None:
    return finite(r.accept_rate)


def acceptance_lines(before: Run, after: Run) -> list[str]:
    """The cases whose acceptance counters moved between the two builds, largest move in accept rate
    first; a case whose own rounds disagree (nondeterministic) says nothing by moving, and is counted
    apart."""
    a, b = _measured(before), _measured(after)
    both = sorted(set(a) & set(b))
    noisy = [n for n in both if a[n].nondeterministic or b[n].nondeterministic]
    moved = []
    for name in (n for n in both if n not in noisy):
        ra, rb = _rate(a[name]), _rate(b[name])
        (aa, da), (ab, db) = ((r.accepted, r.drafted) for r in (a[name], b[name]))
        if ra is not None and rb is not None and (aa, da) != (ab, db):
            moved.append(
                (abs(rb - ra), f"{name} {ra:.4f} -> {rb:.4f} (accepted/drafted {aa}/{da} -> {ab}/{db})")
            )
    apart = f"; {names_phrase(noisy)} nondeterministic (its own rounds disagree)" if noisy else ""
    if not moved:
        same = len(both) - len(noisy)
        return [f"acceptance counters identical in {same} case(s) measured at both{apart}"] if both else []
    moved.sort(key=lambda m: -m[0])
    shown = [text for _, text in moved[:SHOWN]]
    more = f" and {len(moved) - SHOWN} more" if len(moved) > SHOWN else ""
    return [f"accept rate moved in {len(moved)} case(s): {'; '.join(shown)}{more}{apart}"]


def _ran(r: CaseRecord | None) -> bool:
    return r is not None and r.status in ("passed", "failed")


def _absent(r: CaseRecord | None) -> bool:
    return r is not None and (r.status == NOT_IN_BUILD or (r.reason or "").startswith("binary_no_"))


def _red(r: CaseRecord | None) -> bool:
    return r is not None and r.status in ("failed", "error")


def changed_cases(before: Run, after: Run) -> list[str]:
    """The cases a build pair has a cause to find for: red now and green before, fixed, or measured at both
    with counters that moved (a nondeterministic case's moving says nothing)."""
    out = []
    for name, b in after.cases.items():
        a = before.cases.get(name)
        if a is None or not (_ran(a) or _red(a)) or not (_ran(b) or _red(b)):
            continue
        flipped = _red(a) != _red(b)
        moved = (
            _ran(a) and _ran(b) and not (a.nondeterministic or b.nondeterministic)
            and a.drafted is not None and (a.accepted, a.drafted) != (b.accepted, b.drafted)
        )  # fmt: skip
        if flipped or moved:
            out.append(name)
    return out


def suspect_lines(before: Run, after: Run) -> list[str]:
    """The suspects of the cases that changed between the two builds, one line per set of cases with the
    same suspects (or the one line saying what is missing)."""
    names = changed_cases(before, after)
    if not names:
        return []
    return safe_between(head_tree(before), head_tree(after), names, after.binary.backend)


def arrival_lines(before: Run, after: Run) -> list[str]:
    """Cases that turned red (green in the build before), cases that were not in the earlier build and run
    now, cases that ran and are gone now, cases fixed (red before, passed now), and counters that moved
    from the responses' timings to /metrics (or back)."""
    total = len(after.cases)
    pairs = [(n, before.cases.get(n), r) for n, r in after.cases.items()]
    said = [
        (
            "NEWLY RED in this build",
            [n for n, a, b in pairs if _red(b) and a is not None and a.status == "passed"],
        ),
        ("new in this build", [n for n, a, b in pairs if _ran(b) and _absent(a)]),
        ("GONE in this build", [n for n, a, b in pairs if _absent(b) and _ran(a)]),
        ("fixed in this build", [n for n, a, b in pairs if b.status == "passed" and _red(a)]),
    ]
    out = [f"{what}: {names_phrase(names, total)}" for what, names in said if names]
    sources = [
        (a.counters_source, b.counters_source) for _, a, b in pairs if a is not None and _ran(a) and _ran(b)
    ]
    if (TIMINGS, METRICS) in sources:
        out.append(
            "counters from /metrics' spec_decode_* now (from the responses' timings in the build before)"
        )
    if (METRICS, TIMINGS) in sources:
        out.append("COUNTERS GONE from /metrics: from the responses' timings now (/metrics before)")
    return out


def config_lines(before: Run, after: Run, labels: tuple[str, str]) -> list[str]:
    """What differs between the two binaries' configurations (their --help defaults, build options)."""
    found = config.changes((before.config, None), (after.config, None), labels)
    suffix = f" between {labels[0]} and {labels[1]}"
    return [f"configuration: {config.summary_line([f.removesuffix(suffix) for f in found])}"] if found else []


def verdict_lines(run: Run) -> list[str]:
    """The run's own first lines: its verdict, then each cause of a failed case in the run's own words,
    once, with the cases it ended (many cases end on one cause: a server error names its case too)."""
    out = [f"verdict: {run.verdict or '?'}"]
    causes: dict[str, list[str]] = {}
    for r in run.cases.values():
        if r.status in ("failed", "error"):
            causes.setdefault(_failure(r).replace(r.name, "<case>")[:300], []).append(r.name)
    for cause, names in sorted(causes.items(), key=lambda c: -len(c[1]))[:SHOWN]:
        out.append(f"{names_phrase(names, len(run.cases))}: {cause}")
    if len(causes) > SHOWN:
        out.append(f"and {len(causes) - SHOWN} more cause(s) (summary.md)")
    return out


def _failure(r: CaseRecord) -> str:
    """The check that failed, as the case's message words it (``- [regressed] accept_rate ...``), else its
    first line."""
    lines = (r.message or "").strip().splitlines()
    found = [line.removeprefix("- ") for line in lines if line.startswith("- [")]
    return "; ".join(found) if found else (lines[0] if lines else f"({r.reason})")


def steps(replay: Replay) -> list[Step]:
    """Every build in order, each with what changed since the build before it that ran."""
    out: list[Step] = []
    previous: Step | None = None
    for entry in sorted(replay.entries, key=lambda e: e.build):
        step = Step(entry, _load(entry))
        if step.run is None:
            step.lines = [_not_measured(entry)]
        else:
            step.lines = verdict_lines(step.run)
            if previous is not None and previous.run is not None:
                labels = (previous.entry.key, entry.key)
                step.lines[1:1] = config_lines(previous.run, step.run, labels) + arrival_lines(
                    previous.run, step.run
                )
                step.lines += acceptance_lines(previous.run, step.run)
                step.lines += suspect_lines(previous.run, step.run)
            previous = step
        out.append(step)
    return out


def _not_measured(entry: Entry) -> str:
    if entry.status == BUILD_FAILED:
        return f"does not build here: {entry.message}"
    return f"not measured ({entry.status}{': ' + entry.message if entry.message else ''})"


def _counts(run: Run | None) -> list[str]:
    if run is None:
        return ["–"] * 6
    status = [r.status for r in run.cases.values()]
    return [str(status.count(s)) for s in ("passed", "failed", "error", KNOWN_BUG, NOT_IN_BUILD, "skipped")]


HEADER = ("build", "verdict", "passed", "failed", "error", "known bug", "not in build", "skipped", "build s",
          "run s")  # fmt: skip


def _row(step: Step) -> list[str]:
    e = step.entry
    verdict = (step.run.verdict or "?").split(":")[0] if step.run else e.status
    secs = [f"{s:.0f}" if s is not None else "–" for s in (e.build_s, e.run_s)]
    return [e.key, verdict, *_counts(step.run), *secs]


def markdown(replay: Replay, found: Sequence[Step], out: Path) -> str:
    head = (
        f"### specsuite replay: the {replay.tier} tier over {len(replay.builds)} upstream builds, "
        f"b{replay.builds[0]} to b{replay.builds[-1]}"
    )
    lines = [head, "", table.render(HEADER, [_row(s) for s in found], markdown=True), ""]
    lines.append("What changed, each build against the one before it here (the cause first):")
    lines.append("")
    for s in found:
        lines.append(f"- **{s.entry.key}**: {s.lines[0]}")
        lines += [f"  - {line}" for line in s.lines[1:]]
    if bugs := known_bugs(found):
        lines += ["", "Known upstream bugs across the builds (the cases that reproduce them):", "", *bugs]
    lines += ["", f"Every run's folder, results.json and summary.md: {out}"]
    return "\n".join(lines) + "\n"


def known_bugs(found: Sequence[Step]) -> list[str]:
    """Per upstream bug a case reproduces: at which builds it showed, at which the case passed (fixed, or
    not seen for an intermittent one), where the case failed another way; so where it appeared and where
    it was fixed read off one line."""
    states: dict[tuple[int | None, str], dict[str, list[str]]] = {}
    for step in found:
        for rec in step.run.cases.values() if step.run else ():
            if (ref := rec.known_bug) is not None:
                at = states.setdefault((ref.issue, ref.title), {})
                at.setdefault(ref.state, []).append(step.entry.key)
    words = {"present": "present at", "fixed": "passes (fixed) at", "absent": "not there yet at",
             "not_seen": "not seen at",
             "other": "failed another way at"}  # fmt: skip
    return [
        f"- {bug_name(issue, title)}: "
        + "; ".join(f"{words[s]} {', '.join(dict.fromkeys(keys))}" for s, keys in at.items())
        for (issue, title), at in states.items()
    ]
