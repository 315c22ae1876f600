"""Pause a live worker through the store, as the UI does, and time key -> "paused" in each phase.

    .venv/bin/python bench/pause_latency.py --phases eval,sft,rollout,update --tries 3 [--json out.json]
    .venv/bin/python bench/pause_latency.py --db /tmp/headline.db --run 1      (one pause of a running run)

Without --db it starts its own run: the demo recipe (SmolLM2-135M, LoRA, the calendar harness), shortened
(`--sft-steps`, `--steps`, `--eval-tasks`) so that every phase comes by in a few minutes, and its worker
(`workbench.launch.start_worker`, as the UI spawns it). It watches the worker's progress reports (events
of kind "progress") and, while the worker is in a phase that still needs tries, waits a random 0-0.5 s
(so the pause lands anywhere in the phase), queues a pause, and times queue -> the run's status reads
"paused" (what the UI's status bar shows), then resumes. Reports per phase: n, p50, p95, max, and where
each pause landed. The worker runs on all cores; nothing else is started.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import store  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "workbench" / "data" / "demo.yaml"


def wait(pred, timeout: float = 300.0, poll: float = 0.02):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    raise SystemExit("timed out")


def status(db, run_id: int) -> str:
    return store.runs.get_run(db, run_id)["status"]


def pause_once(db, run_id: int) -> tuple[float, str]:
    """Queue a pause, wait for "paused", resume, wait for "running": (seconds to paused, where it landed)."""
    t0 = time.time()
    cid = store.commands.enqueue(db, run_id, "pause")
    wait(lambda: status(db, run_id) == "paused", 120, poll=0.01)
    latency = time.time() - t0
    where = (store.commands.get_command(db, cid)["result"] or {}).get("paused_at", "?")
    store.commands.enqueue(db, run_id, "resume")
    wait(lambda: status(db, run_id) == "running", 60)
    return latency, where


def summary(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "n": len(xs),
        "p50_s": round(statistics.median(xs), 3),
        "p95_s": round(xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))], 3),
        "max_s": round(xs[-1], 3),
    }


def phases_bench(args: argparse.Namespace) -> dict:
    from workbench.config import load_config
    from workbench.launch import start_worker

    tmp = Path(tempfile.mkdtemp(prefix="wb-pause-bench-"))
    cfg = load_config(DEMO)
    config = {
        **cfg.to_dict(),
        "sft_steps": args.sft_steps,
        "max_steps": args.steps,
        "eval_max_tasks": args.eval_tasks,
        "eval_interval": args.steps,
        "output_dir": str(tmp / "runs"),
    }
    db = store.open_db(tmp / "bench.db")
    run_id = store.runs.create_run(db, name="pause-bench", model=cfg.model, config=config)
    proc = start_worker(str(tmp / "bench.db"), run_id)
    want = {p: args.tries for p in args.phases.split(",")}
    got: dict[str, list[tuple[float, str]]] = {p: [] for p in want}
    rng = random.Random(0)
    try:
        while any(v > 0 for v in want.values()):
            st = status(db, run_id)
            if st in ("finished", "stopped", "crashed"):
                print(f"the run ended ({st}) before every phase had its tries", flush=True)
                break
            ev = store.runs.latest_event(db, run_id, "progress")
            phase = ev["data"]["phase"] if ev else None
            fresh = ev is not None and time.time() - ev["created"] < 3.0
            if st == "running" and fresh and want.get(phase, 0) > 0:
                time.sleep(rng.uniform(0.0, 0.5))
                ev2 = store.runs.latest_event(db, run_id, "progress")
                if ev2 and ev2["data"]["phase"] == phase:
                    latency, where = pause_once(db, run_id)
                    got[phase].append((latency, where))
                    want[phase] -= 1
                    print(f"{phase:8s} key -> paused {latency:6.3f} s (paused at {where})", flush=True)
                    time.sleep(rng.uniform(0.5, 2.0))  # let the phase move on before the next try
                    continue
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "config": {k: config[k] for k in ("sft_steps", "max_steps", "eval_max_tasks")},
        "phases": {
            p: {**summary([x for x, _ in v]), "paused_at": sorted({w for _, w in v})}
            for p, v in got.items()
            if v
        },
    }


def one_pause(args: argparse.Namespace) -> None:
    db = store.open_db(args.db)
    latency, where = pause_once(db, args.run)
    print(f"pause queued -> status 'paused': {latency:.3f} s (paused at {where})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db")
    ap.add_argument("--run", type=int)
    ap.add_argument("--phases", default="eval,sft,rollout,update")
    ap.add_argument("--tries", type=int, default=3, help="pauses per phase")
    ap.add_argument("--sft-steps", type=int, default=6)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--eval-tasks", type=int, default=24)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.db:
        one_pause(args)
        return
    out = phases_bench(args)
    for p, s in out["phases"].items():
        print(
            f"{p:8s} n={s['n']}  p50 {s['p50_s']:.3f} s  p95 {s['p95_s']:.3f} s  max {s['max_s']:.3f} s  "
            f"(at {', '.join(s['paused_at'])})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
