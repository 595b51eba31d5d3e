"""gpu-check: its table and verdict on hand-made runs, and the whole command on a machine made to look like
one with a GPU: a fake nvidia-smi listing an H200, a fake nvcc and cuBLAS, a stand-in llama.cpp tree whose
"build" installs the fake llama-server of tests/fakellama.py (a CUDA one that lists a GPU, a CPU one that
does not), and the real build, run-tier and suite chain between them. No GPU is lent to this project's
machines, so the command has not run on a real one; these fakes prove what it does with what one would say.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import msgspec
import pytest
from fakellama import fake_llama

from specsuite import cli
from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.llamacpp import toolchain
from specsuite.results.document import decode_run
from specsuite.results.record import CaseRecord
from specsuite.tools import gpucheck
from specsuite.tools.gpucheck import Run, judge, render

H200 = {"name": "NVIDIA H200", "class": "nvidia-h200", "driver": "570.86", "cuda": "12.8"}
CPU = {"name": "AMD EPYC", "class": "cpu-x86-64-avx2", "driver": None, "cuda": None}
OFFLOAD = "load_tensors: offloaded 5/5 layers to GPU"


def _run(tmp: Path, side: str, *recs: CaseRecord, device: dict | None = None, logs: str = OFFLOAD) -> Run:
    folder = tmp / f"{side}-{len(list(tmp.glob(side + '-*')))}"
    (folder / "logs").mkdir(parents=True)
    cases = {}
    for rec in recs:
        rec.log = f"logs/{rec.name}.log"
        (folder / rec.log).write_text(f"llama.cpp says hello\n{logs}\n")
        cases[rec.name] = msgspec.to_builtins(rec)
    device = device or (H200 if side == "gpu" else CPU)
    doc = {"cases": cases, "device": device, "binary": {"backend": "cuda" if side == "gpu" else "cpu"}}
    return Run(side, "synthetic", folder, 0, decode_run(doc, "test"))


def _rec(name: str, drafted: int = 12, accepted: int = 9, tps: float = 100.0, **kw: object) -> CaseRecord:
    return CaseRecord(
        name=name,
        status="passed",
        drafted=drafted,
        accepted=accepted,
        drafts=4,
        decode_tps=tps,
        speedup=1.5,
        **kw,
    )  # type: ignore[arg-type]


def test_the_check_runs_an_np4_case_of_every_drafter_on_the_gpu() -> None:
    """The synthetic tier, which gpu-check runs with each build, holds each drafter's np-4 member: the CUDA
    build's batched kernels judged against its own np-1 output (batch_variant, concurrency_collapse)."""
    from specsuite.cases.schema import load_cases, select_cases

    cases = [c for s in gpucheck.DEFAULT_SELECTORS for c in select_cases(load_cases(), s)]
    np4 = {c.spec_type[0] for c in cases if c.parallel == 4 and c.sweep_name}
    assert np4 == {"draft-simple", "draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark"}


def test_green_check_table_has_both_sides_tokens_per_second_and_speedup(tmp_path: Path) -> None:
    gpu = _run(tmp_path, "gpu", _rec("a", tps=450.0), _rec("b", drafted=10, tps=300.0))
    cpu = _run(tmp_path, "cpu", _rec("a"), _rec("b"))
    report = judge([gpu, cpu], [("build cuda", 200.4), ("gpu synthetic", 10.2)])
    assert report.green and report.compared == 2 and report.differ == ["b"]
    assert report.rows[0] == [
        "a", "passed / passed", "12/9/4", "12/9/4", "same", "450.0", "100.0", "4.50x", "1.50 / 1.50", "5/5",
    ]  # fmt: skip
    assert report.rows[1][2:5] == ["10/9/4", "12/9/4", "differ"]
    text = render(report, compute_caps=["90"])
    first = text.splitlines()[0]
    assert first == (
        "### gpu-check PASSED on NVIDIA H200: every run green, every layer offloaded; counters identical to "
        "the CPU's in 1 of 2 cases"
    )
    assert "- counters differ from the CPU's (CUDA rounds differently; the floors decide): b" in text
    assert "phases: build cuda 200 s, gpu synthetic 10 s; 211 s in all" in text
    assert "| case | status GPU / CPU | drafted/accepted/steps GPU | CPU | counters | tok/s GPU |" in text


