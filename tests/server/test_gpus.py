"""specsuite.server.gpus: the GPUs of a CUDA build (a fake nvidia-smi on PATH) and ``--gpus`` selections."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakellama import fake_nvidia_smi, gpu_devices

from specsuite.common.errors import UserError
from specsuite.server.gpus import Gpu, GpuList, available, parse_list_devices, parse_smi, select
from specsuite.server.probe import Capabilities, parse_devices

H200 = "NVIDIA H200"


def _caps(backend: str, names: list[str]) -> Capabilities:
    _, lines = parse_devices(gpu_devices(names))
    return Capabilities("llama-server", "v", "abc1234", frozenset(), backend=backend, devices=lines)


@pytest.fixture
def four(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "smi"
    fake_nvidia_smi(bin_dir, [H200, H200, "NVIDIA H100 80GB HBM3", H200])
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return bin_dir


def test_nvidia_smi_rows() -> None:
    text = "0, NVIDIA H200, 143771, GPU-aaaa\n1, NVIDIA H100 80GB HBM3, 81559, GPU-bbbb\n\nNo devices\n"
    assert parse_smi(text) == [
        Gpu("0", H200, 143771, "GPU-aaaa"),
        Gpu("1", "NVIDIA H100 80GB HBM3", 81559, "GPU-bbbb"),
    ]
    assert Gpu("0", H200, 143771).describe() == "0 NVIDIA H200 (143771 MiB)"


def test_without_nvidia_smi_the_binarys_own_list_in_cuda_order() -> None:
    lines = ("CUDA0: NVIDIA H200 (143771 MiB, 142000 MiB free)", "CUDA1: NVIDIA GB10 (unknown)")
    assert parse_list_devices(lines) == [Gpu("0", H200, 143771), Gpu("1", "NVIDIA GB10", None)]


def test_a_cuda_build_sees_nvidia_smis_gpus_numbered_as_nvidia_smi_does(four: Path) -> None:
    found = available(_caps("cuda", [H200] * 4))
    assert [g.id for g in found.gpus] == ["0", "1", "2", "3"] and found.gpus[2].name.startswith("NVIDIA H100")
    assert found.pci_order  # the server must number them as nvidia-smi does
    assert found.visible(found.gpus[1:3]) == {
        "CUDA_VISIBLE_DEVICES": "1,2",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }


def test_other_builds_and_a_cuda_build_without_a_gpu_have_none(four: Path) -> None:
    assert available(_caps("cpu", [])).gpus == ()
    assert available(_caps("vulkan", [H200])).gpus == ()
    assert available(_caps("cuda", [])).gpus == ()


def test_an_outer_cuda_visible_devices_limits_the_list(four: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-00000001-fake")
    assert [g.id for g in available(_caps("cuda", [H200] * 4)).gpus] == ["3", "1"]


def test_no_nvidia_smi_falls_back_to_list_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    found = available(_caps("cuda", [H200, H200]))
    assert [g.describe() for g in found.gpus] == ["0 NVIDIA H200 (143771 MiB)", "1 NVIDIA H200 (143771 MiB)"]
    assert not found.pci_order and found.visible(found.gpus[:1]) == {"CUDA_VISIBLE_DEVICES": "0"}


FOUR = GpuList(tuple(Gpu(str(i), H200, 143771, f"GPU-{i}") for i in range(4)), pci_order=True)


@pytest.mark.parametrize(
    ("spec", "ids"),
    [
        (None, "0123"),
        ("all", "0123"),
        ("2", "01"),
        ("4", "0123"),
        ("0,2", "02"),
        ("3,", "3"),
        ("GPU-1,0", "10"),
    ],
)
def test_select(spec: str | None, ids: str) -> None:
    assert "".join(g.id for g in select(spec, FOUR).gpus) == ids


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("5", "--gpus 5: this machine has 4 GPU(s) (0, 1, 2, 3); give 1 to 4"),
        ("0", "--gpus 0: this machine has 4 GPU(s)"),
        ("0,7", "--gpus 0,7: 7 is not a GPU of this machine"),
        ("1,1", "--gpus 1,1: 1, 1 is not a GPU of this machine, or is named twice"),
        ("some", "--gpus some: some is not a GPU of this machine"),
    ],
)
def test_a_bad_selection_is_one_line(spec: str, says: str) -> None:
    with pytest.raises(UserError) as err:
        select(spec, FOUR)
    assert str(err.value).startswith(says) and "\n" not in str(err.value)
