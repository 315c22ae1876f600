"""Trajectories: batch inserts (one transaction a batch), keyset pages with filters, live follow by id.

Nothing is deleted: trajectories of a step past the last checkpoint are marked superseded on resume.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

from store.db import StoreError, dumps, now, write_txn
from store.rows import decode, one

# Insert columns and whether each is stored as JSON. Required ones have no default below.
COLUMNS: dict[str, bool] = {
    "run_id": False, "step": False, "split": False, "task_id": False, "group_idx": False, "sample_idx": False,
    "messages": True, "completion": False, "tool_calls": True, "reward": False, "reward_parts": True,
    "explanation": False, "verifier_id": False, "advantage": False, "prompt_tokens": False, "tokens": False,
    "truncated": False, "latency": False, "error": False, "checkpoint_id": False, "eval_id": False,
    "outcome": True,
}
REQUIRED = ("run_id", "step", "split", "messages", "completion")
DEFAULTS = {"group_idx": 0, "sample_idx": 0, "truncated": 0}  # the schema's defaults, for omitted fields
_INSERT_SQL = (
    f"INSERT INTO trajectories ({', '.join(COLUMNS)}, created) VALUES ({', '.join('?' for _ in COLUMNS)}, ?)"
)
# Summary columns for list views: everything but the (large) messages.
LIST_COLUMNS = (
    "id, run_id, step, split, task_id, group_idx, sample_idx, completion, tool_calls, reward, reward_parts, "
    "explanation, verifier_id, advantage, tokens, truncated, latency, error, outcome, superseded, created"
)


_NAMES = tuple(COLUMNS)
_JSON_AT = tuple(i for i, is_json in enumerate(COLUMNS.values()) if is_json)


def _row_values(row: dict[str, Any], t: float) -> list[Any]:
    if not row.keys() <= COLUMNS.keys():
        raise StoreError(f"trajectory has unknown field(s) {sorted(row.keys() - COLUMNS.keys())}; known: {list(COLUMNS)}")
    values = [row.get(k, DEFAULTS.get(k)) for k in _NAMES]
    for i in _JSON_AT:
        if values[i] is not None:
            values[i] = dumps(values[i])
    if any(row.get(k) is None for k in REQUIRED):
        raise StoreError(f"trajectory is missing required field(s) {[k for k in REQUIRED if row.get(k) is None]}")
    values.append(t)
    return values


def insert_trajectories(db: sqlite_utils.Database, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert a batch in one transaction (readers never see half of it); returns the new ids in order."""
    t = now()
    values = [_row_values(r, t) for r in rows]  # validate everything before writing anything
    with write_txn(db):
        start = db.execute("SELECT COALESCE(MAX(id), 0) FROM trajectories").fetchone()[0]
        db.conn.executemany(_INSERT_SQL, values)
    # Ids are contiguous: inside our write transaction nobody else can insert, and ids are MAX+1.
    return list(range(start + 1, start + 1 + len(values)))


def get_trajectory(db: sqlite_utils.Database, trajectory_id: int) -> dict[str, Any] | None:
    return one(db.execute("SELECT * FROM trajectories WHERE id = ?", [trajectory_id]))


@dataclass
class TrajectoryFilter:
    """Filters the UI offers. `text` matches completion or explanation (LIKE, case-insensitive ASCII)."""

    run_id: int
    step_min: int | None = None
    step_max: int | None = None
    split: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    task_id: int | None = None
    verifier_id: int | None = None
    text: str | None = None
    errors_only: bool = False
    include_superseded: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def where(self) -> tuple[list[str], list[Any]]:
        clauses, params = ["run_id = ?"], [self.run_id]
        for sql, value in (
            ("step >= ?", self.step_min), ("step <= ?", self.step_max), ("split = ?", self.split),
            ("reward >= ?", self.reward_min), ("reward <= ?", self.reward_max), ("task_id = ?", self.task_id),
            ("verifier_id = ?", self.verifier_id),
        ):
            if value is not None:
                clauses.append(sql)
                params.append(value)
        if self.text:
            clauses.append("(completion LIKE ? OR explanation LIKE ?)")
            params += [f"%{self.text}%"] * 2
        if self.errors_only:
            clauses.append("error IS NOT NULL")
        if not self.include_superseded:
            clauses.append("superseded = 0")
        return clauses, params


@dataclass
class Page:
    rows: list[dict[str, Any]]
    next_cursor: tuple | None  # pass back as `after` for the next page; None at the end


