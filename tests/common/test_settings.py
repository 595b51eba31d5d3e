"""The one options model: every SPEC_* setting read and written in one place, one clear line when bad."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specsuite.common import settings
from specsuite.common.errors import UserError

README = Path(__file__).resolve().parents[2] / "README.md"


def test_defaults_without_any_variable() -> None:
    s = settings.load({})
    # repeat None: each tier's own rounds (cases.schema.TIER_REPEAT)
    assert (s.strict, s.repeat, s.allow_cpu, s.no_history, s.rtol) == (True, None, False, False, 0.05)
    assert s.run_options() == {
        "strict": True, "repeat": None, "allow_cpu": False, "history": True, "rtol": 0.05, "block_rtol": 0.2,
        "drift_window": 10, "speed": True,
    }  # fmt: skip
    assert (s.gpus, s.workers, s.shard, s.plan) == (None, 1, None, None)


def test_workers_on_a_cpu_build_measure_no_speed() -> None:
    s = settings.load({"SPEC_WORKERS": "2", "SPEC_GPUS": "0,2", "SPEC_SHARD": "2/3"})
    assert (s.workers, s.gpus, s.shard, s.run_options()["speed"]) == (2, "0,2", "2/3", False)
    assert settings.load(s.to_env()) == s


@pytest.mark.parametrize(
    ("text", "value"), [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False)]
)
def test_flags_take_the_usual_spellings(text: str, value: bool) -> None:
    assert settings.load({"SPEC_ALLOW_CPU": text}).allow_cpu is value


def test_to_env_round_trips_every_setting() -> None:
    env = {
        "SPEC_REPEAT": "4",
        "SPEC_STRICT": "0",
        "SPEC_RTOL": "0.1",
        "SPEC_MODEL_DIR": "/m",
        "N_GPU_LAYERS": "0",
    }
    s = settings.load(env)
    assert settings.load(s.to_env()) == s
    assert s.to_env()["SPEC_STRICT"] == "0" and s.to_env()["SPEC_REPEAT"] == "4"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SPEC_REPEAT", "x", "must be a whole number from 1 to 100"),
        ("SPEC_REPEAT", "101", "must be a whole number from 1 to 100;"),
        ("SPEC_REPEAT", "1e3", "must be a whole number"),
        ("SPEC_REPEAT", "0", "must be a whole number"),
        ("SPEC_RTOL", "1", "must be a number between 0 and 1"),
        ("SPEC_RTOL", "-0.1", "must be a number between 0 and 1"),
        ("SPEC_START_TIMEOUT_S", "inf", "must be a finite number > 0"),
        ("SPEC_HISTORY_TIMEOUT_S", "nan", "must be a finite number > 0"),
        ("N_GPU_LAYERS", "-1", "must be a whole number from 0"),
        ("SPEC_STRICT", "maybe", "use 1 or 0"),
        ("SPEC_WORKERS", "0", "must be a whole number from 1 to 64"),
        ("SPEC_WORKERS", "65", "must be a whole number from 1 to 64"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(UserError) as exc:
        settings.load({name: value})
    text = str(exc.value)
    assert text.startswith(f"{name}={value!r}") and message in text and "\n" not in text


def test_blank_means_unset() -> None:
    assert settings.load({"SPEC_REPEAT": "  "}).repeat is None


def test_the_readme_documents_every_variable() -> None:
    table = README.read_text(encoding="utf-8")
    missing = [v for v in settings.documented() if not re.search(rf"`{v}`", table)]
    assert missing == []
