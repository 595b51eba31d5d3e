"""The one front door (``specsuite`` / ``python -m specsuite``) and the invoke tasks that call it."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docpages
import pytest
from readonly import sandbox_dir, sandbox_env, specsuite_readonly
from testdata import DATA_ROOT, as_history_run

from specsuite import cli
from specsuite.common import errors, paths
from specsuite.history import recording
from specsuite.results.document import decode_run

DATA = DATA_ROOT / "results"

BIN = Path(sys.executable).parent


@pytest.fixture
def sandbox() -> Iterator[Path]:
    with sandbox_dir() as folder:
        yield folder


def _run(*argv: str, tool: str = "specsuite", **kw) -> subprocess.CompletedProcess[str]:
    exe = BIN / tool
    if not exe.exists():
        pytest.skip(f"{tool} is not installed next to {sys.executable} (pip install -e .)")
    return subprocess.run(
        [str(exe), *argv], cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=120, **kw
    )


def test_help_lists_every_command() -> None:
    wide = {**os.environ, "COLUMNS": "400"}  # argparse wraps to the terminal: one command, one line
    proc = _run("--help", env=wide)
    assert proc.returncode == 0
    listed = " ".join(proc.stdout.split())
    for name in cli.COMMANDS:
        assert f" {name} {cli.command_parser(name).summary()} " in listed, name
    module = subprocess.run(
        [sys.executable, "-m", "specsuite", "--help"], capture_output=True, text=True, env=wide
    )
    assert module.returncode == 0 and module.stdout == proc.stdout


def test_help_needs_no_optional_extra() -> None:
    """Listing every command imports every command's module: none may need matplotlib (the plot extra)."""
    block = "import sys; sys.modules['matplotlib'] = None; from specsuite import cli; "
    proc = subprocess.run(
        [sys.executable, "-c", block + "sys.exit(cli.main(['--help']))"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "plot" in proc.stdout, proc.stderr
    bad = subprocess.run(
        [sys.executable, "-c", block + f"sys.exit(cli.main(['plot', {str(DATA / 'fixture-base')!r}]))"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: plot needs matplotlib"), bad.stderr
    assert bad.stderr.count("\n") == 1


def test_unknown_command_and_no_command_are_usage_errors() -> None:
    bad = _run("weekly")
    assert bad.returncode == 2 and "invalid choice: 'weekly'" in bad.stderr
    assert _run().returncode == 2


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_command_has_its_own_help(command: str, capsys) -> None:
    assert cli.main([command, "--help"]) == 0
    out = capsys.readouterr().out
    parser = cli.command_parser(command)
    assert out.startswith(f"usage: specsuite {command} ") and parser.summary() in " ".join(out.split())


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["fetch-models", "--jobs", "abc"], "'abc' is not a whole number"),
        (["fetch-models", "--jobs", "0"], "0 must be >= 1"),
        (["fetch-models", "--connections", "0"], "0 must be >= 1"),
        (["history", "--last", "-3"], "-3 must be >= 1"),
        (["compare", "a", "b", "--rtol", "nan"], "must be between 0 and 1"),
        (["run-tier", "smoke", "--repeat", "0"], "0 must be >= 1"),
    ],
)
def test_numeric_options_are_checked(argv: list[str], needle: str, capsys) -> None:
    assert cli.main(argv) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b"\xff\xfe junk", "cannot read it as a JSON results file"),
        (b'{"cases": {"x": {"floors": [1]}}}', "case 'x': floors must be an object"),
        (b'{"cases": []}', "no 'cases' table"),
        (b'{"cases": {"x": {"per_position_rate": 5}}}', "case 'x': per_position_rate must be a list"),
        (b'{"cases": {"x": {"status": "passed"}}, "binary": 5}', "binary must be an object"),
        (b'{"cases": {"x": {"speed": [2.0]}}}', "case 'x': speed must be an object or null"),
    ],
)
def test_compare_on_junk_is_one_line(tmp_path: Path, content: bytes, named: str) -> None:
    (tmp_path / "results.json").write_bytes(content)
    proc = _run("compare", "--no-plot", str(tmp_path), str(tmp_path))
    assert proc.returncode == 2
    assert (
        proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    ), proc.stderr
    assert str(tmp_path / "results.json") in proc.stderr and named in proc.stderr


