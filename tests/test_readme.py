"""Every command line README.md and the pages of docs/ show is tested (issue 19, item 7; issue 36, item 9):
parsed, and run where that is cheap; every link between them resolves; the numbers they give of cases.toml
are cases.toml's; no page names a path of a development machine.

The lines are found by tests/docpages.py: in code spans and fenced blocks, each command of a shell line
(``&&``, ``;``), prompts and ``NAME=value`` settings before it left out. Parsed, all of them: each ``nox …``
line names sessions and tags of noxfile.py, and the arguments after ``--`` (also those of the sessions table
and the test sessions' options) parse with the parser of the command each session runs; each ``specsuite
COMMAND …`` line names a command of ``cli.COMMANDS`` whose options parse. Parsing goes through the command's
own ``main`` (what nox and invoke call), which the test stops right after its parser accepted the arguments
(``_parses``): a command that drops build flags or hands the rest to pytest is checked as it really reads them
(what a tier hands to pytest, pytest's own options, is not checked here). Placeholders (``TIER``, ``N``,
``DIR…``) become a value of their option's type, or its first choice; optional groups (``[--json]``) are taken
in.
``python benchmarks/X.py`` lines name scripts whose ``--help`` lists their options, and the ``python -m
pytest`` line a test that exists. (``invoke TASK --option`` lines: tests/test_cli.py checks their tasks and
options; ``pip install -e .`` and ``pip wheel .``: tests/test_packaging.py.)

Run end to end, below, every line that needs no build, no real model, no GPU and no network, on test
data: ``specsuite changes`` (docs/gates.md's output, line for line), ``invoke history --json``, ``specsuite
history import``, ``specsuite plan``, ``specsuite bisect --plan``, ``invoke verify-models``, ``specsuite
plot``, ``invoke probe`` and ``invoke resolve`` (the fake llama-server), ``invoke make-synthetic-models``,
``invoke report``; ``invoke compare A B`` and ``specsuite --help`` run in tests/test_cli.py.

Only parsed, with the reason: ``build`` and ``nox -s build`` (a llama.cpp build: tests/llamacpp), every test
session and ``run-tier`` (a built binary and the tiers' models; the synthetic tier runs on the real build in
tests/suite), ``calibrate`` (N runs of a tier), ``bench`` (run against fakes in tests/bench), ``bisect
--good/--bad`` and ``--from-plan`` (builds of llama.cpp commits: tests/bisect), ``gpu-check`` (a GPU),
``merge`` (the results folders of a sharded run: tests/suite/test_shards.py), ``fetch-models`` and
``lock-models`` (the Hub: tests/models with the fake Hub), the ``lint`` and ``tests`` sessions (a whole
lint or test run; their lines carry no arguments).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import histories
import pytest
from docpages import PAGES, ROOT, anchors, links, resolve, shown
from fakellama import fake_llama
from testdata import DATA_ROOT

from specsuite import cli
from specsuite.cases import schema
from specsuite.common import errors, paths

README = PAGES["README.md"]
BIN = Path(sys.executable).parent
RESULTS = DATA_ROOT / "results"
PYTHONS = re.findall(r"Python :: (3\.\d+)", (paths.REPO_ROOT / "pyproject.toml").read_text())
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_-]*(\.[a-z]+)?")  # TIER, N, TIER-OR-CASES, RESULTS.json, FILE.png


# --- the lines the pages show -------------------------------------------------------------------------------


def words(line: str) -> list[str]:
    """A command line's words, optional groups taken in and ellipses (``DIR…``, ``RESULTS.json...``) cut."""
    out = []
    for word in line.replace("[", " ").replace("]", " ").split():
        word = word.removesuffix("…").removesuffix("...")
        if word:
            out.append(word)
    return out


def _value(action: argparse.Action | None, word: str) -> str:
    """A placeholder as a value its option takes: its first choice, or a number where it wants one."""
    if action is None or not PLACEHOLDER.fullmatch(word):
        return word
    if action.choices:
        return str(next(iter(action.choices)))
    for candidate in (word, "4", "0.05"):
        try:
            callable(action.type) and action.type(candidate)
            return candidate
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            continue
    return word


