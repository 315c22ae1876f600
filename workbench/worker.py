"""The training worker: one process per run that owns the model and obeys commands from the store.

    python -m workbench.worker --db workbench.db --run 3     (what `workbench.launch.start_worker` spawns)

States written to the store with a time and reason: starting, running, pausing, paused, stopping,
stopped, crashed, finished. A heartbeat thread (its own connection) refreshes the run's lock every second
even inside a long step, and flips the status to "pausing" as soon as a pause is queued, so the UI can
show that the request was seen. Commands are obeyed at the trainer's safe points (after the step's rollout
groups, before the update, after the step) and pause/resume/stop also at its inner ones (every few tokens
of decoding, per layer in SFT, the update and evals: the command table is read there at most every
`INNER_POLL_S`); while paused the model stays loaded and the worker only polls.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sqlite3
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import store
from workbench.config import config_from_dict
from workbench.safe_points import Interrupted, Throttle
from workbench.trainer import Hooks, Scored, Trainer
from workbench.verifier_edit import applicable_version
from workbench.view.run_state import ERROR_BUDGET_PAUSE, STALE_AFTER_S

POLL_S = 0.25  # paused: how often the command table is read (one indexed query)
STEP_BOUNDARIES = ("after_step", "sft_step")  # safe points between steps (no step half-scored)
OUTER_POINTS = ("after_group", "before_update", *STEP_BOUNDARIES)  # the trainer's own; others are inner
HEARTBEAT_S = 1.0
INNER_POLL_S = 0.1  # inner safe points come every few ms: read the command table at most this often
# Obeyed mid-phase (the settings only take effect at a step boundary anyway). A checkpoint, an eval or a
# sample asked for mid-forward waits for the next outer safe point (claimed, answered there), unless the
# worker is paused there: then all run at once (a nested forward under the paused one), except a
# checkpoint inside the update (its weights may be between two of its optimizer steps).
INNER_KINDS = ("pause", "resume", "stop", "set_verifier", "set_lr", "set_temperature")


class LockLost(RuntimeError):
    """Another worker took over this run (our heartbeat went stale); stop writing at once."""


class WorkerHooks(Hooks):
    def __init__(self, db: Any, run_id: int, token: str, *, log: Any = None, db_path: str = "workbench.db") -> None:
        self.db, self.run_id, self.token = db, run_id, token
        self.log, self.db_path = log or (lambda m: None), db_path
        self.paused = False
        self.pause_reason: str | None = None  # why the worker paused itself (the error budget), for the status
        self.stop_requested = False
        self.pending_verifier: int | None = None
        self.pending_settings: dict[str, float] = {}  # set_lr / set_temperature, waiting for a step boundary
        self.where = "starting"
        self.lock_lost = threading.Event()
        self._inner_poll = Throttle(INNER_POLL_S)
        self._deferred: list[dict[str, Any]] = []  # claimed mid-phase, handled at the next outer safe point
        self._handling = False  # inside a command (an eval): its own safe points do not read commands
        # Called every POLL_S while paused. Rank 0 of a data-parallel run tells the other ranks it is still
        # paused (workbench.distributed.RankHooks): they wait in short meetings, never one long collective.
        self.while_paused: Callable[[Trainer, str], None] | None = None

    def inner_safe_point(self, trainer: Trainer, phase: str) -> None:
        if self.lock_lost.is_set():
            raise LockLost(f"run {self.run_id}: another worker took the lock; this one stops")
        if self._handling or not self._inner_poll.ready():
            return
        if store.commands.pending(self.db, self.run_id):  # a read; claiming takes the write lock
            self.safe_point(trainer, phase)

    def should_stop(self, trainer: Trainer) -> bool:
        return self.stop_requested

    def safe_point(self, trainer: Trainer, where: str) -> None:
        if self.lock_lost.is_set():
            raise LockLost(f"run {self.run_id}: another worker took the lock; this one stops")
        self.where = where
        claimed = self._drain(trainer, where)
        if self.paused:
            reason, self.pause_reason = self.pause_reason, None
            store.runs.set_status(self.db, self.run_id, "paused", reason or f"paused at {where} of step {trainer.step + 1}")
            if reason:
                self.log(self._resume_hint())
            while self.paused and not self.stop_requested:
                time.sleep(POLL_S)
                if self.lock_lost.is_set():
                    raise LockLost(f"run {self.run_id}: another worker took the lock")
                self._drain(trainer, where)
                if self.while_paused is not None and self.paused and not self.stop_requested:
                    self.while_paused(trainer, where)
            if not self.stop_requested:
                store.runs.set_status(self.db, self.run_id, "running", "resumed")
        elif claimed:  # a pause and a resume both seen at this safe point: undo the heartbeat's "pausing"
            store.runs.unmark_pausing(self.db, self.run_id)
        # One step, one verifier version: a new one starts at a step boundary.
        if self.pending_verifier is not None and where in STEP_BOUNDARIES:
            self._apply_verifier(trainer)
        if self.pending_settings and where in STEP_BOUNDARIES:  # likewise the step's temperature and lr
            self._apply_settings(trainer)

    def pause(self, trainer: Trainer, reason: str) -> bool:
        """The trainer's error budget: pause at the next safe point (after the step) with the reason in the
        run's status (the UI's status bar and banner) and events (the event log, `workbench report`)."""
        self.paused = True
        self.pause_reason = f"{ERROR_BUDGET_PAUSE}: {reason}. Fix the verifier (v in the UI: edit, dry run, apply) and resume (r)"
        return True

    def _resume_hint(self) -> str:
        """How to go on from a pause the worker chose itself: what a headless run's log says."""
        return (f"run {self.run_id} paused (worker pid {os.getpid()}, model loaded). To go on: "
                f"`workbench tui --db {self.db_path} --run {self.run_id}`, fix the verifier (v: edit, dry run, "
                "apply) and resume (r): the next step uses it. Or stop this worker (s in the UI, or "
                f"kill {os.getpid()}: it checkpoints) and later `workbench train --db {self.db_path} --resume "
                f"{self.run_id}`; a resumed run scores with the run's active verifier version, so apply the fix "
                "in the UI first.")

    def _drain(self, trainer: Trainer, where: str) -> bool:
        """Claim and obey the pending commands (those that must wait for an outer safe point are kept, and
        obeyed at the first safe point where they may run); True when there were any."""
        waiting, self._deferred = self._deferred, []
        for cmd in waiting:
            self._obey_or_defer(trainer, cmd, where)
        claimed = False
        while (cmd := store.commands.claim_next(self.db, self.run_id)) is not None:
            claimed = True
            self._obey_or_defer(trainer, cmd, where)
        return claimed

    def _obey_or_defer(self, trainer: Trainer, cmd: dict[str, Any], where: str) -> None:
        if self._must_wait(cmd["kind"], where):
            self._deferred.append(cmd)
        else:
            self._answer(trainer, cmd, where)

    def _must_wait(self, kind: str, where: str) -> bool:
        """Whether a command may not run at this safe point (see INNER_KINDS)."""
        if where in OUTER_POINTS or kind in INNER_KINDS:
            return False
        if self.paused:
            return kind == "checkpoint" and where == "update"
        return True

    def fail_deferred(self, reason: str) -> None:
        """Answer the commands still waiting for an outer safe point (the worker is ending)."""
        for cmd in self._deferred:
            store.commands.finish(self.db, cmd["id"], {"error": reason}, ok=False)
        self._deferred = []

    def _answer(self, trainer: Trainer, cmd: dict[str, Any], where: str) -> None:
        self._handling = True
        try:
            result = self._handle(trainer, cmd["kind"], cmd["payload"] or {}, where)
            store.commands.finish(self.db, cmd["id"], result)
        except Exception as exc:  # a bad command is answered, never fatal
            store.commands.finish(self.db, cmd["id"], {"error": f"{type(exc).__name__}: {exc}"}, ok=False)
        finally:
            self._handling = False

    def _handle(self, trainer: Trainer, kind: str, payload: dict[str, Any], where: str) -> dict[str, Any]:
        if kind == "pause":
            self.paused = True
            return {"paused_at": where, "step": trainer.step}
        if kind == "resume":
            was = self.paused
            self.paused = False
            return {"resumed": was}
        if kind == "stop":  # the worker checkpoints the last completed step on its way out
            store.runs.set_status(self.db, self.run_id, "stopping", "stop requested")
            self.stop_requested = True
            self.paused = False
            return {"step": trainer.step, "note": "stops after checkpointing the last completed step"}
        if kind == "checkpoint":
            if not trainer.sft_done:
                raise ValueError("no checkpoint during the SFT warm-up; the first one is written when it ends")
            return {"checkpoint_id": trainer.save_checkpoint("requested"), "step": trainer.step}
        if kind == "eval":
            m = trainer.run_eval()  # the full metrics (with per-task results) are in the evals table
            return {"message": f"held-out success {m.get('success_rate', 0.0):.3f} at step {trainer.step}",
                    "metrics": {k: v for k, v in m.items() if isinstance(v, (int, float))}}
        if kind == "set_verifier":
            vid = int(applicable_version(self.db, self.run_id, int(payload["verifier_id"]))["id"])
            self.pending_verifier = vid
            if where in STEP_BOUNDARIES:
                return {"verifier_id": self._apply_verifier(trainer), "applied": True}
            return {"verifier_id": vid, "applied": False, "note": "takes effect after the current step"}
        if kind in ("set_lr", "set_temperature"):  # they shape a step: changed between steps only
            key = "lr" if kind == "set_lr" else "temperature"
            self.pending_settings[key] = float(payload[key])
            if where in STEP_BOUNDARIES:
                self._apply_settings(trainer)
                return {key: getattr(trainer, key), "applied": True}
            return {key: self.pending_settings[key], "applied": False, "note": "takes effect after the current step"}
        if kind == "sample":
            return {"trajectory_ids": probe(trainer, int(payload["task_id"]), int(payload.get("n", 4)))}
        raise ValueError(f"unknown command {kind!r}")

    def _apply_settings(self, trainer: Trainer) -> None:
        for key, value in self.pending_settings.items():
            setattr(trainer, key, value)
        self.pending_settings = {}

    def _apply_verifier(self, trainer: Trainer) -> int:
        vid, self.pending_verifier = self.pending_verifier, None
        try:
            trainer.set_verifier(vid)
        except Exception as exc:  # it dry-ran in the UI, but loading can still fail here (a timeout, a crash)
            msg = f"verifier {vid} could not be loaded ({type(exc).__name__}: {exc}); the previous one stays active"
            self.log(msg)
            store.runs.add_event(self.db, self.run_id, "verifier", msg, {"verifier_id": vid, "error": str(exc)})
            return trainer.verifier_id
        store.runs.add_event(self.db, self.run_id, "verifier", f"verifier {vid} active from step {trainer.step + 1}")
        return vid


