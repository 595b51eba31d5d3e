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
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType

PR_SET_PDEATHSIG = 1
FORWARDED = (signal.SIGINT, signal.SIGTERM)
_DEDUP_S = 1.0  # a terminal Ctrl-C reaches us twice (from the tty and from nox): pass it on once
# The Hub token's variables (models.hub reads them): never handed to a child, since build tools, pip and
# llama-server run whatever code the llama.cpp commit under test (or a PyPI build backend) contains.
TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The one environment for a child (build tools, git, pip, llama-server): ``env`` (default: ours)
    without the Hub token and without ``LLAMA_ARG_*`` (hidden llama.cpp configuration that would change a
    server's command line behind the suite's back)."""
    source = os.environ if env is None else env
    return {k: v for k, v in source.items() if k not in TOKEN_VARS and not k.startswith("LLAMA_ARG_")}


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group led by ``proc`` (a child started in its own session or group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 0.0, kill_wait_s: float = 30.0) -> int | None:
    """The one process-group stopper: SIGTERM and ``grace_s`` to finish (none: SIGKILL at once), then
    SIGKILL; returns the exit code, or None if even SIGKILL did not end it within ``kill_wait_s``."""
    steps = ((signal.SIGTERM, grace_s),) if grace_s > 0 else ()
    for sig, wait in (*steps, (signal.SIGKILL, kill_wait_s)):
        signal_group(proc, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=wait)
    return proc.poll()


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


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back while a child is forked with a ``preexec_fn`` (run the child's setup
    through ``in_child``), and delivered when the block ends: raised there, after the caller has kept the
    child to stop it.

    Why by hand: with a ``preexec_fn``, CPython runs the interpreter's fork hooks around the fork (logging
    registers one), and a KeyboardInterrupt raised inside such a hook is printed as "Exception ignored" and
    dropped, so a Ctrl-C or a runner's SIGTERM at that instant was lost and the run went on (seen: a run-tier
    waiting out a server's start timeout after its interrupt). Held, the signal waits for the block's end.
    Main thread only: a signal that another thread takes is still run by the main thread's next check."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)  # a held signal's handler runs (and raises) here


def in_child(setup: Callable[[], None]) -> Callable[[], None]:
    """A ``preexec_fn`` for a child forked under ``signals_held``: the child's signals as they were
    (the mask survives exec: held, a server could not be stopped by SIGTERM), then ``setup``."""

    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        setup()

    return preexec


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


_DROPPED: list[str] = []  # KeyboardInterrupts Python dropped in this process, for raise_if_dropped


def _keeping_dropped(
    previous: Callable[[sys.UnraisableHookArgs], object],
) -> Callable[[sys.UnraisableHookArgs], object]:
    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _DROPPED.append(f"{unraisable.exc_value!r} dropped in {unraisable.object!r}")
        previous(unraisable)

    return hook


def raise_if_dropped() -> None:
    """Raise again a Ctrl-C or SIGTERM that Python dropped; called where a measuring process waits or
    begins work (a server's start, each request), so the run ends there.

    Why: Python runs a signal's handler wherever the main thread is, and a KeyboardInterrupt it raises
    inside a finalizer (a ``weakref.finalize`` the garbage collector ran, a ``__del__``, a fork hook) is
    printed as "Exception ignored" and lost: the run went on (seen, 1 run in about 30 on a busy machine: a
    suite waiting out a server's start timeout after its interrupt). ``sys.unraisablehook`` is where Python
    says so; ``interrupt_on_sigterm`` and ``sigterm_as_interrupt`` listen there."""
    if _DROPPED:
        what = _DROPPED[0]
        _DROPPED.clear()
        raise KeyboardInterrupt(what)


def interrupt_on_sigterm() -> None:
    """The one SIGTERM path of a command that measures: a runner cancelling the job (SIGTERM) ends it like
    Ctrl-C, a KeyboardInterrupt, so its ``finally`` blocks stop its servers and remove its temporary folders,
    it writes what it measured, and ``cli`` says ``interrupted`` and exits 130 (common.errors). Python's
    default for SIGTERM is to die at once, with none of that. Either one that Python drops is kept for
    ``raise_if_dropped``."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
    sys.unraisablehook = _keeping_dropped(sys.unraisablehook)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """``interrupt_on_sigterm`` while the block runs, the previous handler after it (a command that runs
    in-process, as tests run it, leaves its caller's handler as it found it)."""
    old, old_hook = signal.signal(signal.SIGTERM, _raise_interrupt), sys.unraisablehook
    sys.unraisablehook = _keeping_dropped(old_hook)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
        sys.unraisablehook = old_hook
        _DROPPED.clear()


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


def last_line(log: Path) -> str:
    """The last non-empty line of a (growing) log file, for progress lines; '' when there is none."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            lines = fh.read().decode("utf-8", "replace").replace("\r", "\n").splitlines()
    except OSError:
        return ""
    return next((ln.strip() for ln in reversed(lines) if ln.strip()), "")


def run_forwarding(
    cmd: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    log: Path | None = None,
    heartbeat: Callable[[], None] | None = None,
    every_s: float = 60.0,
) -> int:
    """Run ``cmd`` to its end in a new process group; its exit status (negative: killed by that signal).

    SIGINT/SIGTERM received meanwhile go to the whole group (once per burst: a chain like ``git bisect run``
    is several processes, and its leader may die first), and after the leader has exited they are raised
    here as KeyboardInterrupt, so a caller never mistakes an interrupted child for a failed one. ``log``:
    stdout and stderr appended there. ``heartbeat``: called every ``every_s`` seconds while it runs."""
    out = open(log, "ab") if log is not None else None  # noqa: SIM115 (closed in finally)
    seen: dict[int, float] = {}

    def forward(signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if now - seen.get(signum, -_DEDUP_S) >= _DEDUP_S:
            signal_group(proc, signum)
        seen[signum] = now

    try:
        with signals_held():  # one that came while forking is passed on as soon as the child exists
            proc = subprocess.Popen(
                list(cmd),
                env=dict(env) if env is not None else None,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT if out else None,
                preexec_fn=in_child(_own_group_dying_with_parent),
            )
            old = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    except BaseException:
        if out:
            out.close()
        raise
    try:
        code = _wait(proc, heartbeat, every_s)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if proc.poll() is None:  # we are leaving on an exception: the group goes too
            stop_group(proc)
        if out:
            out.close()
    if seen:
        raise KeyboardInterrupt(f"signal {', '.join(str(s) for s in seen)}")
    return code


def _wait(proc: subprocess.Popen[bytes], heartbeat: Callable[[], None] | None, every_s: float) -> int:
    while True:
        try:
            return proc.wait(timeout=every_s if heartbeat else None)
        except subprocess.TimeoutExpired:
            assert heartbeat is not None
            heartbeat()
