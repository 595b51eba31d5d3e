"""run_case against fake llama-server binaries that really serve HTTP (tests/fakellama.py).

Each fake scripts one way a binary of another llama.cpp commit can differ: a lost method, a lost counter,
zero usage, diverging tokens, slower than plain decoding, a crash mid-request. The models are the synthetic
tier's real GGUF files (generated and verified into a temporary model folder).
"""

from __future__ import annotations

import http.server
import json
import re
import socket
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from fakellama import fake_llama

from specsuite.cases.schema import Case, parse_case_file
from specsuite.common.errors import UserError
from specsuite.measure import known, runner
from specsuite.measure.outcome import WARMUP_N_PREDICT
from specsuite.results.document import Run, RunOptions, load_run
from specsuite.results.verdict import verdict
from specsuite.server import process
from specsuite.server.process import LlamaServer
from specsuite.suite import session as suite

TARGET = "synth-target-llama-fixed.gguf"
DRAFT = "synth-draft-llama-fixed.gguf"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specsuite.models.fetch import FetchOptions, fetch_models

    folder = tmp_path_factory.mktemp("models")
    fetch_models(
        FetchOptions(models=[TARGET, DRAFT, "synth-draft-dspark-fixed.gguf"], model_dir=folder, tty=False)
    )
    return folder


@pytest.fixture
def env(tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPEC_MODEL_DIR", str(models))
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "history.sqlite"))
    for var in ("SPEC_STRICT", "SPEC_REPEAT", "SPEC_ALLOW_CPU", "SPEC_NO_HISTORY", "SPEC_RTOL"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _case(body: str, name: str = "c") -> Case:
    return _cases(body, name)[0]


def _cases(body: str, name: str = "c") -> list[Case]:
    """The cases of one table: itself, or a sweep's members."""
    text = textwrap.dedent(f"""
        version = 1
        [[prompt_set]]
        name = "p"
        prompts = [{{ id = "a", text = "Hello world" }}, {{ id = "b", text = "1 2 3" }}]
        [[case]]
        name = "{name}"
        tier = "synthetic"
        target = "{TARGET}"
        prompts = "p"
        n_predict = 8
    """) + textwrap.dedent(body)
    return parse_case_file(text).cases


SIMPLE = f"""
    spec_type = "draft-simple"
    draft = "{DRAFT}"
    n_max = 3
    min_accept_rate = 0.5
    min_accept_len = 2.0
"""


def _session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: Case, **fake: object) -> runner.Engine:
    exe = fake_llama(tmp_path / "bin", **fake)
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(exe))
    return suite.open_session(case.name, [case], tmp_path / "results")


