"""Pause and resume a live worker through the store, as the UI does, and time it.

    .venv/bin/python bench/pause_latency.py --db /tmp/headline.db --run 1 [--hold 5]

Reports: enqueue -> claimed (the worker reached its next safe point, i.e. the current rollout group
ended), claimed -> status "paused" (obeying), and resume enqueue -> status "running".
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import store  # noqa: E402


def wait(pred, timeout: float = 300.0, poll: float = 0.02):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    raise SystemExit("timed out")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", type=int, required=True)
    ap.add_argument("--hold", type=float, default=5.0)
    args = ap.parse_args()
    db = store.open_db(args.db)
    t0 = time.time()
    cid = store.commands.enqueue(db, args.run, "pause")
    wait(lambda: store.runs.get_run(db, args.run)["status"] == "pausing", 30)
    t_pausing = time.time()
    wait(lambda: store.runs.get_run(db, args.run)["status"] == "paused")
    t_paused = time.time()
    claimed = store.commands.get_command(db, cid)["claimed"]
    steps, rows = store.metrics.last_step(db, args.run), store.trajectories.count_trajectories(db, args.run)
    time.sleep(args.hold)
    still = (store.metrics.last_step(db, args.run), store.trajectories.count_trajectories(db, args.run)) == (steps, rows)
    t1 = time.time()
    store.commands.enqueue(db, args.run, "resume")
    wait(lambda: store.runs.get_run(db, args.run)["status"] == "running")
    t_running = time.time()
    print(f"pause queued -> 'pausing' shown: {t_pausing - t0:.2f} s (heartbeat thread)")
    print(f"pause queued -> claimed at a safe point (current group ended): {claimed - t0:.2f} s")
    print(f"claimed -> status 'paused': {t_paused - claimed:.3f} s   (target: < 2 s after the group ends)")
    print(f"no new steps or trajectories during a {args.hold:.0f} s hold: {still}")
    print(f"resume queued -> status 'running': {t_running - t1:.3f} s")


if __name__ == "__main__":
    main()
