"""Every module of the package imports on this interpreter: the check the other supported Pythons run
before their unit tests (syntax, typing forms and standard-library names differ between 3.10 and 3.13)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import specsuite

MODULES = sorted(m.name for m in pkgutil.walk_packages(specsuite.__path__, "specsuite."))


def test_the_package_has_its_rooms() -> None:
    assert {"specsuite.cli", "specsuite.measure.runner", "specsuite.history.changes"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__name__ == name