def test_a_gpu_run_that_fell_back_to_the_cpu_fails(tmp_path: Path) -> None:
    gpu = _run(tmp_path, "gpu", _rec("a"), device=CPU)  # ggml_cuda_init failed: a CPU device
    report = judge([gpu, _run(tmp_path, "cpu", _rec("a"))], [])
    assert not report.green
    assert "GPU synthetic ran on the CPU (AMD EPYC), not on a GPU" in report.problems
    assert render(report, compute_caps=["90"]).startswith("### gpu-check FAILED on AMD EPYC: 1 problem(s)")


@pytest.mark.parametrize(
    ("logs", "seen"),
    [
        ("load_tensors: offloaded 18/19 layers to GPU", "18/19"),
        (f"{OFFLOAD}\nload_tensors: offloaded 0/3 layers to GPU", "5/5, 0/3"),  # the draft stayed on the CPU
        ("nothing about layers", "no 'offloaded N/M layers to GPU' line in its log"),
    ],
)
def test_a_layer_left_on_the_cpu_fails(tmp_path: Path, logs: str, seen: str) -> None:
    report = judge([_run(tmp_path, "gpu", _rec("a"), logs=logs), _run(tmp_path, "cpu", _rec("a"))], [])
    assert report.problems == [f"GPU a: not every layer offloaded ({seen})"]


def test_a_failed_or_missing_run_fails_the_check(tmp_path: Path) -> None:
    bad = CaseRecord(name="a", status="failed", reason="floor", drafted=1, accepted=0, drafts=1)
    gpu = _run(tmp_path, "gpu", bad)
    missing = Run("cpu", "synthetic", tmp_path / "nothing", 2, None)
    report = judge([gpu, missing], [])
    assert report.problems[0].startswith("GPU synthetic: FAILED: 1 of 1 case(s): a (floor)")
    assert report.problems[1] == "CPU synthetic: no results.json (run-tier exit 2; see its output above)"
    assert report.rows == [["a", "failed / absent", "1/0/1", "–", "–", "–", "–", "–", "– / –", "5/5"]]


def test_skipped_cases_need_no_offload_line(tmp_path: Path) -> None:
    skip = CaseRecord(name="a", status="skipped", reason="binary_no_dspark")
    gpu = _run(tmp_path, "gpu", skip, logs="")
    report = judge(
        [gpu, _run(tmp_path, "cpu", CaseRecord(name="a", status="skipped", reason="binary_no_dspark"))], []
    )
    assert report.compared == 0 and not any("offloaded" in p for p in report.problems)


def test_without_a_gpu_it_says_what_to_run_instead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    with pytest.raises(
        UserError, match=r"^gpu-check needs a GPU: nvidia-smi lists none here .*run-tier synthetic"
    ):
        gpucheck.main([])


# --- the whole command, on fakes ------------------------------------------------------------------------