@pytest.fixture
def run(env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    sessions: list[runner.Engine] = []

    def go(case: Case, **fake: object) -> runner.CaseRecord:
        s = _session(env, monkeypatch, case, **fake)
        sessions.append(s)
        return runner.run_case(case, s)

    yield go
    for s in sessions:
        s.close()


def test_numbers_are_the_servers_counters_over_the_first_round(run) -> None:
    rec = run(_case(SIMPLE))
    # the fake adds (12 drafted, 9 accepted, 4 drafts, per position 4/3/2) per request; 2 prompts
    assert rec.status == "passed", rec.message
    assert (rec.drafted, rec.accepted, rec.drafts) == (24, 18, 8)
    assert (rec.accept_rate, rec.accept_len, rec.per_position) == (0.75, 3.25, [8, 6, 4])
    assert rec.pos0_rate == 1.0 and rec.identical_fraction == 1.0
    assert rec.speedup == 2.0 and rec.speed.speedups == [2.0]  # 10 vs 20 ms per token


def test_floor_failure_names_numbers(run) -> None:
    rec = run(_case(SIMPLE.replace("min_accept_rate = 0.5", "min_accept_rate = 0.8")))
    assert (rec.status, rec.reason) == ("failed", "floor")
    assert "accept_rate 0.7500 < floor 0.8000 (accepted=18 / drafted=24)" in rec.message


@pytest.mark.parametrize(("strict", "status"), [("1", "failed"), ("0", "skipped")])
def test_lost_method_fails_strict_by_default_or_skips(run, monkeypatch, strict, status) -> None:
    monkeypatch.setenv("SPEC_STRICT", strict)
    case = _case(
        SIMPLE.replace('"draft-simple"', '"draft-dspark"').replace(DRAFT, "synth-draft-dspark-fixed.gguf")
    )
    rec = run(case, drop_types=["draft-dspark"])
    assert (rec.status, rec.reason) == (status, "binary_no_dspark")
    assert rec.command is None  # ended while building the command: no server was started


@pytest.mark.parametrize(("unknown", "side"), [("draft", "its server"), ("target", "speculation-off")])
def test_a_model_older_builds_do_not_know_is_not_in_this_build(env, monkeypatch, unknown, side) -> None:
    """The binary knows no such architecture (binary_outdated): on a build older than the pin that no lower
    build measured the case on (the harness's vintage), not in this build, whichever server met it first:
    a target's architecture stops the speculation-off server, which starts first."""
    case = _case(SIMPLE)
    s = _session(env, monkeypatch, case, unknown_arch=unknown)
    try:
        s.vintage = lambda name, what: (True, f"; b100 predates the pin: {what} not in this build yet")
        rec = runner.run_case(case, s)
        assert (rec.status, rec.reason) == ("not_in_build", "binary_outdated"), rec.message
        assert "model architecture not in this build yet" in str(rec.message)
        assert (side == "its server") == (rec.baseline_command is not None)  # the plain server started
        s.vintage = lambda name, what: (False, "")  # a lower build measured it: the model vanished
        rec = runner.run_case(case, s)
        assert (rec.status, rec.reason) == ("failed" if unknown == "draft" else "error", "binary_outdated")
    finally:
        s.close()


def test_lost_flag_is_named_by_the_command_builder(run) -> None:
    rec = run(_case(SIMPLE + "synth_rates = [1.0, 1.0, 1.0]\n"), drop_options=["--spec-synth-rates"])
    assert (rec.status, rec.reason) == ("failed", "binary_no_synth_rates")


def test_binary_without_per_position_counters_warns(run) -> None:
    rec = run(_case(SIMPLE), per_pos=None)
    assert rec.status == "passed", rec.message
    assert rec.per_position == [] and rec.pos0_rate is None
    assert any("exports no" in w and "per_pos" in w for w in rec.warnings)


@pytest.mark.parametrize("usage", ["zero", "missing"])
def test_zero_or_missing_usage_fails(run, usage) -> None:
    rec = run(_case(SIMPLE), usage=usage)
    assert (rec.status, rec.reason) == ("failed", "usage")
    assert "timings.predicted_n = 16" in rec.message


def test_divergence_from_the_baseline(run) -> None:
    rec = run(_case(SIMPLE + "min_identical_fraction = 1.0\n"), diverge=True)
    assert (rec.status, rec.reason) == ("failed", "diverged")
    assert [p.first_diff for p in rec.prompts] == [4, 4]


def test_speed_floor_with_abba_rounds(run, monkeypatch) -> None:
    monkeypatch.setenv("SPEC_REPEAT", "3")
    rec = run(_case(SIMPLE + "min_speedup = 1.0\n"), spec_ms_per_token=30.0)
    assert (rec.status, rec.reason) == ("failed", "speed")
    assert rec.speed.repeat == 3 and rec.speed.speedups == [0.6667, 0.6667, 0.6667]
    assert "speedup 0.667 < floor 1.000" in rec.message


def test_a_cases_own_repeat_raises_the_runs_and_blocks_are_timed_per_round(run) -> None:
    """The fake: 2 prompts of 8 tokens, each request 4 drafts; 10 ms a token with speculation, 20 without.
    A round: 160 ms over 8 drafts (20 ms a block), the baseline 320 ms over 14 decode steps (a request's first
    token is the prompt's): a block costs 0.875 plain steps, 14 / 8 = 1.75 tokens each."""
    rec = run(_case(SIMPLE + "repeat = 3\n"))
    assert rec.status == "passed", rec.message
    assert rec.speed.repeat == 3 and rec.blocks is not None and rec.blocks.ratios == [0.875] * 3
    assert (rec.block_ms, rec.token_ms, rec.block_ratio, rec.tokens_per_block) == (20.0, 22.8571, 0.875, 1.75)
    assert rec.implausible_speed is None


def test_an_impossible_speedup_is_recorded_not_gated_and_named_first(run, monkeypatch) -> None:
    """Accept length 3.25 but 20x faster than plain decoding: the two sides were not measured alike. The
    speed floor (which that speedup would pass) is not judged, and a green run says so in its headline."""
    monkeypatch.setenv("SPEC_REPEAT", "2")
    rec = run(_case(SIMPLE + "min_speedup = 1.0\n"), spec_ms_per_token=1.0)
    assert rec.status == "passed", rec.message
    assert rec.speedup == 20.0 and (rec.implausible_speed or "").startswith(
        "implausible_speed: speedup 20.000"
    )
    assert rec.implausible_speed in rec.warnings
    v = verdict(Run(cases={"c": rec}))
    assert v.green and "IMPLAUSIBLE SPEED in 1 case(s)" in v.headline
    assert v.attention[0].startswith(
        "IMPLAUSIBLE SPEED, not gated (the measurement is wrong, not the method): c:"
    )
    slow = run(_case(SIMPLE + "min_speedup = 30.0\n"), spec_ms_per_token=1.0)
    assert slow.status == "passed" and slow.implausible_speed  # a floor above it is not judged either


def test_a_pinned_case_runs_both_servers_on_one_cpu(run, env, monkeypatch) -> None:
    """pin_cpu: the case's server and its baseline on the same one CPU (the last this process may use),
    recorded; the baseline of an unpinned case runs anywhere and is another server."""
    import os

    events = env / "events.jsonl"
    pinned = run(_case(SIMPLE + 'server_args = ["--threads", "1"]\npin_cpu = true\n'), events=str(events))
    assert pinned.status == "passed", pinned.message
    last = max(os.sched_getaffinity(0))
    assert pinned.cpus == [last]
    starts = [e for e in map(json.loads, events.read_text().splitlines()) if e["kind"] == "start"]
    assert sorted(e["spec"] for e in starts) == [False, True] and all(e["cpus"] == [last] for e in starts)
    events.unlink()
    free = run(_case(SIMPLE + 'server_args = ["--threads", "1"]\n'), events=str(events))
    starts = [e for e in map(json.loads, events.read_text().splitlines()) if e["kind"] == "start"]
    assert free.cpus is None and all(e["cpus"] == sorted(os.sched_getaffinity(0)) for e in starts)


def test_uncalibrated_case_reports_without_floors(run) -> None:
    body = SIMPLE.replace("min_accept_rate = 0.5", "min_accept_rate = 0.99") + "uncalibrated = true\n"
    rec = run(_case(body))
    assert rec.status == "passed" and rec.uncalibrated and rec.accept_rate == 0.75


def test_crash_mid_request_is_a_failure_with_a_reason(run) -> None:
    rec = run(_case(SIMPLE), die_after_requests=2)  # the cold pass's two prompts, then SIGABRT
    assert rec.status == "failed" and rec.reason in ("runtime_error", "crashed")
    assert "GGML_ASSERT" in rec.message


def test_counters_before_the_first_request_are_left_out_and_named(run) -> None:
    rec = run(_case(SIMPLE), counted_at_start=5)
    assert rec.status == "passed", rec.message
    assert (rec.drafted, rec.accepted, rec.drafts) == (24, 18, 8)  # the cold pass's two prompts only
    assert any("counted drafted=5 accepted=5 drafts=5 before its first request" in w for w in rec.warnings)


def _port(command: list[str]) -> int:
    return int(command[command.index("--port") + 1])


def test_the_baseline_is_warmed_up_once_before_any_measured_round(env, monkeypatch) -> None:
    """With one round the baseline goes first: it must not be measured cold. Kept across the cases of a
    target, it is warmed up once, when it starts."""
    sent: list[tuple[int, int]] = []  # (port, n_predict) of every /completion, in order
    real_post = LlamaServer._post  # every request, on the server's connection or a stream's own

    def recording_post(self: LlamaServer, http: object, path: str, body: dict) -> dict:
        if path == "/completion":
            sent.append((self.port, body["n_predict"]))
        return real_post(self, http, path, body)  # type: ignore[arg-type]

    monkeypatch.setattr(LlamaServer, "_post", recording_post)
    cases = [_case(SIMPLE, "first"), _case(SIMPLE, "second")]
    s = _session(env, monkeypatch, cases[0])
    try:
        recs = [runner.run_case(c, s) for c in cases]
    finally:
        s.close()
    assert [r.status for r in recs] == ["passed", "passed"], [r.message for r in recs]
    (baseline,) = s.results.run.baselines.values()
    base = _port(baseline.command)
    assert sent[0] == (base, WARMUP_N_PREDICT)  # before any measured request, to either server
    assert [n for port, n in sent if port == base] == [WARMUP_N_PREDICT] + [8] * 4  # 2 cases x 2 prompts
    for rec in recs:  # every case's server: the cold pass first (the prompts), then its own warm-up
        assert [n for port, n in sent if port == _port(rec.command or [])] == [8, 8, WARMUP_N_PREDICT, 8, 8]


def test_each_baseline_runs_its_cases_command_without_speculation(env, monkeypatch) -> None:
    """Like for like: a case's baseline gets its non-speculative server_args too; cases whose commands
    differ only in speculation share one baseline, a case with other threads gets its own; results.json
    records both commands of every case."""
    one = SIMPLE + 'server_args = ["--threads", "1"]\n'
    cases = [_case(one, "a"), _case(one.replace("n_max = 3", "n_max = 2"), "b"),
             _case(SIMPLE + 'server_args = ["--threads", "2", "--batch-size", "64"]\n', "c")]  # fmt: skip
    s = _session(env, monkeypatch, cases[0])
    try:
        recs = [runner.run_case(c, s) for c in cases]
    finally:
        s.close()
    assert [r.status for r in recs] == ["passed"] * 3, [r.message for r in recs]
    bases = [b.command for b in s.results.run.baselines.values()]
    assert len(bases) == 2 and [r.baseline_command for r in recs] == [bases[0], bases[0], bases[1]]
    for rec in recs:
        assert (rec.baseline_command or [])[-2:] == ["--spec-type", "none"]  # the build's word for plain
        rec.baseline_command = (rec.baseline_command or [])[:-2]
        spec, base = " ".join(rec.command or []), " ".join(rec.baseline_command or [])
        assert "--spec-type" in spec and "--spec" not in base and "--spec-draft-poll" not in base
        # the builder puts the case's speculation after --port, and --spec-draft-poll 0 after --poll 0
        head = (rec.command or [])[: (rec.command or []).index("--port")]
        at = head.index("--spec-draft-poll")
        assert head[:at] + head[at + 2 :] == (rec.baseline_command or [])[: len(head) - 2], (spec, base)
        assert (rec.baseline_command or [])[len(head) - 2 :][0] == "--port" and len(base.split()) == len(head)
    assert "--threads 1 -m" in " ".join(bases[0]) and "--threads 2 --batch-size 64 -m" in " ".join(bases[1])


def test_a_plain_server_that_drafts_fails_first_and_gates_no_speed(run) -> None:
    """A build whose default speculates and whose --spec-type adds to it (upstream's #28391): the plain
    server, started with --spec-type none, drafts all the same. Its counters decide: the case fails
    baseline_speculated, first, with the counters, and no speed is reported against that baseline."""
    rec = run(_case(SIMPLE + "min_speedup = 5.0\n"), plain_drafts={"drafted": 6, "accepted": 6, "drafts": 2})
    assert (rec.status, rec.reason) == ("failed", "baseline_speculated"), rec.message
    assert "the speculation-off server drafted 12 tokens and accepted 12 (its own counters" in rec.message
    assert rec.speedup is None and rec.speed is None and rec.block_ratio is None
    assert "[speed]" not in rec.message  # its min_speedup is not judged against speculation either
    assert (rec.drafted, rec.accepted) == (24, 18)  # the case's own cold pass still counts


def test_a_plain_server_that_drafts_nothing_passes(run) -> None:
    rec = run(_case(SIMPLE))
    assert rec.status == "passed" and rec.baseline_command[-2:] == ["--spec-type", "none"]


def test_speculation_that_stops_after_the_cold_pass_fails_naming_the_request(run, monkeypatch) -> None:
    """Upstream's #27692: speculation silently off after the first requests. The cold pass (2 prompts)
    and the warm-up (1 request) draft; every round after drafts nothing: spec_disengaged, first, naming the
    round, the request and both counter sets; its speed (faster without drafting, here) not gated."""
    monkeypatch.setenv("SPEC_REPEAT", "3")
    rec = run(_case(SIMPLE), stop_drafting_after=3)
    assert (rec.status, rec.reason) == ("failed", "spec_disengaged"), rec.message
    assert (
        "speculation stopped: round 1, request 1 of 2 ('a', first of the round): drafted 0 accepted 0, "
        "against drafted 12 accepted 9 on the fresh server (the cold pass)"
    ) in rec.message
    assert rec.speed is None and rec.speedup is None
    assert (rec.drafted, rec.accepted) == (24, 18) and [r.drafted for r in rec.rounds] == [0, 0, 0]


def _run_all(env: Path, monkeypatch: pytest.MonkeyPatch, cases: list[Case], **fake: object) -> dict:
    """Every case in one session (a sweep's members in order), the run finished: name -> record."""
    s = _session(env, monkeypatch, cases[0], **fake)
    try:
        for c in cases:
            runner.run_case(c, s)
    finally:
        suite.finish_session(s)
    return s.results.run.cases


@pytest.mark.parametrize(
    ("fake", "head"),
    [
        (
            {"plain_drafts": {"drafted": 6, "accepted": 6, "drafts": 2}},
            "BASELINE SPECULATED, speed not gated",
        ),
        ({"stop_drafting_after": 3}, "SPECULATION DISENGAGED, speed not gated"),
    ],
)
def test_a_servers_life_failure_is_named_in_the_first_lines(env, monkeypatch, fake, head) -> None:
    recs = _run_all(env, monkeypatch, [_case(SIMPLE)], **fake)
    said = verdict(load_run(env / "results"))
    assert said.headline == f"FAILED: 1 of 1 case(s): c ({recs['c'].reason})"
    assert said.attention[0].startswith(f"{head}: c: "), said.attention


def test_acceptance_that_drops_with_slots_fails_only_the_concurrent_members(env, monkeypatch) -> None:
    """A binary whose acceptance falls when started with --parallel above 1 (llama.cpp issue 27117):
    np 1 passes, np 2 and np 4 fail with concurrency_collapse against np 1's acceptance of this run."""
    sweep = _cases(
        SIMPLE.replace("min_accept_rate = 0.5", "min_accept_rate = 0.2") + "parallel = [1, 2, 4]\n"
    )
    assert [c.name for c in sweep] == ["c", "c-np2", "c-np4"]
    collapsed = {"accepted": 3, "per_pos": [3, 0, 0]}  # 3 of 12 drafted tokens per request, not 9
    recs = _run_all(env, monkeypatch, sweep, parallel_counters=collapsed)
    assert [(r.status, r.reason) for r in recs.values()] == [
        ("passed", None),
        ("failed", "concurrency_collapse"),
        ("failed", "concurrency_collapse"),
    ], [r.message for r in recs.values()]
    np4 = recs["c-np4"]
    assert "accept_rate 0.2500 at np 4 is 66.7% below np 1's 0.7500 (c (this run); rtol 5%)" in np4.message
    assert np4.concurrency.np1.source == "c (this run)"  # the np-1 member's, not a server of its own
    assert "--ctx-size 4096 --parallel 4" in " ".join(np4.command or [])  # each slot: np 1's context
    assert (np4.parallel, np4.streams, np4.sweep, np4.concurrency.requests) == (4, 4, "c", 8)  # 4 x 2 prompts
    assert np4.concurrency.np1.counters.startswith(
        "differ in 8 of 8 request(s): stream 0, prompt 'a' drafted"
    )
    assert len(np4.rounds) == 2 and np4.concurrency.speedups  # two rounds at np > 1, though --repeat is 1
    assert recs["c"].concurrency.np1 is None  # it is the reference


def test_one_stream_that_differs_from_np1_fails_batch_variant_naming_it(run) -> None:
    """A binary whose np-4 output differs in one request: the case measures its own np-1 reference (no np-1
    case ran before it) and names the stream, the prompt and the first differing token."""
    rec = run(_case(SIMPLE + "parallel = 4\n"), batch_variant={"np": 4, "request": 3})
    assert (rec.status, rec.reason) == ("failed", "batch_variant"), rec.message
    (bad,) = [p for p in rec.prompts if not p.identical]  # the same request against the no-spec baseline
    assert rec.concurrency.np1.source.startswith("measured for c: logs/c-np1.log")
    assert rec.concurrency.np1.identical_fraction == 0.875  # 7 of 8
    assert (
        "1 of 8 request(s) differ from the np-1 output (measured for c: logs/c-np1.log): "
        f"stream {bad.stream}, prompt {bad.id!r}: first differing token at index {bad.first_diff} (np 1: "
    ) in rec.message


def test_counters_that_move_between_rounds_at_np4_are_nondeterministic(run) -> None:
    """As DSpark's at np 4 on the CPU build: two rounds at np > 1 even with --repeat 1, and rounds that
    disagree make the case nondeterministic (not compared exactly), not red."""
    moving = [{"accepted": 9}] * 4 + [{"accepted": 8, "per_pos": [4, 3, 1]}]  # a period of 5 requests
    rec = run(_case(SIMPLE + "parallel = 4\n"), by_request=moving)
    assert rec.status == "passed", rec.message
    assert len(rec.rounds) == 2 and rec.rounds[0].accepted != rec.rounds[1].accepted
    assert rec.nondeterministic is True


def test_a_learning_drafter_reports_its_cold_pass_and_is_not_nondeterministic(run, monkeypatch) -> None:
    """Like ngram-mod: a fresh server drafts less (the cold pass, as upstream counts it) than one that has
    seen the prompts (the warmed rounds, which agree with each other)."""
    monkeypatch.setenv("SPEC_REPEAT", "3")
    cold = [{"drafted": 6, "accepted": 3, "drafts": 2, "per_pos": [2, 1, 0]}] * 2
    rec = run(_case(SIMPLE), first_requests=cold)
    assert rec.status == "passed", rec.message
    assert (rec.drafted, rec.accepted, rec.drafts, rec.per_position) == (12, 6, 4, [4, 2, 0])
    assert [(r.drafted, r.accepted, r.drafts) for r in rec.rounds] == [(24, 18, 8)] * 3
    assert rec.nondeterministic is False


@pytest.mark.parametrize(
    ("body", "fake", "status"),
    [
        # a target without MTP heads: auto gives --spec-default
        ("min_accept_rate = 0.5\nmin_accept_len = 2.0\n", {}, "passed"),
        # a separate drafter on a binary without draft-mtp: the resolver falls back (binary_no_mtp)
        (f'draft = "{DRAFT}"\nuncalibrated = true\n', {"drop_types": ["draft-mtp"]}, "failed"),
    ],
)
def test_a_mode_case_records_what_the_resolver_decided(env, models, monkeypatch, body, fake, status) -> None:
    from specsuite.server.resolver import caps_from_probe, resolve_for_model

    case = _case('mode = "auto"\n' + body)
    s = _session(env, monkeypatch, case, **fake)
    try:
        rec = runner.run_case(case, s)
    finally:
        suite.finish_session(s)
    drafter = models / case.draft if case.draft else None
    res = resolve_for_model(
        "auto", caps=caps_from_probe(s.caps), model_path=models / TARGET, gpu=False, mtp_draft_path=drafter
    )
    want = {"flags": list(res.flags), "spec_type": res.spec_type, "why": res.why}
    want["fallback_reason"] = res.fallback_reason
    assert rec.status == status, rec.message
    assert msgspec.to_builtins(rec.resolved) == want and rec.spec_type == res.spec_type
    doc = json.loads((env / "results" / "results.json").read_text())
    assert doc["cases"]["c"]["resolved"] == want
    if case.draft:  # the fallback is the case's reason, and no server was started
        assert res.fallback_reason == rec.reason == "binary_no_mtp" and rec.command is None
    else:
        assert res.flags == ("--spec-default",) and "--spec-default" in (rec.command or [])


NGRAM_KNOBS = [
    "--spec-ngram-mod-n-match",
    "24",
    "--spec-ngram-mod-n-min",
    "48",
    "--spec-ngram-mod-n-max",
    "64",
]


@pytest.mark.parametrize(
    ("body", "status", "tail"),
    [
        # the identifier's -MTP marker and size (0.8B) decide: a small MTP model drops to ngram-mod
        (
            'model_id = "org/Qwen3.5-0.8B-MTP-GGUF"\nexpect_resolved = "ngram-mod"\n',
            "passed",
            ["--spec-type", "ngram-mod", *NGRAM_KNOBS],
        ),
        # the user's extra args set --spec-type: the resolver emits nothing, the args carry it
        (
            'server_args = ["--spec-type", "ngram-mod"]\nexpect_resolved = "none"\n',
            "passed",
            ["--spec-type", "ngram-mod"],
        ),
        ('expect_resolved = "draft-mtp"\n', "failed", None),
    ],
)
def test_a_mode_case_is_resolved_by_its_model_id_and_extra_args(run, body, status, tail) -> None:
    rec = run(_case('mode = "auto"\nmin_accept_rate = 0.5\nmin_accept_len = 2.0\n' + body))
    assert rec.status == status, rec.message
    assert rec.resolved is not None
    if tail is None:  # the resolver's answer is the case's failure, before any server starts
        assert rec.reason == "self_test" and rec.command is None
        assert rec.message == f"mode 'auto' resolved to default, expected draft-mtp ({rec.resolved.why})"
    else:  # the resolver's flags end the command; the user's extra args come before the harness's own
        argv = rec.command or []
        assert any(argv[i : i + len(tail)] == tail for i in range(len(argv))), argv


def test_foreign_process_on_the_port_is_not_taken_for_our_server(run, monkeypatch) -> None:
    foreign = http.server.HTTPServer(("127.0.0.1", 0), _Always200)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    taken = foreign.server_address[1]
    ports = iter([taken])

    def first_the_taken_port(span: range | None = None) -> int:
        return next(ports, None) or _free()

    monkeypatch.setattr(process, "free_port", first_the_taken_port)
    try:
        rec = run(_case(SIMPLE))
    finally:
        foreign.shutdown()
    assert rec.status == "passed", rec.message
    assert f"--port {taken}" not in " ".join(rec.command)


def test_not_a_llama_server_is_one_clear_error(env, monkeypatch, tmp_path) -> None:
    exe = tmp_path / "impostor"
    exe.write_text("#!/bin/sh\necho 'usage: impostor --help'\n")
    exe.chmod(0o755)
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(exe))
    with pytest.raises(UserError, match="not a llama-server with speculative decoding: its --help lists no"):
        suite.open_session("c", [_case(SIMPLE)], tmp_path / "r")