def concrete(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with each option's placeholder value made one it takes (positionals stay as shown)."""
    actions = parser._option_string_actions  # argparse keeps them only here
    return [_value(actions.get(argv[i - 1]) if i else None, w) for i, w in enumerate(argv)]


# --- parsing through the command's own main -----------------------------------------------------------------


class Parsed(BaseException):
    """A command's parser accepted its arguments: the test stops the command there."""

    def __init__(self, result: Any) -> None:
        super().__init__("parsed")
        self.result = result


def _stopping(make: Callable[[], argparse.ArgumentParser]) -> Callable[[], argparse.ArgumentParser]:
    """``make``, whose parser raises Parsed once its outermost parse succeeded (parse_args calls
    parse_known_args: stopping there would skip its check for unknown arguments)."""

    def stopping() -> argparse.ArgumentParser:
        parser = make()
        depth: list[int] = []
        for name in ("parse_args", "parse_known_args"):
            real = getattr(parser, name)

            def stop(*args: Any, real: Any = real, **kwargs: Any) -> Any:
                if depth:
                    return real(*args, **kwargs)
                depth.append(1)
                try:
                    result = real(*args, **kwargs)
                finally:
                    depth.pop()
                raise Parsed(result)

            setattr(parser, name, stop)
        return parser

    return stopping


# `bisect --plan FILES` has no parser (it reads its files at once): run below on a real results folder
UNPARSED = (["bisect", "--plan"],)


def parses(monkeypatch: pytest.MonkeyPatch, command: str, argv: list[str]) -> None:
    """``specsuite COMMAND ARGV`` through cli.main, stopped when the command's parser accepted ARGV."""
    if [command, *argv[:1]] in UNPARSED:
        return
    module = importlib.import_module(cli.COMMANDS[command].partition(":")[0])
    for name, fn in list(vars(module).items()):
        if (name == "parser" or name.endswith("_parser")) and getattr(
            fn, "__module__", ""
        ) == module.__name__:
            monkeypatch.setattr(module, name, _stopping(fn))
    argv = concrete(cli.command_parser(command), argv)
    try:
        code = cli.main([command, *argv])
    except Parsed:
        return
    pytest.fail(f"`specsuite {command} {' '.join(argv)}` did not parse (exit {code}; its error is above)")


# --- nox ----------------------------------------------------------------------------------------------------


def noxfile_sessions() -> tuple[dict[str, list[str] | None], set[str]]:
    """Read from noxfile.py's source (loading it would register its sessions a second time in nox's one
    registry, which tests/test_noxfile.py reads): each session's specsuite command and fixed arguments
    (its ``_specsuite(session, …)`` call; None for lint and tests, which run none with the arguments after
    ``--``), and every tag of a session."""
    tree = ast.parse((paths.REPO_ROOT / "noxfile.py").read_text(encoding="utf-8"))
    commands: dict[str, list[str] | None] = {}
    tags: set[str] = set()
    for fn in tree.body:
        decorators = [d for d in getattr(fn, "decorator_list", []) if "nox.session" in ast.unparse(d)]
        if not isinstance(fn, ast.FunctionDef) or not decorators:
            continue
        calls = [c for c in ast.walk(fn) if isinstance(c, ast.Call) and ast.unparse(c.func) == "_specsuite"]
        commands[fn.name] = [ast.literal_eval(a) for a in calls[0].args[1:]] if calls else None
        for d in decorators:
            keywords = d.keywords if isinstance(d, ast.Call) else []
            tags.update(t for k in keywords if k.arg == "tags" for t in ast.literal_eval(k.value))
    return commands, tags


SESSIONS, TAGS = noxfile_sessions()


def nox_line(line: str) -> tuple[list[str], list[str], list[str]]:
    """(sessions, tags, the arguments after ``--``) of a ``nox …`` line."""
    argv = words(line)[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    sessions: list[str] = []
    tags: list[str] = []
    flag = None
    for word in argv[:cut]:
        if word.startswith("-"):
            flag = word
            continue
        assert flag in ("-s", "-t"), f"{line}: {word} follows neither -s nor -t"
        if flag == "-s" and (m := re.fullmatch(r"(\w+)-(3\.\d+)", word)):  # a session on one Python
            assert m[2] in PYTHONS, f"{line}: {m[2]} is not a supported Python ({PYTHONS})"
            word = m[1]
        (sessions if flag == "-s" else tags).append(word)
    return sessions, tags, argv[cut + 1 :]


def session_table() -> list[str]:
    """The sessions table's arguments as nox lines: ``nox -s SESSION -- ARGS`` for each ``-- ARGS`` in a
    session's row; the options of the test sessions listed below it, on test_smoke."""
    section = README.split("## nox sessions", 1)[1].split("\n## ", 1)[0]
    lines = []
    for name, row in re.findall(r"^\| `([a-z_]+)` \|(.*)$", section, re.M):
        for span in re.findall(r"`-- ([^`]*)`", row):  # (a bare `--flag` there names a server flag)
            lines.append(f"nox -s {name} -- {span}")
    options = section.split("Options of the test sessions:", 1)[1].split("\n\n", 1)[0]
    for span in re.findall(r"`(-[^`]*)`", options):
        flag, _, values = span.partition(" ")
        for value in values.split("|") if values else [""]:  # `--gpus all|N|0,2,5`: each alternative
            lines.append(f"nox -s test_smoke -- {flag} {value}".strip())
    return lines


NOX_LINES = [ln for ln in shown("nox") if words(ln)[1].startswith("-")]  # not nox's own output (`nox > …`)
TABLE_LINES = session_table()


def test_the_readme_shows_the_lines_this_module_checks() -> None:
    assert len(NOX_LINES) >= 8 and "nox -s build test_compact -- --cuda --repeat 4 -x" in NOX_LINES
    assert "nox -s calibrate -- --tier compact --runs 3 --dry-run" in [
        " ".join(words(x)) for x in TABLE_LINES
    ]
    assert "nox -s test_smoke -- --gpus 0,2,5" in TABLE_LINES and len(TABLE_LINES) >= 20
    assert "specsuite changes --case tiny-mtp-random --metric accept_rate" in shown("specsuite")


def test_the_quick_start_installs_uv_beside_nox() -> None:
    """nox takes uv or virtualenv for its venvs (the noxfile's "uv|virtualenv"); a nox installed without uv
    beside it says `nox > uv binary not found.` on every run of the Quick start."""
    installs = [ln for ln in shown("python3 -m pip install") if "nox" in ln.split()]
    assert installs and all("uv" in ln.split() for ln in installs), installs


def test_readme_nox_sessions_and_tags_are_the_noxfiles() -> None:
    assert {"build", "test_smoke", "bench", "lint", "tests"} <= set(SESSIONS)
    assert sorted(TAGS) == ["cpu", "gpu"]
    for line in [*NOX_LINES, *TABLE_LINES]:
        names, wanted, _ = nox_line(line)
        assert names or wanted, line
        assert set(names) <= set(SESSIONS), line
        assert set(wanted) <= TAGS, line


@pytest.mark.parametrize("line", NOX_LINES + TABLE_LINES)
def test_readme_nox_arguments_parse_with_each_sessions_command(line: str, monkeypatch) -> None:
    names, _, posargs = nox_line(line)
    for name in names:
        command = SESSIONS.get(name)
        if name == "tests":  # pytest's: test paths of this repository
            assert all((paths.REPO_ROOT / a).exists() for a in posargs if not a.startswith("-")), line
            continue
        if command is None:  # lint: no specsuite command reads the arguments
            assert not posargs, line
            continue
        parses(monkeypatch, command[0], [*command[1:], *posargs])
        monkeypatch.undo()


# --- specsuite ----------------------------------------------------------------------------------------------

# `specsuite COMMAND --help` and `specsuite …` name no command (test_cli runs every command's --help)
SPECSUITE_LINES = [ln for ln in shown("specsuite") if len(words(ln)) > 1 and not words(ln)[1].isupper()]


@pytest.mark.parametrize("line", SPECSUITE_LINES)
def test_readme_specsuite_lines_name_a_command_and_parse(line: str, monkeypatch) -> None:
    """A line that only names a command in prose (`specsuite merge`) names one; any more must parse."""
    argv = words(line)[1:]
    if argv == ["--help"]:
        assert cli.main(argv) == errors.OK
        return
    assert argv[0] in cli.COMMANDS, line
    if argv[1:]:
        parses(monkeypatch, argv[0], argv[1:])


# --- run end to end -----------------------------------------------------------------------------------------


def run(
    *argv: str, tool: str = "specsuite", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    exe = BIN / tool
    if not exe.exists():
        pytest.skip(f"{tool} is not installed next to {sys.executable} (pip install -e .)")
    return subprocess.run([str(exe), *argv], cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})  # fmt: skip


@pytest.fixture(scope="module")
def drift(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The history of docs/gates.md's change-point example: real synthetic-tier runs, -3 % a commit."""
    from specsuite.history import recording

    folder = tmp_path_factory.mktemp("drift")
    docs = histories.history_docs(histories.SHAPES["drift"])
    recording.import_runs(histories.write(docs, folder / "runs"), folder / "history.sqlite")
    return folder / "history.sqlite"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"SPEC_CACHE_DIR": str(tmp_path / "cache"), "SPEC_HISTORY": str(tmp_path / "history.sqlite")}


def test_specsuite_changes_prints_what_the_readme_shows(drift: Path, env) -> None:
    shown_at = "$ specsuite changes --case tiny-mtp-random --metric accept_rate\n"
    block = next(text for text in PAGES.values() if shown_at in text).split(shown_at, 1)[1]
    shown_lines = [ln.strip() for ln in block.split("…", 1)[0].splitlines() if ln.strip()]
    proc = run("changes", "--case", "tiny-mtp-random", "--metric", "accept_rate",
               env={**env, "SPEC_HISTORY": str(drift)})  # fmt: skip
    assert proc.returncode == errors.OK, proc.stderr
    got = [ln.strip() for ln in proc.stdout.splitlines()]
    assert len(shown_lines) == 5 and got[: len(shown_lines)] == shown_lines


def test_invoke_history_json(drift: Path, env) -> None:
    proc = run("history", "--case", "tiny-mtp-random", "--last", "2", "--json", "--db", str(drift),
               tool="invoke", env=env)  # fmt: skip
    assert proc.returncode == errors.OK, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["run_id"], r["case"]) for r in rows] == [
        ("h10", "tiny-mtp-random"),
        ("h11", "tiny-mtp-random"),
    ]


