"""A server's life as a case's data: its ``sequence`` of requests on one fresh server, each compared with
itself sent alone to a fresh server (``order_dependent``).

A request's counters and tokens must not depend on the requests before it: a drafter's state that leaks from
one request into the next (upstream's #27852: ngram-cache kept a long request's n-grams, and the short one
after it drafted nothing, 86 % -> 11 % acceptance) is invisible to a case that sends its prompts once to a
fresh server. The first request of the sequence is alone on its server already, so it is its own
reference; every other prompt of the sequence gets a fresh server of the case's own command, one request.
Counters are the requests' own (``timings.draft_n``, ``draft_n_accepted``): exact per request, where a
``/metrics`` delta would need a snapshot between every two.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from specsuite.cases.schema import RESTORE, SAVE, SLOT_STEPS, Case
from specsuite.measure.judge import Failure
from specsuite.measure.outcome import Completion, request_body
from specsuite.results.record import RequestCounters
from specsuite.server.process import LlamaServer

# (what the server is for, in its log's name; flags added to the case's command) -> a fresh server of the
# case's command for a ``with``
Serve = Callable[[str, Sequence[str]], AbstractContextManager[LlamaServer]]
SLOT_FILE = "sequence-slot.bin"  # the one slot file a sequence saves and restores, in its own folder


@dataclass
class Sequenced:
    """What a sequence gave: its requests' answers in order, each prompt's answer alone on a fresh server,
    and each request right after a restore with the warm slot's answer to it (right after the save)."""

    done: list[Completion]
    alone: dict[str, Completion]
    # positions in ``done``: (the warm slot's answer right after a save, the answer after the restore)
    restored: list[tuple[int, int]] = field(default_factory=list)

    @property
    def after_restore(self) -> set[int]:
        """The positions of the requests after a restore: the warm slot's answer judges them
        (``slot_restore``), not the alone rule."""
        return {after for _, after in self.restored}


def _body(case: Case, text: str, slots: bool) -> dict[str, object]:
    """A request of the sequence: the suite's own, and with slot steps on slot 0 with its prompt cache (what
    a saved slot holds is only used by a request that may reuse it)."""
    body = request_body(text, case.n_predict, case.temperature)
    return {**body, "cache_prompt": True, "id_slot": 0} if slots else body


def _send(srv: LlamaServer, case: Case, steps: Sequence[str], slots: bool) -> Sequenced:
    """The steps in order on one server: prompts as requests, ``@save`` / ``@restore`` as slot 0's save and
    restore (``/slots/0?action=…``)."""
    texts = dict(case.prompt_texts)
    got = Sequenced([], {})
    warm: int | None = None  # the position of the answer right after the last save
    last = ""
    for step in steps:  # one after another on the one server: the order is the point
        if step in SLOT_STEPS:
            srv.post(f"/slots/0?action={step.removeprefix('@')}", {"filename": SLOT_FILE})
            last = step
            continue
        answer = Completion.from_response(step, srv.post("/completion", _body(case, texts[step], slots)))
        got.done.append(answer)
        if last == SAVE:
            warm = len(got.done) - 1
        elif last == RESTORE and warm is not None:
            got.restored.append((warm, len(got.done) - 1))
        last = step
    return got


def run_sequence(case: Case, serve: Serve, slot_flags: Sequence[str] = ()) -> Sequenced:
    """The case's sequence on one fresh server (with ``slot_flags``: its slot folder, where it saves and
    restores), and each of its prompts alone on a fresh server."""
    slots = any(step in SLOT_STEPS for step in case.sequence)
    with serve("sequence", slot_flags) as srv:
        got = _send(srv, case, case.sequence, slots)
    got.alone = {got.done[0].id: got.done[0]}  # the first request met a fresh server: it is alone already
    for pid in dict.fromkeys(s for s in case.sequence[1:] if s not in SLOT_STEPS):
        if pid not in got.alone:
            with serve(f"alone-{pid}", ()) as srv:
                got.alone[pid] = _send(srv, case, (pid,), slots).done[0]
    return got


def slot_restore(got: Sequenced) -> Failure | None:
    """A request after a restore whose counters or tokens differ from the warm slot's answer to it: the
    restored slot lost what the saved one had (upstream's #28619: the draft context is not saved, so a
    restored slot drafts from an empty draft KV)."""
    for warm, after in ((got.done[w], got.done[a]) for w, a in got.restored):
        if _same(warm, after):
            continue
        return Failure(
            "slot_restore",
            f"request {after.id!r} after the slot's restore: drafted {after.draft_n} accepted "
            f"{after.draft_n_accepted}, {_tokens(after, warm)}; on the warm slot right after its save: "
            f"drafted {warm.draft_n} accepted {warm.draft_n_accepted}",
        )
    return None


def order_dependent(
    done: list[Completion], alone: dict[str, Completion], skip: Collection[int] = ()
) -> Failure | None:
    """The first request of the sequence (but those at ``skip``) whose counters or tokens differ from its
    own sent alone, naming it, both counter sets and the request before it; None when every one is the
    same."""
    for k, got in enumerate(done):
        ref = alone[got.id]
        if k in skip or _same(got, ref):
            continue
        tokens = _tokens(got, ref)
        return Failure(
            "order_dependent",
            f"request {k + 1} of the sequence ({got.id!r}, after {done[k - 1].id!r}): drafted {got.draft_n} "
            f"accepted {got.draft_n_accepted}, {tokens}; sent alone to a fresh server: drafted {ref.draft_n} "
            f"accepted {ref.draft_n_accepted}: the requests before it changed it (state kept across them)",
        )
    return None


def counters(done: list[Completion]) -> list[RequestCounters]:
    """Each request's own counters, as results.json keeps them."""
    return [RequestCounters(prompt=c.id, drafted=c.draft_n, accepted=c.draft_n_accepted) for c in done]


def _same(a: Completion, b: Completion) -> bool:
    return (a.draft_n, a.draft_n_accepted, a.tokens) == (b.draft_n, b.draft_n_accepted, b.tokens)


def _tokens(got: Completion, ref: Completion) -> str:
    return (
        "the same tokens" if got.tokens == ref.tokens else f"other tokens from token {_first_diff(got, ref)}"
    )


def _first_diff(a: Completion, b: Completion) -> int:
    return next((i for i, (x, y) in enumerate(zip(a.tokens, b.tokens, strict=False)) if x != y),
                min(len(a.tokens), len(b.tokens)))  # fmt: skip
