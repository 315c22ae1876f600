"""The Tasks pane keeps one row per task, split and policy: the training rollouts ("training"), and each eval's
rows under the policy it measured ("base", "sft", "step N"), never averaged together."""

from __future__ import annotations

from textual.widgets import DataTable

from screens.app import WorkbenchApp
from screens.widgets.tasks_pane import TasksPane
from tests.conftest import open_dashboard
from tests.fake_run import TASKS, add_policy_evals, wait_until
from workbench.view import Checkpoint, Eval, View, policy_labels

HEADER = ["prompt", "split", "policy", "n", "mean", "succ", "task"]


def cells(table: DataTable) -> list[dict[str, str]]:
    """The table's rows as drawn, by column label."""
    labels = [str(c.label) for c in table.ordered_columns]
    return [
        {lb: getattr(c, "plain", str(c)) for lb, c in zip(labels, table.get_row_at(i), strict=True)}
        for i in range(table.row_count)
    ]


def test_policy_labels_name_the_policy_each_eval_measured():
    checkpoints = [Checkpoint(1, 1, 0, "sft", "/c/sft"), Checkpoint(2, 1, 40, "periodic", "/c/40")]
    evals = [
        Eval(13, 1, 40, "greedy", False, checkpoint_id=2),
        Eval(12, 1, 0, "sampled", False, checkpoint_id=1),
        Eval(11, 1, 0, "greedy", False, checkpoint_id=1),
        Eval(10, 1, 0, "greedy", True),
    ]
    labels = policy_labels(evals, checkpoints)
    assert labels == {10: "base", 11: "sft", 12: "sft smp", 13: "step 40"}
    assert list(labels) == [10, 11, 12, 13]  # the order the pane shows a task's evals in


async def test_each_eval_of_a_held_out_task_is_its_own_row(fake):
    held = [k for k, split, *_ in TASKS if split == "held_out"]
    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=(200, 50)) as pilot:
        dash = await open_dashboard(pilot)
        pane = dash.query_one(TasksPane)
        table = pane.query_one(DataTable)
        pane.query_one(DataTable).focus()
        await pilot.press("o", "o", "o")  # sort: task (task, split, then policy)
        assert pane.sort == "task"
        await pilot.pause(0.1)
        assert [str(c.label) for c in table.ordered_columns] == HEADER
        shown = cells(table)
        # The fake run evaluated its held-out tasks at steps 2 and 5: two rows each, one row per training task.
        assert [(r["task"], r["policy"], r["n"]) for r in shown if r["split"] == "held"] == [
            (k.removeprefix("fake:"), policy, "1") for k in held for policy in ("step 2", "step 5")
        ]
        assert {r["policy"] for r in shown if r["split"] == "train"} == {"training"} and len(shown) == 8

        # The baseline and the SFT policy are evaluated while the dashboard watches (the SFT eval is new to it).
        ids = add_policy_evals(fake)
        await wait_until(
            pilot, lambda: sum(r["split"] == "held" for r in cells(table)) == 8, what="the new evals"
        )
        shown = cells(table)
        for k in held:
            rows = [r for r in shown if r["task"] == k.removeprefix("fake:")]
            assert [r["policy"] for r in rows] == ["base", "sft", "step 2", "step 5"]
            base, sft = rows[0], rows[1]
            # Each policy's own numbers: the baseline failed the task, the SFT policy solved it.
            assert (base["n"], base["mean"], base["succ"]) == ("1", "-1.00", "0%")
            assert (sft["n"], sft["mean"], sft["succ"]) == ("1", "1.00", "100%")
        assert set(pane.policies) >= set(ids.values())

        # What was folded in as it streamed equals a fresh read, row for row.
        with View.open(fake.db_path) as view:
            full = {s.key: (s.attempts, s.reward_sum, s.successes) for s in view.task_stats(fake.run_id)}
        assert {k: (r.attempts, r.reward_sum, r.successes) for k, r in pane.stats.rows.items()} == full

        # Another sort keeps the rows apart; Enter on an eval's row filters the dashboard by its task.
        await pilot.press("o")
        assert pane.sort == "mean reward"
        await pilot.pause(0.1)
        shown = cells(table)
        assert len(shown) == 12 and shown[0]["policy"] == "sft" and shown[-1]["policy"] == "base"
        table.move_cursor(row=0, animate=False)
        await pilot.press("enter")
        await wait_until(pilot, lambda: dash.task_filter is not None, what="the task filter")
        assert dash.task_filter == fake.task_ids[f"fake:{shown[0]['task']}"]
