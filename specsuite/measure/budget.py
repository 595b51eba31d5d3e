"""A case's time budget: how long its measurement may take, from what its requests ask and the rates its
baseline server measured in this run, and what is said when it runs over.

    budget = SPEC_BUDGET_MIN_S + SPEC_BUDGET_FACTOR × (the baseline's time for the case's requests)

The requests are those a case sends once its baseline is warm: the cold pass, the warm-up, each speed
round on both servers and the chat request. Their time at the baseline's rates is the tokens they decode
at its decode rate plus the prompt tokens they process (at most one per byte of text) at its prompt rate:
with 32k-token inputs and 256-token outputs the prompts can be most of it. The rates are the server's own
account in its log (llama-server prints ``prompt eval time`` and ``eval time = X ms / N tokens`` after
every request), over every request it served so far in this run, so a machine that is slow today gets a
longer budget. The budget runs from the moment the case's speculative server is ready to the end of its
measurement; what comes before (the servers' starts, bounded by SPEC_START_TIMEOUT_S, and the baseline's
warm-up) is not in it. A case over its budget fails ``over_budget``, with the rate the speculative server
decoded at, instead of hitting a fixed limit and reading as a harness error.

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
from specsuite.measure.outcome import WARMUP_N_PREDICT, chat_body

# a baseline whose log has no timing lines (not a llama-server of ours): the limit the suite had before
UNMEASURED_S = 900.0
# llama-server's account of each finished request (server-context.cpp print_timing)
_TIMING = re.compile(r"\|\s+(prompt eval|eval) time =\s*([0-9.]+) ms /\s*([0-9]+) tokens")
_SPECIAL = 16  # tokens a request adds to its text at most: BOS, a chat template's markers


class OverBudget(BaseException):
    """The case ran past its budget; the message says what the budget was and at what rate it decoded. A
    BaseException, as KeyboardInterrupt: no ``except Exception`` on the way may take it for its own."""


class _Expired(BaseException):
    """Raised by the alarm where the case is; ``armed`` turns it into OverBudget with its message."""


@dataclass(frozen=True)
class Rates:
    """What a llama-server's log accounts for over its finished requests: tokens and seconds, decoded and
    of prompt processed."""

    decoded: int = 0
    decode_s: float = 0.0
    prompted: int = 0
    prompt_s: float = 0.0


def rates(log: Path) -> Rates:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return Rates()
    found = {"eval": [0, 0.0], "prompt eval": [0, 0.0]}
    for kind, ms, n in _TIMING.findall(text):
        found[kind][0] += int(n)
        found[kind][1] += float(ms) / 1000
    (decoded, decode_s), (prompted, prompt_s) = found["eval"], found["prompt eval"]
    return Rates(int(decoded), decode_s, int(prompted), prompt_s)


@dataclass(frozen=True)
class Work:
    """What a case's requests ask of its servers once its baseline is warm: the tokens they decode, and
    the prompt tokens they process at most (a token covers at least a byte of text: every prompt is
    processed again, no request reuses another's cache)."""

    tokens: int
    prompt_tokens: int


def case_work(case: Case, rounds: int) -> Work:
    """The cold pass, the warm-up, each speed round on both servers, the chat request. With several
    streams each pass is the prompt set once per stream (measure.streams), and the warm-up a request per
    stream: counted as if one after another (at the baseline's rate a batch of them takes no longer)."""
    passes = (1 + 2 * rounds) * case.streams
    prompt_bytes = sum(len(text.encode()) + _SPECIAL for _, text in case.prompt_texts)
    first = len(case.prompt_texts[0][1].encode()) + _SPECIAL if case.prompt_texts else 0
    chat = chat_body("")["max_tokens"]
    return Work(len(case.prompt_texts) * case.n_predict * passes + WARMUP_N_PREDICT * case.streams + chat,
                prompt_bytes * passes + (1 + case.streams) * first)  # fmt: skip


def _shown(seconds: float) -> str:
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"


@dataclass(frozen=True)
class Budget:
    seconds: float
    why: str  # how the seconds were made, for the message

    @classmethod
    def of(cls, case: Case, options: Settings, baseline_log: Path, rounds: int) -> Budget | None:
        """The case's budget; None when budgets are off (SPEC_BUDGET_FACTOR=0)."""
        if options.budget_factor <= 0:
            return None
        seen = rates(baseline_log)
        if not seen.decoded or seen.decode_s <= 0:
            return cls(UNMEASURED_S, f"{UNMEASURED_S:.0f} s: the baseline's log shows no decode rate")
        work = case_work(case, rounds)
        rate = seen.decoded / seen.decode_s
        said = f"its baseline's time for {work.tokens} tokens at {rate:.1f} tok/s"
        took = work.tokens / rate
        if seen.prompted and seen.prompt_s > 0:
            prompt_rate = seen.prompted / seen.prompt_s
            took += work.prompt_tokens / prompt_rate
            said += f" and at most {work.prompt_tokens} prompt tokens at {prompt_rate:.1f} tok/s"
        total = options.budget_min_s + options.budget_factor * took
        min_s, factor = options.budget_min_s, options.budget_factor
        return cls(total, f"{_shown(total)} s = {min_s:g} s + {factor:g} × {_shown(took)} s, {said}")

    def exceeded(self, case_log: Path) -> str:
        """What to say when the case ran over: the budget, the rate seen, how to give it more."""
        done = rates(case_log)
        if done.decoded and done.decode_s > 0:
            rate = done.decoded / done.decode_s
            seen = f"its speculative server decoded at {rate:.1f} tok/s ({done.decoded} tokens finished)"
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
