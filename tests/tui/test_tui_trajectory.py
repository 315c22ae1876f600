"""The trajectory screen: stepping (n/p), group view (g), labels (+/-), search, filters and sort."""

from __future__ import annotations

from textual.widgets import Checkbox, Collapsible, Input

import store
from screens.app import WorkbenchApp
from screens.dashboard import DashboardScreen
from screens.filter_screen import FilterScreen
from screens.modals import PromptScreen
from screens.trajectory_screen import TrajectoryScreen
from store import labels, trajectories
from tests.conftest import open_screen
from tests.fake_run import plain, wait_until

SIZE = (100, 30)


async def open_trajectories(pilot) -> TrajectoryScreen:
    return await open_screen(pilot, "t", TrajectoryScreen, lambda s: s.shown is not None)


async def moved(pilot, screen: TrajectoryScreen, key: str, before: int) -> int:
    await pilot.press(key)
    await wait_until(
        pilot, lambda: screen.shown is not None and screen.shown.id != before, what=f"{key} moves"
    )
    return screen.shown.id


async def test_step_through_see_the_group_and_label(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.2)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_trajectories(pilot)
        # n / p: newest first, one at a time
        newest = max(fake.trajectory_ids)
        assert screen.shown.id == newest
        second = await moved(pilot, screen, "n", newest)
        assert second == newest - 1
        assert await moved(pilot, screen, "p", second) == newest
        # turns with their roles; the system prompt starts collapsed and x opens it
        collapsible = screen.query_one(Collapsible)
        assert collapsible.collapsed
        await pilot.press("x")
        assert not collapsible.collapsed
        head = plain(screen.query_one("#traj-head"))
        assert f"#{newest}" in head and "reward" in head
        side = plain(screen.query_one("#side-body"))
        assert "reward parts" in side and "verifier says" in side
        # g: the G members of a training group side by side
        await pilot.press("n", "n", "n", "n", "n")  # off the held-out rows, onto a train group
        await wait_until(pilot, lambda: screen.shown.split == "train")
        await pilot.press("g")
        members = screen.query(".member")
        assert len(members) == fake.group_size
        db = store.open_db(fake.db_path)
        group = trajectories.group_members(db, screen.shown.id)
        text = " ".join(plain(m.query_one("Static")) for m in members)
        for row in group:
            assert row["completion"][:20] in text
        assert len(screen.query(".member.-current")) == 1
        await pilot.press("g")
        assert not screen.query_one("#group").display
        # + labels good with a note; - then escape labels nothing
        tid = screen.shown.id
        await pilot.press("plus")
        await wait_until(pilot, lambda: isinstance(app.screen, PromptScreen))
        await pilot.press(*"right tool", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, TrajectoryScreen))
        await app.workers.wait_for_complete()
        assert [(lab["verdict"], lab["note"]) for lab in labels.labels_for(db, tid)] == [
            ("good", "right tool")
        ]
        await wait_until(pilot, lambda: "label: good" in plain(screen.query_one("#traj-head")))
        await pilot.press("minus")
        await wait_until(pilot, lambda: isinstance(app.screen, PromptScreen))
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, TrajectoryScreen))
        await app.workers.wait_for_complete()
        assert len(labels.labels_for(db, tid)) == 1
        db.conn.close()


async def test_search_sort_and_filters(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.2)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_trajectories(pilot)
        # / searches completions and explanations
        await pilot.press("slash")
        await wait_until(pilot, lambda: isinstance(app.screen, PromptScreen))
        await pilot.press(*"delete_all", "enter")
        await wait_until(pilot, lambda: screen.browser.flt.text == "delete_all" and screen.browser.rows)
        assert all("delete_all" in r.completion for r in screen.browser.rows)
        await pilot.press("slash")
        await wait_until(pilot, lambda: isinstance(app.screen, PromptScreen))
        app.screen.query_one(Input).value = ""
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.browser.flt.text is None and len(screen.browser.rows) == 50)
        # o: best first, then worst first
        await pilot.press("o")
        await wait_until(pilot, lambda: screen.browser.order == "reward" and screen.browser.rows)
        db = store.open_db(fake.db_path)
        all_rewards = [trajectories.get_trajectory(db, i)["reward"] for i in fake.trajectory_ids]
        db.conn.close()
        assert screen.shown.reward == max(all_rewards)
        await pilot.press("o")
        await wait_until(
            pilot, lambda: not screen.browser.descending and screen.shown.reward == min(all_rewards)
        )
        # f: a reward range and train only
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, FilterScreen))
        app.screen.query_one("#reward_max", Input).value = "0"
        app.screen.query_one("#step_min", Input).value = "3"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: screen.browser.flt.reward_max == 0.0 and screen.browser.rows)
        assert all(r.reward <= 0 and r.step >= 3 for r in screen.browser.rows)
        assert "reward" in plain(screen.query_one("#traj-filter"))
        # errors only: the fake has none
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, FilterScreen))
        app.screen.query_one(Checkbox).value = True
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: screen.browser.flt.errors_only and screen.shown is None)
        assert "No trajectory matches" in plain(screen.query_one("#traj-head"))
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))
