"""Speculative decoding is lossless in distribution at temperature 1: a chi-square test of homogeneity
between the next tokens sampled with and without speculation, on the real CPU build and the synthetic
models with the tiny (12-token) vocabulary; and the same test catching a speculative path that samples
wrongly (llama.cpp's own synthetic acceptance, ``--spec-synth-rates 1,1,1``, which accepts every drafted
token whatever the target says: the output then follows the draft, not the target).

Why it is lossless in the pinned build: the verifier (common_sampler_sample_and_accept_n) samples the
target at every drafted position and keeps a drafted token only when the target's own sample equals it, so
every emitted token is a sample of the target's distribution given the tokens before it.

The statistic: the token at position ``POS`` of ``N`` requests per side, each from its own seed (disjoint
seeds on the two sides, so the samples are independent), in a 2 x K table; outcomes seen fewer than
``MIN_TOTAL`` times on both sides together are pooled into one column, so that every expected count is at
least about 5, where the chi-square distribution holds. ``ALPHA`` = 0.001 is the false-alarm rate: the
chance that two samples of one distribution fail the test (``test_false_alarm_rate`` measures it on
simulated samples). Against the wrong sampler at N = 400 the measured p is below 1e-8, far beyond it.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fakeserver import real_binary
from scipy.stats import chi2_contingency

from specsuite.models.synthetic.generate import generate
from specsuite.server.process import LlamaServer, start_server

ALPHA = 0.001
N = 400  # requests per side
POS = 2  # the third generated token: the second of the first draft block (n_max 3)
N_PREDICT = 8  # a draft block fits whole (the server shortens a draft to the tokens still to generate)
MIN_TOTAL = 10
PROMPT = "abc"  # three tokens of the tiny vocabulary


def homogeneity_p(a: collections.Counter, b: collections.Counter) -> float:
    """p of a chi-square test that the outcomes ``a`` and ``b`` come from one distribution."""
    keys = sorted(set(a) | set(b))
    big = [k for k in keys if a[k] + b[k] >= MIN_TOTAL]
    rest = [k for k in keys if k not in big]
    table = np.array([[c[k] for k in big] + [sum(c[k] for k in rest)] for c in (a, b)])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 1.0  # one outcome on both sides: nothing can differ
    return float(chi2_contingency(table, correction=False).pvalue)


def _draws(rng: np.random.Generator, probs: np.ndarray) -> collections.Counter:
    return collections.Counter(dict(enumerate(rng.multinomial(N, probs))))


def test_false_alarm_rate() -> None:
    """Two samples of one distribution fail about as often as the level says: 1000 simulated pairs of N
    draws from a 12-outcome distribution (seeded) at level 0.05, where 1000 pairs can check it (within 4
    standard errors; at ALPHA the same asymptotics hold, but 1000 pairs would see one failure); and a
    shifted distribution fails at ALPHA."""
    rng = np.random.default_rng(34)
    probs = rng.dirichlet(np.ones(12))
    pairs, level = 1000, 0.05
    fails = sum(homogeneity_p(_draws(rng, probs), _draws(rng, probs)) < level for _ in range(pairs))
    sd = (level * (1 - level) / pairs) ** 0.5
    assert abs(fails / pairs - level) < 4 * sd, f"false alarms {fails / pairs:.4f}, expected {level}"
    assert homogeneity_p(_draws(rng, probs), _draws(rng, np.roll(probs, 1))) < ALPHA


def _server(tmp_path: Path, name: str, args: list[str]) -> LlamaServer:
    binary = str(real_binary())
    common = ["-c", "256", "--parallel", "1", "--fit", "off", "-t", "1", "--poll", "0", "--no-slots"]
    return start_server(
        lambda port: [binary, *args, *common, "--host", "127.0.0.1", "--port", str(port)],
        tmp_path / f"{name}.log",
    )


def _samples(srv: LlamaServer, first_seed: int) -> collections.Counter:
    got: collections.Counter = collections.Counter()
    for seed in range(first_seed, first_seed + N):
        sampling = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": seed}
        body = {"prompt": PROMPT, **sampling, "n_predict": N_PREDICT, "ignore_eos": True}
        body |= {"cache_prompt": False, "return_tokens": True}
        tokens = srv.post("/completion", body)["tokens"]
        assert len(tokens) == N_PREDICT
        got[tokens[POS]] += 1
    return got


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[dict[str, LlamaServer]]:
    tmp = tmp_path_factory.mktemp("sampling")
    target, draft = tmp / "target.gguf", tmp / "draft.gguf"
    generate("target-llama-tinyvocab-random", target)
    generate("draft-llama-tinyvocab-random", draft)
    spec = [
        "-md",
        str(draft),
        "--spec-type",
        "draft-simple",
        "--spec-draft-n-max",
        "3",
        "--spec-draft-poll",
        "0",
    ]
    started: dict[str, LlamaServer] = {}
    try:
        for name, args in (("plain", []), ("spec", spec), ("wrong", [*spec, "--spec-synth-rates", "1,1,1"])):
            started[name] = _server(tmp, name, ["-m", str(target), "--metrics", *args])
        yield started
    finally:
        for srv in started.values():
            srv.stop()


@pytest.fixture(scope="module")
def plain(servers) -> collections.Counter:
    return _samples(servers["plain"], 0)


@pytest.mark.slow
@pytest.mark.integration
def test_speculation_samples_the_targets_distribution(servers, plain) -> None:
    spec = _samples(servers["spec"], 100_000)
    drafted = servers["spec"].metrics()
    assert drafted.drafted > 0 and 0 < drafted.accepted < drafted.drafted  # it drafted, and rejected some
    p = homogeneity_p(plain, spec)
    print(f"lossless: p = {p:.3g}")
    assert p >= ALPHA, f"speculative sampling differs from plain sampling: p = {p:.3g} ({plain} vs {spec})"


@pytest.mark.slow
@pytest.mark.integration
def test_a_wrong_speculative_sampler_is_caught(servers, plain) -> None:
    wrong = _samples(servers["wrong"], 200_000)
    p = homogeneity_p(plain, wrong)
    print(f"wrong sampler: p = {p:.3g}")
    assert p < ALPHA, f"the synthetic-acceptance server passed for lossless: p = {p:.3g} ({plain} vs {wrong})"
