"""A llama-server whose drafter costs as much as its target: the real build, started with the case's own
target as its draft model too (llama.cpp #25117's class: DFlash 2x slower than plain decoding, the drafter's
cost eating the gain).

The wrapper passes every argument on in order, the value of ``--spec-draft-model`` replaced by the value of
``-m``. A draft of the target itself is what the target decodes, so a fixed model's drafts are all accepted
as before (the synthetic speed cases' counters stay those of their real drafter), while each block costs its
draft steps at the target's price. Unlike a CPU quota (benchmarks/cpuquota.py), which a loaded machine makes
moot (a server kept under its cap by other processes loses nothing to it), this is more work, so it slows
the speculative path at any load and needs no root. ``min_parallel``: only a server of that many slots or
more (``--parallel``) gets the costly drafter: speculation slower only at np >= 2 (#27342). The tests of
speed at the defaults (tests/suite/test_speed_defaults.py) and benchmarks/bench_gate.py use it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

SCRIPT = """#!/bin/sh
{version}np=1 prev= target=
for a in "$@"; do
  [ "$prev" = --parallel ] && np=$a
  [ "$prev" = -m ] && target=$a
  prev=$a
done
if [ "$np" -lt {min_parallel} ] || [ -z "$target" ]; then exec {real} "$@"; fi
n=$# prev=
while [ "$n" -gt 0 ]; do
  a=$1; shift
  [ "$prev" = --spec-draft-model ] && a=$target
  set -- "$@" "$a"; prev=$a; n=$((n - 1))
done
exec {real} "$@"
"""


def costly_drafter(folder: Path, real: Path, commit: str | None = None, min_parallel: int = 1) -> Path:
    """``folder/llama-server``: ``real`` with its draft model replaced by its target at ``min_parallel``
    slots or more; with ``commit``, its ``--version`` names that commit (a build the history tells apart)."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "llama-server"
    version = (
        f'[ "$1" = --version ] && {{ echo "version: 9000 (build 1, commit {commit})" >&2; exit 0; }}\n'
        if commit
        else ""
    )
    exe.write_text(
        SCRIPT.format(version=version, min_parallel=int(min_parallel), real=shlex.quote(str(real)))
    )
    exe.chmod(0o755)
    return exe
