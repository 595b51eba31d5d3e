"""The GPUs a CUDA build can run on, and the ones a run uses (``--gpus all|N|0,2,5``, ``SPEC_GPUS``).

The list comes from ``nvidia-smi`` (index, name, memory, UUID): its indices are the numbers people know,
and a server told ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` numbers GPUs the same way, so ``CUDA_VISIBLE_DEVICES=2``
is the GPU nvidia-smi calls 2. Without nvidia-smi, the binary's own ``--list-devices`` (``CUDA0: NVIDIA
H200 (143000 MiB, 142000 MiB free)``) gives the list in CUDA's own order, which the servers then keep. An
outer ``CUDA_VISIBLE_DEVICES`` (a runner handing this job some of its GPUs) limits the list to those.
Only CUDA builds are split: other backends name their devices with other variables and run on one worker.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass

from specsuite.common.errors import UserError
from specsuite.server.device import gpu_device_name, smi
from specsuite.server.probe import Capabilities

QUERY = ("--query-gpu=index,name,memory.total,uuid", "--format=csv,noheader,nounits")
_MIB = re.compile(r"\((\d+) MiB")


@dataclass(frozen=True)
class Gpu:
    id: str  # what CUDA_VISIBLE_DEVICES takes: nvidia-smi's index, or the --list-devices position
    name: str
    memory_mib: int | None = None
    uuid: str | None = None

    def describe(self) -> str:
        memory = f" ({self.memory_mib} MiB)" if self.memory_mib else ""
        return f"{self.id} {self.name}{memory}"


@dataclass(frozen=True)
class GpuList:
    gpus: tuple[Gpu, ...]
    pci_order: bool  # ids are nvidia-smi's (PCI bus order): servers need CUDA_DEVICE_ORDER=PCI_BUS_ID

    def visible(self, gpus: tuple[Gpu, ...]) -> dict[str, str]:
        """The environment that shows a server exactly ``gpus``."""
        env = {"CUDA_VISIBLE_DEVICES": ",".join(g.id for g in gpus)}
        return {**env, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if self.pci_order else env


def parse_smi(text: str) -> list[Gpu]:
    """``nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits`` rows."""
    out = []
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(row) >= 2 and row[0].strip().isdigit():
            memory = row[2].strip() if len(row) > 2 else ""
            uuid = row[3].strip() if len(row) > 3 else ""
            out.append(
                Gpu(row[0].strip(), row[1].strip(), int(memory) if memory.isdigit() else None, uuid or None)
            )
    return out


def parse_list_devices(lines: tuple[str, ...]) -> list[Gpu]:
    """The probe's ``--list-devices`` GPU lines, numbered in their (CUDA's) order."""
    out = []
    for i, line in enumerate(lines):
        m = _MIB.search(line)
        out.append(Gpu(str(i), gpu_device_name(line), int(m.group(1)) if m else None))
    return out


def _outer(gpus: list[Gpu], outer: str | None) -> list[Gpu]:
    """The GPUs an outer CUDA_VISIBLE_DEVICES leaves (by index or UUID), in its order."""
    if outer is None:
        return gpus
    named = [x.strip() for x in outer.split(",") if x.strip()]
    return [g for want in named for g in gpus if want in (g.id, g.uuid)]


def available(caps: Capabilities) -> GpuList:
    """Every GPU this CUDA build can use here; an empty list for any other build."""
    if caps.backend != "cuda" or not caps.gpus:
        return GpuList((), pci_order=False)
    found = parse_smi(smi(*QUERY) or "")
    pci = bool(found)
    gpus = found or parse_list_devices(caps.gpus)
    return GpuList(tuple(_outer(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))), pci_order=pci)


def select(spec: str | None, found: GpuList) -> GpuList:
    """``all`` (or None), ``N`` (the first N), or a comma list of ids or UUIDs: ``0,2,5`` (one: ``2,``)."""
    gpus, text = found.gpus, (spec or "all").strip()
    if text == "all":
        return found
    valid = ", ".join(g.id for g in gpus) or "none"
    if text.isdigit():
        n = int(text)
        if not 1 <= n <= len(gpus):
            raise UserError(
                f"--gpus {text}: this machine has {len(gpus)} GPU(s) ({valid}); give 1 to "
                f"{len(gpus)}, a list such as 0,2 or all"
            )
        return GpuList(gpus[:n], found.pci_order)
    wanted = [w.strip() for w in text.split(",") if w.strip()]
    chosen = [next((g for g in gpus if w in (g.id, g.uuid)), None) for w in wanted]
    if not wanted or None in chosen or len(set(wanted)) != len(wanted):
        bad = [w for w, g in zip(wanted, chosen, strict=True) if g is None] or wanted
        raise UserError(
            f"--gpus {text}: {', '.join(bad) or 'nothing'} is not a GPU of this machine, or is "
            f"named twice (GPUs: {valid}); give all, a count or a list such as 0,2"
        )
    return GpuList(tuple(g for g in chosen if g is not None), found.pci_order)
