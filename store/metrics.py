"""Step metrics, held-out evals and checkpoints: the rows behind the training curves and promotion."""

from __future__ import annotations

from typing import Any

import sqlite_utils

from store.db import dumps, now, write_txn
from store.rows import decode, one


def append_step(db: sqlite_utils.Database, run_id: int, step: int, metrics: dict[str, Any]) -> int:
    cur = db.execute(
        "INSERT INTO steps (run_id, step, metrics, created) VALUES (?, ?, ?, ?)", [run_id, step, dumps(metrics), now()]
    )
    return int(cur.lastrowid)


def steps_since(db: sqlite_utils.Database, run_id: int, after_step: int = -1) -> list[dict[str, Any]]:
    return decode(
        db.execute(
            "SELECT step, metrics, created FROM steps WHERE run_id = ? AND superseded = 0 AND step > ? ORDER BY step",
            [run_id, after_step],
        )
    )


def last_step(db: sqlite_utils.Database, run_id: int) -> int | None:
    row = db.execute("SELECT MAX(step) FROM steps WHERE run_id = ? AND superseded = 0", [run_id]).fetchone()
    return row[0]


def record_eval(
    db: sqlite_utils.Database,
    run_id: int,
    *,
    step: int,
    tasks: dict[str, Any],
    mode: str,
    metrics: dict[str, Any],
    checkpoint_id: int | None = None,
    is_baseline: bool = False,
) -> int:
    """`tasks` says what was evaluated (e.g. {"dataset": "calendar", "split": "held_out", "n": 60})."""
    cur = db.execute(
        "INSERT INTO evals (run_id, step, checkpoint_id, tasks, mode, is_baseline, metrics, created) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [run_id, step, checkpoint_id, dumps(tasks), mode, int(is_baseline), dumps(metrics), now()],
    )
    return int(cur.lastrowid)


def list_evals(db: sqlite_utils.Database, run_id: int, mode: str | None = None) -> list[dict[str, Any]]:
    sql, params = "SELECT * FROM evals WHERE run_id = ? AND superseded = 0", [run_id]
    if mode is not None:
        sql += " AND mode = ?"
        params.append(mode)
    return decode(db.execute(sql + " ORDER BY step, id", params))


def record_checkpoint(
    db: sqlite_utils.Database, run_id: int, *, step: int, kind: str, path: str, metrics: dict | None = None
) -> int:
    cur = db.execute(
        "INSERT INTO checkpoints (run_id, step, kind, path, created, metrics) VALUES (?, ?, ?, ?, ?, ?)",
        [run_id, step, kind, path, now(), dumps(metrics)],
    )
    return int(cur.lastrowid)


def list_checkpoints(db: sqlite_utils.Database, run_id: int) -> list[dict[str, Any]]:
    return decode(db.execute("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step, id", [run_id]))


def latest_checkpoint(db: sqlite_utils.Database, run_id: int) -> dict[str, Any] | None:
    return one(db.execute("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step DESC, id DESC LIMIT 1", [run_id]))


def promote_checkpoint(db: sqlite_utils.Database, checkpoint_id: int) -> None:
    """Make this the run's one promoted checkpoint (the best that beats the baseline)."""
    with write_txn(db):
        db.execute(
            "UPDATE checkpoints SET promoted = 0 WHERE run_id = (SELECT run_id FROM checkpoints WHERE id = ?)",
            [checkpoint_id],
        )
        db.execute("UPDATE checkpoints SET promoted = 1 WHERE id = ?", [checkpoint_id])


def promoted_checkpoint(db: sqlite_utils.Database, run_id: int) -> dict[str, Any] | None:
    return one(db.execute("SELECT * FROM checkpoints WHERE run_id = ? AND promoted = 1", [run_id]))
