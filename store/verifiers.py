"""Verifier versions: code text and its sha256, one active version per run, dry-run results."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import sqlite_utils

from store.db import StoreError, dumps, now, write_txn
from store.rows import decode, one


def add_verifier_version(
    db: sqlite_utils.Database,
    run_id: int | None,
    name: str,
    code: str,
    *,
    note: str = "",
    active: bool = False,
) -> int:
    """Store code as the next version of `name` for this run (identical code reuses its version)."""
    sha = hashlib.sha256(code.encode()).hexdigest()
    with write_txn(db):
        same = db.execute(
            "SELECT id FROM verifiers WHERE run_id IS ? AND name = ? AND sha256 = ?", [run_id, name, sha]
        ).fetchone()
        if same:
            vid = int(same[0])
        else:
            version = db.execute(
                "SELECT COALESCE(MAX(version), 0) + 1 FROM verifiers WHERE run_id IS ? AND name = ?",
                [run_id, name],
            ).fetchone()[0]
            vid = int(
                db.execute(
                    "INSERT INTO verifiers (run_id, name, version, code, sha256, created, note) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [run_id, name, version, code, sha, now(), note],
                ).lastrowid
            )
        if active:
            activate_verifier(db, vid)
    return vid


def activate_verifier(db: sqlite_utils.Database, verifier_id: int) -> None:
    with write_txn(db):
        row = db.execute("SELECT run_id FROM verifiers WHERE id = ?", [verifier_id]).fetchone()
        if row is None:
            raise StoreError(f"verifier {verifier_id} does not exist")
        db.execute("UPDATE verifiers SET active = 0 WHERE run_id IS ? AND active = 1", [row[0]])
        db.execute("UPDATE verifiers SET active = 1 WHERE id = ?", [verifier_id])


def active_verifier(db: sqlite_utils.Database, run_id: int) -> dict[str, Any] | None:
    return one(db.execute("SELECT * FROM verifiers WHERE run_id = ? AND active = 1", [run_id]))


def get_verifier(db: sqlite_utils.Database, verifier_id: int) -> dict[str, Any] | None:
    return one(db.execute("SELECT * FROM verifiers WHERE id = ?", [verifier_id]))


def verifier_history(db: sqlite_utils.Database, run_id: int) -> list[dict[str, Any]]:
    return decode(db.execute("SELECT * FROM verifiers WHERE run_id = ? ORDER BY name, version", [run_id]))


def record_dry_run(
    db: sqlite_utils.Database, verifier_id: int, results: Sequence[dict[str, Any]], summary: dict[str, Any]
) -> None:
    """Replace this version's dry run: rows of trajectory_id, old_reward, new_reward, new_parts, explanation, error."""
    with write_txn(db):
        db.execute("DELETE FROM dry_runs WHERE verifier_id = ?", [verifier_id])
        db.conn.executemany(
            "INSERT INTO dry_runs (verifier_id, trajectory_id, old_reward, new_reward, new_parts, explanation, error) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                [
                    verifier_id,
                    r["trajectory_id"],
                    r.get("old_reward"),
                    r.get("new_reward"),
                    dumps(r.get("new_parts")),
                    r.get("explanation"),
                    r.get("error"),
                ]
                for r in results
            ],
        )
        db.execute("UPDATE verifiers SET dry_run = ? WHERE id = ?", [dumps(summary), verifier_id])


def dry_run_rows(db: sqlite_utils.Database, verifier_id: int) -> list[dict[str, Any]]:
    """Changed rewards first (largest change on top), then the rest by trajectory."""
    return decode(
        db.execute(
            "SELECT d.*, (SELECT verdict FROM labels l WHERE l.trajectory_id = d.trajectory_id "
            "ORDER BY l.id DESC LIMIT 1) "
            "AS label FROM dry_runs d WHERE verifier_id = ? "
            "ORDER BY (d.error IS NULL AND ABS(COALESCE(d.new_reward, 0) - COALESCE(d.old_reward, 0)) < 1e-9), "
            "ABS(COALESCE(d.new_reward, 0) - COALESCE(d.old_reward, 0)) DESC, d.trajectory_id",
            [verifier_id],
        )
    )
