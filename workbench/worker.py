"""The training worker: one process per run that owns the model and obeys commands from the store.

    python -m workbench.worker --db workbench.db --run 3     (what `workbench.launch.start_worker` spawns)

States written to the store with a time and reason: starting, running, pausing, paused, stopping,
stopped, crashed, finished. A heartbeat thread (its own connection) refreshes the run's lock every second
even inside a long step, and flips the status to "pausing" as soon as a pause is queued, so the UI can
show that the request was seen. Commands are obeyed at the trainer's safe points (after the step's rollout
groups, before the update, after the step) and pause/resume/stop also at its inner ones (every few tokens
of decoding, per layer in SFT, the update and evals: the command table is read there at most every
`INNER_POLL_S`); while paused the model stays loaded and the worker only polls.

A thin driver: the lock, heartbeat, statuses and crash reason are `workbench.run.session.RunSession`'s, the
claiming, deferring, answering and the pause loop `workbench.run.loop.CommandLoop`'s, and which command may
run where is the command table's (`workbench.run.commands`). What is here is what each command does to our
trainer (`WorkerHooks`' handlers) and the process around it (`run_worker`, `main`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import store
from workbench.config import config_from_dict
from workbench.run.commands import Sample, SetVerifier, StepSetting
from workbench.run.loop import CommandLoop
from workbench.run.records import Run
from workbench.run.records import Task as TaskRow
from workbench.run.session import ERROR_BUDGET_PAUSE, LockLost, RunSession
from workbench.safe_points import Interrupted, Throttle
from workbench.trainer import Hooks, Scored, Trainer
from workbench.verifier_edit import applicable_version

__all__ = [
    "INNER_POLL_S",
    "OUTER_POINTS",
    "STEP_BOUNDARIES",
    "LockLost",
    "WorkerHooks",
    "main",
    "probe",
    "run_worker",
]

STEP_BOUNDARIES = ("after_step", "sft_step")  # safe points between steps (no step half-scored)
OUTER_POINTS = ("after_group", "before_update", *STEP_BOUNDARIES)  # the trainer's own; others are inner
INNER_POLL_S = 0.1  # inner safe points come every few ms: read the command table at most this often
# Which commands are obeyed mid-phase, and which wait for an outer safe point, is the command table's
# (workbench.run.commands: `mid_phase`, `never_while_paused_in`).


class WorkerHooks(Hooks):
    """The trainer's hooks in the worker: its safe points run the run's `CommandLoop`; the handlers below
    are what each command does to our trainer."""

    def __init__(
        self,
        db: Any,
        run_id: int,
        token: str | None,
        *,
        log: Any = None,
        db_path: str = "workbench.db",
        lock_lost: threading.Event | None = None,
    ) -> None:
        self.db, self.run_id, self.token = db, run_id, token
        self.log, self.db_path = log or (lambda m: None), db_path
        self.pause_reason: str | None = (
            None  # why the worker paused itself (the error budget), for the status
        )
        self.pending_verifier: int | None = None
        self.pending_settings: dict[str, float] = {}  # set_lr / set_temperature, waiting for a step boundary
        self.where = "starting"
        self._inner_poll = Throttle(INNER_POLL_S)
        # Called at every poll while paused. Rank 0 of a data-parallel run tells the other ranks it is
        # still paused (workbench.distributed.meetings.RankHooks): they wait in short meetings, never one
        # long collective.
        self.while_paused: Callable[[Trainer, str], None] | None = None
        self.loop = CommandLoop(
            db,
            run_id,
            "worker",
            {
                "pause": self._pause,
                "resume": self._resume,
                "stop": self._stop,
                "checkpoint": self._checkpoint,
                "eval": self._eval,
                "set_verifier": self._set_verifier,
                "set_lr": self._set_step_setting,
                "set_temperature": self._set_step_setting,
                "sample": self._sample,
            },
            lock_lost=lock_lost,
        )

    # The loop's state, under the names the trainer, the ranks and SIGTERM use.
    @property
    def lock_lost(self) -> threading.Event:
        return self.loop.lock_lost

    @property
    def paused(self) -> bool:
        return self.loop.paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self.loop.paused = value

    @property
    def stop_requested(self) -> bool:
        return self.loop.stop_requested

    @stop_requested.setter
    def stop_requested(self, value: bool) -> None:
        self.loop.stop_requested = value

    def inner_safe_point(self, trainer: Trainer, phase: str) -> None:
        self.loop.check_lock()
        if self.loop.handling or not self._inner_poll.ready():
            return
        if store.commands.pending(self.db, self.run_id):  # a read; claiming takes the write lock
            self.safe_point(trainer, phase)

    def should_stop(self, trainer: Trainer) -> bool:
        return self.stop_requested

    def safe_point(self, trainer: Trainer, where: str) -> None:
        self.loop.check_lock()
        self.where = where
        outer = where in OUTER_POINTS
        self.loop.drain(trainer, where, outer=outer)
        if self.paused:
            reason, self.pause_reason = self.pause_reason, None
            if reason:
                self.log(self._resume_hint())
            progress = getattr(trainer, "progress", None)  # the phase's rate and ETA stand still while paused
            if progress is not None:
                progress.pause()
            try:
                self.loop.hold(
                    trainer,
                    where,
                    reason or f"paused at {where} of step {trainer.step + 1}",
                    outer=outer,
                    while_paused=self.while_paused,
                )
            finally:
                if progress is not None:
                    progress.resume()
        # One step, one verifier version: a new one starts at a step boundary.
        if self.pending_verifier is not None and where in STEP_BOUNDARIES:
            self._apply_verifier(trainer)
        if self.pending_settings and where in STEP_BOUNDARIES:  # likewise the step's temperature and lr
            self._apply_settings(trainer)

    def pause(self, trainer: Trainer, reason: str) -> bool:
        """The trainer's error budget: pause at the next safe point (after the step) with the reason in the
        run's status (the UI's status bar and banner) and events (the event log, `workbench report`)."""
        self.paused = True
        fix = "Fix the verifier (v in the UI: edit, dry run, apply) and resume (r)"
        self.pause_reason = f"{ERROR_BUDGET_PAUSE}: {reason}. {fix}"
        return True

    def _resume_hint(self) -> str:
        """How to go on from a pause the worker chose itself: what a headless run's log says."""
        return (
            f"run {self.run_id} paused (worker pid {os.getpid()}, model loaded). To go on: "
            f"`workbench tui --db {self.db_path} --run {self.run_id}`, fix the verifier (v: edit, dry run, "
            "apply) and resume (r): the next step uses it. Or stop this worker (s in the UI, or "
            f"kill {os.getpid()}: it checkpoints) and later `workbench train --db {self.db_path} --resume "
            f"{self.run_id}`; a resumed run scores with the run's active verifier version, so apply the fix "
            "in the UI first."
        )

    def fail_deferred(self, reason: str) -> None:
        """Answer the commands still waiting for an outer safe point (the worker is ending)."""
        self.loop.fail_deferred(reason)

    # ----- what each command does to the trainer (dispatched by the command table) -----------------------

    def _pause(self, trainer: Trainer, payload: None, where: str) -> dict[str, Any]:
        self.paused = True
        return {"paused_at": where, "step": trainer.step}

    def _resume(self, trainer: Trainer, payload: None, where: str) -> dict[str, Any]:
        was, self.paused = self.paused, False
        return {"resumed": was}

    def _stop(self, trainer: Trainer, payload: None, where: str) -> dict[str, Any]:
        self.loop.request_stop()  # the worker checkpoints the last completed step on its way out
        return {"step": trainer.step, "note": "stops after checkpointing the last completed step"}

    def _checkpoint(self, trainer: Trainer, payload: None, where: str) -> dict[str, Any]:
        if not trainer.sft_done:
            raise ValueError("no checkpoint during the SFT warm-up; the first one is written when it ends")
        return {"checkpoint_id": trainer.save_checkpoint("requested"), "step": trainer.step}

    def _eval(self, trainer: Trainer, payload: None, where: str) -> dict[str, Any]:
        m = trainer.run_eval()  # the full metrics (with per-task results) are in the evals table
        return {
            "message": f"held-out success {m.get('success_rate', 0.0):.3f} at step {trainer.step}",
            "metrics": {k: v for k, v in m.items() if isinstance(v, (int, float))},
        }

    def _set_verifier(self, trainer: Trainer, payload: SetVerifier, where: str) -> dict[str, Any]:
        vid = int(applicable_version(self.db, self.run_id, payload.verifier_id)["id"])
        self.pending_verifier = vid
        if where in STEP_BOUNDARIES:
            return {"verifier_id": self._apply_verifier(trainer), "applied": True}
        return {"verifier_id": vid, "applied": False, "note": "takes effect after the current step"}

    def _set_step_setting(self, trainer: Trainer, payload: StepSetting, where: str) -> dict[str, Any]:
        # set_lr / set_temperature shape a step: changed between steps only
        self.pending_settings[payload.name] = payload.value
        if where in STEP_BOUNDARIES:
            self._apply_settings(trainer)
            return {payload.name: getattr(trainer, payload.name), "applied": True}
        return {payload.name: payload.value, "applied": False, "note": "takes effect after the current step"}

    def _sample(self, trainer: Trainer, payload: Sample, where: str) -> dict[str, Any]:
        return {"trajectory_ids": probe(trainer, payload.task_id, payload.n)}

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
            store.runs.add_event(
                self.db, self.run_id, "verifier", msg, {"verifier_id": vid, "error": str(exc)}
            )
            return trainer.verifier_id
        store.runs.add_event(
            self.db, self.run_id, "verifier", f"verifier {vid} active from step {trainer.step + 1}"
        )
        return vid


