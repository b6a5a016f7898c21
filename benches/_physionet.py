"""Where the benches find the PhysioNet deid notes: ``$PHISIEVE_TEST_CORPUS``, as the tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def corpus() -> Path:
    """The folder of ``id.text`` and ``id-phi.phrase`` (default
    ``../shared/data/physionet-deid``); exits with a message when it is not there."""
    path = Path(os.environ.get("PHISIEVE_TEST_CORPUS", "../shared/data/physionet-deid"))
    if not (path / "id.text").exists():
        sys.exit(f"PhysioNet corpus not found at {path} (set PHISIEVE_TEST_CORPUS)")
    return path
