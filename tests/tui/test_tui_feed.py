"""The dashboard's feed stays bounded under a fast writer (issue 33 item 6): each poll hands the UI thread at
most FEED_LIMIT rows, a backlog is skipped to its newest rows, and the rows skipped still count in the Tasks
pane (summed in SQLite), so its numbers equal a full scan."""

from __future__ import annotations

import random

import pytest

import store
from screens.app import WorkbenchApp
from screens.dashboard import FEED_LIMIT
from screens.widgets.rollouts_pane import RolloutsPane
from screens.widgets.tasks_pane import TasksPane
from tests.conftest import open_dashboard
from tests.fake_run import wait_until
from tests.store_helpers import trajectory_row
from workbench.view import TaskStats, View

BURST = 3 * FEED_LIMIT + 17  # rows written in one transaction: more than a poll may take


def burst(fake, n: int, first_step: int = 6) -> list[int]:
    """`n` rows over the fake's tasks in one transaction, as a fast worker's batch lands."""
    rng = random.Random(7)
    tids = sorted(fake.task_ids.values())
    rows = []
    for i in range(n):
        row = trajectory_row(
            fake.run_id, first_step + i // 32, (i // 8) % 4, i % 8, rng, task_id=tids[i % len(tids)]
        )
        row["outcome"] = {"success": row["reward"] == 1.0}
        rows.append(row)
    db = store.open_db(fake.db_path)
    try:
        return store.trajectories.insert_trajectories(db, rows)
    finally:
        db.conn.close()


def test_feed_skips_a_backlog_and_sums_what_it_skipped(fake):
    view = View.open(fake.db_path)
    try:
        top = view.newest_id(fake.run_id)
        stats = TaskStats()
        stats.load(view.task_stats(fake.run_id), top)
        ids = burst(fake, BURST)
        feed = view.feed(fake.run_id, top, limit=FEED_LIMIT)
        assert [r.id for r in feed.rows] == ids[-FEED_LIMIT:]  # the newest, oldest first
        assert feed.skipped_rows == BURST - FEED_LIMIT
        stats.merge(feed.skipped)
        stats.add(feed.rows)
        full = {s.key: s for s in view.task_stats(fake.run_id)}
        assert set(stats.rows) == set(full)
        for key, row in stats.rows.items():
            assert (row.attempts, row.rewarded, row.classified, row.successes) == (
                full[key].attempts,
                full[key].rewarded,
                full[key].classified,
                full[key].successes,
            )
            assert row.reward_sum == pytest.approx(full[key].reward_sum)
        # A task's per-step sums of the skipped rows (for its reward curve under a task filter).
        task = feed.rows[0].task_id
        assert task is not None
        steps = view.feed(fake.run_id, top, limit=FEED_LIMIT, task_id=task).skipped_steps
        skipped = [
            r
            for r in view.trajectories_since(fake.run_id, top, limit=BURST)[: BURST - FEED_LIMIT]
            if r.task_id == task
        ]
        assert sum(n for _, n in steps.values()) == len(skipped) > 0
        # Caught up: the rows after the newest one read are all there is, nothing skipped.
        assert view.feed(fake.run_id, ids[-1], limit=FEED_LIMIT).rows == []
        small = view.feed(fake.run_id, ids[-5], limit=FEED_LIMIT)
        assert [r.id for r in small.rows] == ids[-4:] and small.skipped_rows == 0
    finally:
        view.close()


async def test_dashboard_takes_at_most_feed_limit_rows_a_poll_and_counts_the_rest(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=(200, 50)) as pilot:
        dash = await open_dashboard(pilot)
        rollouts = dash.query_one(RolloutsPane)
        handed: list[int] = []
        add = rollouts.add

        def counting_add(rows, **kw):
            handed.append(len(rows))
            return add(rows, **kw)

        rollouts.add = counting_add  # type: ignore[method-assign]
        ids = burst(fake, BURST)
        await wait_until(pilot, lambda: dash.last_id == ids[-1], what="the feed at the newest row")
        assert handed and max(handed) <= FEED_LIMIT
        assert sum(handed) <= FEED_LIMIT < BURST and dash.skipped_rows == BURST - FEED_LIMIT
        # The Tasks pane counts every row all the same.
        view = View.open(fake.db_path)
        try:
            full = {s.key: s.attempts for s in view.task_stats(fake.run_id)}
        finally:
            view.close()
        stats = dash.query_one(TasksPane).stats
        assert {k: r.attempts for k, r in stats.rows.items()} == full
