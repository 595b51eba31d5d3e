"""The KV-cache axis on the real CPU build (docs/configuration.md#kv-cache-types): tiny-simple-kv's members
each judged against its f16 member of the run; a member run alone measures its f16 reference; a build whose
quantised draft cache breaks drafting (upstream's #25725) is ``kv_collapse``, named with both numbers.

The broken build is the real build behind a wrapper script: where the draft's cache is q4_0 it hands the
server the fixed-weights draft instead (with an f16 cache, which its 16-wide heads need), whose drafts are
token 0 whatever the context, as a draft reading a broken cache proposes what the context does not say.
Everything else is the real build serving the real synthetic models.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from fakeserver import real_binary
from tierrun import run_tier

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # the real build: on CI's first Python only
AXIS = ("tiny-simple-kv", "tiny-simple-kv-f16-q4_0", "tiny-simple-kv-q8_0", "tiny-simple-kv-q4_0")
DRAFT = "synth-draft-llama-random-head32.gguf"
FIXED_DRAFT = "synth-draft-llama-fixed.gguf"  # tiny-simple-fixed's draft


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specsuite.models.fetch import FetchOptions, fetch_models

    folder = tmp_path_factory.mktemp("models")
    fetch_models(FetchOptions(methods=[*AXIS, "tiny-simple-fixed"], model_dir=folder, tty=False))
    return folder


def _numbers(doc: dict) -> dict[str, tuple]:
    return {n: (c["status"], c["accepted"], c["drafted"], c["drafts"]) for n, c in doc["cases"].items()}


def test_each_member_is_judged_against_the_f16_member_of_its_run(tmp_path: Path, models: Path) -> None:
    rc, doc, out = run_tier(tmp_path, models, real_binary(), ",".join(AXIS))
    assert rc == 0, (out / "summary.md").read_text()
    assert _numbers(doc) == {  # measured on the pin (cases.toml's comment): three runs alike
        "tiny-simple-kv": ("passed", 61, 90, 32),
        "tiny-simple-kv-f16-q4_0": ("passed", 60, 93, 33),
        "tiny-simple-kv-q8_0": ("passed", 61, 90, 32),
        "tiny-simple-kv-q4_0": ("passed", 58, 98, 35),
    }
    kv = {n: c["kv"] for n, c in doc["cases"].items()}
    assert kv["tiny-simple-kv"]["reference"] is None  # the reference itself
    seen = {n: (k["reference"], k["accept_fraction"], k["identical_to_f16"], k["tokens_judged"])
            for n, k in kv.items() if n != "tiny-simple-kv"}  # fmt: skip
    assert seen == {
        "tiny-simple-kv-f16-q4_0": ("tiny-simple-kv (this run)", 0.9519, 1.0, True),
        "tiny-simple-kv-q8_0": ("tiny-simple-kv (this run)", 1.0, 1.0, False),
        "tiny-simple-kv-q4_0": ("tiny-simple-kv (this run)", 0.8732, 0.6667, False),
    }
    # every member lossless against its own plain server, which keeps the target's cache types only
    q4 = doc["cases"]["tiny-simple-kv-q4_0"]
    assert q4["identical_fraction"] == 1.0
    assert " --cache-type-k q4_0 " in f" {shlex.join(q4['baseline_command'])} "
    assert "--spec-draft-type-k" not in q4["baseline_command"]
    assert " --spec-draft-type-k q4_0 " in f" {shlex.join(q4['command'])} "


def test_a_member_run_alone_measures_its_f16_reference(tmp_path: Path, models: Path) -> None:
    rc, doc, out = run_tier(tmp_path, models, real_binary(), "tiny-simple-kv-q4_0")
    assert rc == 0, (out / "summary.md").read_text()
    kv = doc["cases"]["tiny-simple-kv-q4_0"]["kv"]
    assert kv["reference"] == "measured for tiny-simple-kv-q4_0: logs/tiny-simple-kv-q4_0-f16.log"
    assert (kv["f16_accept_rate"], kv["accept_fraction"]) == (0.6778, 0.8732)  # as the f16 member's own
    # its server's own log: the f16 member's counters, request by request
    log = (out / "logs" / "tiny-simple-kv-q4_0-f16.log").read_text()
    pairs = [tuple(map(int, m)) for m in re.findall(r"\(\s*(\d+) accepted /\s*(\d+) generated\)", log)]
    assert len(pairs) == 3 and (sum(a for a, _ in pairs), sum(g for _, g in pairs)) == (61, 90)


def _broken_draft_cache(folder: Path, models: Path) -> Path:
    """The real build, but a q4_0 draft cache drafts with the fixed-weights draft (at f16)."""
    exe = folder / "llama-server"
    folder.mkdir(parents=True)
    draft, fixed = shlex.quote(str(models / DRAFT)), shlex.quote(str(models / FIXED_DRAFT))
    exe.write_text(
        "#!/bin/bash\n"
        'broken=0; prev=""\n'
        'for a in "$@"; do\n'
        '  [ "$prev" = --spec-draft-type-k ] && [ "$a" = q4_0 ] && broken=1; prev="$a"\n'
        "done\n"
        'args=(); prev=""\n'
        'for a in "$@"; do\n'
        '  given="$a"\n'
        "  if [ $broken = 1 ]; then\n"
        f'    [ "$a" = {draft} ] && a={fixed}\n'
        '    case "$prev" in --spec-draft-type-k|--spec-draft-type-v) a=f16;; esac\n'
        "  fi\n"
        '  args+=("$a"); prev="$given"\n'
        "done\n"
        f'exec {shlex.quote(str(real_binary()))} "${{args[@]}}"\n'
    )
    exe.chmod(0o755)
    return exe


def test_a_quantised_draft_cache_that_breaks_drafting_is_kv_collapse(tmp_path: Path, models: Path) -> None:
    exe = _broken_draft_cache(tmp_path / "broken", models)
    rc, doc, out = run_tier(tmp_path, models, exe, "tiny-simple-kv,tiny-simple-kv-f16-q4_0")
    assert rc != 0
    f16, broken = doc["cases"]["tiny-simple-kv"], doc["cases"]["tiny-simple-kv-f16-q4_0"]
    assert (f16["status"], f16["accepted"], f16["drafted"]) == ("passed", 61, 90)
    # the harness asked for the random draft at q4_0; the broken build drafted with the fixed one
    assert " --spec-draft-type-k q4_0 " in f" {shlex.join(broken['command'])} "
    assert FIXED_DRAFT in (out / "logs" / "tiny-simple-kv-f16-q4_0.log").read_text()
    assert (broken["status"], broken["reason"]) == ("failed", "kv_collapse")
    first = broken["message"].splitlines()[1]
    rate = broken["accepted"] / broken["drafted"]
    assert first == (
        f"- [kv_collapse] accept rate {rate:.4f} < 0.8 x f16's 0.6778 (kv f16/q4_0; f16: tiny-simple-kv "
        f"(this run)): accepted={broken['accepted']} drafted={broken['drafted']} steps={broken['drafts']} "
        "against 61/90/32"
    )
    # verification keeps the target's tokens whatever is drafted: no divergence, from f16 or plain decoding
    assert broken["kv"]["identical_to_f16"] == 1.0 and broken["identical_fraction"] == 1.0
    assert "kv_diverged" not in broken["message"]
    assert "tiny-simple-kv-f16-q4_0" in (out / "summary.md").read_text()