def test_specsuite_history_import_enters_each_run_once(tmp_path: Path, env) -> None:
    db = tmp_path / "imported.sqlite"
    first = run("history", "import", str(RESULTS / "fixture-base"),
                str(RESULTS / "fixture-regressed" / "results.json"), "--db", str(db), env=env)  # fmt: skip
    assert first.returncode == errors.OK and f"2 of 2 run(s) entered into {db}" in first.stdout, first.stderr
    again = run("history", "import", str(RESULTS / "fixture-base"), "--db", str(db), env=env)
    assert again.returncode == errors.OK and "0 of 1 run(s) entered" in again.stdout


def test_specsuite_plan_splits_a_tier(tmp_path: Path, env) -> None:
    out = tmp_path / "plan.json"
    proc = run("plan", "synthetic", "--shards", "2", "--json", "--out", str(out), env=env)
    assert proc.returncode == errors.OK, proc.stderr
    shards = json.loads(out.read_text())["include"]
    assert [s["shard"] for s in shards] == ["1/2", "2/2"] and json.loads(proc.stdout)["include"] == shards


def test_specsuite_bisect_plan_reads_a_red_run(env) -> None:
    """fixture-regressed fails a floor, with no earlier commit in the (empty) history: nothing to bisect."""
    proc = run("bisect", "--plan", str(RESULTS / "fixture-regressed"), env=env)
    assert proc.returncode == errors.OK, proc.stderr
    assert json.loads(proc.stdout) == [] and "not bisected: ngram (floor)" in proc.stderr


