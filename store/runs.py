"""Runs, their status, the worker's lock and heartbeat, and the events log."""

from __future__ import annotations

import os
import secrets
import socket
import sqlite3
from typing import Any

import sqlite_utils

from store.db import DiskFullError, StoreError, dumps, now, write_txn
from store.rows import decode, one

# Status values the worker writes; the UI shows them as they are.
STATUSES = (
    "created",
    "starting",
    "running",
    "pausing",
    "paused",
    "stopping",
    "stopped",
    "crashed",
    "finished",
)


class RunLockedError(StoreError):
    """Another live worker holds this run."""

    exit_code = 8


def create_run(
    db: sqlite_utils.Database, *, name: str, model: str, config: dict[str, Any], harness: dict | None = None
) -> int:
    t = now()
    cur = db.execute(
        "INSERT INTO runs (name, model, config, harness, status, created, updated) "
        "VALUES (?, ?, ?, ?, 'created', ?, ?)",
        [name, model, dumps(config), dumps(harness), t, t],
    )
    return int(cur.lastrowid)


def get_run(db: sqlite_utils.Database, run_id: int) -> dict[str, Any]:
    row = one(db.execute("SELECT * FROM runs WHERE id = ?", [run_id]))
    if row is None:
        raise StoreError(f"run {run_id} does not exist")
    return row


def list_runs(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    return decode(db.execute("SELECT * FROM runs ORDER BY id DESC"))


def set_status(
    db: sqlite_utils.Database, run_id: int, status: str, reason: str = "", *, error: str | None = None
) -> None:
    """Record a state change with its time and reason, in the run row and as an event."""
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}; one of {STATUSES}")
    t = now()
    with write_txn(db):
        db.execute(
            "UPDATE runs SET status = ?, status_reason = ?, updated = ?, error = COALESCE(?, error) WHERE id = ?",
            [status, reason, t, error, run_id],
        )
        add_event(db, run_id, "status", f"{status}: {reason}" if reason else status, {"status": status})


def mark_pausing(db: sqlite_utils.Database, run_id: int) -> bool:
    """running -> pausing when a pause is queued, in one statement (never over a later "paused")."""
    with write_txn(db):
        changed = db.execute(
            "UPDATE runs SET status = 'pausing', status_reason = 'pause requested; obeyed at the next safe point', "
            "updated = ? WHERE id = ? AND status = 'running' AND EXISTS (SELECT 1 FROM commands "
            "WHERE run_id = ? AND kind = 'pause' AND status = 'pending')",
            [now(), run_id, run_id],
        ).rowcount
        if changed:
            add_event(db, run_id, "status", "pausing: pause requested", {"status": "pausing"})
    return bool(changed)


