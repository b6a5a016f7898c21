"""Optional dependencies are imported in one place, and a missing one says what to install."""

from __future__ import annotations

import importlib

import pytest

from phisieve import dependencies
from phisieve.errors import MissingDependencyError, PhisieveError


def test_require_returns_the_module() -> None:
    assert dependencies.require("opacus.accountants").__name__ == "opacus.accountants"


def test_a_missing_package_names_the_package_and_its_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(name: str) -> None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(MissingDependencyError) as err:
        dependencies.require("presidio_analyzer")
    assert isinstance(err.value, PhisieveError) and isinstance(err.value, ImportError)
    assert str(err.value) == (
        "this feature needs the optional package 'presidio-analyzer': pip install 'phisieve[ner]'"
    )


def test_a_broken_installed_package_is_not_reported_as_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(name: str) -> None:
        raise ModuleNotFoundError("No module named 'numpy'", name="numpy")

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError) as err:
        dependencies.require("torch")
    assert not isinstance(err.value, MissingDependencyError)


def test_a_required_dependency_is_not_optional() -> None:
    with pytest.raises(KeyError):
        dependencies.require("pyarrow")
