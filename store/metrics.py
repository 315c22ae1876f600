"""Step metrics, held-out evals and checkpoints: the rows behind the training curves and promotion.

Metrics are stored as valid JSON: a NaN or infinite value (a diverged loss, a gradient norm) is written as
null and named under the "nonfinite" key ({"loss": "nan"}), since SQLite's json_extract rejects a bare
NaN as malformed and Python readers take null and NaN alike as "no value".
"""

from __future__ import annotations

import math
from typing import Any

import sqlite_utils

from store.db import dumps, now, write_txn
from store.rows import decode, one

NONFINITE = "nonfinite"  # the key that names the values stored as null because they were NaN or infinite


def json_metrics(metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    """`metrics` with every NaN/inf float (at any depth) as None, and `NONFINITE` mapping where each was
    (a dotted path; "[i]" in lists) to "nan", "inf" or "-inf". Unchanged when every number is finite."""
    if metrics is None:
        return None
    flags: dict[str, str] = {}

    def clean(value: Any, path: str) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            flags[path] = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
            return None
        if isinstance(value, dict):
            return {k: clean(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    out = clean(metrics, "")
    if flags:
        out[NONFINITE] = flags
    return out


def append_step(db: sqlite_utils.Database, run_id: int, step: int, metrics: dict[str, Any]) -> int:
    cur = db.execute(
        "INSERT INTO steps (run_id, step, metrics, created) VALUES (?, ?, ?, ?)",
        [run_id, step, dumps(json_metrics(metrics)), now()],
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
        [
            run_id,
            step,
            checkpoint_id,
            dumps(tasks),
            mode,
            int(is_baseline),
            dumps(json_metrics(metrics)),
            now(),
        ],
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
        [run_id, step, kind, path, now(), dumps(json_metrics(metrics))],
    )
    return int(cur.lastrowid)


def list_checkpoints(db: sqlite_utils.Database, run_id: int) -> list[dict[str, Any]]:
    return decode(db.execute("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step, id", [run_id]))


def latest_checkpoint(db: sqlite_utils.Database, run_id: int) -> dict[str, Any] | None:
    return one(
        db.execute("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step DESC, id DESC LIMIT 1", [run_id])
    )


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


def eval_row_counts(db: sqlite_utils.Database, eval_ids: list[int]) -> dict[int, int]:
    """How many trajectory rows each of these evals has (an eval written before evals were atomic may have 0)."""
    if not eval_ids:
        return {}
    marks = ", ".join("?" * len(eval_ids))
    rows = db.execute(
        f"SELECT eval_id, COUNT(*) FROM trajectories WHERE eval_id IN ({marks}) GROUP BY eval_id",
        list(eval_ids),
    ).fetchall()
    return {int(e): int(n) for e, n in rows}


def supersede_evals(db: sqlite_utils.Database, eval_ids: list[int]) -> None:
    """Hide (never delete) these evals and their rows: a half-written eval about to be redone, or one of a
    policy the run no longer continues from."""
    if not eval_ids:
        return
    marks = ", ".join("?" * len(eval_ids))
    with write_txn(db):
        db.execute(f"UPDATE evals SET superseded = 1 WHERE id IN ({marks})", list(eval_ids))
        db.execute(f"UPDATE trajectories SET superseded = 1 WHERE eval_id IN ({marks})", list(eval_ids))
