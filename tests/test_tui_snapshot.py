"""One picture of the dashboard at 100x30, frozen: a fixed fake run and a frozen clock (the worker's
heartbeat reads 1 s old), no toasts, and every load finished before the shot."""

from __future__ import annotations

import store
from screens.app import WorkbenchApp
from screens.dashboard import DashboardScreen
from store import runs
from tests.fake_run import fake_copy, wait_until


def test_dashboard_snapshot(tmp_path, snap_compare):
    fake = fake_copy(tmp_path / "wb.db")
    db = store.open_db(fake.db_path)
    beat = runs.get_run(db, fake.run_id)["heartbeat"]
    db.conn.close()
    app = WorkbenchApp(fake.db_path, poll_s=0.2, clock=lambda: beat + 1.0)

    async def settle(pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.loaded)
        await app.workers.wait_for_complete()
        await pilot.pause(0.3)  # a couple of polls: nothing new arrives, nothing changes

    assert snap_compare(app, terminal_size=(100, 30), run_before=settle)
