"""A changed default, as a real commit would change it, on the real CPU build: named in the summary's first
lines, beside the change points, and the defaults cases turn red.

A wrapper script poses as llama-server of another commit: its ``--version`` names that commit, its
``--help`` states the other default (the binary's own help text, that one default rewritten, as the new
commit would print it), and it passes the changed flag to the real build before the harness's flags (so a
case's own flag still wins, as with a changed default). Everything else is the real build serving the real
synthetic models: the counters, the memory and the prefill of these runs are the real ones.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from fakeserver import real_binary
from tierrun import run_tier

from specsuite.common import paths
from specsuite.measure.observe import limit

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # the real build: on CI's first Python only
RANDOM = "tiny-simple-random,tiny-mtp-random"
DEFAULTS = [f"tiny-{m}-defaults" for m in ("simple", "mtp", "eagle3", "dflash", "dspark", "dspark-lowconf")]


def wrapper(folder: Path, commit: str, flag: str, default: str, value: str, build: int = 1) -> Path:
    """A llama-server of ``commit`` whose ``flag`` defaults to ``default`` (stated) and runs at ``value``;
    ``build``: the build number its --version says (1, a depth-1 clone's, orders nothing)."""
    exe = folder / commit / "llama-server"
    exe.parent.mkdir(parents=True)
    real = shlex.quote(str(real_binary()))
    stated = f"/^{flag}/s/(default: [0-9.]*)/(default: {default})/"
    exe.write_text(
        "#!/bin/sh\n"
        f'case "$1" in\n'
        f'  --version) echo "version: 9000 (build {build}, commit {commit})" >&2; exit 0;;\n'
        f"  --help) {real} --help | sed {shlex.quote(stated)}; exit 0;;\n"
        "esac\n"
        f'exec {real} {flag} {value} "$@"\n'
    )
    exe.chmod(0o755)
    return exe


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specsuite.models.fetch import FetchOptions, fetch_models

    folder = tmp_path_factory.mktemp("models")
    fetch_models(FetchOptions(methods=[*RANDOM.split(","), *DEFAULTS], model_dir=folder, tty=False))
    return folder


def test_a_p_min_default_reset_is_named_first(tmp_path: Path, models: Path) -> None:
    """llama.cpp #25792: --spec-draft-p-min's default went from 0.75 to 0.0 and acceptance collapsed.

    Both commits report one build number, the pin's (a local patch on a release, a fork, a branch): the
    number cannot order them, so the later run is judged against the earlier one by time, and says so."""
    old = wrapper(tmp_path, "a1a1a1a", "--spec-draft-p-min", "0.75", "0.75", build=11311)
    new = wrapper(tmp_path, "b2b2b2b", "--spec-draft-p-min", "0.00", "0.0", build=11311)
    run_tier(tmp_path, models, old, RANDOM, "a")
    rc, doc, out = run_tier(tmp_path, models, new, RANDOM, "b")
    assert rc == 1 and doc["config"]["defaults"]["--spec-draft-p-min"] == "0.00"
    assert doc["binary"]["build"] == 11311
    head = (out / "summary.md").read_text().splitlines()
    baseline = next(line for line in head[:8] if line.startswith("- baseline ("))
    assert baseline.startswith("- baseline (nearest lower build, ") and "none yet" not in baseline
    assert "; by time: the same build number 11311, another commit) for tiny-simple-random" in baseline
    assert head[0].startswith("### specsuite") and "FAILED" in head[0]
    # the cause first, once: the binary's default against the run before, with the cases it failed
    assert head[2].startswith("- **CONFIGURATION CHANGED since a1a1a1a (run ")
    assert head[2].endswith(
        ": default of --spec-draft-p-min: 0.75 -> 0.00; failed under it: tiny-simple-random (regressed), "
        "tiny-mtp-random (regressed)**"
    )
    rec = doc["cases"]["tiny-simple-random"]
    assert rec["baseline"]["config_changes"] == [
        "default of --spec-draft-p-min: 0.75 -> 0.00 between a1a1a1a and b2b2b2b"
    ]
    assert "--spec-draft-p-min" not in rec["config"]["passed"]  # the harness never passed it: the default
    # the real servers' memory and prefill, the speculative side's and the baseline's
    for rec in doc["cases"].values():
        mem, pre = rec["memory"], rec["prefill"]
        assert mem["peak_rss_mib"] > 5 and mem["base_peak_rss_mib"] > 5 and len(mem["rss_mib"]) == 3
        assert mem["growth_requests"] == 3 and abs(mem["growth_mib"]) < limit(mem["peak_rss_mib"])
        assert (
            pre["ttft_ms"] > 0
            and pre["base_ttft_ms"] > 0
            and pre["prompt_tps"] > 0
            and pre["base_prompt_tps"] > 0
        )
    db = str(tmp_path / "history.sqlite")
    changes = subprocess.run(
        [
            sys.executable,
            "-m",
            "specsuite",
            "changes",
            "--db",
            db,
            "--case",
            "tiny-simple-random",
            "--metric",
            "accept_rate",
        ],
        capture_output=True,
        text=True,
        cwd=paths.REPO_ROOT,
        timeout=120,
    )
    lines = changes.stdout.splitlines()
    assert "-14.3 %" in lines[3] and "b2b2b2b" in lines[3], changes.stdout
    across = (
        "  configuration across it: default of --spec-draft-p-min: 0.75 -> 0.00 between a1a1a1a and b2b2b2b"
    )
    assert lines[4] == across


def test_a_longer_draft_default_turns_the_defaults_cases_red(tmp_path: Path, models: Path) -> None:
    """llama.cpp #22673: MTP 66 -> 32 tok/s at the new default draft length. The cases that pin n_max do not
    see it; the cases that run each method as users get it do."""
    rc, pinned, _ = run_tier(tmp_path, models, real_binary(), ",".join(DEFAULTS), "pinned")
    assert rc == 0, [(r["name"], r["reason"], r["message"]) for r in pinned["cases"].values()]
    longer = wrapper(tmp_path, "c3c3c3c", "--spec-draft-n-max", "8", "8")
    rc, doc, out = run_tier(tmp_path, models, longer, ",".join(DEFAULTS), "longer")
    failed = {n: r["reason"] for n, r in doc["cases"].items() if r["status"] == "failed"}
    # the synthetic DFlash draft's trained block of 4 caps its drafts at 3 whatever the default above it
    assert rc == 1 and failed == {n: "self_test" for n in DEFAULTS if n != "tiny-dflash-defaults"}
    assert doc["cases"]["tiny-simple-defaults"]["drafted"] == 81  # 8,8,8,3 per prompt
    head = (out / "summary.md").read_text().splitlines()
    assert head[2].startswith(f"- **CONFIGURATION CHANGED since {pinned['binary']['commit'][:12]} (run ")
    assert head[2].endswith(
        ": default of --spec-draft-n-max: 3 -> 8; failed under it: all 6 cases but tiny-dflash-defaults**"
    )