def page_trajectories(
    db: sqlite_utils.Database,
    flt: TrajectoryFilter,
    *,
    order: str = "id",
    descending: bool = True,
    after: tuple | None = None,
    limit: int = 50,
) -> Page:
    """One page by keyset pagination: constant time wherever the page is, at millions of rows.

    `after` is the previous page's `next_cursor` (opaque). Ordering by id with a step filter walks
    (step, id) instead, which is the same order for live rows and lets the step index serve it.
    """
    if order not in ("id", "reward", "step"):
        raise ValueError(f"order must be id, reward or step, not {order!r}")
    clauses, params = flt.where()
    if order == "id" and (flt.step_min is not None or flt.step_max is not None):
        order = "step"
    cmp = "<" if descending else ">"
    direction = "DESC" if descending else "ASC"
    if order == "id":
        if after is not None:
            clauses.append(f"id {cmp} ?")
            params.append(after[-1])
        rows = _select(db, clauses, params, f"id {direction}", limit)
    else:
        if order == "reward":
            clauses.append("reward IS NOT NULL")  # NULL rewards (errors) have no place in a reward order
        order_sql = f"{order} {direction}, id {direction}"
        if after is None:
            rows = _select(db, clauses, params, order_sql, limit)
        else:
            # (key, id) < (k, i) as two index range scans: SQLite turns the row-value form into a range
            # on `key` alone and then filters ids one by one, which is a scan when many rows share k.
            # The filter's own bounds on `key` are dropped: the cursor's bound is at least as tight, and
            # with both present the planner may walk the looser one.
            key, last_id = after
            unbounded = dataclasses.replace(flt, **{f"{order}_min": None, f"{order}_max": None})
            same, same_params = unbounded.where()
            rows = _select(db, [*same, f"{order} = ?", f"id {cmp} ?"], [*same_params, key, last_id], order_sql, limit)
            if len(rows) < limit:
                side = dataclasses.replace(flt, **{f"{order}_max" if descending else f"{order}_min": None})
                rest, rest_params = side.where()
                if order == "reward":
                    rest.append("reward IS NOT NULL")
                rows += _select(db, [*rest, f"{order} {cmp} ?"], [*rest_params, key], order_sql, limit - len(rows))
    cursor = None
    if len(rows) == limit:
        last = rows[-1]
        cursor = (last["id"],) if order == "id" else (last[order], last["id"])
    return Page(rows, cursor)


def _select(db: sqlite_utils.Database, clauses: list[str], params: list[Any], order_sql: str, limit: int) -> list[dict]:
    sql = f"SELECT {LIST_COLUMNS} FROM trajectories WHERE {' AND '.join(clauses)} ORDER BY {order_sql} LIMIT ?"
    return decode(db.execute(sql, [*params, limit]))


def trajectories_since(
    db: sqlite_utils.Database, run_id: int, after_id: int, *, limit: int = 500, full: bool = False
) -> list[dict[str, Any]]:
    """New rows of a run since `after_id`, oldest first: what a live pane polls."""
    cols = "*" if full else LIST_COLUMNS
    return decode(
        db.execute(
            f"SELECT {cols} FROM trajectories WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?", [run_id, after_id, limit]
        )
    )


def group_members(db: sqlite_utils.Database, trajectory_id: int) -> list[dict[str, Any]]:
    """The G samples that share a trajectory's run, step, split and group (for side-by-side view)."""
    row = db.execute(
        "SELECT run_id, step, split, group_idx, superseded, eval_id FROM trajectories WHERE id = ?", [trajectory_id]
    ).fetchone()
    if row is None:
        return []
    return decode(
        db.execute(
            "SELECT * FROM trajectories WHERE run_id = ? AND step = ? AND split = ? AND group_idx = ? "
            "AND superseded = ? AND eval_id IS ? ORDER BY sample_idx, id",
            list(row),
        )
    )


def step_rewards(db: sqlite_utils.Database, run_id: int, step: int, split: str = "train") -> list[dict[str, Any]]:
    return decode(
        db.execute(
            "SELECT id, reward, reward_parts, error FROM trajectories WHERE run_id = ? AND step = ? AND split = ? "
            "AND superseded = 0 ORDER BY id",
            [run_id, step, split],
        )
    )


def last_trajectories(db: sqlite_utils.Database, run_id: int, n: int, *, split: str = "train") -> list[dict[str, Any]]:
    """The newest n live trajectories with their messages (what a verifier dry run re-scores)."""
    return decode(
        db.execute(
            "SELECT * FROM trajectories WHERE run_id = ? AND split = ? AND superseded = 0 ORDER BY id DESC LIMIT ?",
            [run_id, split, n],
        )
    )


def mark_superseded(db: sqlite_utils.Database, run_id: int, after_step: int) -> int:
    """On resume from a checkpoint at `after_step`: hide (never delete) later steps' trajectories, step
    rows and evals (a later eval measured a policy the run no longer continues from)."""
    with write_txn(db):
        n = db.execute(
            "UPDATE trajectories SET superseded = 1 WHERE run_id = ? AND step > ? AND superseded = 0",
            [run_id, after_step],
        ).rowcount
        for table in ("steps", "evals"):
            db.execute(f"UPDATE {table} SET superseded = 1 WHERE run_id = ? AND step > ? AND superseded = 0",
                       [run_id, after_step])
    return n


def count_trajectories(db: sqlite_utils.Database, run_id: int) -> int:
    return db.execute("SELECT COUNT(*) FROM trajectories WHERE run_id = ?", [run_id]).fetchone()[0]
