"""Key -> repaint with and without the frozen heap (screens/heap.py), headless, in one run.

    .venv/bin/python bench/ui_gc.py [--rounds 3] [--presses 16] [--json out.json]

Each round runs both arms in fresh processes, alternating (so a change in the machine's load falls on both):
the fake run (tests/fake_run.py) at 200x50 under `App.run_test`, `?` then `esc` pressed `--presses` times.
Timed from the key press to the first full repaint that the app hands to its driver (the help screen's, then
the dashboard's), and every generation-2 collection's pause (gc callbacks). The `thawed` arm replaces
`heap.settle` with a no-op (the app as before the change). Headless: no terminal; `bench/ui_latency.py` is the
real-terminal measure beside a training worker.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ui_latency import summary  # noqa: E402 - the real-terminal bench's n / p50 / p95 / max, in ms


def arm(frozen: bool, presses: int) -> dict:
    """One app, `presses` opens and closes of the help screen; latencies and pauses in seconds."""
    import screens.heap as heap
    from screens.app import WorkbenchApp
    from screens.dashboard import DashboardScreen
    from screens.help_screen import HelpScreen
    from tests.fake_run import fake_copy, wait_until

    if not frozen:
        heap.settle = lambda: 0
    pauses: list[float] = []
    started: dict[str, float] = {}

    def on_gc(phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started["t"] = time.perf_counter()
        elif "t" in started:
            pauses.append(time.perf_counter() - started.pop("t"))

    async def run() -> dict:
        fake = fake_copy(Path(tempfile.mkdtemp()) / "wb.db")
        app = WorkbenchApp(fake.db_path, fake.run_id)
        shown: list[tuple[float, str]] = []
        display = app._display

        def timed_display(screen, update):  # noqa: ANN001 - Textual's private hook
            if type(update).__name__ == "LayoutUpdate":  # a full repaint
                shown.append((time.perf_counter(), type(screen).__name__))
            return display(screen, update)

        app._display = timed_display
        found: dict[str, list[float]] = {"open": [], "close": []}
        async with app.run_test(size=(200, 50)) as pilot:
            await wait_until(
                pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.loaded, 30, "dash"
            )
            await pilot.pause(1.0)
            pauses.clear()
            gc.callbacks.append(on_gc)
            for _ in range(presses):
                for key, cls, name in (
                    ("question_mark", HelpScreen, "open"),
                    ("escape", DashboardScreen, "close"),
                ):
                    shown.clear()
                    t = time.perf_counter()
                    await pilot.press(key)
                    await wait_until(pilot, lambda cls=cls: isinstance(app.screen, cls), 10, name)
                    await wait_until(
                        pilot, lambda cls=cls: any(s == cls.__name__ for _, s in shown), 10, name
                    )
                    first = next(x for x, s in shown if s == cls.__name__)
                    found[name].append(first - t)
                    await pilot.pause(0.2)
            gc.callbacks.remove(on_gc)
        return {**found, "gen2_pauses": pauses, "frozen_objects": gc.get_freeze_count()}

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--presses", type=int, default=16)
    ap.add_argument("--json", default=None)
    ap.add_argument("--arm", choices=["frozen", "thawed"], help=argparse.SUPPRESS)  # one arm, in a child
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(arm(args.arm == "frozen", args.presses)))
        return
    found: dict[str, dict[str, list[float]]] = {
        a: {"open": [], "close": [], "gen2_pauses": []} for a in ("thawed", "frozen")
    }
    for _ in range(args.rounds):
        for name in ("thawed", "frozen"):
            out = subprocess.run(
                [sys.executable, __file__, "--arm", name, "--presses", str(args.presses)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            got = json.loads(out.strip().splitlines()[-1])
            for k in found[name]:
                found[name][k] += got[k]
    result = {
        a: {
            **{k: summary(v) if v else {"n": 0} for k, v in d.items()},
            "all": summary(d["open"] + d["close"]),
        }
        for a, d in found.items()
    }
    for a, d in result.items():
        print(a, json.dumps(d))
    if args.json:
        Path(args.json).write_text(json.dumps({"result": result, "raw": found}, indent=1) + "\n")


if __name__ == "__main__":
    main()
