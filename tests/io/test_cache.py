"""phisieve.io.cache: tables built once, read back equal by later processes; a cache that is
off, unwritable, corrupt or half-written costs only the build."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from phisieve.detect.recognizers import dictionaries
from phisieve.io import cache


def frames() -> dict[str, pl.DataFrame]:
    return {
        "a": pl.DataFrame({"w": ["x", "y", None], "n": [1, 2, 3]}),
        "b": pl.DataFrame({"z": [0.5, 1.5]}, schema={"z": pl.Float32}),
    }


class Builds:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> dict[str, pl.DataFrame]:
        self.calls += 1
        return frames()


def same(got: dict[str, pl.DataFrame], want: dict[str, pl.DataFrame]) -> bool:
    return list(got) == list(want) and all(got[k].equals(want[k]) for k in want)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_build_is_kept_and_read_back_equal(root: Path) -> None:
    build = Builds()
    first = cache.tables("t", "k1", build)
    second = cache.tables("t", "k1", build)
    assert build.calls == 1
    assert same(first, frames()) and same(second, frames())
    assert sorted(p.name for p in root.iterdir()) == ["t-k1"]
    assert (root / "t-k1" / cache.MANIFEST).read_text() == "a\nb\n"


def test_another_key_is_another_entry(root: Path) -> None:
    build = Builds()
    cache.tables("t", "k1", build)
    cache.tables("t", "k2", build)
    assert build.calls == 2
    assert sorted(p.name for p in root.iterdir()) == ["t-k1", "t-k2"]


@pytest.mark.parametrize("off", ["", "0", "off", " OFF "])
def test_the_cache_can_be_turned_off(off: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cache.ENV, off)
    assert cache.cache_dir() is None
    build = Builds()
    cache.tables("t", "k", build)
    cache.tables("t", "k", build)
    assert build.calls == 2


def test_the_default_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "phisieve"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_dir() == Path.home() / ".cache" / "phisieve"


def test_an_unwritable_folder_only_costs_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(cache.ENV, str(blocker / "cache"))  # under a file: never a folder
    build = Builds()
    assert same(cache.tables("t", "k", build), frames())
    assert same(cache.tables("t", "k", build), frames())
    assert build.calls == 2


@pytest.mark.parametrize("damage", ["truncate", "garbage", "no_manifest", "missing_table"])
def test_a_damaged_entry_is_built_again(root: Path, damage: str) -> None:
    build = Builds()
    cache.tables("t", "k", build)
    entry = root / "t-k"
    if damage == "truncate":
        data = (entry / "a.arrow").read_bytes()
        (entry / "a.arrow").write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        (entry / "b.arrow").write_bytes(b"\xff\xfe not arrow at all")
    elif damage == "no_manifest":
        (entry / cache.MANIFEST).unlink()
    else:
        (entry / "b.arrow").unlink()
    assert same(cache.tables("t", "k", build), frames())
    assert build.calls == 2
    # ... and kept again, whole.
    assert same(cache.tables("t", "k", build), frames())
    assert build.calls == 2


def test_no_temporary_folder_is_left_behind(root: Path) -> None:
    cache.tables("t", "k", Builds())
    cache.tables("t", "k", Builds())
    assert [p.name for p in root.iterdir()] == ["t-k"]


def test_the_key_changes_with_what_the_build_reads(tmp_path: Path) -> None:
    code = tmp_path / "build.py"
    code.write_text("one")
    k = cache.cache_key(["polars", "no-such-package"], [code], "x")
    assert k == cache.cache_key(["polars", "no-such-package"], [code], "x")
    assert k != cache.cache_key(["polars", "no-such-package"], [code], "y")
    assert k != cache.cache_key(["polars"], [code], "x")
    code.write_text("two")
    assert k != cache.cache_key(["polars", "no-such-package"], [code], "x")


def test_the_lexicon_from_the_cache_is_the_lexicon_built(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In another process (lexicon() is loaded once per process), twice: built, then read.
    script = (
        "import time, polars as pl\n"
        "from phisieve.detect.recognizers import dictionaries as d\n"
        "lex = d.lexicon()\n"
        "for k in ('names', 'places', 'zipf', 'english', 'words'):\n"
        "    getattr(lex, k).write_ipc(f'{k}.arrow')\n"
    )
    outs = []
    for run in ("built", "read"):
        where = root.parent / run
        where.mkdir()
        subprocess.run([sys.executable, "-c", script], cwd=where, check=True,
                       env={**os.environ, cache.ENV: str(root)})  # fmt: skip
        outs.append(where)
    assert len(list(root.iterdir())) == 1
    built = dictionaries._lexicon_tables()
    for k, frame in built.items():
        for where in outs:
            assert pl.read_ipc(where / f"{k}.arrow").equals(frame), (k, where.name)


def test_a_killed_writer_s_temporary_folder_is_removed_once_stale(root: Path) -> None:
    root.mkdir(parents=True)
    stale, fresh = root / ".t-k-dead", root / ".t-k-live"
    for d in (stale, fresh):
        d.mkdir()
        (d / "a.arrow").write_bytes(b"half")
    old = time.time() - cache.STALE_SECONDS - 60
    os.utime(stale, (old, old))
    cache.tables("t", "k", Builds())
    assert sorted(p.name for p in root.iterdir()) == [".t-k-live", "t-k"]
