"""Compare two suite runs (A = baseline, B = candidate) case by case, or B against its history baseline.

B fails a case when it falls below a floor recorded in B's own results.json (the floors it ran with), when
the case failed outright, or when a metric dropped more than ``rtol`` relative to A (the history gate's
rule, specsuite.history.regress). Improvements never fail. Exit codes: 0 = no regression, 1 = B regresses,
2 = the input cannot be compared (unreadable runs, no case in common). A plot that cannot be drawn is a
note, never a regression.

What it prints, for people first: the bottom line, the two runs, then one row per case that changed (its
status, a floor or the gate, or a metric that moved: exact counters any change, a noisy speed only a move
that is significant and beyond rtol), with the metric, before, after and p. ``--all`` adds the whole
matrix: every case, every metric of both runs and the difference.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsuite.common import table
from specsuite.common.argtypes import CommandParser, fraction
from specsuite.common.errors import UserError
from specsuite.history import regress
from specsuite.llamacpp.identity import short
from specsuite.results import metrics
from specsuite.results.document import Run, load_run, results_file
from specsuite.results.names import SHOWN, all_but
from specsuite.results.plot import plot_per_position
from specsuite.results.record import MEASURED_FAIL_REASONS, CaseRecord, is_finite
from specsuite.suite.gate import baselines_for
from specsuite.suspects.runlines import head_tree, safe_between

METRICS = metrics.in_table("compare")  # compare's columns: the registry's (results.metrics)
_FAILED = {"failed", "error", "interrupted"}


@dataclass(frozen=True)
class Shown:
    """One metric as compare shows and judges it. ``samples``: a noisy metric's per-round samples (its move
    is judged by Mann–Whitney); none: an exact counter (any change is a move)."""

    key: str
    label: str
    floor: str | None
    fmt: str
    samples: Callable[[CaseRecord], list[float | None] | None] | None = None
    higher_is_better: bool = True

    def value(self, rec: CaseRecord | None) -> Any:
        known = metrics.BY_NAME.get(self.key)  # a prompt category's metric ("words/accept_rate") is not
        return known.raw(rec) if known is not None and rec is not None else None


def _shown_as(m: metrics.Metric, label: str | None = None) -> Shown:
    """A registered metric as compare shows it (its per-round samples where the gate reads rounds)."""
    samples = m.samples if m.gate == "rounds" else None
    return Shown(m.name, label or m.label, m.floor, f".{m.digits}f", samples, m.higher_is_better)


def shown_metrics() -> list[Shown]:
    """compare's metrics: its columns of the registry (results.metrics)."""
    return [_shown_as(m) for m in METRICS]


def _shown(value: Any) -> str:
    """A value that is not a number, in words: a missing one is "missing", never Python's None."""
    return "missing" if value is None else str(value)


