"""`CommandLoop`: how a driver obeys the run's commands, written once. At a safe point it claims each pending
command (exactly once, in order), obeys it through the driver's handler for that kind, or keeps it for a
later safe point where the table says it may run, and answers it (`done` with the handler's result, or
`failed` with the error: a bad command is answered, never fatal). While paused it holds the driver in a
loop that polls the table, the heartbeat thread keeping the lock alive.

Dispatch is by `workbench.run.commands`: an unknown kind, a kind this driver does not obey (answered with the
table's reason) and a payload outside its range never reach a handler; a handler gets the typed payload.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import store
from workbench.run.commands import COMMAND_BY_NAME, command_spec, supported
from workbench.run.session import LockLost

POLL_S = 0.25  # paused: how often the command table is read (one indexed query)

# (the driver's context at this safe point: a trainer, TRL's callback arguments; the typed payload; where)
Handler = Callable[[Any, Any, str], dict[str, Any]]


class CommandLoop:
    """The state a driver's commands change (`paused`, `stop_requested`) and the loop that obeys them.
    `handlers` must name exactly the commands the table says `driver` obeys (checked here, so a command added
    to the table without a handler fails at once, not when someone sends it)."""

    def __init__(
        self,
        db: Any,
        run_id: int,
        driver: str,
        handlers: Mapping[str, Handler],
        *,
        lock_lost: threading.Event | None = None,
        set_status: Callable[[str, str], None] | None = None,
        poll_s: float = POLL_S,
        on_lock_lost: str = "this one stops",
    ) -> None:
        want = {c.name for c in supported(driver)}
        if set(handlers) != want:
            raise ValueError(
                f"the {driver} driver's handlers {sorted(handlers)} are not the commands the table "
                f"says it obeys {sorted(want)}"
            )
        self.db, self.run_id, self.driver, self.handlers = db, run_id, driver, dict(handlers)
        self.lock_lost = lock_lost or threading.Event()
        self._set_status = set_status or (
            lambda status, reason: store.runs.set_status(db, run_id, status, reason)
        )
        self.poll_s, self.on_lock_lost = poll_s, on_lock_lost
        self.paused = False
        self.stop_requested = False
        self.handling = False  # inside a command (an eval): its own safe points do not read commands
        self.deferred: list[dict[str, Any]] = []  # claimed where they may not run; obeyed at a later point

    def check_lock(self) -> None:
        if self.lock_lost.is_set():
            raise LockLost(f"run {self.run_id}: another worker took the lock; {self.on_lock_lost}")

    def drain(self, ctx: Any, where: str, *, outer: bool = True) -> bool:
        """Obey the commands kept from earlier that may run here, then claim and obey (or keep) the pending
        ones. True when any was claimed; then, unless one paused, a "pausing" the heartbeat wrote for a pause
        that a resume has since cancelled goes back to "running"."""
        waiting, self.deferred = self.deferred, []
        for cmd in waiting:
            self._obey_or_keep(ctx, cmd, where, outer)
        claimed = False
        while (cmd := store.commands.claim_next(self.db, self.run_id)) is not None:
            claimed = True
            self._obey_or_keep(ctx, cmd, where, outer)
        if claimed and not self.paused:
            store.runs.unmark_pausing(self.db, self.run_id)
        return claimed

    def _obey_or_keep(self, ctx: Any, cmd: dict[str, Any], where: str, outer: bool) -> None:
        spec = COMMAND_BY_NAME.get(cmd["kind"])
        if spec is not None and not spec.may_run(where, outer=outer, paused=self.paused):
            self.deferred.append(cmd)
        else:
            self.answer(ctx, cmd, where)

    def answer(self, ctx: Any, cmd: dict[str, Any], where: str) -> None:
        self.handling = True
        try:
            result = self.dispatch(ctx, cmd["kind"], cmd["payload"], where)
            store.commands.finish(self.db, cmd["id"], result)
        except Exception as exc:  # a bad command is answered, never fatal
            store.commands.finish(self.db, cmd["id"], {"error": f"{type(exc).__name__}: {exc}"}, ok=False)
        finally:
            self.handling = False

    def dispatch(self, ctx: Any, kind: str, payload: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
        """Check the command against the table and run this driver's handler with the typed payload."""
        spec = command_spec(kind)
        refusal = spec.refusal(self.driver)
        if refusal is not None:
            raise ValueError(refusal)
        return self.handlers[kind](ctx, spec.parse(payload), where)

    def hold(
        self,
        ctx: Any,
        where: str,
        reason: str,
        *,
        outer: bool = True,
        while_paused: Callable[[Any, str], None] | None = None,
    ) -> None:
        """Paused: write the status, then poll the table until a resume or a stop; `while_paused` runs at
        every poll (rank 0 of a data-parallel run tells the other ranks it is still paused)."""
        self._set_status("paused", reason)
        while self.paused and not self.stop_requested:
            time.sleep(self.poll_s)
            self.check_lock()
            self.drain(ctx, where, outer=outer)
            if while_paused is not None and self.paused and not self.stop_requested:
                while_paused(ctx, where)
        if not self.stop_requested:
            self._set_status("running", "resumed")

    def request_stop(self) -> None:
        """A stop: the status says so at once; the driver leaves at its next chance (checkpointed)."""
        self._set_status("stopping", "stop requested")
        self.stop_requested = True
        self.paused = False

    def fail_deferred(self, reason: str) -> None:
        """Answer the commands still waiting for a safe point where they may run (the driver is ending)."""
        for cmd in self.deferred:
            store.commands.finish(self.db, cmd["id"], {"error": reason}, ok=False)
        self.deferred = []