def test_gpu_case_on_a_cpu_build_is_refused(env, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(fake_llama(tmp_path / "bin")))
    gpu_case = msgspec.structs.replace(_case(SIMPLE), tier="compact")
    with pytest.raises(UserError, match="CPU build, and the selected cases are GPU tier"):
        suite.open_session("c", [gpu_case], tmp_path / "r")
    monkeypatch.setenv("SPEC_ALLOW_CPU", "1")
    s = suite.open_session("c", [gpu_case], tmp_path / "r2")
    s.close()


def test_all_skipped_is_not_green(run, monkeypatch) -> None:
    monkeypatch.setenv("SPEC_STRICT", "0")
    case = _case(
        SIMPLE.replace('"draft-simple"', '"draft-dspark"').replace(DRAFT, "synth-draft-dspark-fixed.gguf")
    )
    rec = run(case, drop_types=["draft-dspark"])
    assert rec.status == "skipped"
    v = verdict(Run(cases={"c": rec}, options=RunOptions(strict=False)))
    assert not v.green and "no selected case ran" in v.headline
    assert any(a.startswith("SKIPPED 1") for a in v.attention) and any("STRICT OFF" in a for a in v.attention)


class _Always200(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _upstream_counters(
    command: list[str], prompts: list[str], n_predict: int, log: Path
) -> tuple[dict[str, int], list[int]]:
    """Upstream's measurement, by hand: a fresh server of ``command`` (on another port), one request per
    prompt with upstream's body, then the cumulative ``/metrics`` counters read as its ``spec_metrics`` reads
    them."""
    import os
    import subprocess
    import time

    import requests

    port = _free()
    argv = [*command]
    argv[argv.index("--port") + 1] = str(port)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        for prompt in prompts:
            body = {"prompt": prompt, "temperature": 0.0, "top_k": 1, "seed": 42, "n_predict": n_predict,
                    "cache_prompt": False, "return_tokens": True}  # fmt: skip
            res = requests.post(f"{url}/completion", json=body, timeout=600)
            assert res.status_code == 200 and res.json()["tokens"], res.text
        text = requests.get(f"{url}/metrics", timeout=60).text
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    got = {}
    for name in ("draft_tokens", "accepted_tokens", "drafts"):
        m = re.search(rf"^llamacpp:spec_decode_num_{name}_total (\S+)$", text, re.MULTILINE)
        assert m is not None, text
        got[name] = int(float(m.group(1)))
    pos = re.findall(r'^llamacpp:spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\} (\S+)$',
                     text, re.MULTILINE)  # fmt: skip
    per_pos = [0] * (max((int(i) for i, _ in pos), default=-1) + 1)
    for i, v in pos:
        per_pos[int(i)] = int(float(v))
    return got, per_pos


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_stateful_drafter_counts_as_upstream_counts_on_a_fresh_server(tmp_path, monkeypatch) -> None:
    """ngram-mod (the front end's ngram mode, on a generated model; the smoke tier runs it on Gemma) keeps
    its n-gram pool across requests, so a request before the measured ones changes what is counted. The
    suite's reported counters must be those of upstream's measurement: the same command line (as
    results.json records it) started fresh, one upstream request per prompt, the cumulative counters."""
    from fakeserver import real_binary

    from specsuite.cases.schema import load_cases, select_cases
    from specsuite.models.fetch import FetchOptions, fetch_models

    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(real_binary()))
    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "h.sqlite"))
    monkeypatch.setenv("SPEC_MODEL_DIR", str(tmp_path / "models"))
    for var in ("SPEC_STRICT", "SPEC_REPEAT", "SPEC_NO_HISTORY"):
        monkeypatch.delenv(var, raising=False)
    (case,) = select_cases(load_cases(), "tiny-ngram")
    fetch_models(FetchOptions(models=case.models, tty=False))
    s = suite.open_session("tiny-ngram", [case], tmp_path / "r")
    try:
        runner.run_case(case, s)
    finally:
        suite.finish_session(s)
    rec = load_run(tmp_path / "r").cases["tiny-ngram"]  # what results.json says, command line included
    assert rec.status == "passed", rec.message
    # what it ran: verified sha256s, the command, the speed rounds, the server's log
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert doc["models"] and all(re.fullmatch(r"[0-9a-f]{64}", m["sha256"]) for m in doc["models"].values())
    cmd = " ".join(rec.command or [])
    assert "--seed 42" in cmd and "--poll 0" in cmd and "--spec-type ngram-mod" in cmd
    assert rec.speed.repeat == 1 and rec.decode_tps and rec.baseline_decode_tps
    assert (tmp_path / "r" / rec.log).stat().st_size > 0 and (tmp_path / "r" / "bench.json").is_file()
    prompts = [text for _, text in case.prompt_texts]
    got, per_pos = _upstream_counters(rec.command or [], prompts, case.n_predict, tmp_path / "upstream.log")
    print(f"fresh server: {got} per position {per_pos}; suite: drafted={rec.drafted} "
          f"accepted={rec.accepted} drafts={rec.drafts} per position {rec.per_position}; "
          f"warmed rounds {[(r.drafted, r.accepted, r.drafts) for r in rec.rounds]}")  # fmt: skip
    suite_counts = (rec.drafted, rec.accepted, rec.drafts)
    assert suite_counts == (got["draft_tokens"], got["accepted_tokens"], got["drafts"])
    assert rec.per_position == per_pos
    # the drafter is stateful here: its warmed round counts differently, so the test tells the two apart
    assert (rec.rounds[0].drafted, rec.rounds[0].accepted, rec.rounds[0].drafts) != suite_counts


