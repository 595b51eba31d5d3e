"""Fake ``llama-server`` executables for tests: recorded ``--help`` texts and recorded failures.

They stand in for binaries of other llama.cpp commits (older, newer, broken), which cannot be built here
in test time; the real pinned build is tested alongside them (``integration`` tests). Each fake is a
small POSIX shell script, so it runs as a real child process with a real exit status or signal.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

import pytest

from specsuite.common import paths

DATA = Path(__file__).resolve().parent / "data"
HELP_DIR = DATA / "help"
FAILURE_DIR = DATA / "failures"
HELP_VARIANTS = ("current", "post-rename", "legacy", "removal-stubs", "minimal")


def _write_script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def help_binary(path: Path, variant: str, calls: Path | None = None) -> Path:
    """A fake that prints the recorded ``--help``/``--version``/``--list-devices`` of ``variant``.

    ``calls``: a file that gets one line per invocation (its first argument), to count probes."""
    q = lambda p: shlex.quote(str(p))  # noqa: E731
    devices = HELP_DIR / f"{variant}.devices"
    log = f'echo "$1" >> {q(calls)}\n' if calls else ""
    list_devices = (
        f"cat {q(devices)}; exit 0" if devices.exists() else 'echo "error: invalid argument: $1" >&2; exit 1'
    )
    return _write_script(
        path,
        log
        + 'case "$1" in\n'
        + f"  --help) cat {q(HELP_DIR / f'{variant}.txt')}; exit 0;;\n"
        + f"  --version) cat {q(HELP_DIR / f'{variant}.version')} >&2; exit 0;;\n"
        + f"  --list-devices) {list_devices};;\n"
        + "esac\n"
        + 'echo "error: invalid argument: $1" >&2\nexit 1\n',
    )


def failing_binary(path: Path, log_name: str, exit_status: int) -> Path:
    """A fake that prints a recorded server log to stderr, then exits with ``exit_status``; a negative
    status kills the script with that signal, as the real server died."""
    end = f"kill -{-exit_status} $$\nsleep 5\n" if exit_status < 0 else f"exit {exit_status}\n"
    return _write_script(path, f"cat {shlex.quote(str(FAILURE_DIR / log_name))} >&2\n{end}")


def hanging_binary(path: Path) -> Path:
    """A fake that logs a start line and never becomes healthy (for the timeout reason)."""
    return _write_script(
        path, 'echo "0.00.000.700 I srv  llama_server: initializing ..." >&2\nexec sleep 60\n'
    )


def real_binary() -> Path:
    """The real build, where the suite looks for it (paths.server_binary: LLAMA_SERVER_BIN_PATH, else
    build/bin). Skips only where none exists and CI is unset; under CI (which builds first) it fails."""
    binary = paths.server_binary()
    if binary.is_file():
        return binary
    if os.environ.get("CI"):
        pytest.fail(f"no llama-server build at {binary} (CI builds first: run `nox -s build`)")
    pytest.skip(f"no llama-server build at {binary} (run `nox -s build` or set LLAMA_SERVER_BIN_PATH)")