def probe(trainer: Trainer, task_id: int, n: int) -> list[int]:
    """Fresh samples for one task from the current policy, stored as split "probe" (never trained on)."""
    from workbench.rollout.runner import Sampling, run_rollouts

    row = store.tasks.get_task(trainer.db, task_id)
    if row is None:
        raise ValueError(f"task {task_id} does not exist")
    task = TaskRow.from_row(row).as_task()
    sampling = Sampling(trainer.cfg.max_completion_length, trainer.temperature, trainer.cfg.top_p)
    (rollouts,) = run_rollouts(
        trainer.engine,
        trainer.policy.tokenizer,
        trainer.env,
        [task],
        n,
        sampling,
        stop_token_ids=trainer.policy.eos_token_ids,
    )
    return trainer.recorder.store_rows(
        [
            trainer.recorder.row(
                Scored(r, trainer.score(r)),
                trainer.verifier_id,
                step=trainer.step,
                split="probe",
                group_idx=0,
                sample_idx=i,
            )
            for i, r in enumerate(rollouts)
        ]
    )


def run_worker(
    db_path: str | Path,
    run_id: int,
    *,
    policy: Any = None,
    log: Any = None,
    ranks: Any = None,
    make_trainer: Any = None,
) -> str:
    """Train run `run_id` to the end (or until stopped), resuming from its last checkpoint.
    Returns the final status. Raises store.runs.RunLockedError if another live worker holds the run.
    `ranks` (workbench.distributed.collective.Ranks): this is rank 0 of a data-parallel run, the one that
    writes; `make_trainer(cfg, db, run_id, ranks, hooks, **kw)` builds its trainer
    (workbench.distributed.launch.rank_trainer)."""
    db_path = str(db_path)
    db = store.open_db(
        db_path, check=True
    )  # a resume from the UI too: a damaged file is refused, pages named
    session = RunSession(db, db_path, run_id)
    try:
        session.start()
    except BaseException:
        db.close()
        raise
    hooks = WorkerHooks(db, run_id, session.token, log=log, db_path=db_path, lock_lost=session.lock_lost)

    def on_term(signum: int, frame: Any) -> None:  # SIGTERM: stop at the next safe point, checkpointed
        hooks.stop_requested = True

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_term)
    status = "crashed"
    try:
        session.set_status("starting", f"worker pid {os.getpid()} loading the model")
        cfg = config_from_dict(Run.from_row(store.runs.get_run(db, run_id)).config, f"run {run_id} config")
        apply_niceness(cfg.worker_nice, log)
        if ranks is not None:
            trainer = make_trainer(cfg, db, run_id, ranks, hooks, policy=policy, log=log or (lambda m: None))
        else:
            trainer = Trainer(cfg, db, run_id, hooks=hooks, policy=policy, log=log or (lambda m: None))
        try:
            resumed = trainer.resume()
            session.set_status(
                "running", f"resumed from step {resumed}" if resumed is not None else "started"
            )
            trainer.run()
        except Interrupted:  # stopped inside the resume's catch-up eval: nothing of it was recorded
            pass
        if hooks.stop_requested:
            if trainer.step < cfg.max_steps and trainer.sft_done:
                trainer.save_checkpoint("requested")
            status = "stopped"
        else:
            status = "finished"
        session.set_status(status, f"at step {trainer.step}")
    except LockLost:
        status = "stopped"
        raise
    except BaseException as exc:
        session.crashed(exc)
        raise
    finally:
        with contextlib.suppress(sqlite3.Error, store.StoreError):
            hooks.fail_deferred(f"the run ended ({status}) before a safe point where it could run")
        session.release()
        db.close()
    return status


def apply_niceness(nice: int, log: Any = None) -> None:
    """Lower this process's CPU priority to `nice` (the config's `worker_nice`); never raises it (an
    unprivileged process cannot), so a worker started niced by hand keeps that."""
    current = os.nice(0)
    if nice > current:
        os.nice(nice - current)
        if log:
            log(f"worker niceness {nice} (worker_nice)")


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
