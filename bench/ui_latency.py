"""Key press -> repaint latency of the real TUI in a real terminal (tmux) while a worker trains.

    .venv/bin/python bench/ui_latency.py [--presses 40] [--size 200x50] [--no-worker] [--json out.json]
    .venv/bin/python bench/ui_latency.py --writer 5000 [--presses 40]    # a fast writer, no model
    .venv/bin/python bench/ui_latency.py --attach RUN.db [--presses 40]  # beside a run already training

Starts the embedded demo's worker (SmolLM2-135M on both cores), opens `workbench tui` in a detached tmux
session of the given size, and once the worker is training (its first SFT step is stored) sends keys and
reads the screen until it shows the key's effect:

    ]        next curve: the curves pane's title goes to "(k/N)"        (a pane redraw)
    ?, esc   the help screen opens ("esc: close", its footer), then closes (a screen push / pop)

The latency is from just before the key is sent to the first capture that shows the change, so it includes
tmux. `--probe control` (the default) sends and captures through one tmux control-mode client, capturing
again each time tmux reports output from the pane; `--probe spawn` (the bench before 2026-12-08) runs a
`tmux send-keys` and then a `tmux capture-pane` process every ~10 ms, about 100 processes a second on the
cores the UI and the worker share: the probe's own cost is in its figures (docs/benchmarks.md).
`--no-worker` is the control: the same presses with no worker running (the UI on a quiet machine).
Goal: p95 < 100 ms while the worker trains.

`--attach DB` opens the UI on a run that some other process is training now (`workbench train`, say): nothing is
started, and that worker is left running when the bench ends; its CPU use is not read.
`--writer ROWS_PER_S` needs no model: a synthetic run (its tasks and a few thousand rows already there) is
written by another process posing as its worker (it holds the run's lock and heartbeats) that inserts
trajectory rows at that rate through the store's own batch insert, ten batches a second, a step's metrics row
every `--step-rows` rows. `--writer 0` is its idle control (the same live run, nothing written). Goal (issue 33):
key -> repaint within 2x of the idle figure at >= 5,000 rows/s.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import store  # noqa: E402
from tests.store_helpers import trajectory_row  # noqa: E402

HELP_MARK = "esc: close"  # the help box's footer: always on screen (its body scrolls)
TITLE = re.compile(r"Curves: .*?\((\d+)/(\d+)\)")  # the curves pane's title, "(k/N)"
# In the dashboard's key footer, the screen's last row; the help screen leaves that row blank.
FOOTER_MARK = "? Help"


def footer(screen: str) -> bool:
    """Whether the dashboard's footer is on the last row. A frame reaches tmux in pieces, top to bottom, so a
    capture can fall between two of them: the help mark gone does not yet mean the dashboard is drawn, nor the
    mark present that the help is; the last row, drawn last, tells."""
    rows = screen.rstrip("\n").split("\n")
    return FOOTER_MARK in rows[-1]


SESSION = "wb-ui-bench"


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


class SpawnProbe:
    """Each key a `tmux send-keys` process, then a `tmux capture-pane` process every `poll` s until the screen
    shows the key's effect: about 100 processes a second, on the same cores as the UI and the worker."""

    def __init__(self, poll: float = 0.008) -> None:
        self.poll = poll

    def screen(self) -> str:
        return tmux("capture-pane", "-p", "-t", SESSION)

    def send(self, key: str) -> None:
        tmux("send-keys", "-t", SESSION, key)

    def wait_for(self, pred, timeout: float) -> str:
        """The first screen that satisfies `pred`; TimeoutError after `timeout` s."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            if pred(shown := self.screen()):
                return shown
            time.sleep(self.poll)
        raise TimeoutError(f"screen did not change in {timeout} s:\n{self.screen()}")

    def close(self) -> None:
        pass


class ControlProbe:
    """One tmux control-mode client (`tmux -C`) for the whole bench: keys are sent and the pane is captured
    through it, and a capture is taken only when tmux reports output from the pane (its `%output`
    notification), so nothing is spawned and nothing polls while the screen is still."""

    def __init__(self, fallback_s: float = 0.05) -> None:
        self.proc = subprocess.Popen(
            ["tmux", "-C", "attach-session", "-f", "ignore-size", "-t", SESSION],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,  # buffered: an unbuffered pipe's readline reads a byte at a time
        )
        self.fallback_s = fallback_s  # a capture at least this often, should a notification be missed
        self.replies: queue.Queue[tuple[bool, list[str]]] = queue.Queue()
        self.output = threading.Event()
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        # The attach's own reply comes first, then this one's: drain until the client answers.
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"display-message -p probe-ready\n")
        self.proc.stdin.flush()
        while "probe-ready" not in self.replies.get(timeout=30)[1]:
            pass

    def _read(self) -> None:
        block: list[str] | None = None
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if block is not None:
                if line.startswith(("%end ", "%error ")):
                    self.replies.put((line.startswith("%end "), block))
                    block = None
                else:
                    block.append(line)
            elif line.startswith("%begin "):
                block = []
            elif line.startswith("%output "):
                self.output.set()
            elif line.startswith("%exit"):
                break

    def command(self, cmd: str) -> list[str]:
        with self.lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(cmd.encode() + b"\n")
            self.proc.stdin.flush()
            ok, lines = self.replies.get(timeout=30)
        if not ok:
            raise RuntimeError(f"tmux {cmd!r}: {lines}")
        return lines

    def screen(self) -> str:
        return "\n".join(self.command(f"capture-pane -p -t {SESSION}"))

    def send(self, key: str) -> None:
        self.command(f"send-keys -t {SESSION} {key}")

    def wait_for(self, pred, timeout: float) -> str:
        """The first screen that satisfies `pred`; TimeoutError after `timeout` s."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            self.output.clear()  # output after this point wakes the next capture
            if pred(shown := self.screen()):
                return shown
            self.output.wait(self.fallback_s)
        raise TimeoutError(f"screen did not change in {timeout} s:\n{self.screen()}")

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # an empty line / EOF detaches the client
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


