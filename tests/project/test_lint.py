"""The style the project agreed on holds in `make test` (and so in CI): `ruff check` (line length included, at
the 120-column bound of pyproject.toml) and `ruff format --check` (code wrapped at 110) on the whole tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ruff() -> str:
    beside = Path(sys.executable).with_name("ruff")  # the venv's own ruff (a dev dependency)
    found = str(beside) if beside.exists() else shutil.which("ruff")
    assert found, "ruff is a dev dependency: pip install -e .[dev]"
    return found


def test_ruff_check_passes_on_the_whole_tree() -> None:
    out = subprocess.run(
        [ruff(), "check", "--output-format", "concise", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_tree_is_formatted() -> None:
    out = subprocess.run([ruff(), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, "run `ruff format .`:\n" + out.stdout + out.stderr
