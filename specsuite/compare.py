"""Compare two suite runs (A = baseline, B = candidate) case by case.

B is judged against the floors recorded in B's own results.json (the floors it ran with). The command
fails (exit 1) when B falls below a floor or a case of B failed or errored; an improvement over A never
fails. A case present in only one run is shown as such and is not a failure by itself (a tier or a
cases.toml change adds and drops cases); a case only in B is still checked against its floors.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UserError

# (results key, label, floor key or None, number format)
METRICS = (
    ("accept_rate", "accept rate", "min_accept_rate", ".4f"),
    ("accept_len", "accept len", "min_accept_len", ".4f"),
    ("speedup", "speedup", None, ".2f"),
    ("identical_fraction", "identical", "min_identical_fraction", ".4f"),
)
_FAILED = {"failed", "error"}


def results_file(path: str | Path) -> Path:
    """A results/<run> folder or a results.json file -> the results.json path."""
    path = Path(path)
    return path / "results.json" if path.is_dir() else path


def load_run(path: str | Path) -> dict[str, Any]:
    """Read one run's results.json; UserError naming the file when it is missing or not a suite result."""
    file = results_file(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(
            f"{path}: no results.json there (give a results/<run> folder or its results.json)"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{file}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cases"), dict):
        raise UserError(f"{file}: not a specsuite results.json (no 'cases' table)")
    return data


def device_name(run: dict[str, Any]) -> str:
    """The GPU a run used (results.json 'gpu': null, a name, a {name: ...} or a list of those), or 'cpu'."""
    gpu = run.get("gpu")
    if isinstance(gpu, list):
        gpu = gpu[0] if gpu else None
    if isinstance(gpu, dict):
        gpu = gpu.get("name")
    return str(gpu) if gpu else "cpu"


@dataclass
class Row:
    name: str
    a: dict[str, Any] | None
    b: dict[str, Any] | None

    @property
    def presence(self) -> str:
        return "only in A" if self.b is None else "only in B" if self.a is None else ""

    def floor_failures(self) -> list[str]:
        """Which of B's own floors B falls below, plus B failing outright."""
        if self.b is None:
            return []
        out = []
        floors = self.b.get("floors") or {}
        for key, label, floor_key, _ in METRICS:
            floor, value = floors.get(floor_key) if floor_key else None, self.b.get(key)
            if isinstance(floor, (int, float)) and isinstance(value, (int, float)) and value < floor:
                out.append(f"{label} {value:.4f} < {floor:.4f}")
        if self.b.get("status") in _FAILED and not out:
            out.append(f"{self.b.get('status')}: {self.b.get('reason') or self.b.get('message') or '?'}")
        return out


def rows(a: dict[str, Any], b: dict[str, Any]) -> list[Row]:
    names = dict.fromkeys([*b["cases"], *a["cases"]])
    return [Row(n, a["cases"].get(n), b["cases"].get(n)) for n in names]


def _num(value: Any, fmt: str = ".4f") -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "—"


def _delta(a: Any, b: Any, fmt: str) -> str:
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return format(b - a, "+" + fmt) if ok else "—"


def _status(res: dict[str, Any] | None) -> str:
    if res is None:
        return "—"
    reason = res.get("reason")
    return f"{res.get('status')} ({reason})" if reason else str(res.get("status"))


def table(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["case", "A", "B"]
    for _, label, _, _ in METRICS:
        header += [f"{label} A", f"{label} B", f"Δ {label}"]
    header.append("B fails")
    body = []
    for row in rows(a, b):
        ra, rb = row.a or {}, row.b or {}
        cells = [row.name + (f" ({row.presence})" if row.presence else ""), _status(row.a), _status(row.b)]
        for key, _, _, fmt in METRICS:
            cells += [_num(ra.get(key), fmt), _num(rb.get(key), fmt), _delta(ra.get(key), rb.get(key), fmt)]
        cells.append("; ".join(row.floor_failures()) or ("—" if row.b is None else "ok"))
        body.append(cells)
    return header, body


def _run_line(label: str, run: dict[str, Any], path: str | Path) -> str:
    binary = run.get("binary") or {}
    return (
        f"{label}: {run.get('run_id', '?')} ({path}); llama.cpp {binary.get('commit') or '?'} "
        f"({binary.get('backend') or '?'} build) on {device_name(run)}"
    )


def render_markdown(header: list[str], body: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in [header, *body]]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return "\n".join(lines)


def render_text(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r).rstrip() for r in [header, *body])


def _as_bool(value: Any) -> bool | None:
    """invoke may hand flags over as strings; None means 'decide from the terminal'."""
    if value is None or isinstance(value, bool):
        return value
    return str(value).strip().lower() not in {"", "0", "false", "no", "off"}


def compare_command(*, a: str | Path, b: str | Path, markdown: Any = None, plot: Any = True) -> int:
    """Print the comparison table; 1 when B fails a floor (or a case of B failed), else 0."""
    run_a, run_b = load_run(a), load_run(b)
    md = _as_bool(markdown)
    md = not sys.stdout.isatty() if md is None else md
    header, body = table(run_a, run_b)
    failing = [r for r in rows(run_a, run_b) if r.floor_failures()]
    lines = [_run_line("A", run_a, a), _run_line("B", run_b, b)]
    if md:
        print("\n".join(f"- {line}" for line in lines) + "\n")
        print(render_markdown(header, body))
    else:
        print("\n".join(lines) + "\n")
        print(render_text(header, body))
    if _as_bool(plot):
        _plot(run_a, run_b, results_file(b).parent)
    verdict = (
        f"B fails {len(failing)} case(s): {', '.join(r.name for r in failing)}"
        if failing
        else "B passes every floor it ran with"
    )
    print(("\n**" + verdict + "**") if md else "\n" + verdict)
    return 1 if failing else 0


def _plot(run_a: dict[str, Any], run_b: dict[str, Any], out_dir: Path) -> None:
    try:
        from .plot import plot_per_position
    except ImportError as exc:  # matplotlib is the optional `plot` extra
        print(f"note: no plot ({exc}); pip install -e '.[plot]' or pass --no-plot", file=sys.stderr)
        return
    path = plot_per_position([("A", run_a), ("B", run_b)], out_dir / "per_position.png")
    print(f"plot: {path}", file=sys.stderr)
