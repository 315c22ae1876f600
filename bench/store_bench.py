"""Store benchmark: insert N realistic trajectories (~2 KB, multi-turn JSON) through the store's own batch
insert, then time pages of 50 at the start, middle and end, with and without filters.

    .venv/bin/python bench/store_bench.py [--n 1000000] [--batch 512] [--db /tmp/wb_bench.db]

Targets (issue 2): >= 20,000 trajectories/s inserted; a page in < 20 ms anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import store  # noqa: E402
from store import runs, tasks, trajectories  # noqa: E402
from store.trajectories import TrajectoryFilter, page_trajectories  # noqa: E402
from tests.store_helpers import trajectory_row  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=512, help="trajectories a transaction (G x prompts a step)")
    ap.add_argument("--db", default="/tmp/wb_store_bench.db")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    path = Path(args.db)
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    db = store.open_db(path)
    run_id = runs.create_run(db, name="bench", model="none", config={})
    task_ids = list(
        tasks.add_tasks(
            db, [{"key": f"b:{i}", "dataset": "b", "split": "train", "prompt": f"p{i}"} for i in range(200)]
        ).values()
    )
    rng = random.Random(0)
    pool = [trajectory_row(run_id, 0, 0, 0, rng) for _ in range(256)]  # row variety without generation cost
    size = len(json.dumps(pool[0]))
    per_step = args.batch
    insert_s = 0.0  # only the store's insert calls are timed, not the bench's row generation
    done = 0
    step = 0
    while done < args.n:
        k = min(per_step, args.n - done)
        batch = []
        for i in range(k):
            row = dict(pool[(done + i) % len(pool)])
            row.update(
                step=step,
                group_idx=i // 8,
                sample_idx=i % 8,
                task_id=task_ids[(i // 8) % len(task_ids)],
                reward=rng.choice((-1.0, 0.4, 0.6, 0.8, 1.0)),
            )
            batch.append(row)
        t0 = time.perf_counter()
        trajectories.insert_trajectories(db, batch)
        insert_s += time.perf_counter() - t0
        done += k
        step += 1
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db_bytes = path.stat().st_size
    max_id = db.execute("SELECT MAX(id) FROM trajectories").fetchone()[0]
    last_step = step - 1

    def timed(flt, after=None, order="id", reps=20):
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            page = page_trajectories(db, flt, after=after, order=order, limit=50)
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times), max(times), len(page.rows)

    base = TrajectoryFilter(run_id=run_id)
    positions = {"start": (max_id + 1,), "middle": (max_id // 2,), "end": (60,)}
    cases = []
    for where, cur in positions.items():
        cases.append((f"newest first, {where}", base, cur, "id"))
        mid_step = {"start": last_step, "middle": last_step // 2, "end": 1}[where]
        cases.append(
            (
                f"step range, {where}",
                TrajectoryFilter(run_id=run_id, step_min=mid_step - 1, step_max=mid_step),
                None,
                "id",
            )
        )
        cases.append(
            (
                f"task + reward>=0.8, {where}",
                TrajectoryFilter(run_id=run_id, task_id=task_ids[3], reward_min=0.8),
                cur,
                "id",
            )
        )
        rcur = {"start": None, "middle": (0.6, max_id // 2), "end": (-1.0, 100)}[where]
        cases.append((f"sorted by reward, {where}", base, rcur, "reward"))
        cases.append((f"text 'PM', {where}", TrajectoryFilter(run_id=run_id, text="PM"), cur, "id"))
    results = []
    for name, flt, cur, order in cases:
        med, worst, n = timed(flt, cur, order)
        results.append({"case": name, "median_ms": round(med, 2), "max_ms": round(worst, 2), "rows": n})
    t = time.perf_counter()
    since = trajectories.trajectories_since(db, run_id, max_id - 64)
    follow_ms = (time.perf_counter() - t) * 1000
    out = {
        "n": args.n,
        "batch": args.batch,
        "row_json_bytes": size,
        "insert_s": round(insert_s, 1),
        "inserts_per_s": round(args.n / insert_s),
        "db_bytes": db_bytes,
        "follow_64_new_ms": round(follow_ms, 2),
        "follow_rows": len(since),
        "pages": results,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
    }
    print(
        f"inserted {args.n:,} trajectories ({size} B JSON each) in {insert_s:.1f} s = {args.n / insert_s:,.0f}/s; "
        f"db {db_bytes / 1e9:.2f} GB"
    )
    print(f"follow (64 new rows since id): {follow_ms:.2f} ms")
    print(f"{'page of 50':40} {'median ms':>10} {'max ms':>8} {'rows':>5}")
    for r in results:
        print(f"{r['case']:40} {r['median_ms']:>10.2f} {r['max_ms']:>8.2f} {r['rows']:>5}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
