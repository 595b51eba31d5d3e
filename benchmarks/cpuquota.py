"""A CPU quota on the speculating llama-server only: the slowed binary of bench_gate.py's detection runs.

``slowed_binary(binary, spec, base, folder)`` writes a wrapper script that stands in for llama-server.
Started with a speculative flag (any ``--spec-*``: a case's server; like for like, its baseline server has
none), it moves itself into ``spec`` (a cgroup with a CPU quota) and execs the real binary; a baseline
server goes into ``base`` (a whole CPU), the probe (``--help``, ``--version``, ``--list-devices``) runs as
it is. The binary and its flags are the same, so the counters are identical: only the speculative side's
time changes, by the quota.

The quota is a share of one CPU per period (the synthetic tier's servers decode on one thread, so a share
of 1/k makes their decoding about k times slower): cgroup v1's ``cpu`` controller (``cpu.cfs_quota_us``
over ``cpu.cfs_period_us``) or v2's ``cpu.max`` (``"quota period"``), whichever the machine offers
(``controller()``). A short period (10 ms) spreads the throttling over a request instead of stopping it for
most of a 100 ms default period at a time. Writing cgroup files needs root (or a delegated subtree).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 10_000


class NoQuota(Exception):
    """No cgroup CPU controller this process can use: why, in one line."""


def controller(root: Path = CGROUP_ROOT) -> tuple[str, Path]:
    """("v1", the cpu controller's folder) or ("v2", the unified hierarchy's root), v1 first where a
    hybrid machine mounts both (its v2 part then holds no cpu controller)."""
    v1 = root / "cpu"
    if (v1 / "cpu.cfs_quota_us").is_file():
        if not os.access(v1, os.W_OK):
            raise NoQuota(f"{v1} is not writable: run as root (cgroup v1 cpu controller)")
        return "v1", v1
    controllers = root / "cgroup.controllers"
    if controllers.is_file() and "cpu" in controllers.read_text().split():
        if not os.access(root / "cgroup.subtree_control", os.W_OK):
            raise NoQuota(f"{root}/cgroup.subtree_control is not writable: run as root (cgroup v2)")
        return "v2", root
    raise NoQuota(f"no cgroup CPU controller under {root} (neither v1 cpu/cpu.cfs_quota_us nor v2 cpu.max)")


class QuotaGroup:
    """A cgroup holding ``share`` of one CPU: made on enter, removed on exit (its processes, if any are left,
    killed first: they were servers of a finished run)."""

    def __init__(self, name: str, share: float, root: Path = CGROUP_ROOT) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share {share!r} is not a fraction of one CPU in (0, 1]")
        self.kind, base = controller(root)
        self.path = base / name
        self.share = share

    @property
    def procs(self) -> Path:
        """Where a process writes its pid to enter the group."""
        return self.path / "cgroup.procs"

    def __enter__(self) -> QuotaGroup:
        quota = max(1000, round(PERIOD_US * self.share))  # the kernel's minimum quota is 1 ms
        if self.kind == "v2":
            subtree = self.path.parent / "cgroup.subtree_control"
            if "cpu" not in subtree.read_text().split():
                subtree.write_text("+cpu")
        self.path.mkdir()
        if self.kind == "v1":
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (self.path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        return self

    def __exit__(self, *exc: object) -> None:
        for pid in self.procs.read_text().split() if self.procs.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            self.path.rmdir()
        except OSError:  # a killed process leaves it a moment later: one retry after it is reaped
            import time

            time.sleep(0.5)
            self.path.rmdir()


WRAPPER = """#!/bin/sh
# bench_gate.py: a speculating llama-server (any --spec-* flag) at --parallel {min_parallel} or more into one
# cgroup, one at fewer slots into another, any other server (--port) into a third; the probe's --help,
# --version and --list-devices as they are
spec= port= np=1 prev=
for a in "$@"; do
  case "$a" in
    --spec-*) spec=1;;
    --port) port=1;;
  esac
  [ "$prev" = --parallel ] && np=$a
  prev=$a
done
group=
if [ -n "$spec" ]; then
  if [ "$np" -ge {min_parallel} ]; then group={spec}; else group={fast}; fi
elif [ -n "$port" ]; then
  group={base}
fi
[ -n "$group" ] && echo $$ > "$group"
exec {binary} "$@"
"""


def slowed_binary(binary: Path, spec: QuotaGroup, base: QuotaGroup, folder: Path, min_parallel: int = 1,
                  fast: QuotaGroup | None = None) -> Path:  # fmt: skip
    """A ``llama-server`` in ``folder`` that runs ``binary``: its speculating servers inside ``spec``, its
    other servers (the baselines) inside ``base``. Both sides in a group of their own, the A runs too (both
    groups at a whole CPU): measured on the loaded 2-core machine, a speculating server alone in a group
    and its baseline among every other process of the root group did not share the CPU alike (the
    baseline decoded at 196-364 tokens/s beside 721-794 in runs where only the quota differed).
    ``min_parallel``: only a speculating server of that many slots or more (``--parallel``) goes into
    ``spec``, one of fewer into ``fast`` (a speculation that is slower only at np >= 2: llama.cpp #27342)."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "llama-server"
    groups = (("spec", spec), ("base", base), ("fast", fast or spec))
    quoted = {k: shlex.quote(str(g.procs)) for k, g in groups}
    exe.write_text(WRAPPER.format(binary=shlex.quote(str(binary)), min_parallel=int(min_parallel), **quoted))
    exe.chmod(0o755)
    return exe
