"""What the worker's niceness costs a run on a machine that is busy with another job.

    .venv/bin/python bench/worker_nice.py --rounds 3 --hogs 2

A fixed CPU-bound torch workload (the shape of a worker's step: matmuls on all cores) runs as a subprocess
at nice 0 and at nice 10, alternating, while `--hogs` busy-loop processes at nice 0 stand for the other job.
Prints each round's wall time and the median ratio (nice 10 / nice 0). The UI side of the trade (key ->
repaint with the worker niced or not) is bench/ui_latency.py's, in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

WORK = """
import time, torch
torch.manual_seed(0)
a = torch.randn(768, 768)
t0 = time.perf_counter()
for _ in range({iters}):
    a = torch.tanh(a @ a.T / 768.0)
print(time.perf_counter() - t0)
"""

HOG = "while True: pass"


def run_once(nice: int, iters: int) -> float:
    out = subprocess.run(
        ["nice", "-n", str(nice), sys.executable, "-c", WORK.format(iters=iters)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hogs", type=int, default=2, help="busy-loop processes at nice 0 beside the workload")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hogs)]
    times: dict[int, list[float]] = {0: [], 10: []}
    try:
        time.sleep(1.0)
        for r in range(args.rounds):
            for nice in (0, 10) if r % 2 == 0 else (10, 0):
                times[nice].append(run_once(nice, args.iters))
                print(f"round {r} nice {nice}: {times[nice][-1]:.1f} s", flush=True)
    finally:
        for h in hogs:
            h.kill()
    ratio = statistics.median(times[10]) / statistics.median(times[0])
    result = {
        "hogs": args.hogs,
        "iters": args.iters,
        "nice0_s": times[0],
        "nice10_s": times[10],
        "median_ratio_nice10_over_nice0": round(ratio, 2),
    }
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
