"""``specsuite gpu-check`` (``nox -s gpu_check``): the CUDA build on this machine's GPU against the CPU build.

One command, no arguments, for the first machine with a GPU: build llama-server for the CPU and for CUDA
(the visible GPUs' architectures only, all cores, ccache), run the synthetic and smoke tiers with each (the
CUDA binary offloads every layer: the suite's ``-ngl 99``, checked in each server log), and print one table:
per case the counters on the GPU beside the CPU's, decode tokens/s on each and the GPU's speedup over the
CPU, then the verdict. The table also goes to ``<out>/gpu-check.md``; every run keeps its own results
folder under ``<out>``; the time of each phase is listed (the goal: 10 minutes on one H200, warm pip cache).
The synthetic tier holds every drafter at np 2 and 4 as well (docs/concurrency.md): on the GPU they check the
CUDA build's batched kernels against its own np-1 output.

Green: every run green (each enforces its own floors), every GPU run on a GPU (not ggml's CPU fallback), and
every layer of every GPU case offloaded. Counters that differ between the GPU and the CPU are listed, not
failed: CUDA kernels round differently from the CPU's, so greedy tokens (and with them the drafts) may
legitimately differ; the floors are what a case must meet on either.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from specsuite.common import atomic, paths, procs, table
from specsuite.common.argtypes import CommandParser
from specsuite.common.errors import UserError
from specsuite.llamacpp import cmake, toolchain
from specsuite.results.document import Run as RunDocument
from specsuite.results.document import claim_results_dir, load_run, make_results_dir
from specsuite.results.record import CaseRecord, is_finite
from specsuite.results.verdict import verdict

DEFAULT_SELECTORS = ("synthetic", "smoke")
SIDES = ("gpu", "cpu")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


@dataclass
class Run:
    """One run-tier of one binary: its results folder, exit code and document (None: it wrote none)."""

    side: str  # "gpu" | "cpu"
    selector: str
    dir: Path
    code: int
    doc: RunDocument | None = None

    @property
    def label(self) -> str:
        return f"{self.side.upper()} {self.selector}"

    def records(self) -> dict[str, CaseRecord]:
        return dict(self.doc.cases) if self.doc else {}

    def problems(self) -> list[str]:
        """Why this run cannot count as a green one for the check ([] when it can)."""
        if self.doc is None:
            return [f"{self.label}: no results.json (run-tier exit {self.code}; see its output above)"]
        v = verdict(self.doc)
        out = [] if v.green else [f"{self.label}: {v.headline}"]
        if self.side == "gpu" and str(self.doc.device_class or "cpu").startswith("cpu"):
            out.append(f"{self.label} ran on the CPU ({self.doc.device_name}), not on a GPU")
        return out


@dataclass
class Report:
    rows: list[list[str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    differ: list[str] = field(default_factory=list)  # cases whose GPU counters are not the CPU's
    compared: int = 0  # cases measured on both sides
    phases: list[tuple[str, float]] = field(default_factory=list)
    device: str = "?"

    @property
    def green(self) -> bool:
        return not self.problems

    def headline(self) -> str:
        same = (
            f"counters identical to the CPU's in {self.compared - len(self.differ)} of {self.compared} cases"
        )
        if self.green:
            return f"gpu-check PASSED on {self.device}: every run green, every layer offloaded; {same}"
        return f"gpu-check FAILED on {self.device}: {len(self.problems)} problem(s); {same}"


COLUMNS = (
    "case", "status GPU / CPU", "drafted/accepted/steps GPU", "CPU", "counters", "tok/s GPU", "tok/s CPU",
    "GPU ÷ CPU", "speedup vs off GPU / CPU", "layers offloaded (GPU)",
)  # fmt: skip


def parser() -> CommandParser:
    p = CommandParser(
        "gpu-check",
        "CPU and CUDA builds, the synthetic and smoke tiers on each: GPU against CPU, and a verdict.\n"
        "Builds for the CPU and for the visible GPUs, runs the tiers on each (on the GPU with every layer "
        "offloaded), and prints one table: counters, tokens/s and speedup on the GPU beside the CPU.",
    )
    p.add_argument(
        "--run",
        action="append",
        metavar="SELECTOR",
        help="a tier or a comma list of cases to run on both (repeatable; default: synthetic, then smoke)",
    )
    p.add_argument("--out", type=Path, help="folder for the runs and gpu-check.md (default results/<id>)")
    return p


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    gpus = toolchain.visible_compute_caps()
    if not gpus:
        raise UserError(
            "gpu-check needs a GPU: nvidia-smi lists none here (or is not installed). Without one, "
            "`specsuite build --cuda` then `specsuite run-tier synthetic` check the CUDA build on the CPU."
        )
    out = Path(a.out or claim_results_dir("gpu-check")).resolve()
    make_results_dir(out)
    phases: list[tuple[str, float]] = []
    binaries = build_both(phases)
    runs = [
        timed(phases, f"{side} {selector}", partial(run_one, side, selector, binaries[side], out))
        for selector in a.run or DEFAULT_SELECTORS
        for side in SIDES
    ]
    report = judge(runs, phases)
    text = render(report, compute_caps=gpus)
    atomic.write_text(out / "gpu-check.md", text)
    print(text)
    print(f"gpu-check: {out / 'gpu-check.md'}; each run's results under {out}")
    return 0 if report.green else 1


def timed(phases: list[tuple[str, float]], name: str, step: Callable[[], Any]) -> Any:
    t0 = time.monotonic()
    try:
        return step()
    finally:
        phases.append((name, time.monotonic() - t0))


def build_both(phases: list[tuple[str, float]]) -> dict[str, Path]:
    """The CPU build, then the CUDA build for the visible GPUs: build/bin holds the CUDA binary afterwards,
    the CPU binary stays where ninja left it in its own build folder."""
    cpu_plan, _ = timed(phases, "build cpu", lambda: cmake.build_binary(["--cpu"]))
    _, gpu = timed(phases, "build cuda", lambda: cmake.build_binary(["--cuda"]))
    return {"cpu": cpu_plan.build_dir / "bin" / cmake.TARGET, "gpu": gpu}


def run_one(side: str, selector: str, binary: Path, out: Path) -> Run:
    """``specsuite run-tier SELECTOR`` with this binary, into ``<out>/<side>-<selector>``."""
    folder = out / f"{side}-{re.sub(r'[^A-Za-z0-9_-]+', '_', selector)}"
    env = {**os.environ, "LLAMA_SERVER_BIN_PATH": str(binary), "SPEC_RESULTS_DIR": str(folder)}
    env.pop("GITHUB_STEP_SUMMARY", None)  # the check's one table is the summary, not four run summaries
    print(f"gpu-check: {side.upper()} {selector} with {binary}", flush=True)
    cmd = [sys.executable, "-m", "specsuite", "run-tier", selector]
    code = procs.run_forwarding(cmd, env=env, cwd=paths.REPO_ROOT)
    doc = load_run(folder) if (folder / "results.json").is_file() else None
    return Run(side, selector, folder, code, doc)


# --- judging and the table ------------------------------------------------------------------------------


def offloaded(run: Run, rec: CaseRecord) -> list[tuple[int, int]]:
    """Each ``offloaded N/M layers to GPU`` line of a case's server log (target, then a draft)."""
    try:
        text = (run.dir / rec.log).read_text(encoding="utf-8", errors="replace") if rec.log else ""
    except OSError:
        return []
    return [(int(n), int(m)) for n, m in _OFFLOADED.findall(text)]


