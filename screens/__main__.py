"""`python -m screens [--db FILE] [--run ID]`: the same as `workbench tui`."""

from __future__ import annotations

import argparse
import sys

from workbench.view import StoreError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m screens", description="Workbench terminal UI")
    parser.add_argument(
        "--db", default="workbench.db", help="the Workbench database (default ./workbench.db)"
    )
    parser.add_argument("--run", type=int, default=None, help="run id (default: the only run, or choose)")
    args = parser.parse_args(argv)
    from screens.app import run_tui

    try:
        run_tui(args.db, args.run)
    except StoreError as exc:
        print(f"workbench tui: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
