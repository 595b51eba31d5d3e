"""pip_download with the real pip, offline: packages come from a local --find-links folder.

The source package has an in-tree build backend with no requirements (pip runs it to read the metadata,
even for a download), which also records the environment pip gives it: the Hub token must not be there.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from specsuite.common.errors import UserError
from specsuite.common.pip import pip_download

BACKEND = """import os


def _record():
    with open(os.environ["SPEC_TEST_RECORD"], "w") as f:
        f.write("\\n".join(sorted(os.environ)))


def get_requires_for_build_wheel(config_settings=None):
    _record()
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _record()
    info = os.path.join(metadata_directory, "srconly-1.0.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\\nName: srconly\\nVersion: 1.0\\n")
    return "srconly-1.0.dist-info"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("pip download never builds the wheel")
"""
PYPROJECT = '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
PKG_INFO = "Metadata-Version: 2.1\nName: srconly\nVersion: 1.0\n"


def _sdist(links: Path) -> Path:
    path = links / "srconly-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in {"pyproject.toml": PYPROJECT, "backend.py": BACKEND, "PKG-INFO": PKG_INFO}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"srconly-1.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _wheel(links: Path) -> Path:
    path = links / "binonly-2.0-py3-none-any.whl"
    info = "binonly-2.0.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("binonly/__init__.py", "")
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: binonly\nVersion: 2.0\n")
        z.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "links"
    folder.mkdir()
    _sdist(folder)
    _wheel(folder)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # real pip, no network
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    monkeypatch.setenv("SPEC_TEST_RECORD", str(tmp_path / "backend-env.txt"))
    return folder


def test_wheels_only(links: Path, tmp_path: Path) -> None:
    got = pip_download(["binonly==2.0"], tmp_path / "dest", binary=True, check="check X")
    assert got == [tmp_path / "dest" / "binonly-2.0-py3-none-any.whl"]
    assert got[0].read_bytes() == (links / got[0].name).read_bytes()
    assert pip_download(["binonly==2.0"], tmp_path / "dest", binary=True, check="check X") == []  # had it


def test_sources_only_and_no_hub_token(links: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_secret2")
    got = pip_download(["srconly==1.0"], tmp_path / "dest", binary=False, check="check X")
    assert [p.name for p in got] == ["srconly-1.0.tar.gz"]
    seen = (tmp_path / "backend-env.txt").read_text().split()
    assert "PATH" in seen and "HF_TOKEN" not in seen and "HUGGING_FACE_HUB_TOKEN" not in seen


@pytest.mark.parametrize(("requirement", "binary"), [("srconly==1.0", True), ("binonly==2.0", False)])
def test_wrong_kind_is_one_clear_error(links: Path, tmp_path: Path, requirement: str, binary: bool) -> None:
    with pytest.raises(UserError) as exc:
        pip_download([requirement], tmp_path / "dest", binary=binary, check="check the names in models.lock")
    msg = str(exc.value)
    assert msg.startswith(f"pip could not download {requirement} (exit 1):\n  ")
    assert f"No matching distribution found for {requirement}" in msg
    assert msg.endswith("\ncheck the names in models.lock") and len(msg.splitlines()) <= 10
