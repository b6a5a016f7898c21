"""US Census (1990) name frequencies, as the ``names`` package ships them: what names look
like, for the name dictionaries of ``detect``, name canaries and the audit's name guesses."""

from __future__ import annotations

import functools
from pathlib import Path

from ..errors import ConfigError

__all__ = ["CENSUS_FILES", "census_frequencies"]

CENSUS_FILES = ("dist.male.first", "dist.female.first", "dist.all.last")
"""The census files: male and female first names, surnames."""


@functools.cache
def census_frequencies(fname: str) -> dict[str, float]:
    """One of the ``names`` package's US Census (1990) files — ``dist.male.first``,
    ``dist.female.first`` or ``dist.all.last`` — as upper-case name -> frequency (per cent),
    names of two letters or more."""
    if fname not in CENSUS_FILES:
        raise ConfigError(f"no census name file {fname!r}; the files are {CENSUS_FILES}")
    try:
        import names
    except ImportError:  # pragma: no cover - a dependency
        raise ConfigError(
            "the name dictionaries need the `names` package: pip install names"
        ) from None
    out: dict[str, float] = {}
    path = Path(names.__file__).parent / fname
    for line in path.read_text(encoding="ascii").splitlines():
        fields = line.split()
        if len(fields) >= 2 and len(fields[0]) >= 2:
            out[fields[0]] = float(fields[1])
    return out