KNOWN = """
    [case.known_bug]
    issue = 99999
    title = "the fake aborts after its cold pass"
    reason = "runtime_error"
    evidence = "GGML_ASSERT(fake)"
"""


def test_a_known_bug_that_shows_is_said_and_counted_not_red(env, monkeypatch) -> None:
    """A case that names the upstream bug it reproduces, and ends as the bug shows (its reason and the
    evidence in its log): status known_bug, a line of its own, the run not red."""
    recs = _run_all(env, monkeypatch, [_case(SIMPLE + KNOWN)], die_after_requests=2)
    rec = recs["c"]
    assert (rec.status, rec.known_bug.state, rec.known_bug.issue) == ("known_bug", "present", 99999)
    assert rec.message.startswith("known bug, still present: llama.cpp #99999 (the fake aborts after its ")
    said = verdict(load_run(env / "results"))
    assert said.green and said.headline == "PASSED, with warnings (1 KNOWN BUG): 1 known bug"
    assert said.attention[0] == (
        "KNOWN BUG, still present (not a failure): llama.cpp #99999 (the fake aborts after its cold pass): c"
    )


def test_a_known_bug_that_no_longer_shows_is_fixed_and_named_first(env, monkeypatch) -> None:
    recs = _run_all(env, monkeypatch, [_case(SIMPLE + KNOWN)])
    assert (recs["c"].status, recs["c"].known_bug.state) == ("passed", "fixed")
    said = verdict(load_run(env / "results"))
    assert said.headline == "PASSED, with warnings (1 FIXED): 1 passed"
    assert said.attention[0].startswith("FIXED upstream (the case passes): llama.cpp #99999 (")


