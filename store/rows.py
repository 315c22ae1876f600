"""Turning cursor rows into dicts with their JSON columns decoded, the one shape every reader returns."""

from __future__ import annotations

import sqlite3
from typing import Any

from store.db import loads

JSON_COLUMNS = frozenset(
    {
        "config",
        "harness",
        "expected_args",
        "tools",
        "extra",
        "dry_run",
        "metrics",
        "messages",
        "tool_calls",
        "reward_parts",
        "payload",
        "result",
        "data",
        "new_parts",
        "tasks",
        "outcome",
    }
)


def decode(cursor: sqlite3.Cursor) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description]
    json_idx = [i for i, n in enumerate(names) if n in JSON_COLUMNS]
    out = []
    for raw in cursor.fetchall():
        row = dict(zip(names, raw, strict=True))
        for i in json_idx:
            row[names[i]] = loads(raw[i])
        out.append(row)
    return out


def one(cursor: sqlite3.Cursor) -> dict[str, Any] | None:
    rows = decode(cursor)
    return rows[0] if rows else None
