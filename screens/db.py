"""Store connections for the UI: one on the event-loop thread for quick indexed reads (timers), and a
fresh one inside each thread worker (sqlite3 connections belong to the thread that opened them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlite_utils

import store


def open_ui_db(path: str | Path) -> sqlite_utils.Database:
    # Never create a database from the UI: a typo in --db should be an error, not an empty project.
    return store.open_db(path, create=False)


@contextmanager
def thread_db(path: str | Path) -> Iterator[sqlite_utils.Database]:
    db = open_ui_db(path)
    try:
        yield db
    finally:
        db.conn.close()


@contextmanager
def read_snapshot(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """A read transaction: every query inside sees the same WAL snapshot (no write lock is taken)."""
    own = not db.conn.in_transaction
    if own:
        db.execute("BEGIN")
    try:
        yield db
    finally:
        if own and db.conn.in_transaction:
            db.execute("COMMIT")
