"""Pipeline files: a TOML file that names stages with their inputs, output and options.

::

    [pipeline]
    workdir = "../demo_out"        # where relative paths point (relative to this file)

    [synth]                        # a stage: the table's name, or `stage = "..."`
    out = "notes"
    patients = 500

    [encode_members]
    stage = "encode"
    docs = "splits/members"        # inputs and options by their command-line names
    tokenizer = "tokenizer"
    max-len = 128
    out = "enc_members"

Every key is checked before anything runs (:func:`load_pipeline`): an unknown stage or key,
a value of the wrong type, a missing input (one that no stage writes and that does not
exist), two stages writing one output, or a cycle is a :class:`~phisieve.errors.ConfigError`
that names the file, the stage and the key. Stages run in the order their inputs need (a
topological order; the file's order among independent stages).
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from ..errors import ConfigError
from .options import Param, coerce, params
from .stage import DATASETS, Input, Stage

RESERVED = ("stage", "out")
"""Keys of a stage table that are neither inputs nor options."""


@dataclass
class Step:
    """One stage of a pipeline, resolved: its table name, stage, inputs and output."""

    name: str
    stage: Stage
    inputs: dict[str, Any]
    """Input name -> absolute path (a list of paths for a many-valued input)."""
    out: Path
    needs: list[str] = field(default_factory=list)
    """The steps whose outputs this one reads."""

    @property
    def kind(self) -> str:
        return self.stage.name

    def input_paths(self) -> list[tuple[str, Path]]:
        """(input name, path) of every input given."""
        out = []
        for name, value in self.inputs.items():
            for p in value if isinstance(value, list) else [value]:
                out.append((name, p))
        return out

    def writes(self, path: Path) -> bool:
        """Whether ``path`` is this step's output or lies inside it (a part of a folder of
        datasets, a file of a model folder)."""
        return path == self.out or self.out in path.parents


@dataclass
class Pipeline:
    """A checked pipeline file: its steps in the order they run."""

    path: Path
    workdir: Path
    steps: list[Step]

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    def select(self, name: str) -> list[Step]:
        """The steps a ``--from``/``--to`` name means: the step of that name, else every step
        of that stage."""
        named = [s for s in self.steps if s.name == name]
        if named:
            return named
        kind = [s for s in self.steps if s.kind == name]
        if kind:
            return kind
        known = [s.name for s in self.steps]
        raise ConfigError(f"no stage {name!r} in {self.path}{_suggest(name, known)}")

    def downstream(self, names: Iterable[str]) -> set[str]:
        """``names`` and every step that reads, directly or not, what they write."""
        out = set(names)
        for s in self.steps:  # steps are in topological order
            if any(n in out for n in s.needs):
                out.add(s.name)
        return out

    def upstream(self, names: Iterable[str]) -> set[str]:
        """``names`` and every step they read from, directly or not."""
        out = set(names)
        for s in reversed(self.steps):
            if s.name in out:
                out.update(s.needs)
        return out


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_override(text: str) -> tuple[str, str, Any]:
    """``STAGE.KEY=VALUE`` (the value read as TOML, else as a string)."""
    target, sep, raw = text.partition("=")
    name, dot, key = target.strip().partition(".")
    if not sep or not dot or not name or not key:
        raise ConfigError(
            f"--set takes STAGE.KEY=VALUE, e.g. train_model.max-steps=50; not {text!r}"
        )
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return name, key.strip(), value


def load_pipeline(
    path: str | Path,
    catalog: Mapping[str, type[Stage]],
    *,
    workdir: str | Path | None = None,
    overrides: Iterable[str] = (),
) -> Pipeline:
    """Read and check a pipeline file.

    Parameters
    ----------
    path
        The TOML file.
    catalog
        Every stage by name (:data:`phisieve.catalog.STAGES`).
    workdir
        Where relative paths point, overriding the file's ``[pipeline] workdir`` (relative to
        the current folder). Default: the file's ``workdir`` relative to the file's folder,
        else the file's folder.
    overrides
        ``STAGE.KEY=VALUE`` settings applied over the file (``--set``).

    Raises
    ------
    ConfigError
        On anything :mod:`phisieve.pipeline.config` checks, naming the file, stage and key.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read the pipeline file {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    where = str(path)
    settings = data.pop("pipeline", {})
    if not isinstance(settings, dict):
        raise ConfigError(f"{where}: [pipeline] must be a table")
    if unknown := sorted(set(settings) - {"workdir"}):
        raise ConfigError(f"{where}: [pipeline] {unknown[0]}: unknown key (it takes workdir)")
    for name, key, value in (parse_override(o) for o in overrides):
        table = data.get(name)
        if not isinstance(table, dict):
            raise ConfigError(f"--set {name}.{key}: no stage {name!r} in {where}")
        table[key] = value
    if workdir is not None:
        root = Path(_normal(Path(workdir).absolute()))
    else:
        wd = settings.get("workdir", ".")
        if not isinstance(wd, str):
            raise ConfigError(f"{where}: [pipeline] workdir: must be a string")
        root = Path(_normal((path.parent / wd).absolute()))
    steps = []
    for name, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(
                f"{where}: {name!r} is not a stage table (write [{name}] with its keys)"
            )
        steps.append(_step(where, name, table, catalog, root))
    if not steps:
        raise ConfigError(f"{where}: no stages")
    return Pipeline(path, root, _order(where, steps))


def _resolve(root: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return Path(_normal(p if p.is_absolute() else root / p))


def _normal(p: Path) -> str:
    return os.path.normpath(p)


def _step(
    where: str, name: str, table: dict[str, Any], catalog: Mapping[str, type[Stage]], root: Path
) -> Step:
    here = f"{where}: [{name}]"
    kind = table.get("stage", name)
    if not isinstance(kind, str):
        raise ConfigError(f"{here} stage: must be a string")
    cls = catalog.get(kind)
    if cls is None:
        hint = _suggest(kind, catalog)
        what = f"stage = {kind!r}" if "stage" in table else "the table name"
        raise ConfigError(f"{here}: {what} is no stage{hint}; stages: {', '.join(sorted(catalog))}")
    ports: dict[str, Input] = {p.name: p for p in cls.inputs}
    opts: dict[str, Param] = {p.key: p for p in params(cls.Options)}
    known = [*RESERVED, *ports, *opts]
    if "out" not in table:
        raise ConfigError(f"{here} out: missing (the output path)")
    inputs: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key == "stage":
            continue
        if key == "out":
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{here} out: must be a path (string)")
            continue
        if key in ports:
            port = ports[key]
            if port.many:
                items = value if isinstance(value, list) else [value]
                if not items or not all(isinstance(v, str) and v for v in items):
                    raise ConfigError(f"{here} {key}: must be a list of paths (strings)")
                inputs[key] = [_resolve(root, v) for v in items]
            else:
                if not isinstance(value, str) or not value:
                    raise ConfigError(f"{here} {key}: must be a path (string), not {value!r}")
                inputs[key] = _resolve(root, value)
            continue
        if key in opts:
            values[opts[key].attr] = coerce(opts[key], value, here)
            continue
        raise ConfigError(f"{here} {key}: unknown key{_suggest(key, known)}")
    for port in cls.inputs:
        if port.required and port.name not in inputs:
            raise ConfigError(f"{here} {port.name}: missing (the input: {port.help})")
    try:
        stage = cls(**values)
    except ConfigError as e:
        raise ConfigError(f"{here}: {e}") from None
    return Step(name, stage, inputs, _resolve(root, table["out"]))


def _order(where: str, steps: list[Step]) -> list[Step]:
    """``steps`` with their ``needs`` filled, in a topological order (file order among
    independent steps); a missing input, two writers of one output or a cycle is refused."""
    outs: dict[Path, Step] = {}
    for s in steps:
        if s.out in outs:
            raise ConfigError(f"{where}: [{outs[s.out].name}] and [{s.name}] both write {s.out}")
        outs[s.out] = s
    for s in steps:
        if s.stage.output_kind() == DATASETS:
            continue
        for other in steps:
            if other is not s and s.out in other.out.parents:
                raise ConfigError(
                    f"{where}: [{other.name}] writes {other.out}, inside [{s.name}]'s output"
                )
    for s in steps:
        for key, p in s.input_paths():
            writers = [o for o in steps if o.writes(p)]
            if not writers:
                if not p.exists():
                    raise ConfigError(
                        f"{where}: [{s.name}] {key}: {p} does not exist and no stage writes it"
                    )
                continue
            w = writers[0]
            if w is s:
                raise ConfigError(f"{where}: [{s.name}] {key}: reads its own output {p}")
            if w.name not in s.needs:
                s.needs.append(w.name)
    order: list[Step] = []
    state: dict[str, int] = {}  # 1: being visited, 2: done
    by_name = {s.name: s for s in steps}

    def visit(s: Step, trail: list[str]) -> None:
        if state.get(s.name) == 2:
            return
        if state.get(s.name) == 1:
            cycle = [*trail[trail.index(s.name) :], s.name]
            raise ConfigError(f"{where}: the stages form a cycle: {' -> '.join(cycle)}")
        state[s.name] = 1
        for n in s.needs:
            visit(by_name[n], [*trail, s.name])
        state[s.name] = 2
        order.append(s)

    for s in steps:
        visit(s, [])
    return order
