"""A case's time budget: the decode rate read from a llama-server log, the budget's sum, the alarm."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import msgspec
import pytest

from specsuite.cases.schema import load_cases, select_cases
from specsuite.common.settings import Settings
from specsuite.measure import budget

# Two requests as the pinned build (0c1e570) logs them, copied from a synthetic run's baseline log: the
# "prompt eval" lines are prompt processing, not decoding.
LOG = """\
0.00.076.551 I slot print_timing: id  0 | task 0 | prompt eval time =       1.06 ms /    31 tokens (    0.03 ms per token, 29107.98 tokens per second)
0.00.076.582 I slot print_timing: id  0 | task 0 |        eval time =       4.34 ms /    16 tokens (    0.29 ms per token,  3453.83 tokens per second)
0.00.076.590 I slot      release: id  0 | task 0 | stop processing: n_tokens = 46, truncated = 0
0.00.195.990 I slot print_timing: id  0 | task 17 | prompt eval time =       1.07 ms /    31 tokens (    0.03 ms per token, 28837.21 tokens per second)
0.00.196.026 I slot print_timing: id  0 | task 17 |        eval time =       8.86 ms /    32 tokens (    0.29 ms per token,  3498.48 tokens per second)
"""  # noqa: E501


@pytest.fixture
def case():
    (found,) = select_cases(load_cases(), "tiny-mtp-fixed")
    return found


def test_the_rates_are_the_servers_own_account_of_its_finished_requests(tmp_path: Path) -> None:
    log = tmp_path / "baseline.log"
    log.write_text(LOG)
    got = budget.rates(log)
    assert (got.decoded, got.prompted) == (48, 62)
    assert got.decode_s == pytest.approx(0.0132) and got.prompt_s == pytest.approx(0.00213)
    assert budget.rates(tmp_path / "none.log") == budget.Rates()


def test_the_budget_is_the_minimum_plus_the_factor_times_the_baselines_time_for_the_requests(
    tmp_path: Path, case
) -> None:
    log = tmp_path / "baseline.log"
    log.write_text(LOG)
    texts = [text for _, text in case.prompt_texts]
    tokens = len(texts) * case.n_predict * (1 + 2 * 4) + 16 + 16  # 4 rounds, the warm-up, the chat request
    prompt = sum(len(x.encode()) + 16 for x in texts) * (1 + 2 * 4) + 2 * (len(texts[0].encode()) + 16)
    assert budget.case_work(case, 4) == budget.Work(tokens, prompt)
    got = budget.Budget.of(case, Settings(budget_factor=10, budget_min_s=60), log, 4)
    rate, prompt_rate = 48 / 0.0132, 62 / 0.00213
    took = tokens / rate + prompt / prompt_rate
    assert got is not None and got.seconds == pytest.approx(60 + 10 * took)
    assert got.why == (
        f"{got.seconds:.0f} s = 60 s + 10 × {took:.2g} s, its baseline's time for {tokens} tokens at "
        f"{rate:.1f} tok/s and at most {prompt} prompt tokens at {prompt_rate:.1f} tok/s"
    )
    assert budget.Budget.of(case, Settings(budget_factor=0), log, 4) is None  # off
    unmeasured = budget.Budget.of(case, Settings(), tmp_path / "no-timings.log", 4)
    assert unmeasured is not None and unmeasured.seconds == budget.UNMEASURED_S


def test_streams_send_the_prompt_set_each_and_warm_up_a_request_each(case) -> None:
    """A concurrent case (suite.streams): every pass is the prompt set once per stream."""
    four = msgspec.structs.replace(case, parallel=4, streams=4)
    one, many = budget.case_work(case, 2), budget.case_work(four, 2)
    texts = [text for _, text in case.prompt_texts]
    assert many.tokens == len(texts) * case.n_predict * 5 * 4 + 16 * 4 + 16  # 5 passes of 4 streams
    assert many.prompt_tokens == 4 * (one.prompt_tokens - 2 * (len(texts[0].encode()) + 16)) + 5 * (
        len(texts[0].encode()) + 16
    )


def test_long_inputs_get_the_time_their_prompts_take(tmp_path: Path) -> None:
    """256 tokens out of 32k-token prompts: the prompts, not the decoding, take most of the time."""
    log = tmp_path / "baseline.log"
    log.write_text(LOG)
    (short,) = select_cases(load_cases(), "tiny-mtp-fixed")
    long = msgspec.structs.replace(short, prompt_texts=(("p", "x " * 16000),))
    assert budget.case_work(long, 1).prompt_tokens > 3 * 32000
    a, b = (budget.Budget.of(c, Settings(), log, 1) for c in (short, long))
    assert a is not None and b is not None and b.seconds > a.seconds + 10 * 90000 / (62 / 0.00213)


@pytest.fixture
def outer_alarm():
    """An alarm already set, as pytest-timeout's (signal method) is around a test: it must be given back."""
    handler = signal.signal(signal.SIGALRM, lambda *_: None)
    before = signal.setitimer(signal.ITIMER_REAL, 500.0)
    yield
    signal.setitimer(signal.ITIMER_REAL, *before)
    signal.signal(signal.SIGALRM, handler)


def test_running_over_raises_where_the_case_is_and_says_the_rate_seen(tmp_path: Path, outer_alarm) -> None:
    case_log = tmp_path / "case.log"
    case_log.write_text(LOG)
    with pytest.raises(budget.OverBudget) as over, budget.armed(budget.Budget(0.2, "0 s = ..."), case_log):
        time.sleep(30)  # a request that hangs: the alarm ends it
    rate = "3636.4 tok/s (48 tokens finished)"
    assert str(over.value).startswith(
        f"over its time budget of 0 s = ...: its speculative server decoded at {rate}"
    )
    assert 400 < signal.getitimer(signal.ITIMER_REAL)[0] <= 500  # the outer alarm, given back
    assert signal.getsignal(signal.SIGALRM) is not budget._expire


def test_a_case_within_its_budget_is_left_alone(tmp_path: Path, outer_alarm) -> None:
    with budget.armed(budget.Budget(30.0, "30 s"), tmp_path / "case.log"):
        pass
    assert 400 < signal.getitimer(signal.ITIMER_REAL)[0] <= 500
    with budget.armed(None, tmp_path / "case.log"):  # budgets off
        pass
