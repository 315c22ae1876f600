"""Layouts that hold across resizes: every table's columns are recomputed for the pane's width (80x24 ->
200x50 -> 80x24), the header cells stay apart and every column stays on screen; whole-step ticks on the
curves' x axis."""

from __future__ import annotations

import re

import pytest
from textual.widgets import DataTable

import store
from screens.app import WorkbenchApp
from screens.curves import step_ticks
from screens.dashboard import DashboardScreen
from screens.widgets.curves_pane import CurvesPane
from screens.widgets.rollouts_pane import RolloutsPane
from screens.widgets.tasks_pane import TasksPane
from store import runs
from tests.conftest import open_dashboard
from tests.fake_run import fake_copy, wait_until

TASKS_HEADER = ("prompt", "split", "policy", "n", "mean", "succ", "task")
ROLLOUTS_HEADER = ("step", "mean", "sprd", "rewards", "prompt", "best call", "args", "task")


def header(table: DataTable) -> str:
    """The header line as drawn on screen, cut at the table's width."""
    return table.render_line(0).text[: table.size.width]


def check_table(table: DataTable, labels: tuple[str, ...], *, last_visible: bool = True) -> None:
    line = header(table)
    # Every label on screen, each followed by a gap (or the end): none runs into the next.
    tail = r"\s*" if last_visible else r"(\s+\S*)?\s*"  # a cut last column shows a part of its label
    assert re.fullmatch(r"\s*" + r"\s+".join(re.escape(lb) for lb in labels) + tail, line), line
    widths = [c.width for c in table.ordered_columns]
    assert all(not c.auto_width for c in table.ordered_columns)  # auto widths only grow: none here
    if last_visible:
        assert sum(widths) <= table.size.width, (widths, table.size.width)
    for row in range(table.row_count):  # no cell is wider than its column less the gap
        for cell, width in zip(table.get_row_at(row), widths, strict=True):
            text = getattr(cell, "plain", str(cell))
            assert len(text) <= width - 1, (text, width)


async def settle(pilot, w: int, h: int) -> DashboardScreen:
    await pilot.resize_terminal(w, h)
    await pilot.pause(0.3)
    dash = pilot.app.screen
    assert isinstance(dash, DashboardScreen)
    return dash


async def test_tables_hold_their_columns_across_resizes(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=(80, 24)) as pilot:
        dash = await open_dashboard(pilot)
        seen: dict[int, int] = {}
        for w, h in ((80, 24), (200, 50), (80, 24), (120, 30), (80, 24)):
            dash = await settle(pilot, w, h)
            for key, cls, labels in (("1", TasksPane, TASKS_HEADER), ("2", RolloutsPane, ROLLOUTS_HEADER)):
                await pilot.press(key)  # narrow: bring the pane to the front (wide: all are shown)
                await pilot.pause(0.1)
                pane = dash.query_one(cls)
                table = pane.query_one(DataTable)
                assert table.row_count > 0
                # The last column (the task's id) is cut first when the pane is narrow, by design: the Tasks
                # pane keeps it unless the prompt would get under 30 cells (two panes side by side at 120).
                whole = cls is TasksPane and w != 120
                check_table(table, labels if whole else labels[:-1], last_visible=whole)
            tasks = dash.query_one(TasksPane).query_one(DataTable)
            # The prompt takes what the numbers leave (pane 78 - numbers 33 - task 13 - scrollbar 1 at 80
            # columns): it follows the width both ways, the same at the same size.
            prompt = seen.setdefault(w, tasks.ordered_columns[0].width)
            assert tasks.ordered_columns[0].width == prompt
        assert seen[80] == 31 and seen[200] == 51 and seen[120] == 24


async def test_a_resize_under_the_help_screen_lays_the_dashboard_out_when_it_closes(fake):
    """The opaque help hides the dashboard, so the dashboard is not laid out (nor repainted) under it; a see-through
    modal keeps it visible. A resize while help is open reaches the dashboard's tables when help closes."""
    from screens.help_screen import HelpScreen
    from screens.modals import TextScreen

    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=(200, 50)) as pilot:
        dash = await open_dashboard(pilot)
        app.push_screen(TextScreen("see-through", "the dashboard shows around it"))
        await pilot.pause(0.1)
        assert dash.is_current
        await pilot.press("escape")
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        assert not dash.is_current
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.3)
        await pilot.press("escape")
        dash = await settle(pilot, 80, 24)
        assert dash.size.width == 80
        table = dash.query_one(TasksPane).query_one(DataTable)
        check_table(table, TASKS_HEADER)
        assert table.ordered_columns[0].width == 31  # as after a resize with nothing over the dashboard


async def test_curves_x_axis_ticks_are_whole_steps(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=(200, 50)) as pilot:
        dash = await open_dashboard(pilot)
        await pilot.pause(0.3)
        plot = dash.query_one(CurvesPane).query_one("#curve-plot")
        text = "\n".join(plot.render_line(y).text for y in range(plot.size.height))
        axis = [ln for ln in text.splitlines() if re.search(r"\d\s+\d", ln) and not re.search(r"[│┤]", ln)]
        assert axis, text
        assert not re.search(r"\d\.\d", axis[-1]), axis[-1]  # 0 1 2 3 4 5, not 1.0 2.8 4.5
        assert re.findall(r"\d+", axis[-1])[:3] == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("xs", "width", "ticks"),
    [
        ([1, 2.8, 4.5, 5], 40, [1, 2, 3, 4, 5]),
        ([0, 100], 40, [0, 20, 40, 60, 80, 100]),
        ([0, 1000], 40, [0, 200, 400, 600, 800, 1000]),
        ([3, 3], 40, [3]),
        ([], 40, []),
    ],
)
def test_step_ticks(xs, width, ticks):
    assert step_ticks(xs, width) == ticks


@pytest.mark.parametrize(
    "sizes",
    [((80, 24), (200, 50), (80, 24)), ((200, 50), (80, 24), (200, 50))],
    ids=["80-200-80", "200-80-200"],
)
def test_dashboard_snapshot_after_resizes(tmp_path, snap_compare, sizes):
    """The picture after a round trip equals a fresh start at that size: nothing of the other size stays."""
    fake = fake_copy(tmp_path / "wb.db")
    db = store.open_db(fake.db_path)
    beat = runs.get_run(db, fake.run_id)["heartbeat"]
    db.conn.close()
    app = WorkbenchApp(fake.db_path, poll_s=0.2, clock=lambda: beat + 1.0)

    async def resize(pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.loaded)
        await app.workers.wait_for_complete()
        for w, h in sizes[1:]:
            await pilot.resize_terminal(w, h)
            await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=sizes[0], run_before=resize)
