"""``specsuite probe [BINARY] [--all-cases]``: what a llama-server binary can run, each case of the suite and
why not.

The probe (``server.probe``) says what the binary offers; the case's command builder (``measure.argv``)
decides what a case needs, so the table's reason is the exact reason the case would be skipped or failed.
By default only the cases the binary cannot run are rows (the build session runs this after every build:
57 rows of "yes" buried the one that mattered); ``--all-cases`` lists every case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specsuite.cases.schema import load_cases
from specsuite.common import paths, table
from specsuite.common.argtypes import CommandParser
from specsuite.llamacpp.source import load_pin
from specsuite.measure.argv import missing_reason
from specsuite.server.probe import Capabilities, probe


def _rows(caps: Capabilities, cases: list[Any]) -> list[tuple[str, str, str, str, str, str]]:
    rows = []
    for case in cases:
        reason = missing_reason(caps, case)
        tokens = ",".join(caps.spec_token(t) or "-" for t in case.spec_type) if case.spec_type else "-"
        rows.append((case.name, case.tier, case.method, tokens, "no" if reason else "yes", reason or ""))
    return rows


def print_table(caps: Capabilities, cases: list[Any] | None, every: bool = False) -> None:
    """Binary, commit and backend, then how many cases it can run and a row for each it cannot (``every``:
    a row per case); without a cases file only the spec types."""
    print(f"binary:  {caps.binary}")
    first = caps.version_text.splitlines()[0] if caps.version_text else "?"
    print(f"version: {first.removeprefix('version: ')}")
    print(f"commit:  {caps.commit or '?'}")
    gpus = f"; GPUs: {'; '.join(caps.gpus)}" if caps.gpus else "; no GPU visible"
    print(
        f"backend: {caps.backend or '?'}" + (f" ({'; '.join(caps.devices)})" if caps.devices else "") + gpus
    )
    print(f"spec types: {', '.join(sorted(caps.spec_types)) or '(none)'}")
    if cases is None:
        return
    header = ("case", "tier", "method", "token", "runs", "why not")
    body = _rows(caps, cases)
    missing = [row for row in body if row[4] == "no"]
    if not every:
        more = "" if len(missing) == len(body) else "; `specsuite probe --all-cases` lists every case"
        print(f"cases: {len(body) - len(missing)} of {len(body)} can run{more}")
    if every or missing:
        print(table.render(header, body if every else missing))
    if missing:
        print(_missing_note(caps))


def _missing_note(caps: Capabilities) -> str:
    """What a case the binary cannot run becomes: not in this build for a build older than the pin (unless
    a lower build measured it on this setup: suite.vintage), else a failure (strict) or a skip."""
    pin = load_pin().build
    if caps.build is not None and pin is not None and caps.build < pin:
        return (
            f"cases marked 'no' are not in this build: b{caps.build} predates the pin (b{pin}); one that a "
            "lower build measured here fails with that reason (it vanished)"
        )
    return "cases marked 'no' fail with that reason (strict, the default); --allow-missing skips them"


def parser() -> CommandParser:
    p = CommandParser("probe", "What a llama-server binary can run: each case of the suite, and why not.")
    p.add_argument("binary", nargs="?", help="llama-server (default: LLAMA_SERVER_BIN_PATH, else build/bin)")
    p.add_argument(
        "--all-cases", action="store_true", help="a row for every case (default: only those it cannot run)"
    )
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return probe_command(args.binary, every=args.all_cases)


def probe_command(binary: str | None = None, every: bool = False) -> int:
    """Print what the binary (default: the one the suite would run) can run."""
    path = Path(binary) if binary else paths.server_binary()
    cases = load_cases() if paths.CASES_FILE.is_file() else None
    print_table(probe(path), cases, every)
    return 0