@dataclass
class Row:
    name: str
    a: CaseRecord | None
    b: CaseRecord | None
    a_commit: str = "A"

    @property
    def presence(self) -> str:
        return "only in A" if self.b is None else "only in B" if self.a is None else ""

    def floor_breaches(self) -> list[tuple[str, str]]:
        """(metric label, what is wrong) for each of B's own floors B does not meet (a NaN or missing number
        never passes a floor)."""
        if self.b is None or self.b.uncalibrated:
            return []
        out = []
        for m in shown_metrics():
            floor = (self.b.floors or {}).get(m.floor) if m.floor else None
            if floor is None:
                continue
            if not is_finite(floor):
                out.append((m.label, f"{m.label} floor {_shown(floor)} is not a number"))
                continue
            value = m.value(self.b)
            if self.b.status in ("passed", "failed") and not is_finite(value):
                out.append(
                    (m.label, f"{m.label} is {_shown(value)}, not a number, against floor {floor:.4f}")
                )
            elif is_finite(value) and value < floor:
                out.append((m.label, f"{m.label} {value:.4f} < {floor:.4f}"))
        return out

    def floor_failures(self) -> list[str]:
        """Which of B's own floors B falls below, in words."""
        return [text for _, text in self.floor_breaches()]

    def failures(self, rtol: float) -> list[str]:
        out = self.floor_failures()
        if self.b is not None and self.b.status in _FAILED:
            out.append(f"{self.b.status}: {self.b.reason or self.b.message or 'no reason recorded'}")
        out += [r.message for r in self.regressions(rtol)]
        return out

    def regressions(self, rtol: float) -> list[regress.Regression]:
        """The history gate's rule, B against A (only where A measured the case)."""
        if self.a is None or self.b is None or not self.a.measured:
            return []
        return regress.regressions(self.b, self.a, rtol=rtol, baseline_commit=self.a_commit)

    def why(self, rtol: float) -> list[str]:
        """Why B fails this case, in a few words each (the numbers are in the row's other cells): a case
        that failed outright says so once, not once more for every number it then lacks."""
        b = self.b
        if b is None:
            return []
        judged = b.status == "failed" and b.reason in MEASURED_FAIL_REASONS  # said by the cells below
        out = [_status(b)] if b.status in _FAILED and not judged else []
        if out and not any(is_finite(m.value(b)) for m in shown_metrics()):
            return out  # no number at all: the failure is the whole story
        if breaches := self.floor_breaches():
            out.append(f"under its floor: {', '.join(label for label, _ in breaches)}")
        if dropped := [r.metric.replace("_", " ") for r in self.regressions(rtol)]:
            out.append(f"worse than A beyond the gate: {', '.join(dropped)}")
        return out

    def moves(self, rtol: float) -> list[Move]:
        """What moved from A to B, worst first: exact counters at any change, a noisy metric where the
        rounds differ significantly (Mann–Whitney, p < 0.05, 3 rounds a side at least) and by more than
        rtol."""
        if self.a is None or self.b is None:
            return []
        shown = shown_metrics()
        found = [m for m in (_move(s, self.a, self.b, rtol) for s in shown) if m is not None]
        keys = {s.key for s in shown}
        found += [_gated(r, self.a, self.b, rtol) for r in self.regressions(rtol) if r.metric not in keys]
        return sorted(found, key=_worst_first)

    def status_text(self) -> str:
        """``passed``, or ``passed -> failed (floor)`` where it changed; ``absent`` for a missing side."""
        a, b = _status(self.a, "absent"), _status(self.b, "absent")
        return a if a == b else f"{a} -> {b}"

    def changed(self, rtol: float) -> bool:
        return bool(
            self.presence or self.status_text() != _status(self.a) or self.failures(rtol) or self.moves(rtol)
        )

    def kind(self, rtol: float) -> str:
        """worse, better, changed (both ways, or another status), or the presence (only in A, only in B)."""
        if self.presence:
            return self.presence
        moves, was, now = self.moves(rtol), self.a and self.a.status, self.b and self.b.status
        if self.failures(rtol) or (was == "passed" and now != "passed") or any(m.worse for m in moves):
            return "worse"
        if (now == "passed" and was != "passed") or moves:
            return "better"
        return "changed"


@dataclass(frozen=True)
class Move:
    """One metric that moved from A to B: its relative change (None: a side has no number), its p-value
    ("exact" for a counter, "noisy" for a counter whose rounds disagreed), and whether it is worse."""

    metric: Shown
    before: Any
    after: Any
    change: float | None
    p: str
    worse: bool

    def brief(self) -> str:
        """``accept rate -27.4 %`` or ``speedup missing``, with p where it is a test's."""
        if self.change is None:
            return f"{self.metric.label} {'missing' if self.worse else 'new'}"
        p = f" (p {self.p})" if self.p not in ("exact", "noisy") else ""
        return f"{self.metric.label} {self.change * 100:+.1f} %{p}"


def _worst_first(m: Move) -> tuple[bool, float]:
    """Worse before better; a number lost or gained, then the largest relative change."""
    return (not m.worse, -math.inf if m.change is None else -abs(m.change))


