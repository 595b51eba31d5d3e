"""Old upstream builds judged, not just described (issue 50.5): what b9113 and b9246 did to the synthetic
tier, each said as what it is.

- b9113's speculative answers lack the last tokens they generated when an accepted batch reaches
  ``n_predict`` (``timings.predicted_n`` 32, 30 tokens returned, the 30 equal to the plain server's): its own
  failure, ``tokens_lost``, not a divergence, and a measurement (its counters count the whole generation),
  so the next build has a baseline.
- The chat request that checks usage is an auxiliary one: refused with an HTTP error by a server that keeps
  running, it is a warning on the case, not its end.
- A known bug of builds older than the pin (``fixed_in``) is judged on those builds only: on the pin a
  pass says nothing and the bug back is red. One bug whose message upstream reworded names both texts.

The servers are tests/fakellama.py's (a build of another commit cannot be compiled in test time; the real
b9113 and b9246 runs are in docs/replay.md), the models the synthetic tier's real GGUF files.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakellama import fake_llama

from specsuite.cases.schema import Case, KnownBug, load_cases, parse_case_file
from specsuite.llamacpp.source import load_pin
from specsuite.measure import known, runner
from specsuite.results.document import load_run
from specsuite.results.record import CaseRecord
from specsuite.results.verdict import verdict
from specsuite.suite import session as suite

TARGET = "synth-target-llama-fixed.gguf"
DRAFT = "synth-draft-llama-fixed.gguf"
CASE = f"""
    version = 1
    [[prompt_set]]
    name = "p"
    prompts = [{{ id = "a", text = "Hello world" }}, {{ id = "b", text = "1 2 3" }}]
    [[case]]
    name = "c"
    tier = "synthetic"
    target = "{TARGET}"
    draft = "{DRAFT}"
    spec_type = "draft-simple"
    n_max = 3
    prompts = "p"
    n_predict = 8
    min_accept_rate = 0.5
    min_accept_len = 2.0
    min_identical_fraction = 1.0
"""
KNOWN = """
    [case.known_bug]
    title = "a speculative answer lacks the last tokens it generated"
    reason = "tokens_lost"
"""


def _case(extra: str = "") -> Case:
    return parse_case_file(textwrap.dedent(CASE) + textwrap.dedent(extra)).cases[0]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specsuite.models.fetch import FetchOptions, fetch_models

    folder = tmp_path_factory.mktemp("models")
    fetch_models(FetchOptions(models=[TARGET, DRAFT], model_dir=folder, tty=False))
    return folder


@pytest.fixture
def run(tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    monkeypatch.setenv("SPEC_MODEL_DIR", str(models))
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "history.sqlite"))
    for var in ("SPEC_STRICT", "SPEC_REPEAT", "SPEC_ALLOW_CPU", "SPEC_NO_HISTORY", "SPEC_RTOL"):
        monkeypatch.delenv(var, raising=False)
    sessions: list[runner.Engine] = []

    def go(case: Case, **fake: object) -> CaseRecord:
        exe = fake_llama(tmp_path / f"bin{len(sessions)}", **fake)
        monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(exe))
        s = suite.open_session(case.name, [case], tmp_path / f"results{len(sessions)}")
        sessions.append(s)
        try:
            return runner.run_case(case, s)
        finally:
            suite.finish_session(s)

    yield go


# --- an answer that lost the tokens it generated last --------------------------------------------------


def test_an_answer_that_lost_its_tail_fails_tokens_lost_and_still_measured(run) -> None:
    """As b9113 answers: 6 of the 8 tokens counted reach the client, the 6 equal to the plain server's. The
    case fails for that, in those words, with no divergence said besides; its counters are a measurement
    (a baseline for the next build)."""
    rec = run(_case(), lose_tail=2)
    assert (rec.status, rec.reason) == ("failed", "tokens_lost"), rec.message
    assert (
        "- [tokens_lost] the speculative server returned fewer tokens than it generated "
        "(timings.predicted_n) for 2 of 2 request(s): a: 6 of 8, b: 6 of 8; the tokens it returned equal "
        "the plain server's" in rec.message
    )
    assert "[diverged]" not in rec.message
    assert rec.identical_fraction == 0.0 and [p.first_diff for p in rec.prompts] == [6, 6]  # data as it is
    assert (rec.drafted, rec.accepted) == (24, 18) and rec.measured


def test_a_lost_tail_with_a_divergence_inside_the_answer_is_diverged_and_no_measurement(run) -> None:
    rec = run(_case(), lose_tail=2, diverge=True)  # the fake changes token 4 of 8: inside what it returns
    assert (rec.status, rec.reason) == ("failed", "diverged"), rec.message
    assert "(first differing token per prompt: a@4, b@4)" in rec.message
    assert "some of the tokens it returned differ from the plain server's (diverged, above)" in rec.message
    assert not rec.measured


def test_an_answer_that_lost_nothing_says_nothing_of_it(run) -> None:
    rec = run(_case())
    assert rec.status == "passed", rec.message
    assert rec.measured and rec.identical_fraction == 1.0


# --- the chat request that checks usage -------------------------------------------------------------------


def test_a_chat_request_the_server_refuses_is_a_warning_not_the_end_of_the_case(run) -> None:
    message = "Failed to parse input at pos 0: x"
    rec = run(_case(), chat_error=message)
    assert rec.status == "passed", rec.message
    said = [w for w in rec.warnings if w.startswith("usage not checked")]
    assert said and said[0].startswith(
        "usage not checked (an auxiliary request; the measurement stands): POST /v1/chat/completions "
        "returned HTTP 500:"
    )
    assert message in said[0] and (rec.drafted, rec.accepted) == (24, 18)


def test_a_chat_request_that_kills_the_server_still_ends_the_case(run) -> None:
    """A chat request the server dies on (no HTTP answer, the process gone) is the case's end as before."""
    rec = run(_case(), chat_error="SIGABRT")
    assert rec.status == "failed" and not [w for w in rec.warnings if w.startswith("usage")], rec.message
    assert rec.message.startswith("POST /v1/chat/completions failed: ('Connection aborted.'")
    assert "GGML_ASSERT(fake chat) failed" in rec.message


