"""A KV axis's member against its f16 member (measure.kvaxis): the acceptance rule and its message, the
tokens where only the draft's cache moved, the record's block, the run's f16 references.

The counters are those the pinned CPU build gave the synthetic tier's tiny-simple-kv axis (2026-12-07,
three runs alike: f16 61 accepted of 90 drafted in 32 steps, q4_0 58/98/35, f16/q4_0 60/93/33) and
upstream's #25725 (DFlash: 0.99 at f16, 0.02 at q8_0). The tokens are made up: the real ones are judged on
the real build in tests/suite/test_kv_axis.py.
"""

from __future__ import annotations

from types import SimpleNamespace

from casetext import HEAD

from specsuite.cases.kvtypes import REFERENCE
from specsuite.cases.schema import parse_cases
from specsuite.measure import kvaxis
from specsuite.measure.concurrency import Reference
from specsuite.measure.outcome import Completion
from specsuite.results.record import CaseRecord
from specsuite.server.metrics import Delta

AXIS = (
    HEAD
    + """[[case]]
name = "tiny-simple-kv"
tier = "synthetic"
spec_type = "draft-simple"
target = "t.gguf"
draft = "d.gguf"
n_max = 3
prompts = "synthetic"
min_accept_rate = 0.5
min_accept_len = 1.5
kv_types = ["f16", "f16/q4_0", "q8_0", "q4_0"]
"""
)
F16 = Delta(drafted=90, accepted=61, drafts=32)
Q4 = Delta(drafted=98, accepted=58, drafts=35)
DRAFT_Q4 = Delta(drafted=93, accepted=60, drafts=33)
TOKENS = {"fox": (1, 2, 3, 4), "count": (5, 6, 7, 8), "the": (9, 9, 9, 9)}


def _members(fraction: str = "") -> dict[str, object]:
    return {c.name: c for c in parse_cases(AXIS + fraction)}


def _comps(**changed: tuple[int, ...]) -> list[Completion]:
    return [Completion(p, changed.get(p, t), len(t), 1.0) for p, t in TOKENS.items()]


REF = Reference("tiny-simple-kv (this run)", _comps(), F16)


def _judge(name: str, delta: Delta, comps: list[Completion], fraction: str = "") -> tuple[list, CaseRecord]:
    case = _members(fraction)[name]
    rec = CaseRecord(name=name)
    return kvaxis.check(case, rec, delta, comps, REF), rec


def test_q4_0_above_its_tables_fraction_passes_with_its_numbers_in_the_block() -> None:
    fails, rec = _judge("tiny-simple-kv-q4_0", Q4, _comps(fox=(1, 2, 0, 0)), "kv_min_accept_fraction = 0.8\n")
    assert fails == []
    assert rec.kv is not None
    assert (rec.kv.sweep, rec.kv.target, rec.kv.draft, rec.kv.reference) == (
        "tiny-simple-kv", "q4_0", "q4_0", "tiny-simple-kv (this run)",
    )  # fmt: skip
    assert (rec.kv.f16_accept_rate, rec.kv.f16_accept_len, rec.kv.accept_fraction) == (0.6778, 2.9062, 0.8732)
    # a quantised target gives its own tokens: reported against f16's, judged only against its plain server's
    assert (rec.kv.min_accept_fraction, rec.kv.identical_to_f16, rec.kv.tokens_judged) == (0.8, 0.6667, False)


def test_the_same_member_under_the_default_fraction_is_a_collapse_naming_both_numbers() -> None:
    fails, _ = _judge("tiny-simple-kv-q4_0", Q4, _comps())
    assert [(f.reason, f.message) for f in fails] == [
        (
            "kv_collapse",
            "accept rate 0.5918 < 0.9 x f16's 0.6778 (kv q4_0/q4_0; f16: tiny-simple-kv (this run)): "
            "accepted=58 drafted=98 steps=35 against 61/90/32",
        )
    ]


