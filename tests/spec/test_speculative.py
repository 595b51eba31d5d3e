"""The speculative-decoding suite: one test per case selected by SPEC_METHODS (see conftest.py).

Per case: probe-based skip, model checks, the no-speculation baseline (cached per target), a server with
the case's method, /metrics before and after the three greedy requests, then floors, sanity relations,
divergence from the baseline and the case's self-tests. Every outcome lands in results.json.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from specsuite import expect, metrics
from specsuite.cases import Case
from specsuite.errors import UserError
from specsuite.failure import log_tail
from specsuite.measure import Outcome, divergence, run_prompts, spec_result_line
from specsuite.modelcheck import check_models
from specsuite.probe import case_missing_reason, strict
from specsuite.server import LlamaServer, ServerFailed, build_command, free_port, start_timeout_s


class CaseEnd(Exception):
    """How a case ended when not passed: status (failed, skipped, error), reason, message."""

    def __init__(self, status: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def _record(case: Case) -> dict[str, Any]:
    return {
        "status": None,
        "reason": None,
        "message": None,
        "tier": case.tier,
        "spec_type": case.spec_type,
        "n_max": case.n_max,
        "target": case.target,
        "draft": case.draft,
        "floors": case.floors,
        "drafted": None,
        "accepted": None,
        "drafts": None,
        "accept_rate": None,
        "accept_len": None,
        "per_position": [],
        "per_position_rate": [],
        "decode_tps": None,
        "baseline_decode_tps": None,
        "speedup": None,
        "identical_fraction": None,
        "prompts": [],
        "command": None,
        "log": None,
        "wall_s": None,
        "warnings": [],
    }


def _models(suite: Any, case: Case, rec: dict[str, Any]) -> tuple[Any, Any]:
    try:
        found = suite.model_paths(case)
        target, draft = found[case.target], found[case.draft] if case.draft else None
        rec["warnings"] = check_models(case.spec_type, target, draft)
    except UserError as exc:
        raise CaseEnd("error", "model_missing_or_invalid", str(exc)) from None
    return target, draft


def _measure(suite: Any, case: Case, rec: dict[str, Any], target: Any, draft: Any) -> tuple[Outcome, str]:
    try:
        base = suite.baseline(case, target)
    except ServerFailed as exc:
        raise CaseEnd("error", exc.reason, f"baseline server (speculation off) failed: {exc}") from None
    log = suite.results.logs / f"{case.name}.log"
    cmd = build_command(suite.caps, target, free_port(), case, draft)
    rec["command"], rec["log"] = cmd, suite.results.rel(log)
    srv = LlamaServer(cmd, log, start_timeout=start_timeout_s([p for p in (target, draft) if p]))
    try:
        with srv:
            before = srv.metrics()
            comps = run_prompts(srv.post, case.prompts, case.n_predict)
            after = srv.metrics()
    except ServerFailed as exc:
        raise CaseEnd("failed", exc.reason, str(exc)) from None
    text = srv.log_text()
    try:
        delta = metrics.delta(before, after)
    except metrics.MetricsError as exc:
        raise CaseEnd("error", "metrics", f"{exc}\n{log_tail(text)}") from None
    out = Outcome(delta, comps, divergence(base["completions"], comps), base["decode_tps"])
    return out, text


def _run(suite: Any, case: Case, rec: dict[str, Any]) -> None:
    if reason := case_missing_reason(suite.caps, case):
        msg = f"{suite.caps.binary} cannot run {case.spec_type} ({reason})"
        if strict():
            raise CaseEnd("failed", reason, f"{msg}; SPEC_STRICT=1 makes that a failure")
        raise CaseEnd("skipped", reason, msg)
    target, draft = _models(suite, case, rec)
    outcome, log_text = _measure(suite, case, rec, target, draft)
    n = outcome.numbers()
    rec.update(n)
    line = spec_result_line(case.name, n)
    print(line)
    suite.result_lines.append(line)
    failures = expect.check(case, n, outcome.completions, outcome.delta.sanity_errors(), log_text)
    if failures:
        per_pos = ", ".join(f"{r:.3f}" for r in n["per_position_rate"])
        body = "\n".join(f"- [{f.reason}] {f.message}" for f in failures)
        raise CaseEnd(
            "failed",
            failures[0].reason,
            f"{case.name}: {len(failures)} check(s) failed\n{body}\n{line}\n"
            f"per-position rates: [{per_pos}]\n--- last server log lines ---\n{log_tail(log_text)}",
        )


def test_speculative(case: Case, suite: Any) -> None:
    rec = _record(case)
    t0 = time.monotonic()
    try:
        _run(suite, case, rec)
        rec["status"] = "passed"
    except CaseEnd as end:
        rec.update(status=end.status, reason=end.reason, message=end.message)
    except BaseException as exc:  # harness bug, pytest-timeout, Ctrl-C: still recorded, then re-raised
        rec.update(status="error", reason="harness_error", message=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        rec["wall_s"] = round(time.monotonic() - t0, 2)
        suite.results.add_case(case.name, rec)
    if rec["status"] == "skipped":
        pytest.skip(rec["message"])
    if rec["status"] != "passed":
        pytest.fail(f"[{rec['reason']}] {rec['message']}", pytrace=False)
