"""Progress from the first second: the SFT warm-up's loss is plotted as it comes (the Curves pane shows it
while it is all there is), the status says the phase's done/total and time left, frozen while paused, and
an empty curve says what it waits for."""

from __future__ import annotations

import store
from screens.app import WorkbenchApp
from screens.widgets.curves_pane import CurvesPane
from screens.widgets.status_bar import StatusBar
from store import metrics, runs
from tests.conftest import open_dashboard
from tests.fake_run import plain, wait_until
from workbench.progress import Progress

SIZE = (200, 50)


def sft_run(path) -> tuple[int, Progress, list[float]]:
    db = store.open_db(path)
    rid = runs.create_run(db, name="warm", model="m", config={"sft_steps": 160, "max_steps": 8})
    runs.set_status(db, rid, "running", "started")
    now = [0.0]
    p = Progress(db, rid, lambda m: None, every_s=0.0, clock=lambda: now[0])
    for i in range(6):
        runs.add_event(
            db,
            rid,
            "sft_step",
            f"SFT step {i + 1}: loss {1.0 / (i + 1):.4f}",
            {"step": i + 1, "loss": 1.0 / (i + 1)},
        )
        p.report("sft", i + 1, 160, loss=1.0 / (i + 1))
        now[0] += 2.0
    db.conn.close()
    return rid, p, now


async def test_sft_loss_is_plotted_as_it_comes_and_the_status_has_an_eta(tmp_path):
    path = tmp_path / "wb.db"
    rid, _, _ = sft_run(path)
    app = WorkbenchApp(str(path), run_id=rid, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        dash = await open_dashboard(pilot)
        curves = dash.query_one(CurvesPane)
        await wait_until(pilot, lambda: len(curves.sft) == 6, what="the SFT losses")
        assert curves.curve.key == "sft_loss" and "SFT loss" in curves.border_title
        assert [s for s, _ in curves.sft] == [1, 2, 3, 4, 5, 6]
        # The status bar reads the newest progress on its own poll: wait for it, then check what it says.
        await wait_until(
            pilot, lambda: "SFT 6/160" in plain(dash.query_one(StatusBar)), what="the SFT progress"
        )
        status = plain(dash.query_one(StatusBar))
        assert "SFT 6/160 loss 0.167" in status and "5m08s left" in status  # 0.5 steps/s, 154 to go
        # The first GRPO step: the pane turns to the reward by itself (the user had not picked a curve).
        db = store.open_db(path)
        metrics.append_step(db, rid, 0, {"reward": 0.4})
        runs.set_status(db, rid, "paused", "pause command")
        db.conn.close()
        await wait_until(pilot, lambda: curves.curve.key == "reward", what="the reward curve")
        await wait_until(pilot, lambda: "⏸ SFT 6/160" in plain(dash.query_one(StatusBar)), what="frozen")


async def test_an_empty_curve_says_what_it_waits_for(tmp_path):
    path = tmp_path / "wb.db"
    db = store.open_db(path)
    rid = runs.create_run(db, name="cold", model="m", config={"max_steps": 8})
    runs.set_status(db, rid, "running", "started")
    Progress(db, rid, lambda m: None).report("eval", 0, 150, label="base")
    db.conn.close()
    app = WorkbenchApp(str(path), run_id=rid, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        dash = await open_dashboard(pilot)
        curves = dash.query_one(CurvesPane)
        await wait_until(pilot, lambda: "eval (base) 0/150" in curves.waiting, what="the phase")
        await pilot.pause(0.2)
        plot = curves.query_one("#curve-plot")
        text = "\n".join(plot.render_line(y).text for y in range(plot.size.height))
        assert "waiting for the first GRPO step (now: eval (base) 0/150 tasks)" in text
