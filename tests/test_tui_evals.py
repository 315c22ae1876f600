"""The evaluations screen: baseline vs checkpoints, the best one marked, warning flags."""

from __future__ import annotations

from textual.widgets import DataTable

from screens.app import WorkbenchApp
from screens.dashboard import DashboardScreen
from screens.evals_screen import EvalsScreen
from tests.fake_run import fake_copy, plain, wait_until


async def test_evaluations_mark_the_best_checkpoint_and_flag_drift(tmp_path):
    fake = fake_copy(tmp_path / "wb.db")
    app = WorkbenchApp(fake.db_path, poll_s=0.2)
    async with app.run_test(size=(110, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.loaded)
        await pilot.press("E")
        await wait_until(pilot, lambda: isinstance(app.screen, EvalsScreen) and app.screen.query_one(DataTable).row_count)
        screen = app.screen
        table = screen.query_one(DataTable)
        rows = [[getattr(c, "plain", str(c)) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [r[0] for r in rows] == ["base", "★ best", ""]
        assert rows[1][1] == "2"  # the step-2 checkpoint (45%) beats the step-5 one (37.5%)
        assert rows[1][6] == "45.0% 30–60"
        assert rows[1][7] == "+32pp"
        assert "best: step 2" in plain(screen.query_one("#evals-title"))
        flags = plain(screen.query_one("#evals-flags"))
        assert "completion length drifted" in flags
        assert "possible reward hacking" not in flags  # valid JSON improved on the baseline
        await pilot.press("m")  # greedy only: the same three
        await wait_until(pilot, lambda: screen.mode == "greedy" and table.row_count == 3)
        await pilot.press("m")  # sampled: none in the fake
        await wait_until(pilot, lambda: screen.mode == "sampled" and table.row_count == 0)
        assert "no evaluations" not in flags


async def test_the_promoted_checkpoint_is_marked_apart_from_the_best(tmp_path):
    import store

    fake = fake_copy(tmp_path / "wb.db")
    db = store.open_db(fake.db_path)
    store.metrics.promote_checkpoint(db, fake.checkpoint_ids[1])  # the step-5 one (37.5%), not the best
    db.conn.close()
    app = WorkbenchApp(fake.db_path, poll_s=0.2)
    async with app.run_test(size=(110, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.loaded)
        await pilot.press("E")
        await wait_until(pilot, lambda: isinstance(app.screen, EvalsScreen) and app.screen.query_one(DataTable).row_count)
        table = app.screen.query_one(DataTable)
        rows = [[getattr(c, "plain", str(c)) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [r[0] for r in rows] == ["base", "★ best", "promo"]
        assert "promoted: step 5" in plain(app.screen.query_one("#evals-title"))
