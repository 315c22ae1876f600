"""What a verifier score costs: the built-in in process vs user code isolated in a worker process.

    .venv/bin/python bench/verifier_cost.py [--rows 400] [--reps 5] [--mp]

Scores real environment outputs (a single-turn harness episode, ~1.2 KB of messages, and a multi-turn
episode with world state) with the built-in tool_call_verifier:
  - in process (what the built-ins use): `Verifier.score` per row (a thread per call for its timeout);
  - isolated (what user code uses), the same code forced into a worker: per row at batch 1, 8 and 16
    (`score_many`, one round trip per batch), with 1 and 2 workers;
  - the pool's start (a fresh interpreter + loading the code; also what replacing a dead worker costs);
  - a slow user verifier (5 ms a row) at batch 8 with 1 and 2 workers.
`--mp` also times multiprocessing's spawn / forkserver start when the parent's main module imports torch
(as `python -m workbench.worker` does): why the workers are plain `sys.executable -c` processes.
Prints medians over --reps repetitions (ms).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workbench.domains.calendar import builtin_multi_turn_tasks
from workbench.envs import MultiTurnEnv, SingleTurnEnv
from workbench.types import Task
from workbench.verifiers import builtin_verifier_code, load_verifier_code

TASK = Task(
    id="t",
    prompt="Book Alex on Tuesday at 2 PM",
    expected_tool="calendar.create_event",
    expected_args={"attendee": "Alex", "day": "Tuesday", "time": "14:00"},
)


def outputs() -> dict[str, tuple]:
    ep = SingleTurnEnv().start(TASK)
    ep.step('calendar.create_event", "args": {"attendee": "Alex", "day": "Tuesday", "time": "14:00"}}')
    task = builtin_multi_turn_tasks()[0]
    mt = MultiTurnEnv().start(task)
    for r in [
        'calendar.list_events", "args": {}}',
        'calendar.cancel_event", "args": {"attendee": "Sam", "day": "Monday"}}',
        'calendar.create_event", "args": {"attendee": "Sam", "day": "Wednesday", "time": "10:00"}}',
        'finish", "args": {"answer": "done"}}',
    ]:
        mt.step(r)
    return {"single-turn": (ep.output(), TASK), "multi-turn": (mt.output(), task)}


def per_row_ms(fn, rows: int, batch: int, reps: int) -> float:
    """Median over reps of (time to score `rows` rows in batches of `batch`) / rows, in ms."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(rows // batch):
            fn(batch)
        times.append((time.perf_counter() - t0) / (rows // batch * batch) * 1e3)
    return statistics.median(times)


MP_PROBE = """
import os, sys, time
import torch  # the trainer's main module imports torch
import multiprocessing as mp

def child(q):
    q.put("torch" in sys.modules)

if __name__ == "__main__":
    for method in ("spawn", "forkserver"):
        ctx = mp.get_context(method)
        q = ctx.Queue()
        t = time.perf_counter()
        p = ctx.Process(target=child, args=(q,))
        p.start(); had_torch = q.get(); p.join()
        print(f"multiprocessing {method} start, parent main imports torch: {(time.perf_counter() - t) * 1e3:.0f} ms"
              f" (torch imported in the child: {had_torch})")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=400)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mp", action="store_true", help="also time multiprocessing spawn/forkserver with torch")
    args = ap.parse_args()
    code = builtin_verifier_code("tool_call_verifier")

    starts = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        v = load_verifier_code(code, "tool_call_verifier", isolate=True)
        starts.append((time.perf_counter() - t0) * 1e3)
        v.close()
    print(
        f"pool start (1 worker: interpreter + imports + load): median {statistics.median(starts):.1f} ms "
        f"(runs: {', '.join(f'{s:.0f}' for s in starts)})"
    )

    inproc = load_verifier_code(code, "tool_call_verifier")
    assert not inproc.isolated
    iso1 = load_verifier_code(code, "tool_call_verifier", isolate=True)
    iso2 = load_verifier_code(code, "tool_call_verifier", isolate=True, workers=2)
    for kind, pair in outputs().items():
        print(
            f"\n{kind} output ({len(str(pair[0]))} chars of reply, {len(pair[0].messages)} messages), "
            f"per row, median of {args.reps} x {args.rows} rows:"
        )
        ms = per_row_ms(lambda b, pair=pair: inproc.score(*pair), args.rows, 1, args.reps)
        print(f"  built-in in process, score():        {ms:.3f} ms")
        ms = per_row_ms(lambda b, pair=pair: inproc.fn(*pair), args.rows, 1, args.reps)
        print(f"  (bare reward() call, no guard:       {ms:.3f} ms)")
        for name, v in (("1 worker ", iso1), ("2 workers", iso2)):
            for batch in (1, 8, 16):
                ms = per_row_ms(
                    lambda b, v=v, pair=pair: v.score_many([pair] * b), args.rows, batch, args.reps
                )
                print(f"  isolated, {name}, batch {batch:>2}:      {ms:.3f} ms")
        assert iso1.score(*pair) == inproc.score(*pair)
    iso1.close()
    iso2.close()

    # A slow user verifier (5 ms of pure Python a row): where a second worker pays.
    slow = (
        "import time\ndef reward(output, task):\n    t = time.perf_counter()\n"
        "    while time.perf_counter() - t < 0.005:\n        pass\n    return 1.0\n"
    )
    pair = outputs()["single-turn"]
    print(f"\nslow user verifier (5 ms busy a row), per row, median of {args.reps} x {args.rows // 4} rows:")
    for workers in (1, 2):
        with load_verifier_code(slow, "slow", workers=workers) as v:
            ms = per_row_ms(lambda b, v=v: v.score_many([pair] * b), args.rows // 4, 8, args.reps)
            print(f"  isolated, {workers} worker(s), batch 8:   {ms:.3f} ms")

    if args.mp:
        with tempfile.TemporaryDirectory() as d:
            probe = Path(d) / "mp_probe.py"
            probe.write_text(MP_PROBE)
            print()
            subprocess.run([sys.executable, str(probe)], check=True)


if __name__ == "__main__":
    main()
