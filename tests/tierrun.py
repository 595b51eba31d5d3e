"""``specsuite run-tier`` as a user runs it, in a process of its own, on a given binary and model folder, into
a history and results folder of the test's own (never a user's): the tests of real-build runs share it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from specsuite.common import paths

# what the calling environment may set that would change the run (the tests set what they need)
DROPPED = ("SPEC_METHODS", "SPEC_STRICT", "SPEC_REPEAT", "SPEC_NO_HISTORY", "SPEC_RTOL", "SPEC_WORKERS",
           "SPEC_GPUS", "GITHUB_STEP_SUMMARY")  # fmt: skip


def run_tier(
    root: Path, models: Path, exe: Path, selector: str, name: str = "results"
) -> tuple[int, dict[str, Any], Path]:
    """(exit code, results.json, the results folder ``root/name``) of one run; the history is
    ``root/history.sqlite``, so the runs of one test judge each other."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    env.update(LLAMA_SERVER_BIN_PATH=str(exe), SPEC_MODEL_DIR=str(models), SPEC_CACHE_DIR=str(root / "cache"),
               SPEC_HISTORY=str(root / "history.sqlite"), SPEC_RESULTS_DIR=str(root / name),
               OMP_WAIT_POLICY="PASSIVE")  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "specsuite", "run-tier", selector], cwd=paths.REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert (root / name / "results.json").is_file(), proc.stdout + proc.stderr
    return proc.returncode, json.loads((root / name / "results.json").read_text()), root / name
