"""specsuite.server.device: what a run measures on, and the class that history compares like with like."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from specsuite.server.device import cpu_info, device_info, slug, vector_isa
from specsuite.server.probe import Capabilities

XEON = """processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Processor
flags		: fpu sse2 avx avx2 avx512f avx512bw amx_tile

processor	: 1
model name	: another one
flags		: fpu
"""
GRACE = """processor	: 0
BogoMIPS	: 2000.00
Features	: fp asimd sve2 bf16
CPU implementer	: 0x41
"""


def test_cpu_info_reads_the_first_processor(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text(XEON)
    model, flags = cpu_info(str(tmp_path / "cpuinfo"))
    assert model == "Intel(R) Xeon(R) Processor" and {"avx2", "avx512f", "amx_tile"} <= flags
    assert "another" not in (model or "")


def test_arm_cpuinfo_has_features_and_no_model_name(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text(GRACE)
    model, flags = cpu_info(str(tmp_path / "cpuinfo"))
    assert model is None and "sve2" in flags and vector_isa(flags) is None


def test_no_cpuinfo(tmp_path: Path) -> None:
    assert cpu_info(str(tmp_path / "absent")) == (None, set())


@pytest.mark.parametrize(
    ("flags", "isa"), [({"avx2", "avx512f"}, "avx512"), ({"avx", "avx2"}, "avx2"), ({"sse2"}, None)]
)
def test_vector_isa(flags: set[str], isa: str | None) -> None:
    assert vector_isa(flags) == isa


def test_a_cpu_build_is_named_by_its_model_and_classed_by_machine_and_isa() -> None:
    caps = Capabilities(
        "/x/llama-server", "version: 1 (commit abc1234)", "abc1234", frozenset(), backend="cpu"
    )
    model, flags = cpu_info()
    isa = vector_isa(flags)
    assert device_info(caps) == {
        "name": model or "cpu",
        "class": f"cpu-{slug(platform.machine())}" + (f"-{isa}" if isa else ""),
        "driver": None,
        "cuda": None,
    }