def test_invoke_verify_models_on_an_empty_model_folder(tmp_path: Path, env) -> None:
    (tmp_path / "models").mkdir()
    proc = run(
        "verify-models", "--full", tool="invoke", env={**env, "SPEC_MODEL_DIR": str(tmp_path / "models")}
    )
    assert proc.returncode == errors.OK, proc.stderr  # not fetched is not corrupt: fetch-models fetches them
    assert "synth-target-llama-fixed.gguf" in proc.stdout and "missing (not fetched)" in proc.stdout


def test_specsuite_plot_two_runs(tmp_path: Path, env) -> None:
    pytest.importorskip("matplotlib")
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(RESULTS / "fixture-base", a)
    shutil.copytree(RESULTS / "fixture-regressed", b)
    proc = run("plot", str(a), str(b), env=env)
    assert proc.returncode == errors.OK, proc.stderr
    assert (b / "per_position.png").read_bytes()[:4] == b"\x89PNG" and str(
        b / "per_position.png"
    ) in proc.stdout


def test_invoke_probe_make_synthetic_models_and_resolve(tmp_path: Path, env) -> None:
    exe = fake_llama(tmp_path / "bin")
    probe = run("probe", "--binary", str(exe), tool="invoke", env=env)
    assert probe.returncode == errors.OK, probe.stderr
    assert re.search(r"cases: (\d+) of \1 can run", probe.stdout), probe.stdout
    probe = run("probe", "--binary", str(exe), "--all-cases", tool="invoke", env=env)
    assert probe.returncode == errors.OK and "tiny-none" in probe.stdout, probe.stderr
    made = run("make-synthetic-models", "--out", str(tmp_path / "synth"), tool="invoke", env=env)
    assert made.returncode == errors.OK, made.stderr
    model = tmp_path / "synth" / "synth-target-glm4moe-mtp-fixed.gguf"
    args = ["--model", str(model), "--mode", "auto", "--device", "cpu", "--binary", str(exe)]
    args += ["--spec-draft-n-max", "4", "--extra-args=--temp 0"]
    resolved = run("resolve", *args, tool="invoke", env=env)
    assert resolved.returncode == errors.OK, resolved.stderr
    assert "speculative mode: auto -> ngram-mod,draft-mtp" in resolved.stdout
    assert "--spec-draft-n-max 4" in resolved.stdout


