"""The suspects' tests: a fake tree maker (tests/suspecttree.py) under the test's folder, and a cache and
model folder of the test's own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import suspecttree

MakeTree = Callable[..., Path]


@pytest.fixture
def make_tree(tmp_path: Path) -> MakeTree:
    """``make_tree(name, changes)``: ``suspecttree.make_tree`` at tmp_path/name."""
    return lambda name, changes=None: suspecttree.make_tree(tmp_path / name, changes)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of the test's own (SPEC_CACHE_DIR), and a model folder with nothing in it."""
    monkeypatch.setenv("SPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPEC_MODEL_DIR", str(tmp_path / "models"))
    return tmp_path / "cache"
