"""``specsuite bench`` against fake llama-servers that really serve HTTP (tests/fakellama.py), and once
against the real CPU build.

The fake's scripted speeds make every number exact: ``n_predict`` tokens in ``n_predict * ms_per_token``
milliseconds is ``1000 / ms_per_token`` tokens/s, whatever the prompt. Its counters add (12 drafted,
9 accepted, 4 drafts) per speculative request. The models are the synthetic tier's real GGUF files, since
the resolver reads their metadata (MTP heads) to pick each mode's flags.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakellama import fake_llama
from readonly import sandbox_dir, sandbox_env, specsuite_readonly
from testdata import DATA_ROOT

from specsuite import cli
from specsuite.bench.command import parse_modes
from specsuite.bench.measure import Measurement, ModeRun
from specsuite.bench.report import auto_verdict
from specsuite.common import errors, paths
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.server.resolver import Resolution

MTP_TARGET = "synth-target-glm4moe-mtp-fixed.gguf"  # MTP heads: auto = mtp+ngram on a CPU build
PLAIN_TARGET = "synth-target-llama-fixed.gguf"  # none: auto and mtp give --spec-default, ngram = mtp+ngram
TRUNK_TARGET = "synth-target-glm4moe-fixed.gguf"  # no MTP heads: drafts only through the drafter
DRAFTER = "synth-draft-glm4moe-mtp-fixed.gguf"  # a separate MTP drafter (its NextN block alone)
NO_HEADS_DRAFT = "synth-draft-llama-fixed.gguf"  # a plain draft model: no MTP heads to draft with
CPU_CHAIN = "ngram-mod,draft-mtp"
FAILURES = DATA_ROOT / "failures"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specsuite.models.fetch import FetchOptions, fetch_models

    folder = tmp_path_factory.mktemp("models")
    names = [MTP_TARGET, PLAIN_TARGET, TRUNK_TARGET, DRAFTER, NO_HEADS_DRAFT]
    fetch_models(FetchOptions(models=names, model_dir=folder, tty=False))
    return folder


@pytest.fixture
def env(tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPEC_MODEL_DIR", str(models))
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SPEC_METHOD_MODEL_DIR", raising=False)
    return tmp_path


@dataclass
class Bench:
    code: int
    out: Path
    stdout: str
    stderr: str

    @property
    def doc(self) -> dict[str, Any]:
        return json.loads((self.out / "bench.json").read_text())

    @property
    def md(self) -> str:
        return (self.out / "bench.md").read_text()

    def mode(self, name: str) -> dict[str, Any]:
        return next(m for m in self.doc["modes"] if m["mode"] == name)

    def row(self, mode: str) -> list[str]:
        """The bench.md table row of a mode, as cells."""
        line = next(ln for ln in self.md.splitlines() if ln.startswith(f"| {mode} |"))
        return [c.strip() for c in line.strip("|").split(" | ")]


@pytest.fixture
def bench(env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run ``specsuite bench ARGS --out OUT`` through the front door against a binary (default: the fake)."""

    def go(*args: str, binary: Path | None = None, **fake: Any) -> Bench:
        exe = binary or fake_llama(env / "bin", **fake)
        monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(exe))
        out = env / "out"
        code = cli.main(["bench", *args, "--out", str(out)])
        got = capsys.readouterr()
        return Bench(code, out, got.out, got.err)

    return go


def _refused(command: list[str]) -> bool:
    """True when nothing listens on the server's port any more: the bench stopped it."""
    port = int(command[command.index("--port") + 1])
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


# --- numbers ------------------------------------------------------------------------------------------------


