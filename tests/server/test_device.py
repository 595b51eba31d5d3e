"""specsuite.server.device: what a run measures on, and the class that history compares like with like."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from specsuite.server.device import cpu_info, device_info, slug, smi, vector_isa
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


def test_nvidia_smi_gets_no_hub_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever ``nvidia-smi`` comes first on PATH runs without the Hub token, as every child does
    (procs.child_env); the rest of the environment (which GPUs a runner hands the job) still reaches it."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        '#!/bin/sh\necho "token=${HF_TOKEN:-} hub=${HUGGING_FACE_HUB_TOKEN:-}'
        ' gpus=${CUDA_VISIBLE_DEVICES:-}"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_secret")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert smi("--query-gpu=driver_version") == "token= hub= gpus=2"
