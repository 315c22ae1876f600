"""Trajectories: batch inserts (one transaction a batch), keyset pages with filters, live follow by id.

Nothing is deleted: trajectories of a step past the last checkpoint are marked superseded on resume.

Shared prefixes are stored once (schema v4): a row's leading `prefix_messages` messages (default: its leading
system messages) go to the `prefixes` table by content hash, and so do the first `token_prefix_len` prompt ids
of its `token_trace`. Every full-row read puts them back, so callers see whole `messages` and traces.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

from store import tokens
from store.db import StoreError, dumps, loads, now, write_txn
from store.rows import decode, one

# Insert columns and whether each is stored as JSON. Required ones have no default below.
COLUMNS: dict[str, bool] = {
    "run_id": False,
    "step": False,
    "split": False,
    "task_id": False,
    "group_idx": False,
    "sample_idx": False,
    "messages": True,
    "completion": False,
    "tool_calls": True,
    "reward": False,
    "reward_parts": True,
    "explanation": False,
    "verifier_id": False,
    "advantage": False,
    "prompt_tokens": False,
    "tokens": False,
    "truncated": False,
    "latency": False,
    "error": False,
    "checkpoint_id": False,
    "eval_id": False,
    "outcome": True,
    "prefix": False,
    "token_trace": False,
}
# Insert-only hints, not columns: how much of a row is shared with its step (see the module docstring).
HINTS = ("prefix_messages", "token_prefix_len")
_ALLOWED = frozenset(COLUMNS) | frozenset(HINTS)
REQUIRED = ("run_id", "step", "split", "messages", "completion")
DEFAULTS = {"group_idx": 0, "sample_idx": 0, "truncated": 0}  # the schema's defaults, for omitted fields
_INSERT_SQL = (
    f"INSERT INTO trajectories ({', '.join(COLUMNS)}, created) VALUES ({', '.join('?' for _ in COLUMNS)}, ?)"
)
# Summary columns for list views: everything but the (large) messages.
LIST_COLUMNS = (
    "id, run_id, step, split, task_id, group_idx, sample_idx, completion, tool_calls, reward, reward_parts, "
    "explanation, verifier_id, advantage, tokens, truncated, latency, error, outcome, superseded, eval_id, "
    "checkpoint_id, created"
)


_NAMES = tuple(COLUMNS)
_JSON_AT = tuple(i for i, is_json in enumerate(COLUMNS.values()) if is_json and _NAMES[i] != "messages")
_MESSAGES_AT = _NAMES.index("messages")
_PREFIX_AT = _NAMES.index("prefix")
_TRACE_AT = _NAMES.index("token_trace")
_INSERT_PREFIX_SQL = "INSERT OR IGNORE INTO prefixes (hash, kind, body, created) VALUES (?, ?, ?, ?)"


def _digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=16).digest()


class _Prefixes:
    """The distinct prefixes of one batch, keyed by content: hashed once each, written once each."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[str, str, Any]] = {}  # hash -> (hash, kind, body)
        self._by_body: dict[Any, str] = {}

    def add(self, kind: str, body: str | bytes) -> str:
        key = self._by_body.get(body)
        if key is None:
            raw = body.encode() if isinstance(body, str) else body
            key = _digest(kind.encode() + b"\0" + raw).hex()
            self._by_body[body] = key
            self.rows[key] = (key, kind, body)
        return key


def _shared_messages(row: dict[str, Any], messages: list[Any]) -> int:
    n = row.get("prefix_messages")
    if n is None:  # by default the leading system messages: the harness, identical across a run
        n = 0
        for m in messages:
            if not (isinstance(m, dict) and m.get("role") == "system"):
                break
            n += 1
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= len(messages):
        raise StoreError(f"trajectory prefix_messages must be an int in 0..{len(messages)}, got {n!r}")
    return n


def _row_values(row: dict[str, Any], t: float, prefixes: _Prefixes) -> list[Any]:
    if not row.keys() <= _ALLOWED:
        raise StoreError(
            f"trajectory has unknown field(s) {sorted(row.keys() - _ALLOWED)}; known: {list(COLUMNS)}"
        )
    if any(row.get(k) is None for k in REQUIRED):
        raise StoreError(
            f"trajectory is missing required field(s) {[k for k in REQUIRED if row.get(k) is None]}"
        )
    values = [row.get(k, DEFAULTS.get(k)) for k in _NAMES]
    for i in _JSON_AT:
        if values[i] is not None:
            values[i] = dumps(values[i])
    messages = row["messages"]
    if isinstance(messages, list):
        n = _shared_messages(row, messages)
        values[_PREFIX_AT] = prefixes.add("messages", dumps(messages[:n])) if n else None
        values[_MESSAGES_AT] = dumps(messages[n:] if n else messages)
    else:
        values[_PREFIX_AT] = None
        values[_MESSAGES_AT] = dumps(messages)
    trace = row.get("token_trace")
    if trace is not None:
        values[_TRACE_AT] = _trace_blob(row, trace, prefixes)
    values.append(t)
    return values