def probe(trainer: Trainer, task_id: int, n: int) -> list[int]:
    """Fresh samples for one task from the current policy, stored as split "probe" (never trained on)."""
    from workbench.rollout.runner import Sampling, run_rollouts
    from workbench.types import Task

    row = store.tasks.get_task(trainer.db, task_id)
    if row is None:
        raise ValueError(f"task {task_id} does not exist")
    task = Task.from_dict(row["extra"])
    sampling = Sampling(trainer.cfg.max_completion_length, trainer.temperature, trainer.cfg.top_p)
    (rollouts,) = run_rollouts(trainer.engine, trainer.policy.tokenizer, trainer.env, [task], n, sampling,
                               stop_token_ids=trainer.policy.eos_token_ids)
    rows = [
        trainer._trajectory_row(Scored(r, trainer.score(r)), step=trainer.step, split="probe", group_idx=0, sample_idx=i)
        for i, r in enumerate(rollouts)
    ]
    return store.trajectories.insert_trajectories(trainer.db, rows)


def heartbeat_loop(db_path: str, run_id: int, token: str, hooks: WorkerHooks, done: threading.Event) -> None:
    db = store.open_db(db_path)
    try:
        while not done.wait(HEARTBEAT_S):
            try:
                if not store.runs.heartbeat(db, run_id, token):
                    hooks.lock_lost.set()
                    return
                store.runs.mark_pausing(db, run_id)
            except sqlite3.Error:
                continue  # a full disk or a long lock: beat again next second (the lock goes stale after 30)
    finally:
        db.close()