def test_a_known_bug_case_that_fails_another_way_is_red(env, monkeypatch) -> None:
    recs = _run_all(
        env, monkeypatch, [_case(SIMPLE + "min_identical_fraction = 1.0\n" + KNOWN)], diverge=True
    )
    rec = recs["c"]
    assert (rec.status, rec.reason, rec.known_bug.state) == ("failed", "diverged", "other")
    assert (
        "(expected llama.cpp #99999 (the fake aborts after its cold pass) to show as runtime_error"
        in rec.message
    )
    assert not verdict(load_run(env / "results")).green


def test_an_intermittent_known_bug_needs_clean_runs_in_a_row(env, monkeypatch) -> None:
    """Seen in 6 of 13 servers (DFlash at np 8): one clean run says not seen, with the streak; FIXED needs
    five in a row (a still-present bug leaves five clean runs with a chance under 5 %)."""
    case = _case(SIMPLE + KNOWN + "seen = [6, 13]\n")
    history = ["passed", "passed", "passed", "known_bug", "passed"]
    s = _session(env, monkeypatch, case)
    try:
        s.known_history = lambda name: history
        rec = runner.run_case(case, s)
        assert (rec.status, rec.known_bug.state) == ("passed", "not_seen")
        assert (rec.known_bug.clean_runs, rec.known_bug.clean_needed) == (4, 5)
        history.insert(0, "passed")
        rec = runner.run_case(case, s)
        assert (rec.known_bug.state, rec.known_bug.clean_runs) == ("fixed", 5)
    finally:
        suite.finish_session(s)
    assert [known.clean_runs_needed(s) for s in ((6, 13), (1, 2), (1, 20), (3, 3), (19, 20))] == [
        5,
        5,
        59,
        2,
        2,
    ]


