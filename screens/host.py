"""What a screen may ask of the app that hosts it. Screens depend on this protocol, not on the app's
module, so the app can import every screen and no screen imports the app (no import loop)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from workbench.view import Run, RunState, View


class Host(Protocol):
    db_path: str
    run_id: int | None
    current_run: Run | None  # refreshed every poll
    view: View | None  # the event-loop thread's connection (quick indexed reads only)
    clock: Callable[[], float]
    poll_s: float
    live_rows: int

    def state(self) -> RunState | None: ...

    def send_command(self, kind: str, payload: dict[str, Any] | None = None) -> None: ...

    def open_trajectories(self, *, anchor_id: int | None = None) -> None: ...

    def open_run(self, run_id: int) -> None: ...