SMI = """case "$*" in
  "--query-gpu=compute_cap --format=csv,noheader") echo 9.0;;
  "--query-gpu=driver_version --format=csv,noheader") echo 570.86.15;;
  "") echo "| NVIDIA-SMI 570.86.15   Driver Version: 570.86.15   CUDA Version: 12.8 |";;
  *) exit 6;;
esac"""
# The tree's "build": copies the fake server for the backend CMake was configured for.
TREE_CMAKE = """cmake_minimum_required(VERSION 3.14)
project(fake_llama NONE)
if(GGML_CUDA)
  set(SERVER ${CMAKE_SOURCE_DIR}/cuda/llama-server)
else()
  set(SERVER ${CMAKE_SOURCE_DIR}/cpu/llama-server)
endif()
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/bin/llama-server
  COMMAND ${CMAKE_COMMAND} -E copy ${SERVER} ${CMAKE_BINARY_DIR}/bin/llama-server DEPENDS ${SERVER})
add_custom_target(llama-server ALL DEPENDS ${CMAKE_BINARY_DIR}/bin/llama-server)
"""
ALL_ACCEPTED = {"drafted": 12, "accepted": 12, "drafts": 4, "per_pos": [4, 4, 4]}
CASE = "tiny-simple-fixed"


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


@pytest.fixture
def gpu_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from specsuite.models.fetch import FetchOptions, fetch_models

    bin_dir, cuda = tmp_path / "bin", tmp_path / "cuda"
    _script(bin_dir / "nvidia-smi", SMI)
    version = "Cuda compilation tools, release 12.8, V12.8.93"
    _script(
        cuda / "bin" / "nvcc",
        f'case "$1" in --version) echo "{version}";;\n  --dryrun) echo "#$ TOP={cuda}/bin/.." >&2;; esac',
    )
    (cuda / "include").mkdir()
    (cuda / "include" / "cublas_v2.h").write_text("")
    (cuda / "lib64").mkdir()
    (cuda / "lib64" / "libcublas.so").write_text("")
    tree = tmp_path / "llama.cpp"
    for marker in ("include/llama.h", "tools/server/README"):
        (tree / marker).parent.mkdir(parents=True, exist_ok=True)
        (tree / marker).write_text("")
    (tree / "CMakeLists.txt").write_text(TREE_CMAKE)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{cuda / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LLAMA_CPP_DIR", str(tree))
    for var, sub in (("SPEC_CACHE_DIR", "cache"), ("SPEC_MODEL_DIR", "models"), ("SPEC_HISTORY", "h.sqlite")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    for var in ("LLAMA_SERVER_BIN_PATH", "SPEC_RESULTS_DIR", "CMAKE_CUDA_ARCHITECTURES", "SPEC_CMAKE_ARGS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(paths, "BUILD_DIR", tmp_path / "build")
    monkeypatch.setattr(toolchain, "FALLBACK_NVCC", str(tmp_path / "no-such" / "nvcc"))
    fetch_models(FetchOptions(methods=[CASE], model_dir=tmp_path / "models", tty=False))
    return tree


@pytest.mark.slow
def test_the_whole_command_on_a_fake_gpu_machine(
    gpu_machine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    h200 = "Available devices:\n  CUDA0: NVIDIA H200 (143771 MiB, 143000 MiB free)\n"
    fake_llama(gpu_machine / "cuda", devices=h200, spec_ms_per_token=2.0, log_lines=[OFFLOAD], **ALL_ACCEPTED)
    fake_llama(gpu_machine / "cpu", spec_ms_per_token=10.0, **ALL_ACCEPTED)
    out = tmp_path / "check"
    assert gpucheck.main(["--run", CASE, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    text = (out / "gpu-check.md").read_text()
    assert text in printed
    assert text.startswith(
        "### gpu-check PASSED on NVIDIA H200: every run green, every layer offloaded; counters identical to "
        "the CPU's in 1 of 1 cases"
    )
    row = next(line for line in text.splitlines() if line.startswith(f"| {CASE} |"))
    # 3 prompts of 4 fully accepted drafts; the fake decodes at 2 ms (GPU) and 10 ms (CPU) a token, 20 ms
    # without speculation
    cells = "36/36/12 | 36/36/12 | same | 500.0 | 100.0 | 5.00x | 10.00 / 2.00 | 5/5"
    assert row == f"| {CASE} | passed / passed | {cells} |"
    # built for the visible GPU's architecture, published last; the CPU binary stays in its build folder
    info = json.loads((tmp_path / "build" / "build-info.json").read_text())
    assert info["backend"] == "cuda" and info["cuda_architectures"] == "90"
    assert info["cpu_fallback"] is False and info["devices"] == [
        "CUDA0: NVIDIA H200 (143771 MiB, 143000 MiB free)"
    ]
    gpu_doc = json.loads((out / f"gpu-{CASE}" / "results.json").read_text())
    cpu_doc = json.loads((out / f"cpu-{CASE}" / "results.json").read_text())
    assert gpu_doc["device"]["name"] == "NVIDIA H200" and gpu_doc["device"]["driver"] == "570.86.15"
    assert cpu_doc["binary"]["backend"] == "cpu" and "/builds/cpu-" in cpu_doc["binary"]["path"]
    command = gpu_doc["cases"][CASE]["command"]
    assert command[command.index("--n-gpu-layers") + 1] == "99"  # every layer of these models


@pytest.mark.slow
def test_the_whole_command_fails_when_the_cuda_binary_sees_no_gpu(
    gpu_machine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_gpu = (
        "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected\nAvailable devices:\n"
    )
    fake_llama(gpu_machine / "cuda", devices=no_gpu, **ALL_ACCEPTED)
    fake_llama(gpu_machine / "cpu", **ALL_ACCEPTED)
    out = tmp_path / "check"
    assert gpucheck.main(["--run", CASE, "--out", str(out)]) == 1
    text = (out / "gpu-check.md").read_text()
    assert text.startswith("### gpu-check FAILED on ")
    assert (
        f"- **GPU {CASE} ran on the CPU (" in text
        and f"- **GPU {CASE}: not every layer offloaded (no '" in text
    )
    assert json.loads((tmp_path / "build" / "build-info.json").read_text())["cpu_fallback"] is True
    summary = (out / f"gpu-{CASE}" / "summary.md").read_text()
    assert "PASSED, with warnings (CUDA BINARY ON THE CPU): 1 passed" in summary.splitlines()[0]


# --- --container IMAGE: the check as the workflow's jobs build (issue 51, item 6) ---------------------------
# No docker daemon lends itself to tests here: the docker command line is checked against the workflow's suite
# job, its script by bash, and the command's handling of docker by a fake `docker` on PATH.

IMAGE = "nvidia/cuda:13.4.3-devel-ubuntu26.04"


def _suite_job() -> dict:
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((paths.REPO_ROOT / ".github" / "workflows" / "spec-suite.yml").read_text())
    return workflow["jobs"]["suite"]


def test_the_container_run_is_the_suite_jobs(tmp_path: Path) -> None:
    """The image, apt packages, GPU and shared-memory options and folders of the workflow's suite job."""
    job = _suite_job()
    assert job["container"]["image"] == IMAGE
    [install] = [s["run"] for s in job["steps"] if "apt-get install" in s.get("run", "")]
    packages = install.split("--no-install-recommends", 1)[1].replace("\\", " ").split()
    assert tuple(packages) == gpucheck.CONTAINER_PACKAGES
    options = job["container"]["options"]
    assert options.startswith("--gpus all --shm-size 8g ")
    assert f"'{gpucheck.RUNNER_MODELS}'" in options and f"'{gpucheck.RUNNER_CACHE}'" in options
    argv = gpucheck.container_argv(IMAGE, tmp_path / "out", ["smoke"], owner=(1000, 1000))
    head = argv[: argv.index(IMAGE) + 1]
    assert head[:8] == ["docker", "run", "--rm", "--init", "--gpus", "all", "--shm-size", "8g"]
    out = tmp_path / "out"
    for mount in (f"{paths.REPO_ROOT}:/specsuite-src:ro", "/opt/specsuite/models:/opt/specsuite/models",
                  "/opt/specsuite/cache:/opt/specsuite/cache", f"{out}:{out}"):  # fmt: skip
        assert head[head.index(mount) - 1] == "-v", mount
    for setting in ("SPEC_MODEL_DIR=/opt/specsuite/models", "SPEC_CACHE_DIR=/opt/specsuite/cache",
                    "CCACHE_DIR=/opt/specsuite/cache/ccache"):  # the job's env  # fmt: skip
        assert head[head.index(setting) - 1] == "-e" and setting.split("=")[0] in str(job["env"])
    assert argv[len(head) :][:4] == ["bash", "-euo", "pipefail", "-c"]
    script = argv[-1]
    assert f"apt-get install -y -qq --no-install-recommends {' '.join(gpucheck.CONTAINER_PACKAGES)}" in script
    assert f"/opt/nox/bin/nox -s gpu_check -- --out {tmp_path / 'out'} --run smoke" in script
    assert f"chown -R 1000:1000 {tmp_path / 'out'}" in script and script.endswith('exit "$status"')
    syntax = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


def test_the_hub_token_reaches_the_container_by_name_only(tmp_path: Path) -> None:
    argv = gpucheck.container_argv(IMAGE, tmp_path, [], tokens=["HF_TOKEN"])
    assert argv[argv.index("HF_TOKEN") - 1] == "-e" and not any("=" in a and "HF_TOKEN" in a for a in argv)


def _docker(tmp_path: Path, exit_code: int) -> Path:
    """A fake docker that writes its arguments (one per line) and exits with ``exit_code``."""
    record = tmp_path / "docker-argv"
    _script(tmp_path / "bin" / "docker", f'printf "%s\\n" "$@" > {record}\nexit {exit_code}')
    return record


@pytest.fixture
def runner_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("RUNNER_MODELS", "RUNNER_CACHE"):
        folder = tmp_path / name.lower()
        folder.mkdir()
        monkeypatch.setattr(gpucheck, name, folder)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    return tmp_path


@pytest.mark.parametrize(("exit_code", "ends"), [(0, 0), (1, 1)])
def test_the_container_checks_verdict_is_the_commands(runner_folders: Path, capsys, exit_code, ends) -> None:
    record = _docker(runner_folders, exit_code)
    out = runner_folders / "out"
    assert gpucheck.main(["--container", IMAGE, "--out", str(out), "--run", "synthetic"]) == ends
    argv = record.read_text().splitlines()
    assert argv[0] == "run" and IMAGE in argv and "hf_secret_value" not in record.read_text()
    assert f"{runner_folders / 'runner_models'}:{runner_folders / 'runner_models'}" in argv
    stdout = capsys.readouterr().out
    assert stdout.startswith(f"gpu-check: in {IMAGE}, as the workflow's jobs build: docker run --rm --init")
    assert f"gpu-check (in {IMAGE}): {out / 'gpu-check.md'}" in stdout and "hf_secret_value" not in stdout


def test_a_container_that_cannot_start_says_what_to_check(runner_folders: Path) -> None:
    _docker(runner_folders, 125)  # docker's own failure: no daemon, no NVIDIA runtime, a wrong image
    with pytest.raises(UserError, match=rf"exit 125 before a verdict .*`docker run --rm --gpus all {IMAGE} "):
        gpucheck.main(["--container", IMAGE, "--out", str(runner_folders / "out")])


def test_without_docker_or_the_runner_folders_it_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker
    assert cli.main(["gpu-check", "--container", IMAGE]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --container needs docker: none on PATH. Install Docker and the NVIDIA")
    assert "run the workflow's suite job by hand" in err and err.count("\n") == 1
    _docker(tmp_path, 0)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(gpucheck, "RUNNER_MODELS", tmp_path / "no-models")
    monkeypatch.setattr(gpucheck, "RUNNER_CACHE", tmp_path)  # there
    with pytest.raises(UserError, match=r"no-models missing; create them first: sudo install -d -m 755 "):
        gpucheck.main(["--container", IMAGE])
