"""A server's life on the real CPU build (docs/server-life.md): the pin's known upstream bugs reported as
still present, a build where one no longer shows reported FIXED, a build whose plain server speculates
caught.

The other builds are the real build behind a wrapper script that poses as another commit (its --version
names one) and changes one thing on its way to the real binary: it gives every server a 1024-token
context instead of the case's 256 (no shift happens, so #21815 does not show, as on a build with the
fix), or it turns the harness's `--spec-type none` into `--spec-type ngram-mod` (upstream's #28391:
ngram-mod the default and --spec-type additive, so "none" adds nothing to it). Everything else is the
real build serving the real synthetic models.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
from fakeserver import real_binary
from tierrun import run_tier

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # the real build: on CI's first Python only
KNOWN = ("tiny-ngram-map-k-ctx-shift", "tiny-eagle3-ctx-shift", "tiny-ngram-cache-order", "tiny-simple-order")


def wrapper(folder: Path, commit: str, rewrite: str) -> Path:
    """A llama-server of ``commit`` (build 11312: the pin's successor) that passes its arguments through
    ``rewrite`` (bash over one argument ``$a``, appending to ``args``) to the real build."""
    exe = folder / commit / "llama-server"
    exe.parent.mkdir(parents=True)
    real = shlex.quote(str(real_binary()))
    exe.write_text(
        "#!/bin/bash\n"
        f'if [ "$1" = --version ]; then echo "version: 9000 (build 11312, commit {commit})" >&2; exit 0; fi\n'
        'args=()\nfor a in "$@"; do\n'
        f"{rewrite}\n"
        "done\n"
        f'exec {real} "${{args[@]}}"\n'
    )
    exe.chmod(0o755)
    return exe


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specsuite.models.fetch import FetchOptions, fetch_models

    folder = tmp_path_factory.mktemp("models")
    fetch_models(FetchOptions(methods=[*KNOWN, "tiny-simple-fixed"], model_dir=folder, tty=False))
    return folder


def _run(root: Path, models: Path, exe: Path, selector: str) -> tuple[int, dict[str, Any], list[str]]:
    rc, doc, out = run_tier(root, models, exe, selector)
    return rc, doc, (out / "summary.md").read_text().splitlines()


def test_the_pins_known_bugs_are_said_still_present_and_the_run_passes(tmp_path: Path, models: Path) -> None:
    rc, doc, head = _run(tmp_path, models, real_binary(), ",".join(KNOWN))
    states = {n: (r["status"], (r["known_bug"] or {}).get("state")) for n, r in doc["cases"].items()}
    assert rc == 0 and states == {
        "tiny-ngram-map-k-ctx-shift": ("known_bug", "present"),
        "tiny-eagle3-ctx-shift": ("known_bug", "present"),
        "tiny-ngram-cache-order": ("known_bug", "present"),
        "tiny-simple-order": ("passed", None),
    }, states
    assert "PASSED, with warnings (3 KNOWN BUG" in head[0] and "1 passed, 3 known bug" in head[0]
    assert "KNOWN BUG, still present (not a failure): llama.cpp #21815 (" in head[2]
    assert any("llama.cpp #27852 (" in line for line in head[2:6])
    crashed = next(line for line in head if line.startswith("- **CRASHED (known bug, still present)"))
    assert "tiny-ngram-map-k-ctx-shift: killed by signal SIGABRT at common/ngram-map.cpp:242: " in crashed
    order = doc["cases"]["tiny-ngram-cache-order"]
    assert [(s["prompt"], s["drafted"]) for s in order["sequence"]] == [("long", 0), ("short", 0)]
    assert [(s["prompt"], s["drafted"]) for s in order["sequence_alone"]] == [("long", 0), ("short", 27)]


def test_a_build_where_a_known_bug_no_longer_shows_reports_it_fixed_first(
    tmp_path: Path, models: Path
) -> None:
    """The context made roomy on the way to the real build: the n-gram map speculator no longer aborts."""
    fixed = wrapper(tmp_path, "f1f1f1f", '  [ "$a" = 256 ] && a=1024; args+=("$a")')
    rc, doc, head = _run(tmp_path, models, fixed, "tiny-ngram-map-k-ctx-shift")
    rec = doc["cases"]["tiny-ngram-map-k-ctx-shift"]
    assert rc == 0 and (rec["status"], rec["known_bug"]["state"]) == ("passed", "fixed"), rec["message"]
    assert head[0].endswith("PASSED, with warnings (1 FIXED; 1 UNCALIBRATED): 1 passed")
    assert head[2].startswith("- **FIXED upstream (the case passes): llama.cpp #21815 (the n-gram map ")


def test_a_build_whose_plain_server_speculates_is_caught_first(tmp_path: Path, models: Path) -> None:
    """#28391 on the real build: --spec-type none becomes ngram-mod; the plain server's own counters say it
    drafted, the case fails baseline_speculated, first, and no speedup is reported."""
    additive = wrapper(tmp_path, "a2a2a2a", '  [ "$a" = none ] && a=ngram-mod; args+=("$a")')
    rc, doc, head = _run(tmp_path, models, additive, "tiny-simple-fixed")
    rec = doc["cases"]["tiny-simple-fixed"]
    assert rc == 1 and (rec["status"], rec["reason"]) == ("failed", "baseline_speculated"), rec["message"]
    assert rec["baseline_command"][-2:] == ["--spec-type", "none"] and rec["speedup"] is None
    assert head[0].endswith("FAILED: 1 of 1 case(s): tiny-simple-fixed (baseline_speculated)")
    assert head[2].startswith(
        "- **BASELINE SPECULATED, speed not gated: tiny-simple-fixed: the speculation-off "
    )