def test_invoke_tasks_use_the_same_checks() -> None:
    listed = _run("--list", tool="invoke")
    for task in (
        "fetch-models",
        "lock-models",
        "verify-models",
        "probe",
        "compare",
        "history",
        "changes",
        "resolve",
    ):
        assert task in listed.stdout, listed.stdout
    bad = _run("changes", "--metric", "drafted", tool="invoke")
    assert bad.returncode == 2 and "--metric 'drafted': choose one of accept_rate" in bad.stderr
    bad = _run("fetch-models", "--jobs", "abc", tool="invoke")
    assert (
        bad.returncode == 2 and "'abc' is not a whole number" in bad.stderr and "Traceback" not in bad.stderr
    )


def _tasks() -> Any:
    spec = importlib.util.spec_from_file_location("specsuite_tasks", paths.REPO_ROOT / "tasks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ns


def test_each_task_is_its_command_with_its_parsers_help() -> None:
    """A task's docstring and option help are its command's; it takes every option the command has."""
    tasks = _tasks().tasks
    assert set(tasks) >= {"fetch-models", "lock-models", "verify-models", "probe", "compare", "history",
                          "resolve", "make-synthetic-models"}  # fmt: skip
    for name, task in tasks.items():
        shown = {a.name: a.help for a in task.get_arguments()}  # what `invoke --help TASK` prints
        assert shown == cli.task_help(name), name  # every option of the command, with its help
        assert task.__doc__ == cli.command_parser(name).description, name
        params = list(inspect.signature(task.body).parameters)[1:]  # after invoke's context
        assert set(params) == set(shown), name


def test_readme_task_lines_name_real_options() -> None:
    """Each `invoke TASK --option` README.md and the docs pages show is a task, and each option one of its
    command's (invoke names a flag after the command's dest: probe's BINARY is `--binary`)."""
    tasks = _tasks().tasks
    lines = [ln.removeprefix("invoke ").partition(" ") for ln in docpages.shown("invoke")]
    lines = [(name, rest) for name, _, rest in lines if re.fullmatch(r"[a-z][a-z-]*", name)]  # not --help
    assert len(lines) >= 15
    for name, rest in lines:
        assert name in tasks, name
        known = {"--" + dest.replace("_", "-") for dest in cli.task_help(name)}
        assert set(re.findall(r"--[a-z][a-z-]*", rest)) <= known, (name, rest)


def test_invoke_compare_takes_the_readmes_command_lines(tmp_path: Path) -> None:
    """`invoke compare A B` and `invoke compare B --against auto`, as the README shows them."""
    base, regressed = DATA / "fixture-base", DATA / "fixture-regressed"
    both = _run("compare", "--no-plot", str(base), str(regressed), tool="invoke")
    assert both.returncode == 1 and "B regresses in 1 case(s): ngram" in both.stdout, both.stderr
    assert f"A: fixture-base ({base})" in both.stdout
    env = {**os.environ, "SPEC_HISTORY": str(tmp_path / "h.sqlite"), "SPEC_CACHE_DIR": str(tmp_path / "c")}
    run_b = tmp_path / "b"
    run_b.mkdir()
    (run_b / "results.json").write_text(
        json.dumps(as_history_run(regressed, "b" * 40, "2026-12-02T00:00:00+00:00"))
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPEC_HISTORY", env["SPEC_HISTORY"])
        baseline = decode_run(as_history_run(base, "a" * 40, "2026-12-01T00:00:00+00:00"), "a")
        assert recording.record_run(baseline) is not None
    auto = _run("compare", str(run_b), "--against", "auto", "--no-plot", "--all", tool="invoke", env=env)
    assert auto.returncode == 1 and "history baseline, commit(s) aaaaaaaaaaaa" in auto.stdout, auto.stderr
    assert "accept_rate 0.4500 is 27.4 % below 0.6200" in auto.stdout
    neither = _run("compare", str(run_b), "--no-plot", tool="invoke")
    assert neither.returncode != 0 and "'b'" in neither.stderr


def test_ctrl_c_under_invoke_says_so(tmp_path: Path) -> None:
    hang, started = tmp_path / "llama-server", tmp_path / "started"
    hang.write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 60\n")  # a probe that never answers
    hang.chmod(0o755)
    exe = BIN / "invoke"
    if not exe.exists():
        pytest.skip("invoke is not installed")
    env = {**os.environ, "SPEC_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([str(exe), "probe", "--binary", str(hang)], cwd=paths.REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline:  # the probe runs: invoke's handler is set
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err


def test_history_json_on_an_empty_database(tmp_path: Path) -> None:
    proc = _run("history", "--json", env={**os.environ, "SPEC_HISTORY": str(tmp_path / "h.sqlite")})
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == [] and "no runs recorded yet" in proc.stderr


# --- exit codes: defined once (common.errors), followed by every command --------------------------------


def test_exit_codes_are_distinct_and_documented_in_the_readme() -> None:
    assert (errors.OK, errors.FAILED, errors.BAD_INPUT, errors.INTERNAL) == (0, 1, 2, 3)
    readme = (paths.REPO_ROOT / "README.md").read_text(encoding="utf-8")
    for code in errors.EXIT_CODES:
        assert f"| `{code}` |" in readme, f"README.md's exit-code table lacks {code}"


def test_an_internal_error_is_exit_3_and_says_it_is_a_bug(monkeypatch, capsys) -> None:
    def broken(argv: list[str]) -> int:
        raise RuntimeError("an invariant broke")

    monkeypatch.setattr("specsuite.suite.probe_report.main", broken)
    assert cli.main(["probe"]) == errors.INTERNAL
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("internal error (a bug in specsuite): RuntimeError: an invariant broke")


def test_an_os_error_is_bad_input_in_one_line(monkeypatch, capsys) -> None:
    def unwritable(argv: list[str]) -> int:
        raise PermissionError(13, "Permission denied", "/some/where/file.json")

    monkeypatch.setattr("specsuite.suite.probe_report.main", unwritable)
    assert cli.main(["probe"]) == errors.BAD_INPUT
    assert capsys.readouterr().err == "error: /some/where/file.json: Permission denied\n"


def test_a_usage_error_is_2_not_a_regression() -> None:
    for argv in (["compare"], ["history", "--last", "x"], ["bench"]):
        assert cli.main(argv) == errors.BAD_INPUT, argv


def test_a_user_error_cannot_claim_the_internal_code() -> None:
    with pytest.raises(ValueError, match="exits 1 or 2"):
        errors.UserError("x", code=errors.INTERNAL)


def test_verify_models_in_a_read_only_folder_is_no_traceback(sandbox: Path) -> None:
    """--full re-hashes and would refresh the stamps: a folder the user cannot write keeps them, says so."""
    from specsuite.models.synthetic.generate import make_synthetic_models

    models = sandbox / "models"
    make_synthetic_models(out=models)
    for stamp in models.glob(".*.stamp"):
        stamp.unlink()  # nothing vouches for the files: every one is hashed
    for lock in models.glob(".*.lock"):
        lock.unlink()
    proc = specsuite_readonly(
        "verify-models", "--full", "--model-dir", str(models), folders=[models], env=sandbox_env(sandbox)
    )
    assert proc.returncode == errors.OK, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "ok (hashed" in proc.stdout
    assert proc.stderr == f"note: stamps not saved: {models} is not writable (the next check hashes again)\n"
    assert not list(models.glob(".*.stamp"))


def test_an_unwritable_step_summary_never_turns_a_green_run_red(tmp_path: Path, capsys) -> None:
    from specsuite.results.summary import append_step_summary

    summary = tmp_path / "summary.md"
    summary.write_text("### green\n")
    target = tmp_path / "a-folder"
    target.mkdir()  # appending to a folder fails for root too
    os.environ["GITHUB_STEP_SUMMARY"] = str(target)
    try:
        append_step_summary(summary)
    finally:
        del os.environ["GITHUB_STEP_SUMMARY"]
    err = capsys.readouterr().err
    assert err.startswith(f"warning: GITHUB_STEP_SUMMARY={target}: cannot append the summary (")
    assert err.count("\n") == 1


# --- through invoke: positionals as positionals, each error once, the nearest name (issue 51, item 4) -------


def test_invoke_help_lists_positionals_as_positionals_and_following_it_works(tmp_path: Path) -> None:
    """`invoke --help compare` lists A and B first, as positionals (invoke's own listing shows `-a STRING`,
    an option); each way the help and the README give the runs then works."""
    shown = _run("--help", "compare", tool="invoke")
    assert shown.returncode == 0, shown.stderr
    options = shown.stdout.split("Options:\n", 1)[1].splitlines()
    assert options[0].split()[:2] == ["A", "(positional)"] and options[2].split()[:2] == ["B", "(positional)"]
    assert "-a STRING" not in shown.stdout and "-b STRING" not in shown.stdout
    assert "--against=STRING" in shown.stdout and "--all" in shown.stdout
    base, regressed = DATA / "fixture-base", DATA / "fixture-regressed"
    env = {**os.environ, "SPEC_HISTORY": str(tmp_path / "h.sqlite"), "SPEC_CACHE_DIR": str(tmp_path / "c")}
    both = _run("compare", "--no-plot", str(base), str(regressed), tool="invoke", env=env)
    assert both.returncode == 1 and both.stdout.startswith("**B regresses in 1 case(s): ngram**"), both.stderr
    for given in ([str(regressed)], ["-b", str(regressed)]):  # B alone: as the help lists it, or by flag
        alone = _run("compare", *given, "--against", "auto", "--no-plot", tool="invoke", env=env)
        # the empty history has no baseline: the command's own error, so the arguments reached it
        assert alone.returncode == 2 and alone.stderr.startswith("error: no history baseline"), alone.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "--case", "nosuch"],  # a UserError
        ["history", "--last", "0"],  # argparse's usage error
        ["compare", "/nonexistent/a", "/nonexistent/b"],  # bad input found by the command
        ["changes", "--metric", "drafted"],
        ["fetch-models", "--methods", "mpt", "--offline"],
    ],
)
def test_an_error_through_invoke_is_printed_once(argv: list[str], tmp_path: Path) -> None:
    """The command prints its one `error:` line; the Exit invoke gets carries only the exit code."""
    db = tmp_path / "h.sqlite"
    assert recording.import_runs([DATA / "smoke-real-1"], db)
    env = {**os.environ, "SPEC_HISTORY": str(db), "SPEC_CACHE_DIR": str(tmp_path / "c")}
    proc = _run(*argv, tool="invoke", env=env)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    errors_ = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(errors_) == 1 and len(set(proc.stderr.splitlines())) == len(proc.stderr.splitlines()), (
        proc.stderr
    )


def test_a_mistyped_case_name_gets_the_nearest_one(tmp_path: Path) -> None:
    """Wherever a case name is taken: the history's cases, cases.toml's (fetch-models, bisect)."""
    db = tmp_path / "h.sqlite"
    assert recording.import_runs([DATA / "smoke-real-1"], db)
    env = {**os.environ, "SPEC_HISTORY": str(db), "SPEC_CACHE_DIR": str(tmp_path / "c")}
    for argv, nearest in (
        (["history", "--case", "ngram-mdo"], "'ngram-mod'"),
        (["changes", "--case", "ngram-mdo"], "'ngram-mod'"),
        (["fetch-models", "--methods", "mpt"], "'mtp'"),
    ):
        proc = _run(*argv, tool="invoke", env=env)
        assert proc.returncode == 2 and proc.stderr.rstrip().endswith(f": did you mean {nearest}?"), (
            proc.stderr
        )
        assert proc.stderr.count("\n") == 1
    bisect = _run("bisect", "--good", "a", "--bad", "b", "--case", "mtpp", env=env)
    assert bisect.returncode == 2 and bisect.stderr.rstrip().endswith(": did you mean 'mtp'?"), bisect.stderr
