"""`workbench` command line: it parses flags and hands plain values to the engine (and to the app, for the
commands that open it). One module per job:

- `parser`: every command's flags (`build_parser`);
- `train`: `train` (headless, over ranks, or `--check`); `control`: `ls`, `pause`, `resume`, `stop`;
- `results`: `eval`, `report`, `export`, `export-model`;
- `ui`: `tui`, `serve`, `demo` (the only ones that import `screens`);
- `init`: a starter project.
"""

from __future__ import annotations

import sys

from workbench.cli.init import STARTER_REWARD, starter_config
from workbench.cli.parser import DEFAULT_DB, build_parser

__all__ = ["DEFAULT_DB", "STARTER_REWARD", "build_parser", "main", "starter_config"]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from store import StoreError
    from workbench.errors import WorkbenchError, exit_code_of

    try:
        return args.fn(args)
    # Say what is wrong, no traceback, and exit with the kind's code (workbench/errors.py). The store's
    # errors cannot derive from WorkbenchError (the store imports no workbench) but carry the same exit_code.
    except (WorkbenchError, StoreError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_code_of(exc)
