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

On the host the check tests the host's toolchain; the workflow's jobs build inside a container. With
``--container IMAGE`` the same check runs inside that image as the suite job runs (docker run --gpus all, the
job's apt packages, nox from pip, the runner's model and cache folders mounted at the same paths), on a copy
of this checkout, its table written into ``--out`` on the host.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
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
# The suite job's (.github/workflows/spec-suite.yml, "Install system build dependencies"; tests/tools/
# test_gpucheck.py checks they agree) and its folders' defaults, mounted at the same paths as there.
CONTAINER_PACKAGES = ("git", "ca-certificates", "curl", "cmake", "ninja-build", "build-essential", "ccache",
                      "libssl-dev", "python3", "python3-venv", "python3-pip")  # fmt: skip
RUNNER_MODELS = Path("/opt/specsuite/models")
RUNNER_CACHE = Path("/opt/specsuite/cache")
SOURCE = "/specsuite-src"  # this checkout inside the container, read-only; copied to WORK before it builds
WORK = "/specsuite"
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
    p.add_argument(
        "--container",
        metavar="IMAGE",
        help="run the check inside this image, as the workflow's jobs build (needs docker and the NVIDIA "
        "Container Toolkit; the runner's folders /opt/specsuite/models and /opt/specsuite/cache)",
    )
    return p


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    if a.container:
        return in_container(a.container, a.run or [], a.out)
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


# --- the check inside the workflow's container -------------------------------------------------------------


def container_script(out: Path, runs: list[str], owner: tuple[int, int]) -> str:
    """What runs inside the container: the suite job's packages and nox, this checkout copied (without its
    build, nox and results folders), ``nox -s gpu_check`` into ``out``; then ``out`` handed back to the
    host's user (the container runs as root), and the check's exit status."""
    check = ["/opt/nox/bin/nox", "-s", "gpu_check", "--", "--out", str(out)]
    check += [arg for selector in runs for arg in ("--run", selector)]
    excluded = " ".join(f"--exclude=./{name}" for name in ("build", ".nox", "results"))
    return "\n".join([
        "apt-get update -qq",
        f"apt-get install -y -qq --no-install-recommends {' '.join(CONTAINER_PACKAGES)}",
        f"mkdir -p {WORK} && tar -C {SOURCE} {excluded} -cf - . | tar -C {WORK} -xf -",
        "python3 -m venv /opt/nox && /opt/nox/bin/pip install -q --upgrade pip nox",
        f"cd {WORK}",
        f"status=0; {shlex.join(check)} || status=$?",
        f"chown -R {owner[0]}:{owner[1]} {shlex.quote(str(out))}",
        'exit "$status"',
    ])  # fmt: skip


def container_argv(
    image: str,
    out: Path,
    runs: list[str],
    *,
    repo: Path = paths.REPO_ROOT,
    models: Path = RUNNER_MODELS,
    cache: Path = RUNNER_CACHE,
    owner: tuple[int, int] = (0, 0),
    tokens: Sequence[str] = (),
) -> list[str]:
    """``docker run`` of the check in ``image``, with the suite job's container options: every GPU, 8 GiB
    of shared memory, the runner's folders at their own paths (the same environment variables), an init
    that passes Ctrl-C on. ``tokens``: the Hub token's variables, passed by name only, so a value never
    reaches a command line (docker reads it from this process's environment)."""
    argv = ["docker", "run", "--rm", "--init", "--gpus", "all", "--shm-size", "8g"]
    mounts = ((repo, SOURCE, ":ro"), (models, models, ""), (cache, cache, ""), (out, out, ""))
    argv += [arg for host, inside, mode in mounts for arg in ("-v", f"{host}:{inside}{mode}")]
    settings = {"SPEC_MODEL_DIR": models, "SPEC_CACHE_DIR": cache, "CCACHE_DIR": cache / "ccache",
                "DEBIAN_FRONTEND": "noninteractive"}  # fmt: skip
    argv += [arg for name, value in settings.items() for arg in ("-e", f"{name}={value}")]
    argv += [arg for name in tokens for arg in ("-e", name)]
    return [*argv, image, "bash", "-euo", "pipefail", "-c", container_script(out, runs, owner)]


def in_container(image: str, runs: list[str], out: Path | None) -> int:
    """``gpu-check --container IMAGE``: the check in the workflow's container; its exit status."""
    if shutil.which("docker") is None:
        raise UserError(
            "--container needs docker: none on PATH. Install Docker and the NVIDIA Container Toolkit "
            "(docs/runner.md), or run the workflow's suite job by hand (Actions > spec-suite > Run workflow, "
            "tier smoke)"
        )
    if not (paths.REPO_ROOT / "noxfile.py").is_file():
        raise UserError(
            f"--container copies a checkout of specsuite into the image: {paths.REPO_ROOT} is none"
        )
    missing = [str(p) for p in (RUNNER_MODELS, RUNNER_CACHE) if not p.is_dir()]
    if missing:
        raise UserError(
            f"--container mounts the runner's folders, as the jobs do: {', '.join(missing)} missing; create "
            f"them first: sudo install -d -m 755 {RUNNER_MODELS} {RUNNER_CACHE} (docs/runner.md)"
        )
    target = Path(out or claim_results_dir("gpu-check-container")).resolve()
    make_results_dir(target)
    tokens = [name for name in procs.TOKEN_VARS if name in os.environ]
    argv = container_argv(image, target, runs, models=RUNNER_MODELS, cache=RUNNER_CACHE,
                          owner=(os.getuid(), os.getgid()), tokens=tokens)  # fmt: skip
    shown = shlex.join(argv[: argv.index(image) + 1])
    print(f"gpu-check: in {image}, as the workflow's jobs build: {shown} …", flush=True)
    # our environment, the token included: docker hands it on by name to the container, where only the
    # fetcher of the specsuite inside reads it (as the suite job's HF_TOKEN secret); nothing else does
    code = procs.run_forwarding(argv, env=dict(os.environ))
    if code in (0, 1):
        print(f"gpu-check (in {image}): {target / 'gpu-check.md'}; each run's results under {target}")
        return code
    if code in (130, -2):
        raise KeyboardInterrupt
    raise UserError(
        f"the container ended with exit {code} before a verdict (see above; 125: docker could not start it): "
        f"check the driver and toolkit first, `docker run --rm --gpus all {image} nvidia-smi`"
    )


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