def test_invoke_report_builds_the_site(drift: Path, tmp_path: Path, env) -> None:
    site = tmp_path / "site"
    proc = run("report", "--out", str(site), "--last", "5", "--db", str(drift), tool="invoke", env=env)
    assert proc.returncode == errors.OK, proc.stderr
    assert (site / "index.html").is_file() and "report: 5 runs on 1 device class(es)" in proc.stdout


def test_the_check_fails_on_a_wrong_line(monkeypatch) -> None:
    """The parse check can fail: an option the command lacks, a value its type refuses."""
    for command, argv in (
        ("plan", ["TIER", "--shardz", "N"]),
        ("run-tier", ["smoke", "--drift-window", "2"]),
    ):
        with pytest.raises(pytest.fail.Exception, match="did not parse"):
            parses(monkeypatch, command, argv)
        monkeypatch.undo()
    assert nox_line("nox -s build test_smoke -- --cpu -x") == (["build", "test_smoke"], [], ["--cpu", "-x"])


def test_python_lines_name_real_scripts_tests_and_options() -> None:
    """``python benchmarks/X.py --opt N`` names a script whose --help lists each option (a benchmark is
    not run: minutes of builds and servers); ``python -m pytest FILE::TEST`` names a test that exists."""
    joined = " ".join(text.replace("\n", " ") for text in PAGES.values())
    spans = [*re.findall(r"`(python3? [^`]+)`", joined), *shown("python"), *shown("python3")]
    scripts = [words(s)[1:] for s in spans if words(s)[1].startswith("benchmarks/")]
    assert len(scripts) >= 4
    for script, *argv in scripts:
        assert (paths.REPO_ROOT / script).is_file(), script
        if flags := [w for w in argv if w.startswith("--")]:
            shown_help = subprocess.run([sys.executable, script, "--help"], cwd=paths.REPO_ROOT,
                                        capture_output=True, text=True, timeout=60)  # fmt: skip
            assert shown_help.returncode == 0 and all(f in shown_help.stdout for f in flags), script
    tests = [w for s in spans if s.startswith("python -m pytest") for w in words(s) if "::" in w]
    assert tests, "docs/benchmarks.md's pytest line"
    for node in tests:
        file, _, name = node.partition("::")
        assert f"def {name}(" in (paths.REPO_ROOT / file).read_text(encoding="utf-8"), node


