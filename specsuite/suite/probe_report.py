"""``specsuite probe [BINARY]``: what a llama-server binary can run, each case of the suite and why not.

The probe (``server.probe``) says what the binary offers; the case's command builder (``suite.command``)
decides what a case needs, so the table's reason is the exact reason the case would be skipped or failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specsuite.cases.schema import load_cases
from specsuite.common import paths, table
from specsuite.common.argtypes import CommandParser
from specsuite.server.probe import Capabilities, probe
from specsuite.suite.command import missing_reason


def _rows(caps: Capabilities, cases: list[Any]) -> list[tuple[str, str, str, str, str, str]]:
    rows = []
    for case in cases:
        reason = missing_reason(caps, case)
        tokens = ",".join(caps.spec_token(t) or "-" for t in case.spec_type) if case.spec_type else "-"
        rows.append((case.name, case.tier, case.method, tokens, "no" if reason else "yes", reason or ""))
    return rows


def print_table(caps: Capabilities, cases: list[Any] | None) -> None:
    """Binary, commit and backend, then one row per case (or the spec types, without a cases file)."""
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
    print(table.render(header, body))
    if any(row[4] == "no" for row in body):
        print("cases marked 'no' fail with that reason (strict, the default); --allow-missing skips them")


def parser() -> CommandParser:
    p = CommandParser("probe", "What a llama-server binary can run: each case of the suite, and why not.")
    p.add_argument("binary", nargs="?", help="llama-server (default: LLAMA_SERVER_BIN_PATH, else build/bin)")
    return p


def main(argv: list[str]) -> int:
    return probe_command(parser().parse_args(argv).binary)


def probe_command(binary: str | None = None) -> int:
    """Print what the binary (default: the one the suite would run) can run."""
    path = Path(binary) if binary else paths.server_binary()
    cases = load_cases() if paths.CASES_FILE.is_file() else None
    print_table(probe(path), cases)
    return 0
