"""Compare two suite runs (A = baseline, B = candidate) case by case, or B against its history baseline.

B fails a case when it falls below a floor recorded in B's own results.json (the floors it ran with), when
the case failed outright, or when a metric dropped more than ``rtol`` relative to A (the history gate's
rule, specsuite.history.regress). Improvements never fail. Exit codes: 0 = no regression, 1 = B regresses,
2 = the input cannot be compared (unreadable runs, no case in common). A plot that cannot be drawn is a
note, never a regression.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsuite.common import table
from specsuite.common.argtypes import CommandParser, fraction
from specsuite.common.errors import UserError
from specsuite.history import regress
from specsuite.llamacpp.identity import short
from specsuite.results.document import Run, load_run, results_file
from specsuite.results.plot import plot_per_position
from specsuite.results.record import CaseRecord, is_finite
from specsuite.suite.gate import baselines_for

# (record field, label, floor key or None, number format)
METRICS = (
    ("accept_rate", "accept rate", "min_accept_rate", ".4f"),
    ("accept_len", "accept len", "min_accept_len", ".4f"),
    ("speedup", "speedup", "min_speedup", ".2f"),
    ("block_ratio", "block cost", None, ".2f"),  # a verification block in plain decode steps
    ("identical_fraction", "identical", "min_identical_fraction", ".4f"),
)
_FAILED = {"failed", "error", "interrupted"}


@dataclass
class Row:
    name: str
    a: CaseRecord | None
    b: CaseRecord | None
    a_commit: str = "A"

    @property
    def presence(self) -> str:
        return "only in A" if self.b is None else "only in B" if self.a is None else ""

    def floor_failures(self) -> list[str]:
        """Which of B's own floors B falls below (a NaN or missing number never passes a floor)."""
        if self.b is None:
            return []
        out = []
        for key, label, floor_key, _ in METRICS:
            floor = (self.b.floors or {}).get(floor_key) if floor_key else None
            if floor is None or self.b.uncalibrated:
                continue
            if not is_finite(floor):
                out.append(f"{label} floor {floor!r} is not a number")
                continue
            value = getattr(self.b, key)
            if self.b.status in ("passed", "failed") and not is_finite(value):
                out.append(f"{label} is {value!r}, not a number, against floor {floor:.4f}")
            elif is_finite(value) and value < floor:
                out.append(f"{label} {value:.4f} < {floor:.4f}")
        return out

    def failures(self, rtol: float) -> list[str]:
        out = self.floor_failures()
        if self.b is not None and self.b.status in _FAILED:
            out.append(f"{self.b.status}: {self.b.reason or self.b.message or '?'}")
        if self.a is not None and self.b is not None and self.a.measured:
            found = regress.regressions(self.b, self.a, rtol=rtol, baseline_commit=self.a_commit)
            out += [r.message for r in found]
        return out


def rows(a: dict[str, CaseRecord], b: dict[str, CaseRecord], a_commit: str = "A") -> list[Row]:
    names = dict.fromkeys([*b, *a])
    return [Row(n, a.get(n), b.get(n), a_commit) for n in names]


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if is_finite(value) else "—" if value is None else str(value)


def _delta(a: Any, b: Any, fmt: str) -> str:
    return format(b - a, "+" + fmt) if is_finite(a) and is_finite(b) else "—"


def _status(res: CaseRecord | None) -> str:
    if res is None:
        return "—"
    return f"{res.status} ({res.reason})" if res.reason else str(res.status)


def table_rows(all_rows: list[Row], rtol: float) -> tuple[list[str], list[list[str]]]:
    header = ["case", "A", "B"]
    for _, label, _, _ in METRICS:
        header += [f"{label} A", f"{label} B", f"Δ {label}"]
    header.append("B fails")
    body = []
    for row in all_rows:
        cells = [row.name + (f" ({row.presence})" if row.presence else ""), _status(row.a), _status(row.b)]
        for key, _, _, fmt in METRICS:
            va = getattr(row.a, key) if row.a else None
            vb = getattr(row.b, key) if row.b else None
            cells += [_num(va, fmt), _num(vb, fmt), _delta(va, vb, fmt)]
        cells.append("; ".join(row.failures(rtol)) or ("—" if row.b is None else "ok"))
        body.append(cells)
    return header, body


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
    p = CommandParser("compare", "Compare two runs case by case; exit 1 when B regresses.")
    p.add_argument(
        "a", help="baseline: a results/<run> folder or a results.json (or --against auto)", nargs="?"
    )
    p.add_argument("b", help="candidate: a results/<run> folder or a results.json")
    p.add_argument(
        "--against", choices=["auto"], help="take A from the history: the candidate's baseline run"
    )
    p.add_argument("--rtol", type=fraction, default=0.05, help="relative drop that counts as a regression")
    p.add_argument("--markdown", action="store_true", help="markdown even on a terminal")
    p.add_argument("--no-plot", action="store_true", help="do not save the per-position plot")
    return p


def main(argv: list[str]) -> int:
    p = parser()
    a = p.parse_args(argv)
    if (a.a is None) == (a.against is None):
        p.error("give two runs A B, or --against auto and one run")
    return compare_command(a=a.a, b=a.b, against=a.against, rtol=a.rtol, markdown=a.markdown or None,
                           plot=not a.no_plot)  # fmt: skip


def compare_command(
    *,
    a: str | Path | None,
    b: str | Path,
    against: str | None = None,
    rtol: float = 0.05,
    markdown: bool | None = None,
    plot: bool = True,
) -> int:
    """Print the comparison table; 1 when B regresses (floors, failures, relative drops), else 0."""
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
    header, body = table_rows(all_rows, rtol)
    lines = [_run_line("A", run_a, where_a), _run_line("B", run_b, str(b))]
    if md:
        print("\n".join(f"- {line}" for line in lines) + "\n")
    else:
        print("\n".join(lines) + "\n")
    print(table.render(header, body, markdown=md))
    if plot:
        _plot(run_a, run_b, results_file(b).parent)
    failing = [r for r in all_rows if r.failures(rtol)]
    verdict = (
        f"B regresses in {len(failing)} case(s): {', '.join(r.name for r in failing)}"
        if failing
        else f"B passes every floor it ran with and drops no metric by more than {rtol:.0%} against A"
    )
    print(("\n**" + verdict + "**") if md else "\n" + verdict)
    return 1 if failing else 0


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