# --- the pages as a whole -----------------------------------------------------------------------------------


def test_every_link_between_the_pages_resolves() -> None:
    """A link of README.md or a docs page names a file of this repository and, after ``#``, a heading of
    that file (as GitHub makes its anchor)."""
    checked = 0
    for page, text in PAGES.items():
        for target in links(text):
            path, anchor = resolve(page, target)
            assert path.is_file() and paths.REPO_ROOT in path.parents, f"{page}: {target}"
            if anchor:
                assert path.suffix == ".md" and anchor in anchors(path.read_text(encoding="utf-8")), (
                    f"{page}: {target}: no such heading"
                )
            checked += 1
    assert checked >= 60


def test_the_link_check_can_fail() -> None:
    assert resolve("docs/site.md", "workflow.md#the-jobs") == (
        paths.REPO_ROOT / "docs/workflow.md",
        "the-jobs",
    )
    assert "the-jobs" in anchors(PAGES["docs/workflow.md"]) and "no-such" not in anchors(PAGES["README.md"])
    assert links("see [x](a.md#b), `[y](c.md)` and [web](https://example.com)") == ["a.md#b"]


def test_the_readme_links_every_docs_page() -> None:
    pages = {p for p in PAGES if p.startswith("docs/")}
    linked = {resolve("README.md", t)[0] for t in links(README)}
    assert {paths.REPO_ROOT / p for p in pages} <= linked, pages


def test_no_page_names_a_path_of_a_development_machine() -> None:
    """Commands that work from any checkout: no absolute path of the machine a page was written on."""
    for page, text in PAGES.items():
        found = re.findall(r"(?<![\w.])/(?:work|tmp|root|home|Users)/[^\s`)]*", text)
        assert not found, f"{page}: {found}"


def test_the_readme_stays_a_front_door() -> None:
    """What a user needs in the first ten minutes (issue 36, item 9: about 15 KB); the depth is in docs/."""
    assert len(README.encode()) < 16 * 1024


CASES = schema.load_cases()


def tier_size(tier: str) -> int:
    return len(schema.select_cases(CASES, tier))


def test_the_case_counts_the_pages_give_are_cases_toml_s() -> None:
    """The tiers table, docs/tiers.md, docs/upstream.md and the probe line of the Quick start count
    cases.toml's cases, not numbers copied once."""
    table = README.split("## Tiers and download sizes", 1)[1]
    rows = dict(re.findall(r"^\| (\w+) \| `test_\w+` \| (?:CPU|GPU) \| (\d+) \|", table, re.M))
    assert rows.keys() == set(schema.TIERS) and all(int(n) == tier_size(t) for t, n in rows.items()), rows
    listed = dict(
        re.findall(r"^- \*\*(\w+)\*\* \(`test_\w+`, (?:CPU|GPU), (\d+) cases\)", PAGES["docs/tiers.md"], re.M)
    )
    assert listed == rows
    upstream = PAGES["docs/upstream.md"]
    assert f"`compact` runs {tier_size('compact')} cases" in upstream
    assert f"`all` runs {tier_size('all')} cases (compact's {tier_size('compact')} and nightly's " in upstream
    assert f"cases: {len(CASES)} of {len(CASES)} can run" in README


def test_ci_runs_exactly_the_test_command_the_readme_and_development_md_show() -> None:
    """.ci/run's last line is the README's test command, word for word (and development.md's)."""
    command = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert command.startswith("python3 -m pip install nox uv && nox -s ")
    assert f"`{command}`" in README
    assert command in PAGES["docs/development.md"]


