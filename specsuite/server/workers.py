"""A worker's share of the machine in a parallel run: its GPUs and its ports.

A CUDA build runs one pytest-xdist worker per GPU (per group of GPUs, when a case's ``gpus`` asks for
more than one), so no two measured servers ever share a GPU and the speed numbers stay what a serial run
would measure; a case's servers see the first ``gpus`` GPUs of their worker's group. A CPU build runs
``--workers N`` side by side, for acceptance only (they share the cores: speed is not measured).

Which worker holds which place is decided by an OS lock on a file per place, not by the worker's number:
xdist numbers a worker that replaces a crashed one anew (gw4 for gw1), and the lock of a dead process is
released by the kernel, so the replacement takes the place its predecessor held and nothing else. Each place
also has its own port range (llama.cpp's server tests give each worker 8080 + 10 N), below Linux's
ephemeral range, so two workers never pick the same free port between the check and the bind.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from specsuite.cases.schema import Case
from specsuite.common.errors import UserError
from specsuite.server.gpus import Gpu, GpuList

PORT_BASE = 20000  # Linux's ephemeral ports start at 32768: no kernel-picked port falls in a worker's range
PORT_SPAN = 50  # a worker runs two servers at a time; the rest is room for ports others hold
_HELD: list[FileLock] = []  # this process's place lock, held until it exits


@dataclass(frozen=True)
class Layout:
    """How a run spreads over the machine: the places (a GPU group each; empty groups on a CPU build) and
    how many workers use them (no more than there are targets: a target's cases share one worker)."""

    places: tuple[tuple[Gpu, ...], ...]
    workers: int
    found: GpuList

    @property
    def gpus_per_worker(self) -> int:
        return len(self.places[0]) if self.places else 0

    def describe(self) -> str:
        """The run's one line about where it runs."""
        if not self.found.gpus:
            if self.workers > 1:
                return (
                    f"workers: {self.workers} side by side on a CPU build: acceptance only, speed is not "
                    "measured or gated"
                )
            return ""
        gpus = ", ".join(g.describe() for group in self.places for g in group)
        per = self.gpus_per_worker
        return f"GPUs: {gpus}; {self.workers} worker(s) of {per} GPU{'s' if per > 1 else ''}"


def layout(found: GpuList, cases: list[Case], workers: int = 1) -> Layout:
    """The places of a run of ``cases`` on ``found`` GPUs (or ``workers`` CPU workers without any)."""
    targets = len({c.target for c in cases}) or 1
    if not found.gpus:
        return Layout(((),) * workers, min(workers, targets), found)
    size = max((c.gpus for c in cases), default=1)
    if len(found.gpus) < size:  # too few for the largest case: it fails (too_few_gpus), the rest run
        return Layout((found.gpus,), 1, found)
    places = tuple(found.gpus[i : i + size] for i in range(0, len(found.gpus) - size + 1, size))
    return Layout(places, min(len(places), targets), found)


@dataclass(frozen=True)
class Place:
    """A worker's place in a parallel run: its GPUs and ports ("slot" is a server's --parallel slot)."""

    index: int
    gpus: tuple[Gpu, ...]
    found: GpuList
    ports: range | None  # None: the kernel picks (a run of one worker)

    def env(self, gpus: int) -> dict[str, str]:
        """The environment that shows a case's servers the first ``gpus`` GPUs of this place."""
        return self.found.visible(self.gpus[:gpus]) if self.gpus else {}


def first(lay: Layout) -> Place:
    """A run without workers: the first place, its GPUs; ports as the kernel picks them."""
    return Place(0, lay.places[0] if lay.places else (), lay.found, None)


def claim(lay: Layout, folder: Path) -> Place:
    """This worker's place: the first one no live worker holds (its lock is held until this process ends)."""
    folder.mkdir(parents=True, exist_ok=True)
    for index, gpus in enumerate(lay.places):
        lock = FileLock(folder / f"place-{index}.lock")
        with contextlib.suppress(Timeout):
            lock.acquire(timeout=0)
            _HELD.append(lock)
            ports = range(PORT_BASE + index * PORT_SPAN, PORT_BASE + (index + 1) * PORT_SPAN)
            return Place(index, gpus, lay.found, ports)
    raise UserError(
        f"all {len(lay.places)} places of this run are taken: more workers than GPUs (or --workers)"
    )