def unmark_pausing(db: sqlite_utils.Database, run_id: int) -> None:
    """pausing -> running when no pause is queued any more (it was followed by a resume)."""
    db.execute(
        "UPDATE runs SET status = 'running', status_reason = 'pause cancelled by resume', updated = ? "
        "WHERE id = ? AND status = 'pausing' AND NOT EXISTS (SELECT 1 FROM commands "
        "WHERE run_id = ? AND kind = 'pause' AND status = 'pending')",
        [now(), run_id, run_id],
    )


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (a zombie, killed but not yet reaped, counts as gone).
    When in doubt it says alive: the caller then falls back to the heartbeat rule."""
    if pid <= 0:  # 0 and negatives would signal a process group
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, under another user
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):  # no /proc (macOS), or it ended just now: kill() said it exists
        return True


def local_worker_gone(host: str | None, pid: int | None) -> bool:
    """The lock holder ran on this host (`socket.gethostname()`) and its process is gone (kill -9, the OOM
    killer): no need to wait for its heartbeat to go stale. False for another host or an unknown pid, where
    only the heartbeat can tell. One home for the rule: `acquire_lock` and `workbench.view` (the UI's banner)."""
    return pid is not None and host == socket.gethostname() and not pid_alive(pid)


def acquire_lock(db: sqlite_utils.Database, run_id: int, *, stale_after_s: float) -> str:
    """Take the run's single-worker lock; steal it only if the holder's heartbeat is older than
    `stale_after_s` (the engine's liveness rule, `workbench.view.run_state.STALE_AFTER_S`), or at once when
    the holder ran on this host and its process is gone (`local_worker_gone`)."""
    token = secrets.token_hex(8)
    t = now()
    with write_txn(db):
        row = db.execute(
            "SELECT lock_token, heartbeat, worker_pid, worker_host FROM runs WHERE id = ?", [run_id]
        ).fetchone()
        if row is None:
            raise StoreError(f"run {run_id} does not exist")
        held, beat, pid, host = row
        fresh = held and beat is not None and t - beat < stale_after_s
        gone = bool(held) and local_worker_gone(host, pid)
        if fresh and not gone:
            raise RunLockedError(
                f"run {run_id} already has a live worker (pid {pid} on {host}, heartbeat {t - beat:.0f} s ago); "
                "attach to it with `workbench tui`, or stop it first"
            )
        db.execute(
            "UPDATE runs SET lock_token = ?, heartbeat = ?, worker_pid = ?, worker_host = ? WHERE id = ?",
            [token, t, os.getpid(), socket.gethostname(), run_id],
        )
        if held:
            why = (
                "its process is gone"
                if gone
                else (f"heartbeat {t - beat:.0f} s old" if beat is not None else "no heartbeat")
            )
            add_event(
                db,
                run_id,
                "lock",
                f"worker pid {os.getpid()} took the lock over from pid {pid} on {host} ({why})",
                {"from_pid": pid, "from_host": host, "pid": os.getpid()},
            )
    return token


def heartbeat(db: sqlite_utils.Database, run_id: int, token: str) -> bool:
    """Refresh the heartbeat; False when the lock was stolen (the worker must then stop writing)."""
    cur = db.execute("UPDATE runs SET heartbeat = ? WHERE id = ? AND lock_token = ?", [now(), run_id, token])
    return cur.rowcount == 1


def release_lock(db: sqlite_utils.Database, run_id: int, token: str) -> None:
    db.execute(
        "UPDATE runs SET lock_token = NULL, heartbeat = NULL WHERE id = ? AND lock_token = ?", [run_id, token]
    )


def record_crash(db: sqlite_utils.Database, run_id: int, reason: str) -> None:
    """The status write of last resort, when `set_status("crashed", ...)` failed on a full disk (else `workbench
    ls` would go on saying "running"): free what can be freed, then change the run row in place. A checkpoint
    of the WAL copies its frames into pages the database already has and lets the next write start the WAL
    over from its beginning (space already allocated); TRUNCATE also hands the WAL's space back. The row then
    changes without an event row or the traceback, so no new page is needed. DiskFullError when even that
    fails (the caller reports the crash where it can: its log)."""
    for mode in ("PASSIVE", "TRUNCATE"):  # PASSIVE never waits for readers; TRUNCATE may (busy_timeout)
        try:
            db.execute(f"PRAGMA wal_checkpoint({mode})")
            with write_txn(db):
                db.execute(
                    "UPDATE runs SET status = 'crashed', status_reason = ?, updated = ? WHERE id = ?",
                    [reason[:500], now(), run_id],
                )
            return
        except (sqlite3.Error, DiskFullError):
            if mode == "TRUNCATE":
                raise


def add_event(
    db: sqlite_utils.Database, run_id: int | None, kind: str, message: str, data: Any = None
) -> int:
    # In a write transaction (joined when the caller holds one): a full disk is then DiskFullError with its
    # message, never a raw sqlite3.OperationalError from a progress report.
    with write_txn(db):
        cur = db.execute(
            "INSERT INTO events (run_id, kind, message, data, created) VALUES (?, ?, ?, ?, ?)",
            [run_id, kind, message, dumps(data), now()],
        )
    return int(cur.lastrowid)


def _not_kinds(exclude: tuple[str, ...]) -> tuple[str, list[str]]:
    return (f" AND kind NOT IN ({', '.join('?' * len(exclude))})", list(exclude)) if exclude else ("", [])


def events_since(
    db: sqlite_utils.Database,
    run_id: int,
    after_id: int = 0,
    limit: int = 200,
    *,
    exclude_kinds: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    where, args = _not_kinds(exclude_kinds)
    return decode(
        db.execute(
            f"SELECT * FROM events WHERE run_id = ? AND id > ?{where} ORDER BY id LIMIT ?",
            [run_id, after_id, *args, limit],
        )
    )


def last_events(
    db: sqlite_utils.Database, run_id: int, n: int, *, exclude_kinds: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The run's newest n events, oldest first."""
    where, args = _not_kinds(exclude_kinds)
    return decode(
        db.execute(
            f"SELECT * FROM (SELECT * FROM events WHERE run_id = ?{where} ORDER BY id DESC LIMIT ?) ORDER BY id",
            [run_id, *args, n],
        )
    )


def latest_event(db: sqlite_utils.Database, run_id: int, kind: str) -> dict[str, Any] | None:
    """The run's newest event of one kind (walks the (run_id, id) index backwards)."""
    rows = decode(
        db.execute(
            "SELECT * FROM events WHERE run_id = ? AND kind = ? ORDER BY id DESC LIMIT 1", [run_id, kind]
        )
    )
    return rows[0] if rows else None
