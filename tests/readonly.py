"""Run a real command where some folders are read-only for it, even when the tests run as root.

Root writes into a mode-0555 folder, so as root the folders are bind-mounted read-only in a private mount
namespace of the one child (``unshare``: the write then fails with EROFS, a read-only filesystem); as any
other user they are made mode 0555 (EACCES). Either way the command meets a folder it cannot write, and
no test needs a skip. (Dropping root with ``setpriv`` was tried first: on this machine the venv's
interpreter lives under /root, which a child of an unprivileged process cannot execute.)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
# $1 = how many paths follow; each is bound onto itself and remounted read-only, then the command runs.
_MOUNT_RO = (
    'set -e; n=$1; shift; while [ "$n" -gt 0 ]; do mount --bind "$1" "$1"; '
    'mount -o remount,bind,ro "$1"; shift; n=$((n - 1)); done; exec "$@"'
)


def _as_root_wrapper(folders: Sequence[Path]) -> list[str]:
    unshare = shutil.which("unshare")
    probe = [unshare, "--mount", "--propagation", "private", "true"] if unshare else None
    if probe is None or subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.skip("root without mount namespaces (unshare --mount): no folder is read-only for root here")
    return [str(unshare), "--mount", "--propagation", "private", "sh", "-c", _MOUNT_RO, "sh",
            str(len(folders)), *map(str, folders)]  # fmt: skip


def run_readonly(
    argv: Sequence[str],
    folders: Sequence[Path],
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """``argv`` with ``folders`` (and all under them) read-only for it; output captured."""
    if os.geteuid() == 0:
        wrapper = _as_root_wrapper(folders)
    else:
        wrapper = []
        for folder in folders:
            chmod_dirs(folder, 0o555)
    try:
        return subprocess.run(
            [*wrapper, *argv], env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout
        )
    finally:
        for folder in folders if not wrapper else ():
            chmod_dirs(folder, 0o755)


def specsuite_readonly(
    *args: str, folders: Sequence[Path], env: Mapping[str, str], cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return run_readonly([str(BIN / "specsuite"), *args], folders, env, cwd, timeout)


def chmod_dirs(path: Path, mode: int) -> None:
    """``path`` and every folder under it (files keep their modes: a fake binary stays executable)."""
    for root, subdirs, _ in os.walk(path):
        for name in subdirs:
            os.chmod(os.path.join(root, name), mode)
    os.chmod(path, mode)


@contextlib.contextmanager
def sandbox_dir() -> Iterator[Path]:
    """A fresh folder under the temp directory, removed afterwards (writable again first).
    (A test module makes it a fixture: ``with sandbox_dir() as d: yield d``.)"""
    folder = Path(tempfile.mkdtemp(prefix="specsuite-test-"))
    try:
        yield folder
    finally:
        chmod_dirs(folder, 0o755)
        shutil.rmtree(folder, ignore_errors=True)


def sandbox_env(sandbox: Path, **extra: str) -> dict[str, str]:
    """Our environment with HOME, the cache and the temp folder inside the sandbox."""
    for name in ("home", "cache", "tmp"):
        (sandbox / name).mkdir(exist_ok=True)
    return {
        **os.environ,
        "HOME": str(sandbox / "home"),
        "SPEC_CACHE_DIR": str(sandbox / "cache"),
        "TMPDIR": str(sandbox / "tmp"),
        **extra,
    }
