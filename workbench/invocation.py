"""How a command the workbench prints should start, so it works when pasted into the user's shell.

`make demo` installs into `.venv/` and never touches the shell's PATH, so a bare `workbench ...` printed by
`init`, `train`, `demo` or the quit dialog failed with "command not found" on a fresh clone (issue 36). The
printed commands start with whatever calls this very installation from the directory they will be run in.
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
from pathlib import Path


def workbench_command(run_from: str | Path | None = None) -> str:
    """`workbench` when that name on PATH is this installation's own script; otherwise the script's path:
    relative when it lies under `run_from` (the directory the command will be typed in, default the current
    one; e.g. `.venv/bin/workbench`), absolute otherwise; `python -m workbench.cli` when there is no script
    (a source checkout run without installing)."""
    scripts = Path(sysconfig.get_path("scripts"))
    script = scripts / ("workbench.exe" if sys.platform == "win32" else "workbench")
    found = shutil.which("workbench")
    if found is not None and script.exists() and Path(found).resolve() == script.resolve():
        return "workbench"
    if not script.exists():
        return f"{sys.executable} -m workbench.cli"
    where = Path(run_from if run_from is not None else Path.cwd()).absolute()
    try:
        return str(script.absolute().relative_to(where))
    except ValueError:
        return str(script.absolute())