def test_a_request_the_ones_before_it_changed_is_order_dependent(run) -> None:
    """Upstream's #27852: a drafter's state leaks from one request into the next. The fake's second request
    of every process accepts nothing: 'b' after 'a' on one server differs from 'b' alone on a fresh one."""
    second = [{}, {"accepted": 0, "per_pos": [0, 0, 0]}]
    body = SIMPLE.replace("min_accept", "# min_accept") + 'uncalibrated = true\nsequence = ["a", "b"]\n'
    rec = run(_case(body), first_requests=second)
    assert (rec.status, rec.reason) == ("failed", "order_dependent"), rec.message
    assert (
        "request 2 of the sequence ('b', after 'a'): drafted 12 accepted 0, the same tokens; sent alone to a "
        "fresh server: drafted 12 accepted 9"
    ) in rec.message
    assert [(c.prompt, c.accepted) for c in rec.sequence] == [("a", 9), ("b", 0)]
    assert [(c.prompt, c.accepted) for c in rec.sequence_alone] == [("a", 9), ("b", 9)]


def test_a_sequence_whose_requests_do_not_depend_on_order_passes(run) -> None:
    rec = run(_case(SIMPLE + 'sequence = ["b", "a", "b"]\n'))
    assert rec.status == "passed", rec.message
    assert [c.prompt for c in rec.sequence] == ["b", "a", "b"] and len(rec.sequence_alone) == 2


