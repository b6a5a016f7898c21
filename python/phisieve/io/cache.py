"""A per-user cache of tables that phisieve derives from installed packages (never from notes).

Building the ``lists`` recognizer's dictionaries from the ``names``, ``zipcodes``, ``wordfreq``
and ``english-words`` packages takes seconds, and every process that detects (each worker of
``--workers N``) builds them again. :func:`tables` keeps what a build gave as Arrow IPC files,
keyed by everything the build read (:func:`cache_key`: the packages' versions, phisieve's own
source), so that the next process reads them in a fraction of a second.

Where: ``$PHISIEVE_CACHE_DIR`` when set (empty, ``0`` or ``off``: no cache), else
``$XDG_CACHE_HOME/phisieve``, else ``~/.cache/phisieve``. A folder that cannot be written only
costs the build; an entry that cannot be read is built again. Entries are written to a
temporary folder and renamed into place whole, so processes that build at once never read a
half-written one; the temporary folder of a process killed while writing is removed by the
next write, once it is :data:`STALE_SECONDS` old.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

__all__ = ["cache_dir", "cache_key", "tables"]

ENV = "PHISIEVE_CACHE_DIR"
"""The variable that moves the cache (or turns it off)."""

MANIFEST = "tables.txt"
"""An entry's list of its tables, written last: an entry without it is incomplete."""


def cache_dir() -> Path | None:
    """The cache's folder (module docstring), or ``None`` when the cache is off."""
    given = os.environ.get(ENV)
    if given is not None:
        return None if given.strip().lower() in ("", "0", "off", "none") else Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "phisieve"


def cache_key(packages: Iterable[str], files: Iterable[Path | str], *extra: str) -> str:
    """A digest of what a build reads: the installed version of each of ``packages`` (absent:
    ``-``), the bytes of ``files`` (the code that builds) and ``extra`` strings."""
    h = hashlib.blake2b(digest_size=10)
    for name in packages:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "-"
        h.update(f"{name}={version}\n".encode())
    for f in files:
        h.update(Path(f).read_bytes())
        h.update(b"\0")
    for e in extra:
        h.update(e.encode() + b"\0")
    return h.hexdigest()


def _read(folder: Path) -> dict[str, pl.DataFrame] | None:
    import polars as pl

    try:
        names = (folder / MANIFEST).read_text(encoding="utf-8").split()
        # Read whole, not memory-mapped: the entry may be replaced while this process runs.
        return {n: pl.read_ipc(io.BytesIO((folder / f"{n}.arrow").read_bytes())) for n in names}
    except FileNotFoundError:
        if folder.exists():  # no manifest: never complete (entries are renamed in whole)
            shutil.rmtree(folder, ignore_errors=True)
        return None
    except (OSError, pl.exceptions.PolarsError, ValueError):
        shutil.rmtree(folder, ignore_errors=True)  # unreadable: built again below
        return None


STALE_SECONDS = 600.0
"""A temporary entry folder older than this was left by a process that died while writing."""


def _write(folder: Path, built: dict[str, pl.DataFrame]) -> None:
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    except OSError:
        return  # a folder that cannot be written: no cache
    now = time.time()
    for left in folder.parent.glob(".*-*"):  # killed writers' (a live one's is younger)
        with contextlib.suppress(OSError):
            if left != tmp and now - left.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(left, ignore_errors=True)
    try:
        for name, frame in built.items():
            frame.write_ipc(tmp / f"{name}.arrow", compression="uncompressed")
        (tmp / MANIFEST).write_text("\n".join(built) + "\n", encoding="utf-8")
        tmp.rename(folder)  # whole, or not at all (another process may have won)
    except OSError:
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tables(
    name: str, key: str, build: Callable[[], dict[str, pl.DataFrame]]
) -> dict[str, pl.DataFrame]:
    """The tables ``build()`` gives, from the cache entry ``name-key`` when there is one,
    else built and kept there (module docstring). Table names must be plain words."""
    root = cache_dir()
    if root is None:
        return build()
    folder = root / f"{name}-{key}"
    found = _read(folder)
    if found is not None:
        return found
    built = build()
    _write(folder, built)
    return built
