"""A run spread over a box: one pytest-xdist worker per GPU (a fake nvidia-smi listing 4 GPUs and a fake
CUDA llama-server that records, per request, which GPUs it was shown), and a CPU build's ``--workers``.

The fakes stand in for what cannot exist here (a 4-GPU box); the chain is real: ``specsuite run-tier`` ->
pytest -> xdist workers -> servers listening on loopback. Each speculative /completion sleeps, so the
cases take seconds and their overlap shows in the recorded times; nothing is asserted about how long
anything took (bench_scale.py measures that).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from fakellama import fake_llama, fake_nvidia_smi, gpu_devices

from specsuite.common import paths

pytestmark = pytest.mark.slow

# two cases on each of four targets (the synthetic tier's models)
CASES = {
    "synth-target-llama-fixed.gguf": ["tiny-simple-fixed", "tiny-eagle3-fixed"],
    "synth-target-glm4moe-mtp-fixed.gguf": ["tiny-mtp-fixed", "tiny-mtp-n8"],
    "synth-target-llama-random.gguf": ["tiny-simple-random", "tiny-eagle3-random"],
    "synth-target-glm4moe-fixed.gguf": ["tiny-mtp-drafter", "tiny-auto-drafter"],
}
SELECTOR = ",".join(n for names in CASES.values() for n in names)
ALL_ACCEPTED = {"drafted": 12, "accepted": 12, "drafts": 4, "per_pos": [4, 4, 4]}
DROPPED = (
    "SPEC_GPUS",
    "SPEC_WORKERS",
    "SPEC_SHARD",
    "SPEC_PLAN",
    "SPEC_METHODS",
    "SPEC_REPEAT",
    "SPEC_NO_HISTORY",
    "CUDA_VISIBLE_DEVICES",
    "GITHUB_STEP_SUMMARY",
)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specsuite.models.fetch import FetchOptions, fetch_models

    folder = tmp_path_factory.mktemp("models")
    fetch_models(FetchOptions(methods=SELECTOR.split(","), model_dir=folder, tty=False))
    return folder


class Box:
    """A fake 4-GPU machine: nvidia-smi on PATH, a CUDA llama-server, a history and results of its own."""

    def __init__(self, root: Path, models: Path, **fake: Any) -> None:
        self.root, self.events = root, root / "events.jsonl"
        smi = root / "smi"
        fake_nvidia_smi(smi, ["NVIDIA H200"] * 4)
        self.exe = fake_llama(
            root / "bin",
            devices=gpu_devices(["NVIDIA H200"] * 4),
            events=str(self.events),
            **{**ALL_ACCEPTED, **fake},
        )
        self.env = {k: v for k, v in os.environ.items() if k not in DROPPED}
        self.env.update(
            PATH=f"{smi}{os.pathsep}{os.environ['PATH']}",
            LLAMA_SERVER_BIN_PATH=str(self.exe),
            SPEC_MODEL_DIR=str(models),
            SPEC_CACHE_DIR=str(root / "cache"),
            SPEC_HISTORY=str(root / "history.sqlite"),
        )

    def run(self, name: str, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
        out = self.root / name
        proc = subprocess.run(
            [sys.executable, "-m", "specsuite", "run-tier", SELECTOR, *args],
            cwd=paths.REPO_ROOT,
            env={**self.env, "SPEC_RESULTS_DIR": str(out)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        return proc, json.loads((out / "results.json").read_text()), out

    def requests(self) -> list[dict[str, Any]]:
        return [e for e in map(json.loads, self.events.read_text().splitlines()) if e["kind"] == "completion"]


def _overlap(spans: list[tuple[float, float]]) -> bool:
    return any(a[1] > b[0] for a, b in zip(sorted(spans), sorted(spans)[1:], strict=False))


def test_one_worker_per_gpu_one_run(tmp_path: Path, models: Path) -> None:
    box = Box(tmp_path, models, request_sleep_s=0.4)
    proc, doc, out = box.run("all")
    output = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), output  # the fake's numbers fail some floors; the run itself is whole
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("GPUs: "))
    assert line == ", ".join(f"{i} NVIDIA H200 (143771 MiB)" for i in range(4)).join(
        ["GPUs: ", "; 4 worker(s) of 1 GPU"]
    )

    # every case ran once, in one results.json, junit.xml, bench.json, summary and history record
    names = [n for ns in CASES.values() for n in ns]
    assert sorted(doc["cases"]) == sorted(names) and {c["status"] for c in doc["cases"].values()} <= {
        "passed",
        "failed",
    }
    junit = [c.get("name") for c in ET.parse(out / "junit.xml").getroot().iter("testcase")]
    assert sorted(junit) == sorted(f"test_speculative[{n}]" for n in names)
    assert doc["run_id"].endswith("Z-all")  # <time>-<folder>: the SPEC_RESULTS_DIR it was given
    assert (
        (out / "summary.md")
        .read_text()
        .startswith(f"### specsuite synthetic run `{doc['run_id']}`: {doc['verdict']}")
    )
    assert (out / "bench.json").is_file() and not (out / "parts").exists()
    with sqlite3.connect(tmp_path / "history.sqlite") as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    unmeasured = {
        n: (c["status"], c["reason"], c["message"]) for n, c in doc["cases"].items() if not c["speedup"]
    }
    assert doc["options"]["speed"] is True and not unmeasured, unmeasured

    # each target's servers on one GPU, numbered as nvidia-smi numbers them; four GPUs in use
    reqs = box.requests()
    gpu_of: dict[str, set[str]] = defaultdict(set)
    for r in reqs:
        gpu_of[Path(r["model"]).name].add(r["gpus"])
        assert r["order"] == "PCI_BUS_ID"
    assert all(len(g) == 1 for g in gpu_of.values()) and {g for gs in gpu_of.values() for g in gs} == {
        "0",
        "1",
        "2",
        "3",
    }

    # at most one server computing on a GPU at any moment; a GPU's speculative servers one after another
    for gpu in "0123":
        assert not _overlap([(r["t0"], r["t1"]) for r in reqs if r["gpus"] == gpu]), gpu
    measured: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in reqs:
        if r["spec"]:
            measured[r["pid"]].append(r)
    for gpu in "0123":  # a speculative server's requests, first to last: one such span at a time per GPU
        spans = [
            (min(x["t0"] for x in rs), max(x["t1"] for x in rs))
            for rs in measured.values()
            if rs[0]["gpus"] == gpu
        ]
        assert len(spans) == 2 and not _overlap(spans), gpu

    # and the four GPUs worked side by side: one moment inside every GPU's busy span
    spans = [
        (min(r["t0"] for r in reqs if r["gpus"] == g), max(r["t1"] for r in reqs if r["gpus"] == g))
        for g in "0123"
    ]
    assert max(s for s, _ in spans) < min(e for _, e in spans), spans


def test_the_same_run_on_one_gpu_gives_the_same_records(tmp_path: Path, models: Path) -> None:
    """--gpus 1 (serial, one GPU) and --gpus all: the same cases, counters and verdict."""
    box = Box(tmp_path, models)
    _, serial, _ = box.run("serial", "--gpus", "1", "--no-history")
    assert {r["gpus"] for r in box.requests()} == {"0"}
    _, parallel, _ = box.run("parallel", "--no-history")
    keys = (
        "status",
        "reason",
        "drafted",
        "accepted",
        "drafts",
        "per_position",
        "accept_rate",
        "identical_fraction",
    )
    assert {n: [c[k] for k in keys] for n, c in serial["cases"].items()} == {
        n: [c[k] for k in keys] for n, c in parallel["cases"].items()
    }
    assert serial["verdict"] == parallel["verdict"] and sorted(serial["planned"]) == sorted(
        parallel["planned"]
    )


def test_a_cpu_builds_workers_run_acceptance_only(tmp_path: Path, models: Path) -> None:
    box = Box(tmp_path, models)
    cpu = fake_llama(tmp_path / "cpu", **ALL_ACCEPTED)
    box.env["LLAMA_SERVER_BIN_PATH"] = str(cpu)
    proc, doc, out = box.run("cpu", "--workers", "2")
    assert "workers: 2 side by side on a CPU build: acceptance only" in proc.stdout
    head = (out / "summary.md").read_text().splitlines()
    assert "ACCEPTANCE ONLY" in head[0] and head[2].startswith(
        "- **ACCEPTANCE ONLY (--workers on a CPU build)"
    )
    assert doc["options"]["speed"] is False
    odd = {
        n: (c["status"], c["reason"], c["message"], c["accept_rate"], c["speedup"], c["speed"])
        for n, c in doc["cases"].items()
        if c["speedup"] is not None or c["speed"] is not None or not c["accept_rate"]
    }
    assert not odd, (odd, proc.stdout[-3000:], proc.stderr[-3000:])
    assert not (tmp_path / "history.sqlite").exists() or sqlite3.connect(tmp_path / "history.sqlite").execute(
        "SELECT count(*) FROM runs"
    ).fetchone() == (0,)


@pytest.mark.parametrize(
    ("cpu", "args", "says"),
    [
        (False, ("--workers", "2"), "--workers 2: this is a cuda build; --workers runs a CPU build's cases"),
        (True, ("--gpus", "2"), "--gpus 2: it is a CPU build with no CUDA GPU to give each worker"),
        (False, ("--gpus", "0,7"), "--gpus 0,7: 7 is not a GPU of this machine"),
        (False, ("--shard", "4/3"), "--shard '4/3': give K/N with 1 <= K <= N"),
    ],
)
def test_bad_spread_is_one_line_before_any_download(
    tmp_path: Path, cpu: bool, args: tuple[str, ...], says: str
) -> None:
    box = Box(tmp_path, tmp_path / "no-models")
    if cpu:
        box.env["LLAMA_SERVER_BIN_PATH"] = str(fake_llama(tmp_path / "cpu"))
    proc = subprocess.run(
        [sys.executable, "-m", "specsuite", "run-tier", SELECTOR, *args],
        cwd=paths.REPO_ROOT,
        env={**box.env, "SPEC_RESULTS_DIR": str(tmp_path / "r")},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {says}"), proc.stderr
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "no-models").exists()


def test_sigterm_to_a_parallel_run_records_each_workers_case_and_leaves_nothing(
    tmp_path: Path, models: Path
) -> None:
    box = Box(tmp_path, models, request_sleep_s=60.0)  # every case hangs in its first request
    proc = subprocess.Popen(
        [sys.executable, "-m", "specsuite", "run-tier", SELECTOR],
        cwd=paths.REPO_ROOT,
        env={**box.env, "SPEC_RESULTS_DIR": str(tmp_path / "r")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # until four speculative servers wait in their first request
        started = (
            [e for e in map(json.loads, box.events.read_text().splitlines()) if e["spec"]]
            if box.events.exists()
            else []
        )
        if len({e["gpus"] for e in started}) == 4:
            break
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    interrupted = [n for n, c in doc["cases"].items() if c["status"] == "interrupted"]
    # each worker's case, and any not reached; the headline says so first
    assert len(interrupted) >= 4 and doc["verdict"].startswith("INTERRUPTED: ")
    assert sorted(doc["cases"]) == sorted(SELECTOR.split(","))
    for _ in range(50):
        if not subprocess.run(["pgrep", "-f", str(box.exe)], capture_output=True).stdout:
            break
        time.sleep(0.1)
    assert subprocess.run(["pgrep", "-f", str(box.exe)], capture_output=True, text=True).stdout == ""
