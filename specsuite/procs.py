"""Child processes that never outlive their parent, and signals passed down the chain.

The chain is nox -> ``specsuite run-tier`` -> pytest -> llama-server. A runner cancelling a job sends SIGTERM
(or SIGINT) to nox only; each link passes it to the next, waits for it to finish its cleanup (the interrupted
case recorded, servers stopped, results.json and summary.md written), and every child also asks the kernel
for a signal when its parent dies (``PR_SET_PDEATHSIG``), so even a SIGKILL high up the chain leaves no
process behind. Standard library only: the noxfile imports this module in nox's own interpreter.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

PR_SET_PDEATHSIG = 1
FORWARDED = (signal.SIGINT, signal.SIGTERM)
_DEDUP_S = 1.0  # a terminal Ctrl-C reaches us twice (from the tty and from nox): pass it on once


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent exits (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)


def children(pid: int | None = None, proc: Path = Path("/proc")) -> list[int]:
    """Direct children of ``pid`` (default: this process), from /proc; [] where /proc cannot tell."""
    pid = os.getpid() if pid is None else pid
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in (proc / str(pid) / "task").iterdir():
            with contextlib.suppress(OSError):
                out += [int(c) for c in (task / "children").read_text().split()]
    return out


def install_forwarder() -> None:
    """For nox's own process: SIGTERM/SIGINT go on to every child, then nox winds down as for Ctrl-C.

    nox reacts to KeyboardInterrupt by waiting for its child (``interrupt_timeout``), but it forwards nothing
    and dies at once on SIGTERM; the run-tier child would go on alone."""

    def handler(signum: int, frame: FrameType | None) -> None:
        for pid in children():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in FORWARDED:
        signal.signal(sig, handler)


def _own_group_dying_with_parent() -> None:
    os.setpgrp()  # Ctrl-C in the terminal reaches us, and we pass it on once
    die_with_parent(signal.SIGTERM)


def run_forwarding(
    cmd: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> int:
    """Run ``cmd`` to its end in its own process group, passing SIGINT/SIGTERM on (once per burst)."""
    proc = subprocess.Popen(list(cmd), env=dict(env) if env is not None else None, cwd=cwd,
                            preexec_fn=_own_group_dying_with_parent)  # fmt: skip
    last: dict[int, float] = {}

    def forward(signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if now - last.get(signum, -_DEDUP_S) >= _DEDUP_S:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)
        last[signum] = now

    old = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        return proc.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if proc.poll() is None:  # we are leaving on an exception: the child goes too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