def test_table_numbers_are_the_servers_speeds_and_counters(bench) -> None:
    b = bench("--model", MTP_TARGET, "--repeat", "2")  # fake: 10 ms/token speculative, 20 ms/token off
    assert b.code == 0, b.stderr
    for mode in ("auto", "ngram", "mtp", "mtp+ngram"):
        m = b.mode(mode)
        assert (m["tps"], m["tps_median"], m["tps_spread"]) == ([100.0, 100.0], 100.0, 0.0)
        assert m["speedup"] == 2.0
        # the cold pass: the 3 prompts on the fresh server, counted as the suite's cases count them; the
        # two timed rounds after it measure speed only (measure.cold: one definition of acceptance)
        assert (m["drafted"], m["accepted"], m["drafts"]) == (36, 27, 12)
        assert (m["accept_rate"], m["accept_len"]) == (0.75, 3.25)
    off = b.mode("off")
    assert (off["tps_median"], off["speedup"], off["accept_rate"], off["accept_len"]) == (
        50.0,
        1.0,
        None,
        None,
    )
    assert b.row("auto")[3:8] == ["100.0", "0.0", "2.00x", "0.750", "3.25"]
    assert b.row("off")[1] == "none" and b.row("off")[3:8] == ["50.0", "0.0", "1.00x", "—", "—"]
    assert b.row("auto")[1] == f"{CPU_CHAIN}, n_max 3, ngram 24/48/64"
    assert b.row("mtp")[1] == "draft-mtp, n_max 3"
    assert f"auto resolved to {CPU_CHAIN}: the fastest" in b.md
    assert b.md in b.stdout  # the table is printed as well as saved
    assert (b.out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert all(_refused(m["command"]) for m in b.doc["modes"] if m["command"])


def test_an_off_mode_that_drafts_is_no_baseline(bench) -> None:
    """off runs with the build's own word for no speculation (--spec-type none), and its counters decide: a
    build whose default speculates whatever --spec-type says (upstream's #28391) drafts there, and off is
    then a failed row, baseline_speculated, and no mode gets a speedup over it."""
    b = bench("--model", MTP_TARGET, "--modes", "off,mtp", "--repeat", "2")
    assert b.mode("off")["command"][-2:] == ["--spec-type", "none"]
    b = bench("--model", MTP_TARGET, "--modes", "off,mtp", "--repeat", "2",
              plain_drafts={"drafted": 6, "accepted": 6, "drafts": 2})  # fmt: skip
    off = b.mode("off")
    assert (off["reason"], off["tps_median"]) == ("baseline_speculated", None), off
    assert "the speculation-off server drafted" in off["message"]
    assert b.mode("mtp")["speedup"] is None


def test_progress_lines_name_each_mode_and_round(bench) -> None:
    b = bench("--model", MTP_TARGET, "--modes", "off,mtp", "--repeat", "2")
    assert "bench: mtp -> --spec-type draft-mtp --spec-draft-n-max 3" in b.stdout
    assert "bench:   round 2/2: 100.0 tokens/s" in b.stdout


def test_auto_slower_than_another_mode_is_said_with_both_speeds(bench) -> None:
    b = bench("--model", MTP_TARGET, "--repeat", "2", spec_ms_per_token=40.0, base_ms_per_token=20.0)
    assert b.code == 0
    sentence = f"auto resolved to {CPU_CHAIN} (25.0 tok/s), but off was fastest (50.0 tok/s)"
    assert sentence in b.md and b.doc["auto"] == sentence
    assert b.row("auto")[5] == "0.50x"


def test_modes_resolving_to_the_same_flags_share_one_server(bench) -> None:
    b = bench("--model", PLAIN_TARGET, "--repeat", "1")
    assert b.code == 0
    # on a model without MTP heads: mtp falls back to --spec-default like auto, mtp+ngram keeps ngram-mod
    assert (b.mode("mtp")["shares_with"], b.mode("mtp+ngram")["shares_with"]) == ("auto", "ngram")
    assert b.mode("auto")["flags"] == b.mode("mtp")["flags"] == ["--spec-default"]
    assert b.row("mtp")[1] == "--spec-default" and b.row("mtp")[8] == "same flags as auto: one measurement"
    assert b.row("mtp+ngram")[8] == "same flags as ngram: one measurement"
    assert sorted(p.name for p in (b.out / "logs").iterdir()) == ["auto.log", "ngram.log", "off.log"]
    assert b.mode("mtp")["command"] == b.mode("auto")["command"]
    assert "auto resolved to --spec-default: the fastest" in b.md


def test_without_off_the_speedup_is_a_dash(bench) -> None:
    b = bench("--model", MTP_TARGET, "--modes", "auto,mtp", "--repeat", "1", "--cuda", "-DGGML_FOO=1")
    assert b.code == 0
    assert "note: build flags --cuda -DGGML_FOO=1 are for `specsuite build`; ignored here" in b.stdout
    assert [m["mode"] for m in b.doc["modes"]] == ["auto", "mtp"]
    assert b.mode("auto")["speedup"] is None and b.row("auto")[5] == "—"


def _run(mode: str, tps: list[float], spec_type: str | None = "ngram-mod") -> ModeRun:
    flags = ("--spec-type", spec_type) if spec_type else ()
    res = Resolution(flags, spec_type, mode, None, "test")
    return ModeRun(mode, res, Measurement(flags, tps=tps))


def test_auto_verdict_says_when_the_repeats_overlap() -> None:
    other = _run("off", [100.0, 120.0], None)
    assert auto_verdict([_run("auto", [90.0, 110.0]), other]) == (
        "auto resolved to ngram-mod (100.0 tok/s), but off was fastest (110.0 tok/s); "
        "the ranges of the repeats overlap, so the difference is not clear"
    )
    assert auto_verdict([_run("auto", [80.0, 90.0]), other]).endswith("(110.0 tok/s)")
    assert auto_verdict([other]) == "auto was not benchmarked (--modes has no auto)"


def test_legacy_mode_names_are_canonicalized() -> None:
    assert parse_modes("default, draft-mtp,ngram-mod,OFF") == ["auto", "mtp", "ngram", "off"]
    assert parse_modes("auto,default,off") == ["auto", "off"]  # the same mode twice is measured once


@pytest.mark.parametrize("text", ["auto,turbo", "auto,", "ngram-mod;draft-mtp"])
def test_unknown_mode_is_refused_not_taken_for_auto(text: str) -> None:
    with pytest.raises(UserError, match="--modes: unknown mode"):
        parse_modes(text)


def test_a_separate_drafter_goes_to_the_resolver_and_the_server(bench, models: Path) -> None:
    b = bench("--model", TRUNK_TARGET, "--mtp-drafter", DRAFTER, "--modes", "off,auto,mtp", "--repeat", "1")
    assert b.code == 0, b.stderr
    auto, mtp = b.mode("auto"), b.mode("mtp")
    drafter = str(models / DRAFTER)
    assert auto["flags"][:2] == ["--model-draft", drafter] and auto["spec_type"] == CPU_CHAIN
    assert mtp["flags"] == ["--model-draft", drafter, "--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]
    assert "--spec-draft-poll 0" in " ".join(mtp["command"])  # a drafter on a CPU build: no busy polling
    assert b.row("mtp")[1] == f"draft-mtp, drafter {DRAFTER}, n_max 3"
    assert f"with the MTP drafter {DRAFTER}" in b.md
    assert b.doc["drafter"] == {"name": DRAFTER, "sha256": sha256_file(models / DRAFTER)}
    assert b.doc["model"] == {"name": TRUNK_TARGET, "sha256": sha256_file(models / TRUNK_TARGET)}
    assert b.mode("off")["flags"] == [] and "--model-draft" not in b.mode("off")["command"]


def test_without_a_drafter_bench_json_says_none(bench) -> None:
    b = bench("--model", MTP_TARGET, "--modes", "off", "--repeat", "1")
    assert b.code == 0 and b.doc["drafter"] is None


def test_a_drafter_without_mtp_heads_is_one_error_before_any_server(bench, env: Path) -> None:
    b = bench("--model", TRUNK_TARGET, "--mtp-drafter", NO_HEADS_DRAFT, "--modes", "off,mtp", "--repeat", "1")
    assert b.code == 2 and "Traceback" not in b.stderr
    (line,) = [ln for ln in b.stderr.splitlines() if ln.strip()]
    assert line.startswith(f"error: --mtp-drafter {NO_HEADS_DRAFT}: ") and "needs MTP heads" in line
    assert not (env / "out").exists()  # no server, not even off's, was started


# --- failures -----------------------------------------------------------------------------------------------


def _mtp_fails_to_start(folder: Path) -> Path:
    """The fake, except that a server asked for draft-mtp prints a real build's log of an MTP context that
    could not be created, and exits 1 (tests/data/failures/mtp-no-heads.log)."""
    fake = fake_llama(folder / "fake")
    script = folder / "llama-server"
    log = shlex.quote(str(FAILURES / "mtp-no-heads.log"))
    body = f'case "$*" in *draft-mtp*) cat {log} >&2; exit 1;; esac\nexec {shlex.quote(str(fake))} "$@"\n'
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_a_server_that_fails_to_start_is_a_row_with_its_reason(bench, env: Path) -> None:
    b = bench("--model", MTP_TARGET, "--repeat", "1", binary=_mtp_fails_to_start(env / "bin"))
    assert b.code == 1
    for mode in ("auto", "mtp", "mtp+ngram"):
        m = b.mode(mode)
        assert (m["status"], m["reason"], m["tps_median"]) == ("failed", "spec_init_failed", None)
        assert "failed to create MTP context" in m["message"]  # the server log's tail
    assert b.row("mtp")[3:9] == ["—", "—", "—", "—", "—", "failed: spec_init_failed"]
    assert b.mode("ngram")["status"] == b.mode("off")["status"] == "measured"
    assert b.mode("ngram")["speedup"] == 2.0
    assert f"auto resolved to {CPU_CHAIN}, but it could not be measured (spec_init_failed)" in b.md
    assert (b.out / "bench.png").is_file()


def test_a_server_dying_mid_run_is_a_failed_row_and_every_server_is_stopped(bench) -> None:
    # each speculative server dies on its third request, the cold pass's last prompt
    b = bench("--model", MTP_TARGET, "--repeat", "1", die_after_requests=2)
    assert b.code == 1
    assert {b.mode(m)["reason"] for m in ("auto", "ngram", "mtp")} == {"runtime_error"}
    assert b.mode("off")["status"] == "measured"
    assert all(_refused(m["command"]) for m in b.doc["modes"] if m["command"])


def test_without_matplotlib_one_note_and_the_rest_is_written(bench, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    b = bench("--model", MTP_TARGET, "--modes", "off", "--repeat", "1")
    assert b.code == 0
    assert "note: no bench.png: matplotlib is not installed" in b.stdout
    assert not (b.out / "bench.png").exists()
    assert b.mode("off")["tps_median"] == 50.0 and "| off |" in b.md


# --- interrupted: Ctrl-C, or SIGTERM from a runner cancelling the job ---------------------------------------


def _pids(exe: Path) -> list[int]:
    out = subprocess.run(["pgrep", "-f", str(exe)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _no_process_left(exe: Path) -> bool:
    for _ in range(50):  # a SIGKILLed server is reaped by its parent's exit: give the kernel a moment
        if not _pids(exe):
            return True
        time.sleep(0.1)
    return False


def _bench_process(env: Path, models: Path, exe: Path, *args: str) -> subprocess.Popen[str]:
    """``python -m specsuite bench ARGS`` as its own process, its temp folder private (env/tmp)."""
    (env / "tmp").mkdir()
    child_env = {k: v for k, v in os.environ.items() if k != "SPEC_METHOD_MODEL_DIR"}
    child_env.update(SPEC_MODEL_DIR=str(models), SPEC_CACHE_DIR=str(env / "cache"), TMPDIR=str(env / "tmp"),
                     LLAMA_SERVER_BIN_PATH=str(exe))  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "specsuite", "bench", *args, "--out", str(env / "out")],
        cwd=paths.REPO_ROOT,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(found: Any, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120  # generous: a loaded machine starts the bench slowly
    while not found() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_bench_reports_what_was_measured_and_leaves_nothing(
    env: Path, models: Path, sig
) -> None:
    """off is measured, then auto's server hangs in its cold pass's first request: the signal stops it,
    bench.md and bench.json hold off's numbers with auto and mtp marked interrupted, the exit is 130, and
    neither a server nor a server's config folder (specsuite-xdg-*) is left."""
    events = env / "events.jsonl"
    exe = fake_llama(env / "bin", request_sleep_s=60.0, events=str(events))
    proc = _bench_process(env, models, exe, "--model", MTP_TARGET, "--modes", "off,auto,mtp", "--repeat", "2")
    spec_started = lambda: events.exists() and '"spec": true' in events.read_text()  # noqa: E731
    _wait_for(spec_started, proc)
    time.sleep(0.5)  # into auto's first request
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == errors.INTERRUPTED, out + err
    assert err.splitlines()[-1] == "interrupted" and "Traceback" not in err, err
    assert out.splitlines()[-1] == (
        "bench: interrupted while measuring auto; bench.md and bench.json hold the 1 configuration(s) "
        "measured before it"
    )
    b = Bench(proc.returncode, env / "out", out, err)
    assert b.doc["interrupted"] == "auto"
    assert (b.mode("off")["status"], b.mode("off")["tps"]) == ("measured", [50.0, 50.0])
    for mode, when in (("auto", "while measuring"), ("mtp", "before")):
        m = b.mode(mode)
        assert (m["status"], m["reason"], m["tps_median"]) == ("interrupted", "interrupted", None)
        assert m["message"].startswith(f"the bench was interrupted {when} this mode")
    assert b.mode("auto")["command"] and b.mode("mtp")["command"] is None  # mtp's server never started
    assert "- **INTERRUPTED (Ctrl-C or SIGTERM) while measuring auto: the rows marked interrupted" in b.md
    assert b.row("auto")[8] == "interrupted" and b.row("off")[3] == "50.0"
    assert b.md in out  # printed as well as saved
    assert list((env / "tmp").glob("specsuite-xdg-*")) == []
    assert _no_process_left(exe)


def test_sigterm_before_any_server_says_nothing_was_measured(env: Path, models: Path) -> None:
    """A probe that never answers: SIGTERM there is one line saying no report was written, and exit 130."""
    started = env / "started"
    hang = env / "bin" / "llama-server"
    hang.parent.mkdir()
    hang.write_text(f"#!/bin/sh\ntouch {shlex.quote(str(started))}\nexec sleep 60\n")
    hang.chmod(0o755)
    proc = _bench_process(env, models, hang, "--model", MTP_TARGET)
    _wait_for(started.exists, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == errors.INTERRUPTED, out + err
    assert out == "bench: interrupted before any mode was measured: no report written\n"
    assert err == "interrupted\n"
    assert not (env / "out").exists() and _no_process_left(hang)


# --- bad input ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "nope.gguf"], "error: --model 'nope.gguf' is not in"),
        (["--model", MTP_TARGET, "--modes", "auto,turbo"], "error: --modes: unknown mode 'turbo'"),
        (["--model", MTP_TARGET, "--repeat", "0"], "argument --repeat: 0 must be >= 1"),
        (["--model", MTP_TARGET, "--repeat", "101"], "argument --repeat: 101 must be <= 100"),
        (["--model", MTP_TARGET, "--repeat", "9" * 30], "must be <= 100"),
        (["--model", MTP_TARGET, "--n-predict", "1025"], "argument --n-predict: 1025 must be <= 1024"),
        (["--model", MTP_TARGET, "--prompts", "nope"], "error: --prompts 'nope' is not an inline prompt set"),
        (["--modes", "auto"], "the following arguments are required: --model"),
        (
            ["--model", TRUNK_TARGET, "--mtp-drafter", "nope.gguf"],
            "error: --mtp-drafter 'nope.gguf' is not in",
        ),
    ],
)
def test_bad_input_is_one_message_and_exit_2(bench, env: Path, args: list[str], message: str) -> None:
    b = bench(*args)
    assert b.code == 2
    assert message in b.stderr and "Traceback" not in b.stderr
    assert not (env / "out").exists()  # refused before anything ran


# --- the real build -----------------------------------------------------------------------------------------


@pytest.mark.integration
def test_real_build_benches_the_synthetic_mtp_target(bench, env: Path) -> None:
    """Every mode on the real CPU build: auto is the CPU chain; the fixed weights accept every draft."""
    from fakeserver import real_binary

    b = bench("--model", MTP_TARGET, "--repeat", "2", binary=real_binary())
    assert b.code == 0, b.stdout[-3000:]
    auto = b.mode("auto")
    assert auto["spec_type"] == CPU_CHAIN and b.doc["auto"].startswith(f"auto resolved to {CPU_CHAIN}")
    assert b.mode("mtp+ngram")["shares_with"] == "auto"
    for mode in ("auto", "mtp", "ngram"):
        m = b.mode(mode)
        assert m["drafts"] > 0 and m["accept_rate"] == 1.0, m  # fixed weights: every draft is accepted
        assert len(m["tps"]) == 2 and all(t > 0 for t in m["tps"])
    assert b.mode("off")["drafted"] == 0 and b.mode("off")["speedup"] == 1.0
    assert (b.out / "bench.png").is_file() and (b.out / "bench.md").is_file()
    assert "--poll 0" in " ".join(auto["command"])  # server_command's CPU rule, as the suite runs it


@pytest.mark.integration
def test_real_build_benches_the_separate_drafter(bench) -> None:
    """The trunk target has no MTP heads: every draft comes from the drafter (fixed: all accepted)."""
    from fakeserver import real_binary

    b = bench("--model", TRUNK_TARGET, "--mtp-drafter", DRAFTER, "--modes", "off,auto,mtp", "--repeat", "1",
              binary=real_binary())  # fmt: skip
    assert b.code == 0, b.stdout[-3000:]
    assert b.mode("auto")["spec_type"] == CPU_CHAIN and "--model-draft" in b.mode("auto")["flags"]
    for mode in ("auto", "mtp"):
        m = b.mode(mode)
        assert (m["drafted"], m["accepted"], m["drafts"]) == (69, 69, 24), m  # as tiny-mtp-drafter


# --- where the reports go -----------------------------------------------------------------------------------


def test_out_onto_a_file_is_one_line_before_any_server(env: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(fake_llama(env / "bin")))
    afile = env / "a-file"
    afile.write_text("keep me\n")
    assert cli.main(["bench", "--model", MTP_TARGET, "--out", str(afile / "run")]) == errors.BAD_INPUT
    assert cli.main(["bench", "--model", MTP_TARGET, "--out", str(afile)]) == errors.BAD_INPUT
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("error: cannot create the results folder") for line in err)
    assert "give --out a writable folder" in err[0] and afile.read_text() == "keep me\n"


def test_out_in_a_read_only_folder_is_one_line_before_any_server(models: Path) -> None:
    with sandbox_dir() as box:
        out = box / "ro"
        out.mkdir()
        env = sandbox_env(box, SPEC_MODEL_DIR=str(models), LLAMA_SERVER_BIN_PATH=str(fake_llama(box / "bin")))
        proc = specsuite_readonly("bench", "--model", MTP_TARGET, "--out", str(out / "run"), folders=[out],
                                  env=env)  # fmt: skip
    assert proc.returncode == errors.BAD_INPUT, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"error: cannot create the results folder {out / 'run'}")
    assert proc.stderr.count("\n") == 1 and "bench:" not in proc.stdout  # no mode was started


def test_a_link_in_a_reused_out_folder_is_refused_before_any_server(env: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(fake_llama(env / "bin")))
    out, outside = env / "out", env / "outside"
    outside.mkdir()
    out.mkdir()
    (out / "logs").symlink_to(outside)
    assert cli.main(["bench", "--model", MTP_TARGET, "--out", str(out)]) == errors.BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith(f"error: the results folder {out} holds a link: {out / 'logs'} (a symbolic link)")
    assert err.endswith("remove it or give --out a new folder\n") and not list(outside.iterdir())