# --- promises kept: what the Quick start installs, a first baseline, a runner from the README (issue 51) ----


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_quick_start_installs_the_commands_the_readme_uses() -> None:
    """`invoke …` and `specsuite …` lines follow the Quick start: it installs both (the `tasks` extra holds
    invoke; the package's script is specsuite)."""
    import tomllib

    quick = _section("Quick start")
    installs = [
        ln for ln in re.findall(r"^python3 -m pip install [^#\n]*", quick, re.M) if "-e" in ln.split()
    ]
    assert installs == ["python3 -m pip install -e '.[tasks]'   "], installs
    project = tomllib.loads((paths.REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert any(req.startswith("invoke") for req in project["optional-dependencies"]["tasks"])
    assert "specsuite" in project["scripts"]
    rest = README.split("## Quick start\n", 1)[1]
    assert "`invoke " in rest and "`specsuite " in rest  # what it installs them for


def test_the_readme_says_how_to_seed_a_first_baseline() -> None:
    """The same tier on a build before the pin's: a real earlier build, as a line every check parses."""
    pin = tomllib_load(paths.REPO_ROOT / "llama.cpp.pin.toml")["llama_cpp"]["build"]
    reading = _section("Reading a run")
    assert "none yet" in reading and "seed one with the same tier on an earlier build" in reading
    [line] = re.findall(r"`(nox -s build test_smoke -- --ref b(\d+))`", reading)
    assert line[0] in NOX_LINES and int(line[1]) < pin


def tomllib_load(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10: the same parser, as tomli (a dependency there)
        import tomli as tomllib

    return tomllib.loads(path.read_text(encoding="utf-8"))


def _workflow() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "spec-suite.yml").read_text(encoding="utf-8"))
    return workflow


def test_the_runner_setup_says_what_a_first_runner_needs() -> None:
    """README's setup section (and docs/runner.md in depth): the floors first; the driver with its source;
    the container check on the workflow's own image; host toolchain against the image's; the folders the
    jobs mount, created for root; the first run's cost; the public-repository warning on a workflow that
    has no pull-request trigger."""
    from specsuite.tools import gpucheck

    setup, runner = _section("Setting up a GPU runner"), PAGES["docs/runner.md"]
    first, steps = setup.split("\n1. ", 1)
    assert "calibrate" in first and "DGX" in first.replace("\n", " ")  # before step 1
    workflow = _workflow()
    image = workflow["jobs"]["suite"]["container"]["image"]
    assert f"`docker run --rm --gpus all {image} nvidia-smi`" in steps
    assert f"docker run --rm --gpus all {image} nvidia-smi" in runner
    assert "driver 580 or newer" in steps and "CUDA 13.x, minimum driver >= 580" in runner
    assert "Minor Version Compatibility" in runner  # where the number comes from
    assert "`nox -s gpu_check` tests the host's toolchain" in steps
    assert "nox -s gpu_check -- --container IMAGE" in NOX_LINES
    folders = f"sudo install -d -m 755 {gpucheck.RUNNER_MODELS} {gpucheck.RUNNER_CACHE}"
    assert f"`{folders}`" in steps and "run as root" in steps and folders in runner
    options = workflow["jobs"]["suite"]["container"]["options"]
    assert f"'{gpucheck.RUNNER_MODELS}'" in options and f"'{gpucheck.RUNNER_CACHE}'" in options
    assert list(workflow[True]) == ["workflow_dispatch", "schedule"]  # yaml reads `on:` as True
    assert "fork's pull request" in steps and "only by hand and on schedule" in steps
    assert "forks of a public repository can run code on the runner" in runner.replace("\n", " ")
    gib = f"about {compact_download_gib():.1f} GiB of models"
    assert gib in steps.replace("\n   ", " ") and "image" in steps and "CUDA cold" in steps


def compact_download_gib() -> float:
    """The compact tier's models from models.lock: the locked sizes, else upstream's in each entry's note."""
    lock = tomllib_load(paths.REPO_ROOT / "models.lock")
    names = {m for c in schema.select_cases(CASES, "compact") for m in c.models}
    total = 0.0
    for entry in (e for e in lock["model"] if e["name"] in names):
        if entry.get("size"):
            total += entry["size"]
            continue
        number, unit = re.search(r"about ([\d.]+) (GiB|MiB)", entry["note"]).groups()
        total += float(number) * 2 ** (30 if unit == "GiB" else 20)
    return total / 2**30
