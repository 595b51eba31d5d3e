"""Where things live: the data files, the per-user cache, the built binary, the model folder, results."""

from __future__ import annotations

import os
from pathlib import Path

from specsuite.common import settings

_PACKAGE = Path(__file__).resolve().parents[1]
REPO_ROOT = _PACKAGE.parent  # the checkout, when specsuite runs from one (an editable install)
# From a checkout the data files are the repository's own; an installed wheel carries copies in
# specsuite/data, and builds and results go to the current folder.
IN_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "cases.toml").is_file()
DATA_DIR = REPO_ROOT if IN_CHECKOUT else _PACKAGE / "data"
MODELS_LOCK = DATA_DIR / "models.lock"
CASES_FILE = DATA_DIR / "cases.toml"
LLAMA_PIN = DATA_DIR / "llama.cpp.pin.toml"
WORK_DIR = REPO_ROOT if IN_CHECKOUT else Path.cwd()
BUILD_DIR = WORK_DIR / "build"
RESULTS_DIR = WORK_DIR / "results"


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
