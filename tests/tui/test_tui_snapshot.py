"""Pictures of the dashboard, frozen: a fixed fake run and a frozen clock (the worker's heartbeat reads
1 s old), no toasts, and every load finished before the shot. 80x24 and 100x30 (narrow: one pane at a time,
keys 1-4, the status on one line) and 200x50 (all four panes)."""

from __future__ import annotations

import pytest

import store
from screens.app import WorkbenchApp
from screens.dashboard import DashboardScreen
from store import runs
from tests.fake_run import fake_copy, wait_until


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_dashboard_snapshot(tmp_path, snap_compare, size):
    fake = fake_copy(tmp_path / "wb.db")
    db = store.open_db(fake.db_path)
    beat = runs.get_run(db, fake.run_id)["heartbeat"]
    db.conn.close()
    app = WorkbenchApp(fake.db_path, poll_s=0.2, clock=lambda: beat + 1.0)

    async def settle(pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.loaded)
        await app.workers.wait_for_complete()
        await pilot.pause(0.3)  # a couple of polls: nothing new arrives, nothing changes

    assert snap_compare(app, terminal_size=size, run_before=settle)
