"""Shared fixtures: the real PhysioNet corpus (required) and small corpora."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def corpus_dir() -> Path:
    """The PhysioNet deid corpus: $PHISIEVE_TEST_CORPUS or ../shared/data/physionet-deid."""
    path = Path(os.environ.get("PHISIEVE_TEST_CORPUS", "../shared/data/physionet-deid"))
    return path if path.is_absolute() else (REPO / path).resolve()


@pytest.fixture(scope="session")
def physionet_dir() -> Path:
    path = corpus_dir()
    if not (path / "id.text").is_file():
        pytest.fail(f"the PhysioNet test corpus is missing at {path} (set PHISIEVE_TEST_CORPUS)")
    return path


@pytest.fixture(scope="session")
def physionet_docs(physionet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus ingested into a documents dataset."""
    from phisieve import ingest

    out = tmp_path_factory.mktemp("physionet") / "docs"
    ingest(physionet_dir / "id.text", out, "physionet")
    return out
