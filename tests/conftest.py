"""What every test process needs before any test runs."""

from __future__ import annotations

import os
import signal

import pytest

# A shell that starts the tests in the background (nohup, `cmd &` in a script, some CI agents) starts them
# with SIGINT ignored, and every child inherits that: the tests that send SIGINT to a child (Ctrl-C under
# run-tier, bench, invoke, bisect) would wait for an exit that never comes. A handler, unlike SIG_IGN, is
# reset to the default by exec, so the children get Ctrl-C's usual meaning back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


class Collected:
    """Every test function this process collected (node ids without parameters), before -m or -k deselect
    any: tests/test_collection.py compares them with the functions written under tests/. A plugin looked up
    by name, since a test module importing this conftest gets a second copy of it (importlib mode)."""

    NAME = "specsuite-collected"

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        self.ids.add(item.nodeid.split("[", 1)[0])


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Collected(), Collected.NAME)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first, in their order: pytest-xdist hands tests out in this order, so the long ones
    start at once on every worker instead of one of them ending the run alone while the others idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """One worker more than cores for ``-n auto``: the tests wait on subprocesses, servers and loopback
    sockets for a good part of their time (two workers kept 1.5 of 2 cores busy, three kept 1.8:
    docs/development.md, "CI's time")."""
    return len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) + 1
