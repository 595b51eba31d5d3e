"""server.workers: how a run spreads over GPUs (or CPU workers), and which worker holds which place."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specsuite.cases.schema import Case, parse_case_file
from specsuite.common.errors import UserError
from specsuite.server import workers
from specsuite.server.gpus import Gpu, GpuList

GPUS = GpuList(tuple(Gpu(str(i), "NVIDIA H200", 143771) for i in range(4)), pci_order=True)


def _cases(*specs: tuple[str, str, int]) -> list[Case]:
    """(name, target, gpus) cases on the synthetic prompt set."""
    text = 'version = 1\n[[prompt_set]]\nname = "p"\nprompts = [{ id = "a", text = "x" }]\n'
    for name, target, gpus in specs:
        text += textwrap.dedent(f"""
            [[case]]
            name = "{name}"
            tier = "compact"
            target = "{target}"
            spec_type = "ngram-mod"
            n_max = 3
            prompts = "p"
            min_accept_rate = 0.1
            min_accept_len = 1.0
            gpus = {gpus}
        """)
    return parse_case_file(text).cases


def test_one_worker_per_gpu_and_no_more_workers_than_targets() -> None:
    lay = workers.layout(GPUS, _cases(("a", "t1", 1), ("b", "t2", 1), ("c", "t2", 1)))
    assert [[g.id for g in s] for s in lay.places] == [["0"], ["1"], ["2"], ["3"]]
    assert lay.workers == 2  # two targets: a target's cases share one worker
    assert lay.describe().startswith("GPUs: 0 NVIDIA H200 (143771 MiB), 1 NVIDIA H200")
    assert lay.describe().endswith("; 2 worker(s) of 1 GPU")


def test_a_two_gpu_case_makes_groups_of_two() -> None:
    lay = workers.layout(GPUS, _cases(("a", "t1", 2), ("b", "t2", 1), ("c", "t3", 1)))
    assert [[g.id for g in s] for s in lay.places] == [["0", "1"], ["2", "3"]] and lay.workers == 2
    place = workers.first(lay)
    assert place.env(1) == {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert (
        place.env(2)["CUDA_VISIBLE_DEVICES"] == "0,1" and place.ports is None
    )  # one worker: the kernel picks


def test_too_few_gpus_for_the_largest_case_runs_on_one_worker() -> None:
    two = GpuList(GPUS.gpus[:2], pci_order=True)
    lay = workers.layout(two, _cases(("a", "t1", 4), ("b", "t2", 1)))
    assert lay.workers == 1 and [g.id for g in lay.places[0]] == ["0", "1"]


def test_a_cpu_build_runs_workers_without_gpus() -> None:
    none = GpuList((), pci_order=False)
    lay = workers.layout(none, _cases(("a", "t1", 1), ("b", "t2", 1), ("c", "t3", 1)), workers=2)
    assert lay.workers == 2 and lay.places == ((), ())
    assert "acceptance only" in lay.describe()
    assert workers.first(lay).env(1) == {}
    assert workers.layout(none, _cases(("a", "t1", 1))).describe() == ""  # a serial CPU run says nothing


CLAIM = """
import sys, time
from pathlib import Path
from specsuite.server.gpus import Gpu, GpuList
from specsuite.server import workers
gpus = GpuList(tuple(Gpu(str(i), "g") for i in range(3)), pci_order=True)
place = workers.claim(workers.Layout(tuple((g,) for g in gpus.gpus), 3, gpus), Path(sys.argv[1]))
print(place.index, place.gpus[0].id, place.ports.start, flush=True)
time.sleep(float(sys.argv[2]))
"""


def _claimer(folder: Path, hold_s: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CLAIM, str(folder), str(hold_s)], stdout=subprocess.PIPE, text=True
    )


def test_each_worker_process_holds_its_own_place_and_a_dead_ones_is_taken_again(tmp_path: Path) -> None:
    first = _claimer(tmp_path, 60)
    second = _claimer(tmp_path, 60)
    try:
        a = first.stdout.readline().split()  # type: ignore[union-attr]
        b = second.stdout.readline().split()  # type: ignore[union-attr]
        assert {a[0], b[0]} == {"0", "1"} and a[1] == a[0] and b[1] == b[0]  # place i: GPU i
        assert a[2] != b[2]  # each its own port range
        first.kill()
        first.wait()
        out, _ = _claimer(tmp_path, 0).communicate(timeout=60)
        assert out.split()[0] == a[0]  # the place the dead worker held, not the free third one
    finally:
        for p in (first, second):
            p.kill()
            p.wait()


def test_more_workers_than_places_is_one_line(tmp_path: Path) -> None:
    lay = workers.layout(GpuList(GPUS.gpus[:1], True), _cases(("a", "t1", 1)))
    workers.claim(lay, tmp_path)
    with pytest.raises(UserError, match="all 1 places of this run are taken"):
        workers.claim(lay, tmp_path)  # this process holds it already
