"""The cold pass: upstream's measurement of acceptance, and the one definition of it (the suite's cases,
``specsuite bench`` and calibrate all take acceptance from here; docs/speed.md).

The prompts on the fresh server, its first requests, and the counters after. A delta from a snapshot taken
when the server is ready, not the raw cumulative counters: equal to upstream's numbers when the server
counted nothing before its first request (the pinned build counts nothing at startup: the snapshot is
zero), and ``metrics.delta`` catches a restart mid-pass, which a cumulative read cannot. A non-zero ready
snapshot is named in a warning (upstream's numbers would include it). A drafter that keeps state across
requests (ngram-mod) is measured from the same empty state as upstream's, which no warm-up before it may
change. A categorised prompt set is sent one category after another, with a snapshot after each: each
category's counters are exact too. Speed is measured after it, on the warmed server (the A-B-B-A rounds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specsuite.cases.schema import Case
from specsuite.measure.categories import CategoryPass, groups
from specsuite.measure.outcome import Prompts
from specsuite.measure.streams import Pass, run_streams
from specsuite.server import metrics
from specsuite.server.process import LlamaServer

Groups = Sequence[tuple[str | None, Prompts]]  # (category or None, its prompts), in the order sent


@dataclass
class Cold:
    delta: metrics.Delta  # the pass's counters
    done: Pass  # its requests' answers, as the client saw them
    warnings: list[str] = field(default_factory=list)
    categories: list[CategoryPass] = field(default_factory=list)  # each category's counters


def cold_pass(spec: LlamaServer, groups: Groups, n_predict: int, streams: int, temperature: float) -> Cold:
    """The prompts of ``groups`` on the fresh server ``spec``, ``streams`` at a time (see the module)."""
    ready = spec.metrics()
    done = Pass([], 0.0)
    marks, passes = [ready], []
    for cat, prompts in groups:
        got = run_streams(spec.connection, prompts, n_predict, streams, temperature)
        done += got
        marks.append(spec.metrics())
        if cat:
            delta = metrics.delta(marks[-2], marks[-1], got.completions)
            passes.append(CategoryPass(cat, tuple(i for i, _ in prompts), delta))
    warn = []
    if ready.drafted or ready.accepted or ready.drafts:
        warn.append(
            f"the server counted drafted={ready.drafted} accepted={ready.accepted} drafts={ready.drafts} "
            "before its first request: upstream's cumulative counters would include them, ours do not"
        )
    return Cold(metrics.delta(ready, marks[-1], done.completions), done, warn, passes)


def of_case(spec: LlamaServer, case: Case, streams: int | None = None) -> Cold:
    """The cold pass of ``case`` on ``spec``: its streams unless given (its np-1 reference's: 1); each
    category is one pass of them."""
    return cold_pass(spec, groups(case), case.n_predict, streams or case.streams, case.temperature)