def test_upstreams_25725_shape_fails_at_once() -> None:
    ref = Reference("dflash2-kv (this run)", _comps(), Delta(drafted=100, accepted=99, drafts=20))
    case = _members()["tiny-simple-kv-f16-q4_0"]
    fails = kvaxis.check(
        case, CaseRecord(name=case.name), Delta(drafted=100, accepted=2, drafts=50), _comps(), ref
    )
    assert [f.reason for f in fails] == ["kv_collapse"]
    assert fails[0].message.startswith(
        "accept rate 0.0200 < 0.9 x f16's 0.9900 (kv f16/q4_0; f16: dflash2-kv"
    )


def test_the_bound_itself_passes() -> None:
    # 0.9 x 61/90 of 100 drafted is 61.0 accepted: the counters decide, not a rounded rate
    fails, rec = _judge("tiny-simple-kv-q8_0", Delta(drafted=100, accepted=61, drafts=40), _comps())
    assert fails == [] and rec.kv is not None and rec.kv.accept_fraction == 0.9
    fails, _ = _judge("tiny-simple-kv-q8_0", Delta(drafted=100, accepted=60, drafts=40), _comps())
    assert [f.reason for f in fails] == ["kv_collapse"]


def test_only_the_drafts_cache_moved_so_greedy_tokens_must_be_f16s() -> None:
    fails, rec = _judge("tiny-simple-kv-f16-q4_0", DRAFT_Q4, _comps())
    assert fails == [] and rec.kv is not None
    assert (rec.kv.accept_fraction, rec.kv.identical_to_f16, rec.kv.tokens_judged) == (0.9519, 1.0, True)
    fails, _ = _judge("tiny-simple-kv-f16-q4_0", DRAFT_Q4, _comps(count=(5, 6, 0, 8), the=(9, 9)))
    assert [(f.reason, f.message) for f in fails] == [
        (
            "kv_diverged",
            "2 of 3 request(s) differ from the f16 member's tokens with only the draft's cache type moved "
            "(kv f16/q4_0; f16: tiny-simple-kv (this run)): prompt 'count': first differing token at index 2 "
            "(f16: 7, here: 0); prompt 'the': first differing token at index 2 (f16: 9, here: end)",
        )
    ]


def test_a_sampled_member_is_not_held_to_f16s_tokens() -> None:
    sampled = _members("temperature = 1.0\n")["tiny-simple-kv-f16-q4_0"]
    rec = CaseRecord(name=sampled.name)
    assert kvaxis.check(sampled, rec, DRAFT_Q4, _comps(fox=(0,)), REF) == []
    assert rec.kv is not None and (rec.kv.tokens_judged, rec.kv.identical_to_f16) == (False, 0.6667)


def test_the_f16_member_and_any_other_case_are_not_compared() -> None:
    f16 = _members()["tiny-simple-kv"]
    rec = CaseRecord(name=f16.name)
    assert kvaxis.check(f16, rec, F16, _comps(), None) == []
    assert rec.kv is not None and (rec.kv.target, rec.kv.reference, rec.kv.accept_fraction) == (
        "f16",
        None,
        None,
    )
    plain = parse_cases(AXIS.replace('kv_types = ["f16", "f16/q4_0", "q8_0", "q4_0"]\n', ""))[0]
    rec = CaseRecord(name=plain.name)
    assert kvaxis.check(plain, rec, Q4, _comps(), REF) == [] and rec.kv is None


def test_the_f16_members_pass_is_the_runs_reference_for_its_members() -> None:
    """The f16 member keeps its cold pass under its own command; a member finds it under its f16 command
    (its own with the f16 flags), another prompt set or n_predict does not."""
    members = _members()
    engine = SimpleNamespace(kv_refs={})  # the one attribute reference() reads when nothing is measured

    def command(case):  # an argv whose only difference between members is the cache flags
        return lambda port: ["llama-server", *case.server_args, "--port", str(port)]

    f16 = members["tiny-simple-kv"]
    assert kvaxis.reference(engine, f16, command(f16), F16, _comps()) is None  # nothing to compare with
    q4 = members["tiny-simple-kv-q4_0"]
    got = kvaxis.reference(engine, q4, command(q4.kv_member(REFERENCE)), Q4, _comps())
    assert got is not None and (got.source, got.delta) == ("tiny-simple-kv (this run)", F16)
    assert len(engine.kv_refs) == 1
    other = next(iter(engine.kv_refs))
    assert other[1:] == ("synthetic", 128, 1)  # prompt set, n_predict, streams: part of the key
