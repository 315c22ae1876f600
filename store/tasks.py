"""Tasks: stored once per (dataset, task key); trajectories point at them by id."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlite_utils

from store.db import dumps, write_txn
from store.rows import decode, one


def add_tasks(db: sqlite_utils.Database, tasks: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Insert or refresh tasks; returns {key: id}. Each dict: key, dataset, split, prompt, expected_tool,
    expected_args, tools, extra (anything else the engine wants back)."""
    ids: dict[str, int] = {}
    with write_txn(db):
        for t in tasks:
            cur = db.execute(
                "INSERT INTO tasks (key, dataset, split, prompt, expected_tool, expected_args, tools, extra) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET dataset = excluded.dataset, "
                "split = excluded.split, prompt = excluded.prompt, expected_tool = excluded.expected_tool, "
                "expected_args = excluded.expected_args, tools = excluded.tools, extra = excluded.extra "
                "RETURNING id",
                [
                    t["key"],
                    t.get("dataset", "custom"),
                    t.get("split", "train"),
                    t["prompt"],
                    t.get("expected_tool"),
                    dumps(t.get("expected_args")),
                    dumps(t.get("tools")),
                    dumps(t.get("extra")),
                ],
            )
            ids[t["key"]] = int(cur.fetchone()[0])
    return ids


def get_task(db: sqlite_utils.Database, task_id: int) -> dict[str, Any] | None:
    return one(db.execute("SELECT * FROM tasks WHERE id = ?", [task_id]))


def list_tasks(
    db: sqlite_utils.Database, *, dataset: str | None = None, split: str | None = None
) -> list[dict[str, Any]]:
    where, params = ["1 = 1"], []
    if dataset is not None:
        where.append("dataset = ?")
        params.append(dataset)
    if split is not None:
        where.append("split = ?")
        params.append(split)
    return decode(db.execute(f"SELECT * FROM tasks WHERE {' AND '.join(where)} ORDER BY id", params))


def task_stats(db: sqlite_utils.Database, run_id: int) -> list[dict[str, Any]]:
    """Per task, split and eval of the live rows (eval_id NULL: rows of no eval, the training rollouts of every
    step): attempts, rewarded (rows with a reward) and their reward sum, classified (rows with a stored outcome)
    and successes (outcome.success, the engine's rule). Two evals of one task are two rows: each is one policy."""
    return decode(
        db.execute(
            "SELECT t.task_id, t.split, t.eval_id, k.prompt, k.expected_tool, COUNT(*) AS attempts, "
            "COUNT(t.reward) AS rewarded, COALESCE(SUM(t.reward), 0.0) AS reward_sum, COUNT(t.outcome) AS classified, "
            "COALESCE(SUM(json_extract(t.outcome, '$.success')), 0) AS successes "
            "FROM trajectories t JOIN tasks k ON k.id = t.task_id "
            "WHERE t.run_id = ? AND t.superseded = 0 GROUP BY t.task_id, t.split, t.eval_id "
            "ORDER BY t.task_id, t.split, t.eval_id",
            [run_id],
        )
    )
