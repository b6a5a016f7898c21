"""The command line answers at once: ``--help`` and option parsing import the stages'
declarations (``*/stage.py``) and nothing that a stage needs only to run.

Speed itself is measured by ``benches/startup.py``; these tests pin what makes it fast: which
modules a fresh interpreter has imported once it has printed the help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from phisieve.catalog import PATHS, STAGES

HEAVY = (
    "pyarrow",
    "polars",
    "numpy",
    "pandas",
    "scipy",
    "sklearn",
    "torch",
    "transformers",
    "tokenizers",
    "faker",
    "matplotlib",
    "ray",
    "pycrfsuite",
    "spacy",
    "presidio_analyzer",
    "stanza",
    "opacus",
)
"""Libraries a stage imports when it runs, never for ``--help``."""


def _imported_after(code: str) -> list[str]:
    """The heavy top-level modules a fresh interpreter holds after running ``code``."""
    probe = (
        "import sys, json\n"
        f"{code}\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


HELP = (
    "from phisieve.cli import main\n"
    "try:\n"
    "    main({argv!r})\n"
    "except SystemExit as e:\n"
    "    assert e.code in (0, None), e.code\n"
)


@pytest.mark.parametrize(
    "argv", [["--help"], ["index", "--help"], ["detect", "--help"], ["run", "--help"]]
)
def test_help_imports_no_heavy_library(argv: list[str]) -> None:
    assert _imported_after(HELP.format(argv=argv)) == []


def _modules_after(code: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules starting with ``prefixes`` that a fresh interpreter holds after ``code``."""
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return [m for m in json.loads(done.stdout.strip().splitlines()[-1]) if m.startswith(prefixes)]


def test_a_commands_help_builds_that_command_only() -> None:
    """``index --help`` imports the index stage's declaration and no other stage's, nor
    pydantic (typer coerces an unset group ``--help`` through a pydantic adapter) nor rich
    (plain help): the two cost 0.25 s of a subcommand's help."""
    code = HELP.format(argv=["index", "--help"])
    seen = _modules_after(code, ("pydantic", "rich", "phisieve."))
    assert not [m for m in seen if m.startswith(("pydantic", "rich"))], seen
    stages = [m for m in seen if m.endswith(".stage") and m != "phisieve.pipeline.stage"]
    assert stages == ["phisieve.term_index.stage"]


def test_the_help_lists_every_command_in_order() -> None:
    from typer.testing import CliRunner

    from phisieve.cli import app
    from phisieve.cli.app import MODULES

    out = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    listed = [line.split()[0] for line in out.split("Commands:")[1].splitlines() if line]
    assert listed == list(MODULES)
    assert "audit-compare" not in MODULES and len(MODULES) == len(PATHS) + 3


def test_importing_the_command_line_and_every_stage_is_light() -> None:
    code = "import phisieve.cli.app\nfrom phisieve.catalog import STAGES\n"
    code += "[STAGES[n] for n in STAGES]"
    assert _imported_after(code) == []


@pytest.mark.parametrize("name", sorted(PATHS))
def test_every_stage_is_defined_in_its_sub_packages_stage_module(name: str) -> None:
    cls = STAGES[name]
    parts = cls.__module__.split(".")
    assert len(parts) == 3 and parts[0] == "phisieve" and parts[2] == "stage", cls.__module__
    assert cls.name == name


def test_the_probe_sees_a_heavy_import() -> None:
    assert "pyarrow" in _imported_after("import pyarrow")