def _move(m: Shown, a: CaseRecord, b: CaseRecord, rtol: float) -> Move | None:
    va, vb = m.value(a), m.value(b)
    if not is_finite(va) and not is_finite(vb):
        return None
    if not (is_finite(va) and is_finite(vb)):
        return Move(m, va, vb, None, "—", worse=not is_finite(vb))
    if va == vb:
        return None
    change = (vb - va) / abs(va) if va else math.inf
    worse = (change < 0) == m.higher_is_better
    if m.samples is None:
        noisy = a.nondeterministic or b.nondeterministic
        if noisy and abs(change) <= rtol:
            return None  # rounds that disagree: a small move is their noise
        return Move(m, va, vb, change, "noisy" if noisy else "exact", worse)
    sa, sb = (_finite_samples(m.samples(r)) for r in (a, b))
    if a.implausible_speed or b.implausible_speed or min(len(sa), len(sb)) < regress.MIN_SAMPLES:
        return None  # noise cannot be told from a move: --all shows the numbers
    lower, higher = (sb, sa) if vb < va else (sa, sb)
    p = regress.mann_whitney_less(lower, higher)
    if p >= regress.ALPHA or abs(change) <= rtol:
        return None
    return Move(m, va, vb, change, f"{p:.3g}", worse)


def _gated(found: regress.Regression, a: CaseRecord, b: CaseRecord, rtol: float) -> Move:
    """A regression the gate found in a metric compare has no column for (decode tokens/s, a prompt
    category's acceptance): its numbers, and p from its rounds where they are known."""
    name, _, category = found.metric.rpartition("/")  # a category's metric: "words/accept_rate"
    known = metrics.get(category or found.metric)
    m = (
        _shown_as(known, found.metric.replace("_", " "))
        if not name
        else Shown(found.metric, found.metric.replace("_", " "), None, f".{known.digits}f")
    )
    tested = _move(m, a, b, rtol) if m.samples is not None else None
    if tested is not None:
        return tested
    change = None if found.current is None else found.change
    return Move(m, found.baseline, found.current, change, "—" if m.samples else "exact", worse=True)


def _finite_samples(raw: list[float | None] | None) -> list[float]:
    return [v for v in raw or [] if v is not None and is_finite(v)]


def rows(a: dict[str, CaseRecord], b: dict[str, CaseRecord], a_commit: str = "A") -> list[Row]:
    names = dict.fromkeys([*b, *a])
    return [Row(n, a.get(n), b.get(n), a_commit) for n in names]


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if is_finite(value) else "—" if value is None else str(value)


def _delta(a: Any, b: Any, fmt: str) -> str:
    return format(b - a, "+" + fmt) if is_finite(a) and is_finite(b) else "—"


def _status(res: CaseRecord | None, absent: str = "—") -> str:
    if res is None:
        return absent
    return f"{res.status} ({res.reason})" if res.reason else str(res.status)


def table_rows(all_rows: list[Row], rtol: float) -> tuple[list[str], list[list[str]]]:
    """The whole matrix (``--all``): every case, each metric of A and B and the difference."""
    header = ["case", "A", "B"]
    for m in shown_metrics():
        header += [f"{m.label} A", f"{m.label} B", f"Δ {m.label}"]
    header.append("B fails")
    body = []
    for row in all_rows:
        cells = [row.name + (f" ({row.presence})" if row.presence else ""), _status(row.a), _status(row.b)]
        for m in shown_metrics():
            va, vb = m.value(row.a), m.value(row.b)
            cells += [_num(va, m.fmt), _num(vb, m.fmt), _delta(va, vb, m.fmt)]
        cells.append("; ".join(row.failures(rtol)) or ("—" if row.b is None else "ok"))
        body.append(cells)
    return header, body


CHANGED_HEADER = ("case", "status A -> B", "metric", "before", "after", "change", "p", "also moved",
                  "B fails")  # fmt: skip


