"""A case's time budget: how long its measurement may take, from the tokens it decodes and the decode rate
its baseline server measured in this run, and what is said when it runs over.

    budget = SPEC_BUDGET_MIN_S + SPEC_BUDGET_FACTOR × tokens / the baseline's tokens/s

The tokens are every token the case's requests ask for once its baseline is warm: the cold pass, the
warm-up, each speed round on both servers and the chat request. The baseline's rate is the server's own
account in its log (llama-server prints ``eval time = X ms / N tokens`` after every request), over every
request it served so far in this run, so a machine that is slow today gets a longer budget. The budget runs
from the moment the case's speculative server is ready to the end of its measurement; what comes before
(the servers' starts, bounded by SPEC_START_TIMEOUT_S, and the baseline's warm-up) is not in it. A case
over its budget fails ``over_budget``, with the rate the speculative server decoded at, instead of hitting
a fixed limit and reading as a harness error.

Enforced as pytest-timeout enforces its own limit: SIGALRM in the main thread, raising where the case is
(a blocked request included). pytest-timeout is off for the suite's cases while a budget is on (one alarm
per process); ``SPEC_BUDGET_FACTOR=0`` turns the budget off and gives them pytest-timeout's limit back.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from specsuite.cases.schema import Case
from specsuite.common.settings import Settings
from specsuite.suite.measure import WARMUP_N_PREDICT, chat_body

# a baseline whose log has no timing lines (not a llama-server of ours): the limit the suite had before
UNMEASURED_S = 900.0
_EVAL = re.compile(r"\|\s+eval time =\s*([0-9.]+) ms /\s*([0-9]+) tokens")


class OverBudget(BaseException):
    """The case ran past its budget; the message says what the budget was and at what rate it decoded. A
    BaseException, as KeyboardInterrupt: no ``except Exception`` on the way may take it for its own."""


class _Expired(BaseException):
    """Raised by the alarm where the case is; ``armed`` turns it into OverBudget with its message."""


def decode_rate(log: Path) -> tuple[int, float]:
    """(tokens, seconds) of decoding a llama-server's log accounts for, over its finished requests."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return 0, 0.0
    found = [(int(n), float(ms)) for ms, n in _EVAL.findall(text)]
    return sum(n for n, _ in found), sum(ms for _, ms in found) / 1000


def case_tokens(case: Case, rounds: int) -> int:
    """Every token a case's requests ask for once its baseline is warm."""
    per_pass = len(case.prompt_texts) * case.n_predict
    return per_pass * (1 + 2 * rounds) + WARMUP_N_PREDICT + chat_body("")["max_tokens"]


@dataclass(frozen=True)
class Budget:
    seconds: float
    why: str  # how the seconds were made, for the message

    @classmethod
    def of(cls, case: Case, options: Settings, baseline_log: Path, rounds: int) -> Budget | None:
        """The case's budget; None when budgets are off (SPEC_BUDGET_FACTOR=0)."""
        if options.budget_factor <= 0:
            return None
        tokens, seconds = decode_rate(baseline_log)
        if not tokens or seconds <= 0:
            return cls(UNMEASURED_S, f"{UNMEASURED_S:.0f} s: the baseline's log shows no decode rate")
        rate, need = tokens / seconds, case_tokens(case, rounds)
        total = options.budget_min_s + options.budget_factor * need / rate
        shown = f"{total:.0f}" if total >= 10 else f"{total:.2g}"
        why = (
            f"{shown} s = {options.budget_min_s:g} s + {options.budget_factor:g} × {need} tokens at "
            f"its baseline's {rate:.1f} tok/s"
        )
        return cls(total, why)

    def exceeded(self, case_log: Path) -> str:
        """What to say when the case ran over: the budget, the rate seen, how to give it more."""
        tokens, seconds = decode_rate(case_log)
        if tokens and seconds > 0:
            rate = tokens / seconds
            seen = f"its speculative server decoded at {rate:.1f} tok/s ({tokens} tokens finished)"
        else:
            seen = "no request to its speculative server finished"
        return (
            f"over its time budget of {self.why}: {seen}. A slower machine gets more time by itself; "
            "raise it with run-tier --budget-factor (SPEC_BUDGET_FACTOR, 0: no budget) or SPEC_BUDGET_MIN_S"
        )


def _expire(signum: int, frame: FrameType | None) -> None:
    raise _Expired()


@contextlib.contextmanager
def armed(budget: Budget | None, case_log: Path) -> Iterator[None]:
    """Run the body within ``budget``; OverBudget when it runs over, saying what ``case_log`` shows of the
    requests that finished. Unarmed outside the main thread (signals go there only)."""
    if budget is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _expire)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, budget.seconds)  # another alarm's time left, if any
    t0 = time.monotonic()
    try:
        yield
    except _Expired:
        raise OverBudget(budget.exceeded(case_log)) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:  # pytest-timeout's, in a test of this module: given back, less the time spent here
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - t0), 0.001))
