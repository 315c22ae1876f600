"""Human labels on trajectories: good/bad with a note. The newest label of a trajectory is its verdict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlite_utils

from store.db import StoreError, now
from store.rows import decode


def add_label(db: sqlite_utils.Database, trajectory_id: int, verdict: str, note: str = "") -> int:
    if verdict not in ("good", "bad"):
        raise StoreError(f"label verdict must be 'good' or 'bad', not {verdict!r}")
    cur = db.execute(
        "INSERT INTO labels (trajectory_id, verdict, note, created) VALUES (?, ?, ?, ?)",
        [trajectory_id, verdict, note, now()],
    )
    return int(cur.lastrowid)


def labels_for(db: sqlite_utils.Database, trajectory_id: int) -> list[dict[str, Any]]:
    return decode(db.execute("SELECT * FROM labels WHERE trajectory_id = ? ORDER BY id", [trajectory_id]))


def verdicts(db: sqlite_utils.Database, trajectory_ids: Sequence[int]) -> dict[int, str]:
    """Newest verdict per trajectory, for the given ids."""
    if not trajectory_ids:
        return {}
    marks = ", ".join("?" for _ in trajectory_ids)
    rows = db.execute(
        f"SELECT trajectory_id, verdict FROM labels WHERE id IN (SELECT MAX(id) FROM labels "
        f"WHERE trajectory_id IN ({marks}) GROUP BY trajectory_id)",
        list(trajectory_ids),
    ).fetchall()
    return {int(t): v for t, v in rows}
