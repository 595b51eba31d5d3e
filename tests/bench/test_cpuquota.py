"""benchmarks/cpuquota.py: the CPU quota bench_gate.py puts on the speculating server only.

The cgroup files are checked on a folder laid out as the kernel lays out v1 and v2 (the controller is the
kernel's: no test here can make it throttle, and none asserts on time); where this machine has a writable
cgroup CPU controller (root), the wrapper is run for real and the kernel asked which group each process is in.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from cpuquota import CGROUP_ROOT, PERIOD_US, NoQuota, QuotaGroup, controller, slowed_binary


def _v1(root: Path) -> Path:
    (root / "cpu").mkdir(parents=True)
    (root / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    return root


def _v2(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("memory\n")
    return root


def test_v1_quota_and_period_are_written_and_the_group_removed(tmp_path: Path) -> None:
    root = _v1(tmp_path / "fs")
    assert controller(root) == ("v1", root / "cpu")
    with QuotaGroup("g", 0.5, root) as g:
        assert (g.path / "cpu.cfs_period_us").read_text() == str(PERIOD_US)
        assert (g.path / "cpu.cfs_quota_us").read_text() == str(PERIOD_US // 2)
        for f in g.path.iterdir():  # the kernel's files vanish with the group; a plain folder keeps them
            f.unlink()
    assert not (root / "cpu" / "g").exists()


def test_v2_enables_the_cpu_controller_and_writes_cpu_max(tmp_path: Path) -> None:
    root = _v2(tmp_path / "fs")
    assert controller(root) == ("v2", root)
    with QuotaGroup("g", 0.25, root) as g:
        assert (root / "cgroup.subtree_control").read_text() == "+cpu"
        assert (g.path / "cpu.max").read_text() == f"{PERIOD_US // 4} {PERIOD_US}"
        (g.path / "cpu.max").unlink()


def test_no_controller_is_one_line_saying_why(tmp_path: Path) -> None:
    with pytest.raises(NoQuota, match="no cgroup CPU controller under"):
        controller(tmp_path)
    with pytest.raises(ValueError, match="share 2"):
        QuotaGroup("g", 2, _v1(tmp_path / "fs"))


def _writable_controller() -> bool:
    try:
        controller()
    except NoQuota:
        return False
    return True


@pytest.mark.skipif(
    not _writable_controller(), reason=f"no writable cgroup CPU controller under {CGROUP_ROOT}"
)
def test_only_a_speculating_server_enters_the_quota_group(tmp_path: Path) -> None:
    """The wrapper moves itself into the quota group and execs the binary (same pid) when a --spec-* flag is
    given; a baseline server (no speculative flag) into the other group; --help into neither."""
    fake = tmp_path / "real-server"
    fake.write_text("#!/bin/sh\ncat /proc/$$/cgroup\n")
    fake.chmod(0o755)
    name = f"specsuite-test-{tmp_path.name}"
    with QuotaGroup(f"{name}-spec", 0.5) as group, QuotaGroup(f"{name}-base", 1.0) as whole:
        exe = slowed_binary(fake, group, whole, tmp_path / "slowed")
        run = lambda *argv: subprocess.run([exe, *argv], capture_output=True, text=True)  # noqa: E731
        spec = run("-m", "t.gguf", "--spec-type", "draft-simple", "--port", "1")
        base, helped = run("-m", "t.gguf", "--threads", "1", "--port", "1"), run("--help")
    assert spec.returncode == 0 and f"/{name}-spec\n" in spec.stdout, spec.stdout + spec.stderr
    assert f"/{name}-base\n" in base.stdout and name not in helped.stdout
    assert not group.path.exists() and not whole.path.exists()


@pytest.mark.skipif(
    not _writable_controller(), reason=f"no writable cgroup CPU controller under {CGROUP_ROOT}"
)
def test_min_parallel_slows_only_a_speculating_server_of_that_many_slots(tmp_path: Path) -> None:
    """bench_gate's np >= 2 slowdown (llama.cpp #27342): a speculating server at --parallel 2 enters the
    quota group, one at --parallel 1 the unslowed one, a baseline at --parallel 2 the baselines' group."""
    fake = tmp_path / "real-server"
    fake.write_text("#!/bin/sh\ncat /proc/$$/cgroup\n")
    fake.chmod(0o755)
    name = f"specsuite-test-np-{tmp_path.name}"
    with (
        QuotaGroup(f"{name}-spec", 0.5) as slow,
        QuotaGroup(f"{name}-fast", 1.0) as fast,
        QuotaGroup(f"{name}-base", 1.0) as whole,
    ):
        exe = slowed_binary(fake, slow, whole, tmp_path / "slowed", min_parallel=2, fast=fast)
        run = lambda *argv: subprocess.run([exe, *argv], capture_output=True, text=True).stdout  # noqa: E731
        np2 = run("--parallel", "2", "--spec-type", "draft-simple", "--port", "1")
        np1 = run("--parallel", "1", "--spec-type", "draft-simple", "--port", "1")
        base = run("--parallel", "2", "--port", "1")
    said = (np2, np1, base)
    assert f"/{name}-spec\n" in np2 and f"/{name}-fast\n" in np1 and f"/{name}-base\n" in base, said
