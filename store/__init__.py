"""The Workbench store: one SQLite file (WAL) that is both the record of a run and the bus between the UI
and the training worker. It knows SQLite only: it imports neither `workbench` nor `screens`.

Modules: db (open, migrate, errors), runs, tasks, trajectories, metrics, verifiers, commands, labels.
"""

from store import commands, labels, metrics, runs, tasks, trajectories, verifiers
from store.db import DiskFullError, SchemaTooNewError, StoreError, integrity_ok, open_db, write_txn

__all__ = [
    "DiskFullError",
    "SchemaTooNewError",
    "StoreError",
    "commands",
    "integrity_ok",
    "labels",
    "metrics",
    "open_db",
    "runs",
    "tasks",
    "trajectories",
    "verifiers",
    "write_txn",
]
