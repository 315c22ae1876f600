"""`View`: the one door from a UI (or a report) into the store. Reads come back as typed records; the
few writes a UI makes (commands, labels, verifier dry runs) go through here too.

One `View` per thread (sqlite3 connections belong to the thread that opened them): the UI keeps one on
its event loop for quick indexed reads and opens another inside each thread worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

import store
from store.trajectories import TrajectoryFilter
from workbench.progress import PROGRESS_KIND
from workbench.run.commands import check_command
from workbench.view.records import (
    Checkpoint,
    Command,
    DryRunRow,
    Eval,
    Event,
    Label,
    Progress,
    Run,
    Step,
    Task,
    Trajectory,
    VerifierVersion,
)
from workbench.view.scores import TaskRow, policy_labels

if TYPE_CHECKING:
    from workbench.verifier_edit import DryRunControl

ORDERS = ("id", "reward", "step")


@dataclass(frozen=True)
class Page:
    rows: list[Trajectory]
    next_cursor: tuple | None  # pass back as `after` for the next page; None at the end


def page_key(row: Trajectory, order: str) -> tuple:
    """The keyset cursor of a row for an order (what `Page.next_cursor` holds)."""
    return (row.id,) if order == "id" else (getattr(row, order), row.id)


def effective_order(flt: TrajectoryFilter, order: str) -> str:
    """Ordering by id under a step filter walks (step, id): the same order, served by the step index."""
    return "step" if order == "id" and (flt.step_min is not None or flt.step_max is not None) else order


def _run(row: dict[str, Any], last_step: int | None = None) -> Run:
    """A run record with the local liveness check filled in (the same rule as the worker's lock)."""
    gone = bool(row.get("lock_token")) and store.runs.local_worker_gone(
        row.get("worker_host"), row.get("worker_pid")
    )
    return Run.from_row(row, last_step, worker_gone=gone)


class View:
    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db

    @classmethod
    def open(cls, path: str | Path, *, check: bool = False) -> View:
        """Never creates a database: a typo in --db is an error that names the file, not an empty project.
        `check`: refuse a damaged file first (`store.open_db`'s quick_check), for the commands that read it whole."""
        return cls(store.open_db(path, create=False, check=check))

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self) -> View:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def snapshot(self) -> Iterator[View]:
        """A read transaction: every read inside sees the same WAL snapshot (no write lock is taken)."""
        own = not self.db.conn.in_transaction
        if own:
            self.db.execute("BEGIN")
        try:
            yield self
        finally:
            if own and self.db.conn.in_transaction:
                self.db.execute("COMMIT")

    # ---- runs ----------------------------------------------------------------------------------------

    def runs(self) -> list[Run]:
        """Every run, newest first, with its last step."""
        return [_run(r, store.metrics.last_step(self.db, r["id"])) for r in store.runs.list_runs(self.db)]

    def run(self, run_id: int) -> Run:
        return _run(store.runs.get_run(self.db, run_id))

    def events(self, run_id: int, after_id: int = 0, limit: int = 500) -> list[Event]:
        """The run's log after `after_id`, oldest first (what a live log polls); progress reports are not
        the log (one a second: `progress` reads the newest)."""
        return [
            Event.from_row(e)
            for e in store.runs.events_since(self.db, run_id, after_id, limit, exclude_kinds=(PROGRESS_KIND,))
        ]

    def last_events(self, run_id: int, n: int) -> list[Event]:
        return [
            Event.from_row(e)
            for e in store.runs.last_events(self.db, run_id, n, exclude_kinds=(PROGRESS_KIND,))
        ]

    def sft_losses(
        self, run_id: int, after_id: int = 0, limit: int = 5000
    ) -> tuple[list[tuple[int, float]], int]:
        """The SFT warm-up's (step, loss) points logged after event `after_id` (its "sft_step" events), and the
        last event id read (pass it back to read only newer ones): the Curves pane plots SFT as it comes."""
        rows = store.runs.events_since(self.db, run_id, after_id, limit, exclude_kinds=(PROGRESS_KIND,))
        points = [
            (int(d["step"]), float(d["loss"]))
            for r in rows
            if r.get("kind") == "sft_step"
            and isinstance(d := r.get("data"), dict)
            and isinstance(d.get("loss"), (int, float))
        ]
        return points, (rows[-1]["id"] if rows else after_id)

    def progress(self, run_id: int) -> Progress | None:
        """The worker's newest progress report (phase, i/N, loss, ETA), or None before its first."""
        row = store.runs.latest_event(self.db, run_id, PROGRESS_KIND)
        return None if row is None else Progress.from_event(Event.from_row(row))

    # ---- steps, evals, checkpoints -------------------------------------------------------------------

    def steps(self, run_id: int, after_step: int = -1) -> list[Step]:
        return [Step.from_row(s) for s in store.metrics.steps_since(self.db, run_id, after_step)]

    def evals(self, run_id: int, mode: str | None = None) -> list[Eval]:
        return [Eval.from_row(e) for e in store.metrics.list_evals(self.db, run_id, mode)]

    def checkpoints(self, run_id: int) -> list[Checkpoint]:
        return [Checkpoint.from_row(c) for c in store.metrics.list_checkpoints(self.db, run_id)]

    def latest_checkpoint(self, run_id: int) -> Checkpoint | None:
        row = store.metrics.latest_checkpoint(self.db, run_id)
        return None if row is None else Checkpoint.from_row(row)

    # ---- tasks ---------------------------------------------------------------------------------------

    def task(self, task_id: int) -> Task | None:
        row = store.tasks.get_task(self.db, task_id)
        return None if row is None else Task.from_row(row)

    def tasks(self) -> dict[int, Task]:
        return {t["id"]: Task.from_row(t) for t in store.tasks.list_tasks(self.db)}

    def task_stats(self, run_id: int) -> list[TaskRow]:
        """One row per task, split and policy (`TaskRow`): an eval's rows are never averaged with another's."""
        return [
            TaskRow(
                s["task_id"],
                s["split"],
                s.get("prompt") or "",
                s.get("expected_tool"),
                attempts=s["attempts"],
                rewarded=s["rewarded"],
                reward_sum=float(s["reward_sum"]),
                classified=s["classified"],
                successes=int(s["successes"]),
                eval_id=s["eval_id"],
            )
            for s in store.tasks.task_stats(self.db, run_id)
        ]

    def policy_labels(self, run_id: int) -> dict[int, str]:
        """eval id -> the policy its rows came from ("base", "sft", "step N"): the Tasks pane's policy column."""
        return policy_labels(self.evals(run_id), self.checkpoints(run_id))

    # ---- trajectories --------------------------------------------------------------------------------

    def page(
        self,
        flt: TrajectoryFilter,
        *,
        order: str = "id",
        descending: bool = True,
        after: tuple | None = None,
        limit: int = 50,
    ) -> Page:
        """One keyset page of summaries (no messages): constant time wherever it is, at millions of rows."""
        page = store.trajectories.page_trajectories(
            self.db, flt, order=order, descending=descending, after=after, limit=limit
        )
        return Page([Trajectory.from_row(r) for r in page.rows], page.next_cursor)

    def newest_id(self, run_id: int) -> int:
        """The run's highest trajectory id, superseded rows included (where a live feed starts from)."""
        rows = self.page(TrajectoryFilter(run_id, include_superseded=True), limit=1).rows
        return rows[0].id if rows else 0

    def trajectories_since(
        self, run_id: int, after_id: int, *, limit: int = 500, newest: bool = False
    ) -> list[Trajectory]:
        """Rows after `after_id`, oldest first: the first `limit` of them, or with `newest` the last `limit`."""
        return [
            Trajectory.from_row(r)
            for r in store.trajectories.trajectories_since(
                self.db, run_id, after_id, limit=limit, newest=newest
            )
        ]

    def feed(self, run_id: int, after_id: int, *, limit: int = 500, task_id: int | None = None) -> Feed:
        """What a live pane takes per poll, bounded however fast the worker writes: the rows after `after_id`
        when at most `limit`, else the newest `limit` rows and, for the rows between (read by no one row by
        row), their per-task counts and `task_id`'s per-step reward sums, aggregated in SQLite."""
        rows = self.trajectories_since(run_id, after_id, limit=limit, newest=True)
        if len(rows) < limit or rows[0].id <= after_id + 1:
            return Feed(rows)
        before = rows[0].id
        skipped = [
            TaskRow(
                s["task_id"],
                s["split"],
                attempts=s["attempts"],
                rewarded=s["rewarded"],
                reward_sum=float(s["reward_sum"]),
                classified=s["classified"],
                successes=int(s["successes"]),
                eval_id=s["eval_id"],
            )
            for s in store.trajectories.task_sums(self.db, run_id, after_id, before)
        ]
        steps = (
            {}
            if task_id is None
            else store.trajectories.step_reward_sums(self.db, run_id, task_id, after_id, before)
        )
        return Feed(rows, skipped, steps, sum(r.attempts for r in skipped))

    def trajectory(self, trajectory_id: int) -> Trajectory | None:
        row = store.trajectories.get_trajectory(self.db, trajectory_id)
        return None if row is None else Trajectory.from_row(row)

    def group(self, trajectory_id: int) -> list[Trajectory]:
        """The G samples that share a trajectory's run, step, split and group, in sample order."""
        return [Trajectory.from_row(r) for r in store.trajectories.group_members(self.db, trajectory_id)]

    def step_rows(self, run_id: int, step: int, *, task_id: int | None = None) -> list[Trajectory]:
        """One training step's live episodes (of one task, if given): what the scores pane summarises."""
        flt = TrajectoryFilter(run_id, step_min=step, step_max=step, split="train", task_id=task_id)
        return self.page(flt, limit=10_000).rows

    # ---- labels, verifiers, commands -----------------------------------------------------------------

    def labels(self, trajectory_id: int) -> list[Label]:
        return [Label.from_row(r) for r in store.labels.labels_for(self.db, trajectory_id)]

    def add_label(self, trajectory_id: int, verdict: str, note: str = "") -> int:
        return store.labels.add_label(self.db, trajectory_id, verdict, note)

    def verifier(self, verifier_id: int) -> VerifierVersion | None:
        row = store.verifiers.get_verifier(self.db, verifier_id)
        return None if row is None else VerifierVersion.from_row(row)

    def active_verifier(self, run_id: int) -> VerifierVersion | None:
        row = store.verifiers.active_verifier(self.db, run_id)
        return None if row is None else VerifierVersion.from_row(row)

    def verifier_history(self, run_id: int) -> list[VerifierVersion]:
        return [VerifierVersion.from_row(v) for v in store.verifiers.verifier_history(self.db, run_id)]

    def dry_run(
        self,
        run_id: int,
        code: str,
        *,
        n: int,
        name: str,
        n_eval: int = 0,
        min_rows: int = 1,
        control: DryRunControl | None = None,
    ) -> DryRunOutcome:
        """Compile `code`, re-score the run's last `n` training and `n_eval` eval episodes with it, store the
        version and the results (the engine's `verifier_edit.dry_run`); ok only with >= `min_rows` re-scored.
        `control` (`dry_run_control()`): its progress, and a cancel from another thread (nothing stored)."""
        from workbench.verifier_edit import dry_run

        res = dry_run(
            self.db, run_id, code, n=n, n_eval=n_eval, name=name, min_rows=min_rows, control=control
        )
        return DryRunOutcome(
            res.verifier_id, res.ok, res.error, res.summary, [DryRunRow.from_row(r) for r in res.rows]
        )

    def enqueue(self, run_id: int, kind: str, payload: dict[str, Any] | None = None) -> int:
        """A command for the run's worker (pause, resume, stop, checkpoint, eval, set_verifier, ...). Its payload
        is checked against the command table first: PayloadError (naming the valid range) writes nothing."""
        check_command(kind, payload)
        return store.commands.enqueue(self.db, run_id, kind, payload)

    def command(self, command_id: int) -> Command | None:
        row = store.commands.get_command(self.db, command_id)
        return None if row is None else Command.from_row(row)


def dry_run_control() -> DryRunControl:
    """Progress and cancel for a `View.dry_run` in another thread (`done`, `total`, `cancel()`)."""
    from workbench.verifier_edit import DryRunControl

    return DryRunControl()


@dataclass(frozen=True)
class Feed:
    """One poll of a live run (`View.feed`): `rows`, oldest first, and what was skipped before them: per-task
    counts (`TaskStats.merge` folds them in), one task's step -> (reward sum, n), and how many rows."""

    rows: list[Trajectory]
    skipped: list[TaskRow] = field(default_factory=list)
    skipped_steps: dict[int, tuple[float, int]] = field(default_factory=dict)
    skipped_rows: int = 0


@dataclass(frozen=True)
class DryRunOutcome:
    verifier_id: int | None
    ok: bool
    error: str | None
    summary: dict[str, Any]
    rows: list[DryRunRow]