# --- a known bug of older builds ------------------------------------------------------------------------


def _ended(status: str, reason: str | None = None, message: str = "") -> CaseRecord:
    return CaseRecord(name="c", tier="synthetic", status=status, reason=reason, message=message)


BUG = KnownBug(title="tail lost", reason="tokens_lost", fixed_in=9246)


def test_a_bug_of_older_builds_is_judged_before_its_fix() -> None:
    rec = _ended("failed", "tokens_lost", "- [tokens_lost] ...")
    known.judge(BUG, rec, None, build=9113)
    assert (rec.status, rec.known_bug.state) == ("known_bug", "present")
    passed = _ended("passed")
    known.judge(BUG, passed, None, older=True, build=9113)
    assert passed.known_bug.state == "absent"


@pytest.mark.parametrize("build", [9246, 11311])
def test_from_its_fix_on_a_pass_says_nothing_and_the_bug_back_is_red(build: int) -> None:
    passed = _ended("passed")
    known.judge(BUG, passed, None, build=build)
    assert (passed.status, passed.known_bug) == ("passed", None)
    back = _ended("failed", "tokens_lost", "- [tokens_lost] ...")
    known.judge(BUG, back, None, build=build)
    assert (back.status, back.known_bug) == ("failed", None)  # a regression, not a known bug


@pytest.mark.parametrize("build", [None, 0, 1])
def test_a_build_of_no_number_is_taken_as_current(build: int | None) -> None:
    """A local tree or a fork (no build number; 0 and 1 are none) is not judged against a bug fixed long
    ago: its pass names no FIXED bug on every run, and the bug back is red."""
    passed = _ended("passed")
    known.judge(BUG, passed, None, build=build)
    assert (passed.status, passed.known_bug) == ("passed", None)
    rec = _ended("failed", "tokens_lost")
    known.judge(BUG, rec, None, build=build)
    assert (rec.status, rec.known_bug) == ("failed", None)


def test_a_reworded_message_shows_by_either_text() -> None:
    bug = KnownBug(title="parser", reason="runtime_error", evidence=("at pos 0", "Content-only format"))
    for text, state in (("Failed to parse input at pos 0: ...", "present"),
                        ("does not match the expected Content-only format", "present"),
                        ("decode() failed", "other")):  # fmt: skip
        rec = _ended("error", "runtime_error", f"the speculation-off server failed: {text}")
        known.judge(bug, rec, None, build=9702)
        assert rec.known_bug.state == state, text


def test_a_known_bug_fixed_before_the_pin_leaves_the_pins_run_as_it_was(run, tmp_path) -> None:
    """Through the runner: a fake of build 9300 (after the fix at 9246) passes, and the run names no bug
    (the pin's headline stays as before); one of build 9200 that loses its tail shows it, not red."""
    case = _case(KNOWN + "fixed_in = 9246\n")
    rec = run(case, version="version: 9300 (build 9300, commit abc1234)")
    assert (rec.status, rec.known_bug) == ("passed", None)
    assert verdict(load_run(tmp_path / "results0")).headline == "PASSED: 1 passed"
    rec = run(case, version="version: 9200 (build 9200, commit abc1234)", lose_tail=2)
    assert (rec.status, rec.known_bug.state) == ("known_bug", "present")
    said = verdict(load_run(tmp_path / "results1"))
    assert said.green and said.headline == "PASSED, with warnings (1 KNOWN BUG): 1 known bug"


# --- cases.toml -----------------------------------------------------------------------------------------


def test_the_suites_known_bugs_of_older_builds_are_fixed_before_the_pin() -> None:
    cases = {c.name: c for c in load_cases()}
    pin = load_pin().build
    assert pin is not None
    older = {n: c.known_bug for n, c in cases.items() if c.known_bug and c.known_bug.fixed_in}
    assert older and all(b.fixed_in <= pin for b in older.values())
    assert older["tiny-simple-fixed"].reason == "tokens_lost" and older["tiny-simple-fixed"].fixed_in == 9246
    assert older["tiny-simple-random"].issue == 27543
    for text in ("tiny-simple-text", "tiny-simple-text-defaults"):  # measured on every build
        assert cases[text].target == "synth-target-llama-text-random.gguf" and cases[text].known_bug is None