SLOTS = 'sequence = ["a", "@save", "b", "@restore", "b"]\n'


def test_a_restored_slot_answers_as_the_warm_one(run, env) -> None:
    """Slot steps: the sequence's server gets the harness's own --slot-save-path (in the run's logs), and
    the request after the restore equals the warm slot's answer to it (right after the save)."""
    rec = run(_case(SIMPLE + SLOTS))
    assert rec.status == "passed", rec.message
    assert [c.prompt for c in rec.sequence] == ["a", "b", "b"]
    assert (env / "results" / "logs" / "c-slots").is_dir()


def test_a_restored_slot_that_lost_its_draft_context_fails_slot_restore(run) -> None:
    """Upstream's #28619: a restored slot drafts from an empty draft KV (the fake accepts nothing after a
    restore): slot_restore, naming the request and both counter sets."""
    rec = run(_case(SIMPLE + SLOTS), restore_drops_drafts=True)
    assert (rec.status, rec.reason) == ("failed", "slot_restore"), rec.message
    assert (
        "request 'b' after the slot's restore: drafted 12 accepted 0, the same tokens; on the warm slot "
        "right after its save: drafted 12 accepted 9"
    ) in rec.message


def test_slot_steps_on_a_build_without_a_slot_folder_flag_are_a_lost_method(run) -> None:
    rec = run(_case(SIMPLE + SLOTS), drop_options=["--slot-save-path"])
    assert (rec.status, rec.reason) == ("failed", "binary_no_slot_save_path"), rec.message


def test_a_known_bug_that_does_not_show_on_an_older_build_is_not_there_yet(env, monkeypatch) -> None:
    """A build older than the pin the bug was recorded on: the case passes because the bug is not there
    yet, and the run says so instead of FIXED (a replay reads where it appeared off it)."""
    case = _case(SIMPLE + KNOWN)
    s = _session(env, monkeypatch, case)
    try:
        s.older_than_pin = True
        rec = runner.run_case(case, s)
    finally:
        suite.finish_session(s)
    assert (rec.status, rec.known_bug.state) == ("passed", "absent")
    said = verdict(load_run(env / "results"))
    assert said.headline == "PASSED, with warnings (1 NOT YET): 1 passed"
    assert said.attention[0].startswith("KNOWN BUG not in this build yet (an older build than the pin; the ")
