"""``build/build-info.json``: what the published ``build/bin/llama-server`` is and how it was built.

Keys (docs/DESIGN.md, "build-info.json"): commit, identity (llamacpp.identity: commit, build, tree_sha256,
origin), source, backend, cmake_flags, compiler, nvcc_version, cuda_architectures, build_seconds,
binary_sha256, spec_types (plus build_dir, the CMake folder it came from).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specsuite.common import atomic, paths
from specsuite.common.errors import UserError


def load(path: Path | None = None) -> dict[str, Any] | None:
    """The build info, or None when no build has been published."""
    path = path or paths.build_info_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is unreadable ({exc}); rebuild with `specsuite build`") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a JSON object; rebuild with `specsuite build`")
    return data


def for_binary(binary: Path, sha256: str) -> dict[str, Any] | None:
    """The build-info.json that describes this binary (its ``binary_sha256``): the suite's own
    (build/build-info.json), else the one beside the binary's ``bin/`` folder (a build used in place: a
    bisect step's, a replay's). None when neither does."""
    for path in (paths.build_info_path(), Path(binary).resolve().parent.parent / "build-info.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("binary_sha256") == sha256:
            return data
    return None


def write(info: dict[str, Any], path: Path | None = None) -> None:
    """Write atomically: readers see the previous file or the complete new one, never half of it."""
    atomic.write_json(path or paths.build_info_path(), info)
