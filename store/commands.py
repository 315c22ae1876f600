"""The command bus from the UI to the worker: enqueue, claim exactly once, answer with a result."""

from __future__ import annotations

from typing import Any

import sqlite_utils

from store.db import dumps, now, write_txn
from store.rows import decode, one

# The kinds of `workbench.run.commands.COMMANDS` (the one table of commands: payloads, drivers, keys). A copy,
# because the store may not import the engine; tests/tui/test_command_specs.py holds the two equal. A parameter
# instead would let each writer pass its own list: this way every writer (UI, CLI, launcher, tests) is refused
# a kind no driver reads.
KINDS = (
    "pause",
    "resume",
    "checkpoint",
    "eval",
    "set_lr",
    "set_temperature",
    "sample",
    "set_verifier",
    "stop",
)


def enqueue(db: sqlite_utils.Database, run_id: int, kind: str, payload: dict[str, Any] | None = None) -> int:
    if kind not in KINDS:
        raise ValueError(f"unknown command {kind!r}; one of {KINDS}")
    cur = db.execute(
        "INSERT INTO commands (run_id, kind, payload, created) VALUES (?, ?, ?, ?)",
        [run_id, kind, dumps(payload), now()],
    )
    return int(cur.lastrowid)


def claim_next(db: sqlite_utils.Database, run_id: int) -> dict[str, Any] | None:
    """The oldest pending command, marked claimed in the same statement so no two workers get it."""
    with write_txn(db):
        return one(
            db.execute(
                "UPDATE commands SET status = 'claimed', claimed = ? WHERE id = (SELECT id FROM commands "
                "WHERE run_id = ? AND status = 'pending' ORDER BY id LIMIT 1) RETURNING *",
                [now(), run_id],
            )
        )


def finish(
    db: sqlite_utils.Database, command_id: int, result: dict[str, Any] | None = None, *, ok: bool = True
) -> None:
    db.execute(
        "UPDATE commands SET status = ?, handled = ?, result = ? WHERE id = ?",
        ["done" if ok else "failed", now(), dumps(result), command_id],
    )


def fail_claimed(db: sqlite_utils.Database, run_id: int, reason: str) -> int:
    """Answer commands a dead worker claimed and never answered, so the UI stops waiting for them."""
    return db.execute(
        "UPDATE commands SET status = 'failed', handled = ?, result = ? WHERE run_id = ? AND status = 'claimed'",
        [now(), dumps({"error": reason}), run_id],
    ).rowcount


def get_command(db: sqlite_utils.Database, command_id: int) -> dict[str, Any] | None:
    return one(db.execute("SELECT * FROM commands WHERE id = ?", [command_id]))


def pending(db: sqlite_utils.Database, run_id: int) -> list[dict[str, Any]]:
    return decode(
        db.execute("SELECT * FROM commands WHERE run_id = ? AND status = 'pending' ORDER BY id", [run_id])
    )
