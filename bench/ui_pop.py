"""Closing a modal over the dashboard, headless: Textual's stock Footer against screens' KeyFooter, in one run.

    .venv/bin/python bench/ui_pop.py [--rounds 3] [--pops 8]

The fake run (tests/fake_run.py) at 200x50 under `App.run_test`; each round opens a fresh app with each footer
in turn (alternating, so a change in the machine's load falls on both) and times `esc` on the help screen until
the dashboard is back and the app idle. Headless: no terminal, no tmux; `bench/ui_latency.py` is the
real-terminal measure with a training worker.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from textual.widgets import Footer  # noqa: E402

import screens.dashboard as dashboard  # noqa: E402
from screens.app import WorkbenchApp  # noqa: E402
from screens.dashboard import DashboardScreen  # noqa: E402
from screens.help_screen import HelpScreen  # noqa: E402
from screens.widgets.footer import KeyFooter  # noqa: E402
from tests.fake_run import fake_copy, wait_until  # noqa: E402


async def pops(footer: type, n: int) -> list[float]:
    dashboard.KeyFooter = footer  # what the dashboard composes
    fake = fake_copy(Path(tempfile.mkdtemp()) / "wb.db")
    app = WorkbenchApp(fake.db_path, fake.run_id)
    times = []
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_until(
            pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.loaded, what="dash"
        )
        await pilot.pause(1.0)
        for _ in range(n):
            await pilot.press("question_mark")
            await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
            await pilot.pause()
            t = time.perf_counter()
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen), what="dashboard")
            await pilot.pause()
            times.append(time.perf_counter() - t)
    return times


async def main(rounds: int, n: int) -> None:
    found: dict[str, list[float]] = {"Footer": [], "KeyFooter": []}
    for _ in range(rounds):
        for footer in (Footer, KeyFooter):
            found[footer.__name__] += await pops(footer, n)
    for name, times in found.items():
        times.sort()
        p95 = times[int(0.95 * (len(times) - 1))]
        print(
            f"{name:9} n {len(times)}  p50 {1000 * statistics.median(times):.0f} ms  p95 {1000 * p95:.0f} ms"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pops", type=int, default=8)
    args = ap.parse_args()
    asyncio.run(main(args.rounds, args.pops))
