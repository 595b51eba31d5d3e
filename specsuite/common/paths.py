"""Where things live: the repository, the per-user cache, the built binary, the model folder."""

from __future__ import annotations

import os
from pathlib import Path

from specsuite.common import settings

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELS_LOCK = REPO_ROOT / "models.lock"
CASES_FILE = REPO_ROOT / "cases.toml"
LLAMA_PIN = REPO_ROOT / "llama.cpp.pin.toml"
BUILD_DIR = REPO_ROOT / "build"
RESULTS_DIR = REPO_ROOT / "results"


def cache_dir() -> Path:
    """Per-user cache: ``SPEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/specsuite``, else ``~/.cache/specsuite``."""
    if env := settings.load().cache_dir:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "specsuite"


def model_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Model folder: an explicit ``--model-dir``, else ``SPEC_MODEL_DIR``, else ``SPEC_METHOD_MODEL_DIR``
    (upstream's name for it), else ``<cache>/models``."""
    if override:
        return Path(override).expanduser()
    s = settings.load()
    if env := s.model_dir or s.method_model_dir:
        return Path(env).expanduser()
    return cache_dir() / "models"


def server_binary() -> Path:
    """The ``llama-server`` under test: ``LLAMA_SERVER_BIN_PATH`` (as upstream), else ``build/bin``."""
    if env := os.environ.get("LLAMA_SERVER_BIN_PATH"):
        return Path(env).expanduser()
    return BUILD_DIR / "bin" / "llama-server"


def build_info_path() -> Path:
    return BUILD_DIR / "build-info.json"
