"""`RunSession`: a driver's hold on one run in the store, the same for the worker and the TRL callback.

It takes the run's lock, keeps it fresh with a heartbeat thread (its own connection, so a long step never
looks dead; the same thread turns "running" into "pausing" as soon as a pause is queued, so the UI shows the
request was seen), fails the commands a dead worker had claimed and never answered, writes the statuses,
says why a run crashed (one classification for every driver) and releases the lock at the end.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import traceback
from typing import Any

import store
from workbench.errors import RunLostError

HEARTBEAT_S = 1.0
STALE_AFTER_S = 30.0  # a worker whose heartbeat is older than this is gone: its lock may be taken
# The worker paused the run itself: more than max_verifier_error_frac of a step's rewards failed. Its
# status_reason starts with this (the UI's banner tells it from a person's own pause by it).
ERROR_BUDGET_PAUSE = "verifier error budget exceeded"
DEAD_CLAIM = "the worker that claimed it died before answering"


class LockLost(RunLostError, RuntimeError):
    """Another worker took over this run (our heartbeat went stale); stop writing at once."""


def is_out_of_memory(exc: BaseException) -> bool:
    """Python's MemoryError, and the allocators that say it in words (torch's CUDA/MPS "out of memory"
    RuntimeErrors, which are no MemoryError)."""
    return isinstance(exc, MemoryError) or "out of memory" in str(exc).lower()


def crash_reason(exc: BaseException) -> str:
    """The crashed status's reason: the kind of failure, then the start of its message."""
    kind = "out of memory" if is_out_of_memory(exc) else type(exc).__name__
    return f"{kind}: {str(exc)[:200]}"


def heartbeat_loop(
    db_path: str,
    run_id: int,
    token: str,
    lock_lost: threading.Event,
    done: threading.Event,
    every_s: float = HEARTBEAT_S,
) -> None:
    """Refresh the lock every `every_s` until `done`; set `lock_lost` (and end) when another took it."""
    db = store.open_db(db_path)
    try:
        while not done.wait(every_s):
            try:
                if not store.runs.heartbeat(db, run_id, token):
                    lock_lost.set()
                    return
                store.runs.mark_pausing(db, run_id)
            except sqlite3.Error:
                continue  # a full disk or a long lock: beat again next second (the lock goes stale after 30)
    finally:
        db.close()


class RunSession:
    """`RunSession(db, db_path, run_id).start()` ... `release()`. `db` is the driver's connection (the
    session writes statuses through it); the heartbeat opens its own from `db_path`."""

    def __init__(
        self,
        db: Any,
        db_path: str,
        run_id: int,
        *,
        heartbeat_s: float = HEARTBEAT_S,
        stale_after_s: float = STALE_AFTER_S,
    ) -> None:
        self.db, self.db_path, self.run_id = db, str(db_path), run_id
        self.heartbeat_s, self.stale_after_s = heartbeat_s, stale_after_s
        self.token: str | None = None
        self.status: str | None = None  # the last status this session wrote
        self.lock_lost = threading.Event()
        self._done = threading.Event()
        self._beat: threading.Thread | None = None

    def start(self) -> RunSession:
        """Take the lock (store.runs.RunLockedError when a live worker holds it), start the heartbeat and
        answer the commands a dead worker had claimed, so the UI stops waiting for them."""
        self.token = store.runs.acquire_lock(self.db, self.run_id, stale_after_s=self.stale_after_s)
        self._beat = threading.Thread(
            target=heartbeat_loop,
            daemon=True,
            name=f"heartbeat-run-{self.run_id}",
            args=(self.db_path, self.run_id, self.token, self.lock_lost, self._done, self.heartbeat_s),
        )
        self._beat.start()
        store.commands.fail_claimed(self.db, self.run_id, DEAD_CLAIM)
        return self

    def check_lock(self, what: str = "this one stops") -> None:
        if self.lock_lost.is_set():
            raise LockLost(f"run {self.run_id}: another worker took the lock; {what}")

    def set_status(self, status: str, reason: str, error: str | None = None) -> None:
        self.status = status
        store.runs.set_status(self.db, self.run_id, status, reason, error=error)

    def crashed(self, exc: BaseException) -> None:
        """Mark the run crashed with the reason and the traceback (call inside the `except`). When that write
        fails (a full disk), the row alone is changed in place after freeing what can be freed
        (`store.runs.record_crash`), so the status still says crashed and why; a write that fails even then is
        swallowed: it must not mask the error that ended the run (the driver's log still has it)."""
        try:
            self.set_status("crashed", crash_reason(exc), error=traceback.format_exc())
        except (sqlite3.Error, store.StoreError):
            with contextlib.suppress(sqlite3.Error, store.StoreError):
                store.runs.record_crash(self.db, self.run_id, crash_reason(exc))
                self.status = "crashed"

    def release(self) -> None:
        """Stop the heartbeat and free the lock (a failed write leaves it to go stale, or to the pid check)."""
        self._done.set()
        if self._beat is not None:
            self._beat.join(timeout=self.heartbeat_s * 5)
        if self.token is not None:
            with contextlib.suppress(sqlite3.Error, store.StoreError):
                store.runs.release_lock(self.db, self.run_id, self.token)
        self.token = None
