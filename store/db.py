"""Opening a Workbench database: WAL, foreign keys, schema version check, forward-only migrations.

One `Database` per thread and per process (sqlite3's check_same_thread); open another for each worker.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from store.schema import MIGRATIONS, SCHEMA_VERSION


class StoreError(Exception):
    """A database that cannot be used, with a message that names the file and says what to do.
    `exit_code`: what `workbench` exits with (the kinds' table is in workbench/errors.py, which the store
    may not import)."""

    exit_code = 2


class SchemaTooNewError(StoreError):
    exit_code = 6


class DiskFullError(StoreError):
    """A write the disk refused (full, over a file-size limit, failing); the transaction was rolled back whole."""

    exit_code = 7


def now() -> float:
    return time.time()


# One encoder for all writes: json.dumps with options would build a new encoder on every call.
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def dumps(value: Any) -> str | None:
    return None if value is None else _encode(value)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@contextmanager
def write_txn(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """A transaction that takes the write lock at BEGIN. A deferred one that reads then writes can fail
    at once in WAL mode (SQLITE_BUSY_SNAPSHOT, not retried by busy_timeout) when another process wrote
    in between; this one waits its turn instead."""
    if db.conn.in_transaction:  # nested: join the caller's transaction
        yield db
        return
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.conn.execute("COMMIT")
    except BaseException as exc:
        if db.conn.in_transaction:
            # After an I/O error SQLite may have rolled back already; the journal undoes the rest.
            with contextlib.suppress(sqlite3.Error):
                db.conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError) and _is_write_failure(exc):
            raise DiskFullError(
                f"{db_file(db)}: the write failed ({exc}: the disk is full or failing); nothing of this write "
                "was kept; free space, then resume the run"
            ) from exc
        raise


def _is_write_failure(exc: sqlite3.OperationalError) -> bool:
    # SQLITE_FULL on ENOSPC; SQLITE_IOERR_* when the OS refuses the write (EFBIG past RLIMIT_FSIZE, EIO).
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name == "SQLITE_FULL" or name.startswith("SQLITE_IOERR") or "disk is full" in str(exc)


def db_file(db: sqlite_utils.Database) -> str:
    """The database's file path, for messages."""
    row = db.execute("PRAGMA database_list").fetchone()
    return row[2] if row and row[2] else "<memory>"


def open_db(
    path: str | Path, *, create: bool = True, readonly: bool = False, check: bool = False
) -> sqlite_utils.Database:
    """Open (and create or migrate) the store at `path`; raise StoreError with a clear message otherwise.
    `check`: run `PRAGMA quick_check` first (reads every page once) and refuse a damaged file, naming the pages
    it reports, before anything reads rows from it or migrates it: what resume, report, export and ls pass."""
    path = Path(path)
    if not path.exists() and not create:
        raise StoreError(f"{path}: no such database (create one with `workbench train` or `workbench demo`)")
    if path.exists() and path.is_dir():
        raise StoreError(f"{path}: is a directory, not a Workbench database file")
    try:
        if readonly:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        else:
            conn = sqlite3.connect(str(path), timeout=30)
        db = sqlite_utils.Database(conn)
        db.execute("PRAGMA busy_timeout = 30000")
        db.execute("PRAGMA foreign_keys = ON")
        if not readonly:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")  # safe in WAL: a crash loses no committed txn
        db.execute("PRAGMA cache_size = -65536")  # 64 MiB: index pages of a busy run stay in memory
        if check:
            _quick_check(db, path)
        _migrate(db, path, readonly=readonly)
    except StoreError:
        db.conn.close()
        raise
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"{path}: not a usable SQLite database ({exc}); move it aside or pass another --db"
        ) from exc
    return db


QUICK_CHECK_LINES = 10  # quick_check stops after this many problems; the message quotes the first 3


def _quick_check(db: sqlite_utils.Database, path: Path) -> None:
    """StoreError naming the damaged pages (from quick_check's own lines: "On tree page 54 cell 29: ..."), if any."""
    fix = (
        f"nothing was read or changed. Restore it from a backup, or copy out what is readable: "
        f"sqlite3 {path} .recover | sqlite3 recovered.db"
    )
    try:
        rows = [row[0] for row in db.execute(f"PRAGMA quick_check({QUICK_CHECK_LINES})").fetchall()]
    except sqlite3.DatabaseError as exc:  # a page so damaged that the check itself cannot walk past it
        raise StoreError(
            f"{path}: the database is damaged (PRAGMA quick_check stopped: {exc}); {fix}"
        ) from exc
    if rows == ["ok"]:
        return
    lines = [ln for row in rows for ln in str(row).splitlines() if ln.strip() and not ln.startswith("***")]
    pages = sorted({int(n) for ln in lines for n in re.findall(r"page (\d+)", ln)})
    named = f"page(s) {', '.join(map(str, pages))}: " if pages else ""
    raise StoreError(
        f"{path}: the database is damaged ({named}PRAGMA quick_check: {'; '.join(lines[:3])}"
        f"{' ...' if len(lines) > 3 else ''}); {fix}"
    )


def schema_version(db: sqlite_utils.Database) -> int:
    if "schema_version" not in db.table_names():
        return 0
    row = db.execute("SELECT version FROM schema_version WHERE id = 1").fetchone()
    return int(row[0]) if row else 0


def _migrate(db: sqlite_utils.Database, path: Path, *, readonly: bool) -> None:
    version = schema_version(db)
    if version > SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"{path}: schema version {version} is newer than this Workbench understands ({SCHEMA_VERSION}); "
            "upgrade agent-workbench to open it (nothing was changed)"
        )
    if version == 0 and db.table_names() and "schema_version" not in db.table_names():
        raise StoreError(
            f"{path}: is an SQLite file but not a Workbench database (tables: {db.table_names()[:5]})"
        )
    if version == SCHEMA_VERSION or readonly:
        return
    # The write lock is taken first, so two processes opening a new file migrate it once.
    with write_txn(db):
        version = schema_version(db)
        for target, statements in MIGRATIONS:
            if target <= version:
                continue
            for sql in statements:
                db.execute(sql)
            db.execute(
                "INSERT INTO schema_version (id, version, migrated) VALUES (1, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET version = excluded.version, migrated = excluded.migrated",
                [target, now()],
            )


def integrity_ok(db: sqlite_utils.Database) -> bool:
    return db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