def changed_rows(all_rows: list[Row], rtol: float) -> list[list[str]]:
    """One row per case that changed: its status, the metric that moved most (the worst first), before,
    after, the change and p, the other metrics that moved, and why B fails it ("no": it does not)."""
    body = []
    for row in (r for r in all_rows if r.changed(rtol)):
        moves = row.moves(rtol)
        first = moves[0] if moves else None
        if first is None:
            metric = before = after = change = p = "—"
        else:
            metric, p = first.metric.label, first.p
            before, after = _num(first.before, first.metric.fmt), _num(first.after, first.metric.fmt)
            before, after = (x if x != "—" else "missing" for x in (before, after))
            change = "—" if first.change is None else f"{first.change * 100:+.1f} %"
        also = _also(moves[1:])
        why = "; ".join(row.why(rtol)) or ("—" if row.b is None else "no")
        body.append([row.name, row.status_text(), metric, before, after, change, p, also, why])
    return body


def _also(moves: list[Move]) -> str:
    """The other metrics that moved, briefly; those B lost (or gained) named together."""
    lost = [m.metric.label for m in moves if m.change is None and m.worse]
    new = [m.metric.label for m in moves if m.change is None and not m.worse]
    parts = [m.brief() for m in moves if m.change is not None]
    parts += [f"{', '.join(lost)} missing"] if lost else []
    parts += [f"{', '.join(new)} new"] if new else []
    return ", ".join(parts) or "—"


def bottom_line(all_rows: list[Row], rtol: float) -> tuple[str, list[Row]]:
    failing = [r for r in all_rows if r.failures(rtol)]
    if failing:
        bad, everyone = [r.name for r in failing], [r.name for r in all_rows]
        named = all_but(bad, everyone)
        if named.endswith("more)"):  # "9 cases (a, b, c, d and 5 more)": the count is said already
            named = f"{', '.join(bad[:SHOWN])} and {len(bad) - SHOWN} more (below)"
        return f"B regresses in {len(failing)} case(s): {named}", failing
    return f"B passes every floor it ran with and drops no metric by more than {rtol:.0%} against A", failing


def tally(all_rows: list[Row], rtol: float) -> str:
    """``3 of 26 cases changed (1 worse, 1 better, 1 only in B); 23 the same``: better where every move
    is for the better (or it passes now), changed where its status moved another way."""
    changed = [r for r in all_rows if r.changed(rtol)]
    kinds = [r.kind(rtol) for r in changed]
    order = ("worse", "better", "changed", "only in A", "only in B")
    parts = ", ".join(f"{kinds.count(k)} {k}" for k in order if k in kinds)
    same = len(all_rows) - len(changed)
    head = f"{len(changed)} of {len(all_rows)} cases changed" + (f" ({parts})" if parts else "")
    return f"{head}; {same} the same"


def _run_line(label: str, run: Run, where: str) -> str:
    return (
        f"{label}: {run.run_id or '?'} ({where}); llama.cpp {run.binary.key or '?'} "
        f"({run.binary.backend or '?'} build) on {run.device_name}"
    )


def _against_history(run_b: Run) -> tuple[dict[str, CaseRecord], str]:
    """A built from the history: for each case of B, its baseline (the gate's rule), and a description."""
    found = baselines_for(run_b)
    if not found:
        raise UserError(
            "no history baseline for any case of this run (same device class, backend and cases.toml, an "
            "earlier llama.cpp commit); run the tier on an earlier commit first, or compare two runs A B"
        )
    commits = sorted({short(b.commit, 12) for b in found.values()})
    recs = {name: b.record for name, b in found.items()}
    return recs, f"history baseline, commit(s) {', '.join(commits)}"


def parser() -> CommandParser:
    p = CommandParser(
        "compare",
        "Compare two runs case by case (A B, or B --against auto): the bottom line, then each case that "
        "changed; exit 1 when B regresses.",
    )
    p.add_argument(
        "a", help="baseline: a results/<run> folder or a results.json (or --against auto)", nargs="?"
    )
    p.add_argument("b", help="candidate: a results/<run> folder or a results.json")
    p.add_argument(
        "--against", choices=["auto"], help="take A from the history: the candidate's baseline run"
    )
    p.add_argument("--rtol", type=fraction, default=0.05, help="relative drop that counts as a regression")
    p.add_argument(
        "--all", action="store_true", help="also the whole matrix: every case, each metric of A and B"
    )
    p.add_argument("--markdown", action="store_true", help="markdown even on a terminal")
    p.add_argument("--no-plot", action="store_true", help="do not save the per-position plot")
    return p


