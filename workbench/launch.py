"""Starting a run's worker process. Torch-free on purpose: the UI calls it, and the model loads only in
the child (`python -m workbench.worker`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from workbench.native_heap import child_env


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
        env=child_env(),  # glibc's heap thresholds from the start (workbench/native_heap.py)
    )
