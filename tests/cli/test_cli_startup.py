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