TIMEOUTS: list[str] = []  # keys whose effect was not on screen within the timeout (counted at the timeout)


def press(probe, key: str, pred, timeout: float = 10.0) -> float:
    t0 = time.perf_counter()
    probe.send(key)
    try:
        probe.wait_for(pred, timeout)
    except TimeoutError:
        TIMEOUTS.append(key)
        if len(TIMEOUTS) >= 3:  # the UI does not answer: three are the figure, more would only take long
            raise
        return timeout
    return time.perf_counter() - t0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summary(xs: list[float]) -> dict[str, float]:
    xs = sorted(x * 1e3 for x in xs)
    return {
        "n": len(xs),
        "p50_ms": round(statistics.median(xs), 1),
        "p95_ms": round(xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))], 1),
        "max_ms": round(xs[-1], 1),
    }


def synthetic_run(db_path: Path, n_tasks: int, step_rows: int, steps: int) -> int:
    """A run with tasks, `steps` steps of rows and their metrics: what a UI attaches to mid-training."""
    from workbench.config import load_config

    db = store.open_db(db_path)
    cfg = load_config(Path(__file__).resolve().parent.parent / "workbench" / "data" / "demo.yaml")
    run_id = store.runs.create_run(db, name="writer-bench", model=cfg.model, config=cfg.to_dict())
    store.tasks.add_tasks(
        db,
        [
            {
                "key": f"w:{i}",
                "dataset": "writer",
                "split": "train",
                "prompt": f"Create a calendar event for Alex next Tuesday at {i % 12 + 1} PM (#{i})",
                "expected_tool": "calendar.create_event",
            }
            for i in range(n_tasks)
        ],
    )
    writer = Writer(db, run_id, step_rows)
    for _ in range(steps * step_rows // 512):
        writer.write(512)
    db.close()
    return run_id


class Writer:
    """Rows as a GRPO worker writes them: groups of 8 over the tasks, a step's metrics once it is full."""

    def __init__(self, db, run_id: int, step_rows: int) -> None:
        self.db, self.run_id, self.step_rows = db, run_id, step_rows
        self.task_ids = [t["id"] for t in store.tasks.list_tasks(db, dataset="writer")]
        rng = random.Random(0)
        self.pool = [
            trajectory_row(run_id, 0, 0, 0, rng) for _ in range(256)
        ]  # variety without generation cost
        self.rng, self.done, self.step = rng, 0, 0

    def write(self, n: int) -> None:
        batch = []
        for _ in range(n):
            i = self.done % self.step_rows
            row = dict(self.pool[self.done % len(self.pool)])
            reward = self.rng.choice((-1.0, 0.4, 0.6, 0.8, 1.0))
            row.update(
                step=self.step,
                group_idx=i // 8,
                sample_idx=i % 8,
                reward=reward,
                task_id=self.task_ids[(self.step * self.step_rows // 8 + i // 8) % len(self.task_ids)],
                outcome={"success": reward == 1.0},
            )
            batch.append(row)
            self.done += 1
            if self.done % self.step_rows == 0:  # the step is full: flush it with its metrics
                store.trajectories.insert_trajectories(self.db, batch)
                batch = []
                store.metrics.append_step(
                    self.db,
                    self.run_id,
                    self.step,
                    {"reward/mean": self.rng.uniform(0, 1), "loss": self.rng.uniform(0, 0.1)},
                )
                self.step += 1
        if batch:
            store.trajectories.insert_trajectories(self.db, batch)


def write_loop(db_path: str, run_id: int, rate: float, step_rows: int) -> None:
    """The writer process: hold the run's lock (a live worker to the UI), insert `rate` rows/s until killed."""
    db = store.open_db(db_path)
    token = store.runs.acquire_lock(db, run_id, stale_after_s=30)
    store.runs.set_status(db, run_id, "running", "ui_latency writer")
    writer = Writer(db, run_id, step_rows)
    writer.step = (store.metrics.last_step(db, run_id) or 0) + 1
    t0, beat = time.perf_counter(), 0.0
    while True:
        due = int(rate * (time.perf_counter() - t0)) - writer.done
        if due > 0:
            writer.write(min(due, int(rate) or 1))  # behind by more than a second: do not chase it
        if time.perf_counter() - beat > 1.0:
            store.runs.heartbeat(db, run_id, token)
            beat = time.perf_counter()
        time.sleep(0.1)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--write-loop":  # the writer process (see --writer)
        write_loop(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presses", type=int, default=40, help="presses of each kind")
    ap.add_argument("--no-worker", action="store_true", help="the control: stop the worker before pressing")
    ap.add_argument("--size", default="200x50")
    ap.add_argument("--wait-s", type=float, default=300.0, help="give up if training has not started by then")
    ap.add_argument(
        "--writer",
        type=float,
        metavar="ROWS_PER_S",
        help="no model: a synthetic run that another process writes at this rate (0: idle control)",
    )
    ap.add_argument("--step-rows", type=int, default=512, help="--writer: rows a step")
    ap.add_argument("--tasks", type=int, default=280, help="--writer: tasks of the synthetic run")
    ap.add_argument("--attach", metavar="DB", help="a run another process is training now (its first run)")
    ap.add_argument(
        "--probe",
        choices=("control", "spawn"),
        default="control",
        help="how the screen is read: one tmux control-mode client (default) or a process per capture",
    )
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.attach and (args.writer is not None or args.no_worker):
        ap.error("--attach uses the run's own worker: not with --writer or --no-worker")
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is needed (apt-get install tmux)")
    cols, rows = args.size.split("x")
    bindir = Path(sys.executable).parent
    tmp = Path(tempfile.mkdtemp(prefix="wb-ui-bench-"))
    db_path = Path(args.attach).resolve() if args.attach else tmp / "ui.db"
    if args.writer is not None:
        synthetic_run(db_path, args.tasks, args.step_rows, steps=20)
    elif not args.attach:  # an attached run's worker is someone else's: neither started nor stopped here
        subprocess.run(
            [bindir / "workbench", "demo", "--headless", "--db", str(db_path)], check=True, cwd=tmp
        )
    db = store.open_db(db_path)
    run_id = store.runs.list_runs(db)[0]["id"]
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
    # a tree to compare (PYTHONPATH) and an escape delay to compare (ESCDELAY), passed to the UI in tmux
    env = "".join(f"{k}={os.environ[k]} " for k in ("PYTHONPATH", "ESCDELAY") if os.environ.get(k))
    tmux(
        "new-session",
        "-d",
        "-s",
        SESSION,
        "-x",
        cols,
        "-y",
        rows,
        f"cd {tmp} && {env}{bindir / 'workbench'} tui --db {db_path} --run {run_id}",
    )
    worker_pid, probe = None, None
    try:
        probe = ControlProbe() if args.probe == "control" else SpawnProbe()
        probe.wait_for(lambda s: "Curves:" in s, 60)
        time.sleep(2.0)  # the dashboard's first load (in a thread) lands after its first paint
        if args.writer is not None:
            # Rate 0 too: the idle control's run is as live (lock, heartbeat, status) as the written one.
            worker_pid = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--write-loop",
                    str(db_path),
                    str(run_id),
                    str(args.writer),
                    str(args.step_rows),
                ]
            ).pid
            time.sleep(5)  # the writer at its pace, the UI's feed caught up with (or skipping) its backlog
        elif not args.attach:
            worker_pid = int(
                subprocess.run(
                    ["pgrep", "-f", f"workbench.worker --db {db_path}"], capture_output=True, text=True
                ).stdout.split()[0]
            )
        t_start = (
            time.time()
        )  # wait for training proper (the SFT warm-up's first step), past load and baseline
        while args.writer is None and not any(
            e["kind"] in ("sft_step", "step") for e in store.runs.events_since(db, run_id, 0, 1000)
        ):
            if time.time() - t_start > args.wait_s:
                raise SystemExit(f"the worker did not start training within {args.wait_s} s")
            time.sleep(1.0)
        if args.no_worker and worker_pid:
            subprocess.run(["kill", str(worker_pid)], capture_output=True)
            worker_pid = None
            time.sleep(5)
        cpu0, wall0 = (cpu_seconds(worker_pid) if worker_pid else 0.0), time.time()
        traj0 = store.trajectories.count_trajectories(db, run_id)
        lat: dict[str, list[float]] = {"next curve ]": [], "open help ?": [], "close help esc": []}
        try:
            for _ in range(args.presses):
                # The curves pane's title says "(k/N)": read where it is before each press. (Read once at the
                # start, a title drawn before the dashboard's first load was wrong by one: the load picks the
                # SFT loss curve until the user picks one.)
                m = TITLE.search(probe.wait_for(lambda s: TITLE.search(s) is not None, 5.0))
                assert m is not None
                n_curves = int(m.group(2))
                due = f"({int(m.group(1)) % n_curves + 1}/{n_curves})"
                lat["next curve ]"].append(press(probe, "]", lambda s, due=due: due in s))
                lat["open help ?"].append(press(probe, "?", lambda s: HELP_MARK in s and not footer(s)))
                lat["close help esc"].append(
                    press(probe, "Escape", lambda s: HELP_MARK not in s and footer(s))
                )
                time.sleep(0.05)
        except TimeoutError:
            print("stopped: three keys were not on screen within 10 s")
        wall = time.time() - wall0
        cpu = (cpu_seconds(worker_pid) - cpu0) / wall if worker_pid else 0.0
        traj = store.trajectories.count_trajectories(db, run_id) - traj0
        status = store.runs.get_run(db, run_id)
    finally:
        if probe is not None:
            probe.close()
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
        if worker_pid:
            subprocess.run(["kill", str(worker_pid)], capture_output=True)
    allx = [x for v in lat.values() for x in v]
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "size": args.size,
        "probe": args.probe,
        "worker": not args.no_worker,
        "attached_to": args.attach,
        "writer_rows_per_s": args.writer,
        "worker_cpu_cores": round(cpu, 2),
        "trajectories_written_during": traj,
        "rows_per_s_during": round(traj / wall),
        "worker_status": f"{status['status']}: {status['status_reason']}",
        "keys": {k: summary(v) for k, v in lat.items()},
        "all": summary(allx),
        "timeouts_10s": len(TIMEOUTS),
    }
    print(
        f"worker used {cpu:.2f} cores and wrote {traj} trajectories during the bench ({traj / wall:.0f}/s; "
        f"{result['worker_status']})"
    )
    for k, v in result["keys"].items():
        print(
            f"{k:16s} n={v['n']:3d}  p50 {v['p50_ms']:6.1f} ms  p95 {v['p95_ms']:6.1f} ms  max {v['max_ms']:6.1f} ms"
        )
    a = result["all"]
    print(
        f"{'all':16s} n={a['n']:3d}  p50 {a['p50_ms']:6.1f} ms  p95 {a['p95_ms']:6.1f} ms  (goal p95 < 100 ms)"
    )
    if TIMEOUTS:
        print(f"{len(TIMEOUTS)} key(s) not on screen within 10 s (counted as 10 s): {TIMEOUTS}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
