"""The layering of DESIGN.md, enforced: store knows SQLite only; the engine never imports the UI; the screens
reach the engine and the store only through workbench.view; the view layer never loads torch."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    out = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "8 kept, 0 broken" in out.stdout


def test_screens_import_the_engine_only_through_the_view_layer():
    """import-linter cannot say "only workbench.view" without listing every other engine module: read the
    screens' own import statements (top level and inside functions) instead."""
    offenders = []
    for path in sorted((ROOT / "screens").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            for name in names:
                top = name.split(".")[0]
                if top == "store" or (top == "workbench" and not name.startswith("workbench.view")):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert offenders == []