def _trace_blob(row: dict[str, Any], trace: Any, prefixes: _Prefixes) -> bytes:
    if isinstance(trace, bytes):
        return trace
    if not isinstance(trace, list) or not all(isinstance(s, dict) for s in trace):
        raise StoreError(
            "trajectory token_trace must be a list of {prompt_ids, completion_ids, logprobs} dicts"
        )
    n = int(row.get("token_prefix_len") or 0)
    if n and (not trace or n > len(trace[0]["prompt_ids"])):
        raise StoreError(f"trajectory token_prefix_len {n} is longer than its first prompt")
    key = (
        bytes.fromhex(prefixes.add("tokens", tokens.ids_bytes(list(trace[0]["prompt_ids"][:n]))))
        if n
        else None
    )
    try:
        return tokens.encode_trace(trace, key, n)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise StoreError(f"trajectory token_trace is malformed: {exc}") from exc


def insert_trajectories(db: sqlite_utils.Database, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert a batch in one transaction (readers never see half of it); returns the new ids in order."""
    t = now()
    prefixes = _Prefixes()
    values = [_row_values(r, t, prefixes) for r in rows]  # validate everything before writing anything
    with write_txn(db):
        if prefixes.rows:
            db.conn.executemany(_INSERT_PREFIX_SQL, [(*p, t) for p in prefixes.rows.values()])
        start = db.execute("SELECT COALESCE(MAX(id), 0) FROM trajectories").fetchone()[0]
        db.conn.executemany(_INSERT_SQL, values)
    # Ids are contiguous: inside our write transaction nobody else can insert, and ids are MAX+1.
    return list(range(start + 1, start + 1 + len(values)))


# Prefixes never change once written, so a process caches them by hash (bounded: a run has a handful).
_PREFIX_CACHE: dict[str, Any] = {}


def _prefix(db: sqlite_utils.Database, key: str) -> Any:
    body = _PREFIX_CACHE.get(key)
    if body is None:
        row = db.execute("SELECT kind, body FROM prefixes WHERE hash = ?", [key]).fetchone()
        if row is None:
            raise StoreError(
                f"prefix {key} is missing from the prefixes table (the database was edited by hand?)"
            )
        body = loads(row[1]) if row[0] == "messages" else tokens.ids_from_bytes(row[1])
        if len(_PREFIX_CACHE) > 1024:
            _PREFIX_CACHE.clear()
        _PREFIX_CACHE[key] = body
    return body


def expand(db: sqlite_utils.Database, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Full rows as they were inserted: shared prefix messages put back, the token trace decoded."""
    for row in rows:
        key = row.get("prefix")
        if key and isinstance(row.get("messages"), list):
            row["messages"] = [*_prefix(db, key), *row["messages"]]
        blob = row.get("token_trace")
        if isinstance(blob, bytes):
            ref = tokens.trace_prefix(blob)
            row["token_trace"] = tokens.decode_trace(blob, _prefix(db, ref.hex()) if ref else None)
    return rows


def get_trajectory(db: sqlite_utils.Database, trajectory_id: int) -> dict[str, Any] | None:
    row = one(db.execute("SELECT * FROM trajectories WHERE id = ?", [trajectory_id]))
    return expand(db, [row])[0] if row else None


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
            ("step >= ?", self.step_min),
            ("step <= ?", self.step_max),
            ("split = ?", self.split),
            ("reward >= ?", self.reward_min),
            ("reward <= ?", self.reward_max),
            ("task_id = ?", self.task_id),
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
            rows = _select(
                db, [*same, f"{order} = ?", f"id {cmp} ?"], [*same_params, key, last_id], order_sql, limit
            )
            if len(rows) < limit:
                side = dataclasses.replace(flt, **{f"{order}_max" if descending else f"{order}_min": None})
                rest, rest_params = side.where()
                if order == "reward":
                    rest.append("reward IS NOT NULL")
                rows += _select(
                    db, [*rest, f"{order} {cmp} ?"], [*rest_params, key], order_sql, limit - len(rows)
                )
    cursor = None
    if len(rows) == limit:
        last = rows[-1]
        cursor = (last["id"],) if order == "id" else (last[order], last["id"])
    return Page(rows, cursor)


def _select(
    db: sqlite_utils.Database, clauses: list[str], params: list[Any], order_sql: str, limit: int
) -> list[dict]:
    sql = (
        f"SELECT {LIST_COLUMNS} FROM trajectories WHERE {' AND '.join(clauses)} ORDER BY {order_sql} LIMIT ?"
    )
    return decode(db.execute(sql, [*params, limit]))


def trajectories_since(
    db: sqlite_utils.Database,
    run_id: int,
    after_id: int,
    *,
    limit: int = 500,
    full: bool = False,
    newest: bool = False,
) -> list[dict[str, Any]]:
    """New rows of a run since `after_id`, oldest first: what a live pane polls. `newest`: the newest `limit`
    of them (a feed that fell behind skips to the head instead of reading the backlog row by row)."""
    cols = "*" if full else LIST_COLUMNS
    rows = decode(
        db.execute(
            f"SELECT {cols} FROM trajectories WHERE run_id = ? AND id > ? ORDER BY id {'DESC' if newest else ''} "
            "LIMIT ?",
            [run_id, after_id, limit],
        )
    )
    if newest:
        rows.reverse()
    return expand(db, rows) if full else rows


def task_sums(db: sqlite_utils.Database, run_id: int, after_id: int, before_id: int) -> list[dict[str, Any]]:
    """Per task, split and eval, the live rows with after_id < id < before_id: attempts, rewarded, reward_sum,
    classified, successes (`store.tasks.task_stats`'s counts over an id range). One aggregate in SQLite (which
    runs without the GIL): what a feed that skipped those rows folds into its per-task stats."""
    return decode(
        db.execute(
            "SELECT task_id, split, eval_id, COUNT(*) AS attempts, COUNT(reward) AS rewarded, "
            "COALESCE(SUM(reward), 0.0) AS reward_sum, COUNT(outcome) AS classified, "
            "COALESCE(SUM(json_extract(outcome, '$.success')), 0) AS successes FROM trajectories "
            "WHERE id > ? AND id < ? AND run_id = ? AND superseded = 0 AND task_id IS NOT NULL "
            "GROUP BY task_id, split, eval_id",
            [after_id, before_id, run_id],
        )
    )


def step_reward_sums(
    db: sqlite_utils.Database, run_id: int, task_id: int, after_id: int, before_id: int
) -> dict[int, tuple[float, int]]:
    """One task's live training rows with after_id < id < before_id: step -> (reward sum, rows with a reward)."""
    return {
        int(step): (float(s), int(n))
        for step, s, n in db.execute(
            "SELECT step, SUM(reward), COUNT(reward) FROM trajectories WHERE id > ? AND id < ? AND run_id = ? "
            "AND task_id = ? AND split = 'train' AND superseded = 0 AND reward IS NOT NULL GROUP BY step",
            [after_id, before_id, run_id, task_id],
        ).fetchall()
    }


def group_members(db: sqlite_utils.Database, trajectory_id: int) -> list[dict[str, Any]]:
    """The G samples that share a trajectory's run, step, split and group (for side-by-side view)."""
    row = db.execute(
        "SELECT run_id, step, split, group_idx, superseded, eval_id FROM trajectories WHERE id = ?",
        [trajectory_id],
    ).fetchone()
    if row is None:
        return []
    return expand(
        db,
        decode(
            db.execute(
                "SELECT * FROM trajectories WHERE run_id = ? AND step = ? AND split = ? AND group_idx = ? "
                "AND superseded = ? AND eval_id IS ? ORDER BY sample_idx, id",
                list(row),
            )
        ),
    )


def last_trajectories(
    db: sqlite_utils.Database, run_id: int, n: int, *, split: str = "train"
) -> list[dict[str, Any]]:
    """The newest n live trajectories with their messages (what a verifier dry run re-scores)."""
    return expand(
        db,
        decode(
            db.execute(
                "SELECT * FROM trajectories WHERE run_id = ? AND split = ? AND superseded = 0 ORDER BY id DESC LIMIT ?",
                [run_id, split, n],
            )
        ),
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
            db.execute(
                f"UPDATE {table} SET superseded = 1 WHERE run_id = ? AND step > ? AND superseded = 0",
                [run_id, after_step],
            )
    return n


def count_trajectories(db: sqlite_utils.Database, run_id: int) -> int:
    return db.execute("SELECT COUNT(*) FROM trajectories WHERE run_id = ?", [run_id]).fetchone()[0]


def train_group_rewards(
    db: sqlite_utils.Database, run_id: int, up_to_step: int
) -> list[tuple[int, int, int, Any]]:
    """(step, group_idx, task_id, reward) of the run's live training rows up to `up_to_step`, in order: what
    the prompt sampler learns from (reward None: a verifier error)."""
    return [
        tuple(r)
        for r in db.execute(
            "SELECT step, group_idx, task_id, reward FROM trajectories WHERE run_id = ? AND split = 'train' "
            "AND superseded = 0 AND step <= ? ORDER BY step, group_idx, sample_idx",
            [run_id, up_to_step],
        )
    ]
