"""`workbench serve`: the workbench in a browser, through textual-serve.

Each browser connection gets its own `workbench tui` process (textual-serve starts one per websocket), all on
the same database, so several people can watch one run; the worker is untouched. It listens on the loopback
by default: the page drives the UI with every key it has (stop a run, edit the verifier) and there is no
login, so reach it from another machine through an SSH tunnel (README), not by listening on 0.0.0.0.
"""

from __future__ import annotations

import shlex
import sys


def serve(db: str, *, host: str = "127.0.0.1", port: int = 8000, run: int | None = None,
          public_url: str | None = None) -> None:
    """Serve `workbench tui --db DB` on http://HOST:PORT until interrupted."""
    try:
        from textual_serve.server import Server
    except ImportError:
        raise SystemExit("workbench serve needs textual-serve: pip install 'agent-workbench[web]'") from None
    command = [sys.executable, "-m", "workbench.cli", "tui", "--db", db]
    if run is not None:
        command += ["--run", str(run)]
    Server(shlex.join(command), host=host, port=port, title="Workbench", public_url=public_url).serve()