def run_worker(db_path: str | Path, run_id: int, *, policy: Any = None, log: Any = None, ranks: Any = None,
               make_trainer: Any = None) -> str:
    """Train run `run_id` to the end (or until stopped), resuming from its last checkpoint.
    Returns the final status. Raises store.runs.RunLockedError if another live worker holds the run.
    `ranks` (workbench.distributed.Ranks): this is rank 0 of a data-parallel run, the one that writes;
    `make_trainer(cfg, db, run_id, ranks, hooks, **kw)` builds its trainer (workbench.distributed.rank_trainer)."""
    db_path = str(db_path)
    db = store.open_db(db_path)
    token = store.runs.acquire_lock(db, run_id, stale_after_s=STALE_AFTER_S)
    hooks = WorkerHooks(db, run_id, token, log=log, db_path=db_path)
    done = threading.Event()
    beat = threading.Thread(target=heartbeat_loop, args=(db_path, run_id, token, hooks, done), daemon=True)
    beat.start()

    def on_term(signum: int, frame: Any) -> None:  # SIGTERM: stop at the next safe point, checkpointed
        hooks.stop_requested = True

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_term)
    status = "crashed"
    try:
        store.runs.set_status(db, run_id, "starting", f"worker pid {os.getpid()} loading the model")
        store.commands.fail_claimed(db, run_id, "the worker that claimed it died before answering")
        cfg = config_from_dict(store.runs.get_run(db, run_id)["config"], f"run {run_id} config")
        if ranks is not None:
            trainer = make_trainer(cfg, db, run_id, ranks, hooks, policy=policy, log=log or (lambda m: None))
        else:
            trainer = Trainer(cfg, db, run_id, hooks=hooks, policy=policy, log=log or (lambda m: None))
        try:
            resumed = trainer.resume()
            store.runs.set_status(db, run_id, "running",
                                  f"resumed from step {resumed}" if resumed is not None else "started")
            trainer.run()
        except Interrupted:  # stopped inside the resume's catch-up eval: nothing of it was recorded
            pass
        if hooks.stop_requested:
            if trainer.step < cfg.max_steps and trainer.sft_done:
                trainer.save_checkpoint("requested")
            status = "stopped"
        else:
            status = "finished"
        store.runs.set_status(db, run_id, status, f"at step {trainer.step}")
    except LockLost:
        status = "stopped"
        raise
    except BaseException as exc:
        kind = "out of memory" if isinstance(exc, MemoryError) or "out of memory" in str(exc).lower() else type(exc).__name__
        with contextlib.suppress(sqlite3.Error, store.StoreError):  # a full disk must not mask the first error
            store.runs.set_status(db, run_id, "crashed", f"{kind}: {str(exc)[:200]}", error=traceback.format_exc())
        raise
    finally:
        with contextlib.suppress(sqlite3.Error, store.StoreError):
            hooks.fail_deferred(f"the run ended ({status}) before a safe point where it could run")
        done.set()
        beat.join(timeout=5)
        with contextlib.suppress(sqlite3.Error, store.StoreError):  # the lock then goes stale (or the pid check)
            store.runs.release_lock(db, run_id, token)
        db.close()
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbench.worker", description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", type=int, required=True)
    ap.add_argument("--nice", type=int, default=0, help="lower this process's CPU priority (beside a UI)")
    args = ap.parse_args(argv)
    if args.nice:
        os.nice(args.nice)
    try:
        status = run_worker(args.db, args.run, log=lambda m: print(m, flush=True))
    except store.runs.RunLockedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except LockLost as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 4
    print(f"run {args.run}: {status}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
