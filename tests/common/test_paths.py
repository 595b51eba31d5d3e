"""Where things live: the cache, the model folder (with upstream's variable name), the binary."""

from __future__ import annotations

from pathlib import Path

from specsuite.common import paths


def test_model_dir_order(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SPEC_MODEL_DIR", raising=False)
    monkeypatch.delenv("SPEC_METHOD_MODEL_DIR", raising=False)
    assert paths.model_dir() == tmp_path / "cache" / "models"
    monkeypatch.setenv("SPEC_METHOD_MODEL_DIR", str(tmp_path / "upstream"))  # upstream's name
    assert paths.model_dir() == tmp_path / "upstream"
    monkeypatch.setenv("SPEC_MODEL_DIR", str(tmp_path / "ours"))
    assert paths.model_dir() == tmp_path / "ours"
    assert paths.model_dir(tmp_path / "flag") == tmp_path / "flag"


def test_server_binary_default_and_override(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LLAMA_SERVER_BIN_PATH", raising=False)
    assert paths.server_binary() == paths.REPO_ROOT / "build" / "bin" / "llama-server"
    monkeypatch.setenv("LLAMA_SERVER_BIN_PATH", str(tmp_path / "x"))
    assert paths.server_binary() == tmp_path / "x"
