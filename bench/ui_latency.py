"""Key press -> repaint latency of the real TUI in a real terminal (tmux) while a worker trains.

    .venv/bin/python bench/ui_latency.py [--presses 40] [--size 200x50] [--no-worker] [--json out.json]

Starts the embedded demo's worker (SmolLM2-135M on both cores), opens `workbench tui` in a detached tmux
session of the given size, and once the worker is training (its first SFT step is stored) sends keys
with `tmux send-keys`, polling `tmux capture-pane` until the screen shows the key's effect:

    ]        next curve: the curves pane's title goes to "(k/7)"        (a pane redraw)
    ?, esc   the help screen opens ("esc: close", its footer), then closes (a screen push / pop)

The latency is from just before send-keys to the first capture that shows the change, so it includes
tmux and the polling (a capture every ~10 ms: the resolution; polling faster steals a core from the two).
`--no-worker` is the control: the same presses with no worker running (the UI on a quiet machine).
Goal: p95 < 100 ms while the worker trains.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import store  # noqa: E402

HELP_MARK = "esc: close"  # the help box's footer: always on screen (its body scrolls)
SESSION = "wb-ui-bench"


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def screen() -> str:
    return tmux("capture-pane", "-p", "-t", SESSION)


def wait_for(pred, timeout: float, poll: float = 0.008) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if pred(screen()):
            return time.perf_counter() - t0
        time.sleep(poll)
    raise TimeoutError(f"screen did not change in {timeout} s:\n{screen()}")


def press(key: str, pred, timeout: float = 10.0) -> float:
    t0 = time.perf_counter()
    tmux("send-keys", "-t", SESSION, key)
    wait_for(pred, timeout)
    return time.perf_counter() - t0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summary(xs: list[float]) -> dict[str, float]:
    xs = sorted(x * 1e3 for x in xs)
    return {"n": len(xs), "p50_ms": round(statistics.median(xs), 1),
            "p95_ms": round(xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))], 1), "max_ms": round(xs[-1], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presses", type=int, default=40, help="presses of each kind")
    ap.add_argument("--no-worker", action="store_true", help="the control: stop the worker before pressing")
    ap.add_argument("--size", default="200x50")
    ap.add_argument("--wait-s", type=float, default=300.0, help="give up if training has not started by then")
    ap.add_argument("--json")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is needed (apt-get install tmux)")
    cols, rows = args.size.split("x")
    bindir = Path(sys.executable).parent
    tmp = Path(tempfile.mkdtemp(prefix="wb-ui-bench-"))
    db_path = tmp / "ui.db"
    subprocess.run([bindir / "workbench", "demo", "--headless", "--db", str(db_path)], check=True, cwd=tmp)
    db = store.open_db(db_path)
    run_id = store.runs.list_runs(db)[0]["id"]
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
    env = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""  # a tree to compare
    tmux("new-session", "-d", "-s", SESSION, "-x", cols, "-y", rows,
         f"cd {tmp} && {env}{bindir / 'workbench'} tui --db {db_path} --run {run_id}")
    worker_pid = None
    try:
        wait_for(lambda s: "Curves:" in s, 60)
        worker_pid = int(subprocess.run(["pgrep", "-f", f"workbench.worker --db {db_path}"], capture_output=True,
                                        text=True).stdout.split()[0])
        t_start = time.time()  # wait for training proper (the SFT warm-up's first step), past load and baseline
        while not any(e["kind"] in ("sft_step", "step") for e in store.runs.events_since(db, run_id, 0, 1000)):
            if time.time() - t_start > args.wait_s:
                raise SystemExit(f"the worker did not start training within {args.wait_s} s")
            time.sleep(1.0)
        if args.no_worker:
            subprocess.run(["kill", str(worker_pid)], capture_output=True)
            time.sleep(5)
        cpu0, wall0 = (0.0 if args.no_worker else cpu_seconds(worker_pid)), time.time()
        traj0 = store.trajectories.count_trajectories(db, run_id)
        curve, n_curves = 1, 7
        lat: dict[str, list[float]] = {"next curve ]": [], "open help ?": [], "close help esc": []}
        for _ in range(args.presses):
            curve = curve % n_curves + 1
            lat["next curve ]"].append(press("]", lambda s, c=curve: f"({c}/{n_curves})" in s))
            lat["open help ?"].append(press("?", lambda s: HELP_MARK in s))
            lat["close help esc"].append(press("Escape", lambda s: HELP_MARK not in s))
            time.sleep(0.05)
        cpu = 0.0 if args.no_worker else (cpu_seconds(worker_pid) - cpu0) / (time.time() - wall0)
        traj = store.trajectories.count_trajectories(db, run_id) - traj0
        status = store.runs.get_run(db, run_id)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
        if worker_pid:
            subprocess.run(["kill", str(worker_pid)], capture_output=True)
    allx = [x for v in lat.values() for x in v]
    result = {
        "date": time.strftime("%Y-%m-%d"), "size": args.size, "worker": not args.no_worker,
        "worker_cpu_cores": round(cpu, 2),
        "trajectories_written_during": traj, "worker_status": f"{status['status']}: {status['status_reason']}",
        "keys": {k: summary(v) for k, v in lat.items()}, "all": summary(allx),
    }
    print(f"worker used {cpu:.2f} cores and wrote {traj} trajectories during the bench ({result['worker_status']})")
    for k, v in result["keys"].items():
        print(f"{k:16s} n={v['n']:3d}  p50 {v['p50_ms']:6.1f} ms  p95 {v['p95_ms']:6.1f} ms  max {v['max_ms']:6.1f} ms")
    a = result["all"]
    print(f"{'all':16s} n={a['n']:3d}  p50 {a['p50_ms']:6.1f} ms  p95 {a['p95_ms']:6.1f} ms  (goal p95 < 100 ms)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
