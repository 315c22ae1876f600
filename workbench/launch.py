"""Starting a run's worker process. Torch-free on purpose: the UI calls it, and the model loads only in
the child (`python -m workbench.worker`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import store
from workbench.config import Config
from workbench.native_heap import child_env, needs_bound

DEFAULT_ENV = Config.__dataclass_fields__["env"].default  # what a stored config without `env` ran in


def start_worker(
    db_path: str | Path, run_id: int, *, log_path: str | Path | None = None, nice: int = 0
) -> subprocess.Popen:
    """Spawn the worker for an existing run in its own session, so it outlives the UI that started it;
    `nice` > 0 lowers its CPU priority from the start (the run's `worker_nice` is applied by the worker itself,
    whoever starts it)."""
    log_path = Path(log_path or Path(db_path).with_suffix(f".run{run_id}.log"))
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    niceness = ["--nice", str(nice)] if nice else []
    return subprocess.Popen(
        [sys.executable, "-m", "workbench.worker", "--db", str(db_path), "--run", str(run_id), *niceness],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        # glibc's heap thresholds from the start for a run with multi-turn episodes (workbench/native_heap.py)
        env=child_env(needs_bound(run_env_kind(db_path, run_id))),
    )


def run_env_kind(db_path: str | Path, run_id: int) -> str | None:
    """The `env` of the run's stored config; None when it cannot be read (the worker will say why)."""
    try:
        db = store.open_db(db_path, create=False, readonly=True)
    except store.StoreError:
        return None
    try:
        config = store.runs.get_run(db, run_id).get("config")
    except store.StoreError:
        return None
    finally:
        db.conn.close()
    return config.get("env", DEFAULT_ENV) if isinstance(config, dict) else None