def main(argv: list[str]) -> int:
    p = parser()
    a = p.parse_args(argv)
    if (a.a is None) == (a.against is None):
        p.error("give two runs A B, or --against auto and one run")
    return compare_command(a=a.a, b=a.b, against=a.against, rtol=a.rtol, markdown=a.markdown or None,
                           plot=not a.no_plot, everything=a.all)  # fmt: skip


def compare_command(
    *,
    a: str | Path | None,
    b: str | Path,
    against: str | None = None,
    rtol: float = 0.05,
    markdown: bool | None = None,
    plot: bool = True,
    everything: bool = False,
) -> int:
    """Print the bottom line, the runs, the cases that changed (``everything``: then the whole matrix);
    1 when B regresses (floors, failures, relative drops), else 0."""
    run_b = load_run(b)
    recs_b = run_b.cases
    if against == "auto":
        recs_a, where_a = _against_history(run_b)
        run_a = Run(run_id="history", cases=recs_a)
        a_commit = "history"
    else:
        assert a is not None
        run_a, where_a = load_run(a), str(a)
        recs_a = run_a.cases
        a_commit = short(run_a.binary.key or run_a.run_id or "A", 12)
    if not set(recs_a) & set(recs_b):
        raise UserError(
            f"A ({run_a.tier}) and B ({run_b.tier}) have no case in common: nothing to "
            "compare; compare runs of the same tier"
        )
    all_rows = rows(recs_a, recs_b, a_commit)
    md = not sys.stdout.isatty() if markdown is None else markdown
    verdict, failing = bottom_line(all_rows, rtol)
    runs = [_run_line("A", run_a, where_a), _run_line("B", run_b, str(b))]
    print(f"**{verdict}**\n" if md else verdict)
    print("\n".join(f"- {line}" for line in runs) if md else "\n".join(runs))
    changed = changed_rows(all_rows, rtol)
    hint = "" if everything else " (--all: every case and metric)"
    print(f"\n{tally(all_rows, rtol)}{hint}")
    if changed:
        print("\n" + table.render(CHANGED_HEADER, changed, markdown=md))
    if found := suspects(run_a, run_b, [r.name for r in all_rows if r.a and r.b and r.changed(rtol)]):
        print(("\n**why**\n\n" if md else "\nwhy\n") + "\n".join(f"- {line}" for line in found))
    if everything:
        header, body = table_rows(all_rows, rtol)
        print(("\n**every case**\n\n" if md else "\nevery case\n") + table.render(header, body, markdown=md))
    if plot:
        _plot(run_a, run_b, results_file(b).parent)
    return 1 if failing else 0


def suspects(run_a: Run, run_b: Run, names: list[str]) -> list[str]:
    """The upstream changes between A's build and B's that touch what the changed cases exercise
    (specsuite.suspects); against the history, the lines B's own run named. None for one build."""
    if not names:
        return []
    if run_a.run_id == "history":  # --against auto: B's run named them against its own baselines
        return list(run_b.history.suspects) if run_b.history is not None else []
    if run_a.binary.key and run_a.binary.key == run_b.binary.key:
        return []
    return safe_between(head_tree(run_a), head_tree(run_b), names, run_b.binary.backend)


def _plot(run_a: Run, run_b: Run, out_dir: Path) -> None:
    """Best effort: a missing matplotlib or an unwritable folder is a note, not a regression."""
    try:
        path = plot_per_position([("A", run_a), ("B", run_b)], out_dir / "per_position.png")
    except ImportError as exc:  # matplotlib is the optional `plot` extra
        print(f"note: no plot ({exc}); pip install -e '.[plot]' or pass --no-plot", file=sys.stderr)
        return
    except (OSError, ValueError, RuntimeError) as exc:
        print(
            f"note: the plot could not be saved in {out_dir} ({exc}); the comparison stands", file=sys.stderr
        )
        return
    print(f"plot: {path}", file=sys.stderr)
