"""What the tests of commands that build and measure in turn share (bisect, bisect over builds, replay):
the synthetic models of the case they run, and an environment of their own: a private cache and history,
the models, no run option or binary inherited from the caller, and the test's folder importable by the
``module:function`` builder the command loads (in its own process too: PYTHONPATH)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CASE = "tiny-simple-random"  # floors: accept_rate >= 0.8271, accept_len >= 3.2444, identical 1.0
MODELS = ["synth-target-llama-random.gguf", "synth-draft-llama-random.gguf"]
UNSET = ("SPEC_STRICT", "SPEC_REPEAT", "SPEC_ALLOW_CPU", "SPEC_NO_HISTORY", "SPEC_RTOL",
         "LLAMA_SERVER_BIN_PATH", "GITHUB_STEP_SUMMARY", "LLAMA_CPP_DIR", "LLAMA_CPP_REF",
         "SPEC_RESULTS_DIR")  # fmt: skip
TESTS = Path(__file__).resolve().parent


def synthetic_models(factory: pytest.TempPathFactory) -> Path:
    """The case's generated models, in a folder of their own (once a test module)."""
    from specsuite.models.fetch import FetchOptions, fetch_models

    folder = factory.mktemp("models")
    fetch_models(FetchOptions(models=MODELS, model_dir=folder, tty=False))
    return folder


def isolate(tmp_path: Path, models: Path, here: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The environment of one test (see the module); ``here``: the folder of the test's builder."""
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPEC_MODEL_DIR", str(models))
    monkeypatch.setenv("SPEC_HISTORY", str(tmp_path / "history.sqlite"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(here), str(TESTS)]))
    monkeypatch.syspath_prepend(str(here))  # in-process steps load the builder too
    for var in UNSET:
        monkeypatch.delenv(var, raising=False)
    return tmp_path