def counters(rec: CaseRecord | None) -> tuple[Any, Any, Any] | None:
    if rec is None or rec.drafted is None:
        return None
    return (rec.drafted, rec.accepted, rec.drafts)


def _num(value: Any, fmt: str) -> str:
    return f"{value:{fmt}}" if is_finite(value) else "–"


def _ratio(a: Any, b: Any) -> str:
    return f"{a / b:.2f}x" if is_finite(a) and is_finite(b) and b else "–"


def case_row(
    name: str, gpu: CaseRecord | None, cpu: CaseRecord | None, layers: list[tuple[int, int]]
) -> list[str]:
    g, c = counters(gpu), counters(cpu)
    same = "–" if g is None or c is None else "same" if g == c else "differ"
    return [
        name,
        f"{gpu.status if gpu else 'absent'} / {cpu.status if cpu else 'absent'}",
        "/".join(map(str, g)) if g else "–",
        "/".join(map(str, c)) if c else "–",
        same,
        _num(gpu and gpu.decode_tps, ".1f"),
        _num(cpu and cpu.decode_tps, ".1f"),
        _ratio(gpu and gpu.decode_tps, cpu and cpu.decode_tps),
        f"{_num(gpu and gpu.speedup, '.2f')} / {_num(cpu and cpu.speedup, '.2f')}",
        ", ".join(f"{n}/{m}" for n, m in layers) or "–",
    ]


def judge(runs: list[Run], phases: list[tuple[str, float]]) -> Report:
    report = Report(phases=phases)
    for run in runs:
        report.problems += run.problems()
    gpu_docs = [r.doc for r in runs if r.side == "gpu" and r.doc]
    report.device = gpu_docs[0].device_name if gpu_docs else "?"
    for selector in dict.fromkeys(r.selector for r in runs):
        gpu = next((r for r in runs if r.selector == selector and r.side == "gpu"), None)
        cpu = next((r for r in runs if r.selector == selector and r.side == "cpu"), None)
        _compare(report, gpu, cpu)
    return report


def _compare(report: Report, gpu: Run | None, cpu: Run | None) -> None:
    g, c = (gpu.records() if gpu else {}), (cpu.records() if cpu else {})
    for name in dict.fromkeys([*g, *c]):
        layers = offloaded(gpu, g[name]) if gpu and name in g else []
        report.rows.append(case_row(name, g.get(name), c.get(name), layers))
        ran = name in g and g[name].status in ("passed", "failed")
        if ran and (not layers or any(n != m for n, m in layers)):
            seen = (
                ", ".join(f"{n}/{m}" for n, m in layers) or "no 'offloaded N/M layers to GPU' line in its log"
            )
            report.problems.append(f"GPU {name}: not every layer offloaded ({seen})")
        pair = counters(g.get(name)), counters(c.get(name))
        if None not in pair:
            report.compared += 1
            if pair[0] != pair[1]:
                report.differ.append(name)


def render(report: Report, *, compute_caps: list[str]) -> str:
    lines = [f"### {report.headline()}", ""]
    lines += [f"- **{p}**" for p in report.problems]
    if report.differ:
        why = "CUDA rounds differently; the floors decide"
        lines.append(f"- counters differ from the CPU's ({why}): {', '.join(report.differ)}")
    lines.append(f"- GPU compute capability {', '.join(compute_caps)}; phases: " + ", ".join(
        f"{name} {seconds:.0f} s" for name, seconds in report.phases
    ) + f"; {sum(s for _, s in report.phases):.0f} s in all")  # fmt: skip
    lines += ["", table.render(COLUMNS, report.rows, markdown=True)]
    return "\n".join(lines) + "\n"
