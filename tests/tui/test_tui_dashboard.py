"""The app and the dashboard against a fake run written with the real store functions."""

from __future__ import annotations

import time

import pytest
from textual.widgets import DataTable, Static

import store
from screens.app import WorkbenchApp
from screens.dashboard import DashboardScreen
from screens.help_screen import HelpScreen
from screens.modals import ConfirmScreen, TextScreen
from screens.runs_screen import RunsScreen
from screens.widgets.curves_pane import CurvesPane
from screens.widgets.rollouts_pane import RolloutsPane
from screens.widgets.status_bar import Banner, StatusBar
from screens.widgets.tasks_pane import TasksPane
from store import commands, runs, tasks, trajectories
from tests.conftest import open_dashboard, open_screen, pending_commands
from tests.fake_run import add_step, fake_copy, make_fake_run, plain, wait_until

SIZE = (100, 30)


def open_db(fake):
    return store.open_db(fake.db_path)


def live_groups(fake) -> set[str]:
    """The run's live groups as the live pane keys them: (step, split, group, eval)."""
    db = open_db(fake)
    rows = db.execute(
        "SELECT DISTINCT step, split, group_idx, eval_id FROM trajectories "
        "WHERE run_id = ? AND superseded = 0",
        [fake.run_id],
    ).fetchall()
    db.conn.close()
    return {f"{s}:{sp}:{g}:{'' if e is None else e}" for s, sp, g, e in rows}


def pending_kinds(fake) -> list[str]:
    return [c["kind"] for c in pending_commands(fake)]


async def test_dashboard_fills_all_panes(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        dash = await open_dashboard(pilot)
        db = open_db(fake)
        n_stats = len(tasks.task_stats(db, fake.run_id))
        db.conn.close()
        # 4 train tasks, and 2 held-out tasks x 2 evals (each eval's policy its own row)
        assert dash.query_one(TasksPane).query_one(DataTable).row_count == n_stats == 8
        # One row per group: 6 steps x 2 groups of 4, and 2 evals x 2 held-out tasks (52 trajectories).
        rollouts = dash.query_one(RolloutsPane)
        assert {k.value for k in rollouts.table.rows} == live_groups(fake)
        assert len(live_groups(fake)) == 16
        assert all(len(g.members) == 4 for g in rollouts.groups.values() if g.key[1] == "train")
        status = plain(dash.query_one(StatusBar))
        for part in (
            "fake-grpo",
            "running",
            "step 5/100",
            "tool_call_verifier v1",
            "ckpt @5",
            "worker ✓",
            "ETA",
        ):
            assert part in status, part
        assert not dash.query_one(Banner).has_class("-shown")
        # The scores pane reads its step in a thread (it must not hold up the UI under a fast writer).
        await wait_until(pilot, lambda: "step 5" in plain(dash.query_one("#scores-body")), what="scores pane")
        scores = plain(dash.query_one("#scores-body"))
        assert "step 5" in scores and "bad JSON" in scores and "valid_json" in scores


async def test_p_enqueues_pause_and_the_answer_becomes_a_toast(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await open_dashboard(pilot)
        await pilot.press("p")
        await app.workers.wait_for_complete()
        assert pending_kinds(fake) == ["pause"]
        # Play the worker: claim it and answer, as workbench's worker does at its safe point.
        db = open_db(fake)
        cmd = commands.claim_next(db, fake.run_id)
        commands.finish(db, cmd["id"], {"message": "paused after group 2"})
        runs.set_status(db, fake.run_id, "paused", "pause command")
        db.conn.close()
        await wait_until(pilot, lambda: app.tracker.answers, what="answer")
        assert app.tracker.answers[-1].message == "paused after group 2"
        # App.notify posts a message: the toast lands a moment after the answer is recorded.
        await wait_until(
            pilot,
            lambda: any("paused after group 2" in str(n.message) for n in app._notifications),
            what="toast",
        )
        # Paused: r now resumes (and p is hidden).
        await wait_until(pilot, lambda: app.current_run.status == "paused")
        assert app.check_action("pause", ()) is False
        await pilot.press("r")
        await app.workers.wait_for_complete()
        assert pending_kinds(fake) == ["resume"]


async def test_checkpoint_eval_then_quit_leaves_the_worker_running(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await open_dashboard(pilot)
        await pilot.press("c", "e", "r")  # r is hidden while a live worker runs: nothing to resume
        await app.workers.wait_for_complete()
        assert pending_kinds(fake) == ["checkpoint", "eval"]
        await pilot.press("q")
        await pilot.pause()
    assert not app.is_running and not app.stop_chosen
    db = open_db(fake)
    assert runs.get_run(db, fake.run_id)["status"] == "running"  # quitting sends no stop
    assert [c["kind"] for c in commands.pending(db, fake.run_id)] == ["checkpoint", "eval"]
    db.conn.close()


async def test_stop_asks_first(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await open_dashboard(pilot)
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "saves a checkpoint" in app.screen.detail  # the fake run has checkpoints
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        assert pending_kinds(fake) == [] and not app.stop_chosen
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await app.workers.wait_for_complete()
        assert pending_kinds(fake) == ["stop"] and app.stop_chosen


async def test_stop_before_the_first_checkpoint_says_nothing_is_saved(tmp_path):
    db = store.open_db(tmp_path / "wb.db")
    rid = runs.create_run(db, name="warming", model="m", config={"sft_steps": 15})
    runs.set_status(db, rid, "running", "started")
    db.conn.close()
    app = WorkbenchApp(str(tmp_path / "wb.db"), run_id=rid, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await open_dashboard(pilot)
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "No checkpoint yet" in app.screen.detail and "saves a checkpoint" not in app.screen.detail


async def test_live_pane_picks_up_rows_written_after_start_and_keeps_n(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.1, live_rows=10)
    async with app.run_test(size=SIZE) as pilot:
        dash = await open_dashboard(pilot)
        pane = dash.query_one(RolloutsPane)
        table = pane.table
        assert table.row_count == 6  # the newest 10 rows: 4 held-out singles and 2 of step 5's groups of 4
        for step in range(6, 11):  # the "worker" writes steps (one group of 4 each) while the UI watches
            new_ids = add_step(fake, step)
        await wait_until(pilot, lambda: "10:train:0:" in table.rows, what="the new groups in the live pane")
        assert sorted(m.id for m in pane.groups["10:train:0:"].members) == sorted(new_ids)
        assert table.row_count == 10  # at most N groups: the oldest went
        assert table.cursor_row == table.row_count - 1  # it follows the stream
        await wait_until(pilot, lambda: "step 10/100" in plain(dash.query_one(StatusBar)))
        stats = dash.query_one(TasksPane).stats
        total = sum(r.attempts for r in stats.rows.values())
        db = open_db(fake)
        assert total == sum(
            s["attempts"] for s in tasks.task_stats(db, fake.run_id)
        )  # incremental == full scan
        db.conn.close()
        assert dash.score_step == 10


async def test_task_filter_sort_and_curves(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        dash = await open_dashboard(pilot)
        pane = dash.query_one(TasksPane)
        pane.query_one(DataTable).focus()
        await pilot.press("o")
        assert pane.sort == "success"
        await pilot.press("o", "o", "o")
        assert pane.sort == "mean reward"
        table = pane.query_one(DataTable)
        train_row = next(i for i, key in enumerate(table.rows) if key.value.endswith(":train"))
        table.move_cursor(row=train_row)
        await pilot.press("enter")
        await wait_until(pilot, lambda: dash.task_filter is not None)
        rollouts = dash.query_one(RolloutsPane)
        task_rows = [r for r in rollouts.table.rows]
        assert task_rows, "the selected task has rows"
        for key in task_rows:
            assert {m.task_id for m in rollouts.groups[key.value].members} == {dash.task_filter}
        assert "task " in plain(dash.query_one(StatusBar))
        await wait_until(
            pilot,
            lambda: (
                dash.query_one(CurvesPane).task_series is not None
                and dash.query_one(CurvesPane).task_series.sums
            ),
        )
        await pilot.press("escape")
        assert dash.task_filter is None
        assert rollouts.table.row_count > len(task_rows)
        curves = dash.query_one(CurvesPane)
        await pilot.press("right_square_bracket")
        assert curves.curve.key == "sft_loss"
        await pilot.press("right_square_bracket")
        assert curves.curve.key == "held_out"
        await pilot.press("left_square_bracket", "left_square_bracket", "left_square_bracket")
        assert curves.curve.key == "length"
        assert "completion length" in curves.border_title


async def test_enter_on_a_rollout_opens_it(fake):
    from screens.trajectory_screen import TrajectoryScreen

    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        dash = await open_dashboard(pilot)
        table = dash.query_one(RolloutsPane).table
        table.focus()
        table.move_cursor(row=3)
        pane = dash.query_one(RolloutsPane)
        group = pane.groups[pane.highlighted_key()]
        wanted = pane.highlighted_id()
        assert wanted == max(group.members, key=lambda m: m.reward).id  # the group's best sample
        await pilot.press("enter")
        await wait_until(
            pilot, lambda: isinstance(app.screen, TrajectoryScreen) and app.screen.shown is not None
        )
        assert app.screen.shown.id == wanted
        # Opened as a group: its members side by side.
        assert app.screen.group_view and app.screen.query_one("#group").display
        await wait_until(
            pilot, lambda: len(app.screen.query(".member")) == len(group.members), what="members"
        )


async def test_crashed_run_shows_banner_and_traceback(tmp_path):
    fake = fake_copy(tmp_path / "wb.db", status="crashed", alive=False)
    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        dash = await open_dashboard(pilot)
        banner = dash.query_one(Banner)
        await wait_until(pilot, lambda: banner.has_class("-shown"))
        assert "CRASHED: RuntimeError: CUDA out of memory" in plain(banner)
        assert app.check_action("pause", ()) is False
        assert app.check_action("resume", ()) is True  # r starts a worker
        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, TextScreen))
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))


async def test_stale_heartbeat_banner(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.1, clock=lambda: time.time() + 120)
    async with app.run_test(size=SIZE) as pilot:
        dash = await open_dashboard(pilot)
        banner = dash.query_one(Banner)
        await wait_until(pilot, lambda: banner.has_class("-shown"))
        assert "No live worker" in plain(banner)
        names = [n for n, _, _ in app.palette_commands()]
        assert "Start worker" in names and "Pause training" not in names


async def test_palette_follows_state_and_runs_commands(fake):
    from screens.palette import WorkbenchCommands

    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    assert WorkbenchCommands in app.COMMANDS
    async with app.run_test(size=SIZE) as pilot:
        await open_dashboard(pilot)

        async def hits(query: str) -> list:
            provider = WorkbenchCommands(app.screen)
            return [h async for h in provider.search(query)]

        assert [h.text for h in await hits("pause")] == ["Pause training"]
        assert await hits("resume") == []
        db = open_db(fake)
        runs.set_status(db, fake.run_id, "paused", "test")
        db.conn.close()
        await wait_until(pilot, lambda: app.current_run.status == "paused")
        assert await hits("pause training") == []
        (resume,) = await hits("resume")
        resume.command()
        await wait_until(pilot, lambda: pending_kinds(fake) == ["resume"], what="resume from the palette")
        discovered = [h.text async for h in WorkbenchCommands(app.screen).discover()]
        assert "Resume training" in discovered and "Stop run" in discovered


async def test_several_runs_start_on_the_runs_list(tmp_path):
    path = tmp_path / "two.db"
    make_fake_run(path, name="first", n_steps=2)
    second = make_fake_run(path, name="second", n_steps=2, seed=3)
    app = WorkbenchApp(path, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, RunsScreen) and app.screen.query_one(DataTable).row_count == 2,
        )
        await pilot.press("enter")  # newest first: "second"
        dash = await open_dashboard(pilot)
        assert app.run_id == second.run_id
        assert "second" in plain(dash.query_one(StatusBar))
        assert "Switch run" in [n for n, _, _ in app.palette_commands()]


async def test_screens_and_help_open_from_the_dashboard(fake):
    from screens.evals_screen import EvalsScreen
    from screens.trajectory_screen import TrajectoryScreen
    from screens.verifier_editor import VerifierEditorScreen

    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await open_dashboard(pilot)
        for key, cls in (("t", TrajectoryScreen), ("E", EvalsScreen), ("v", VerifierEditorScreen)):
            await pilot.press(key)
            await wait_until(pilot, lambda cls=cls: isinstance(app.screen, cls), what=cls.__name__)
            await app.workers.wait_for_complete()
            await pilot.press("escape")
            if isinstance(app.screen, VerifierEditorScreen):  # escape first leaves the code editor
                await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        text = " ".join(plain(s) for s in app.screen.query("Static"))
        for word in (
            "Pause",
            "Next",
            "Dry run",
            "Group",
            "Mode",
            "When the run controls work",
            "while paused or pausing, with a live worker",
        ):
            assert word in text, word
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        help_screen = app.get_screen("help")
        await pilot.press("question_mark")  # the same screen again: composed once, kept installed
        await wait_until(pilot, lambda: app.screen is help_screen)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))


async def test_event_log_shows_the_runs_events_and_follows_new_ones(fake):
    from screens.events_screen import EventsScreen

    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_screen(pilot, "l", EventsScreen, lambda s: s.last_id > 0)
        table = screen.query_one(DataTable)
        first = table.row_count
        assert first >= 2  # starting, running
        assert "running" in " ".join(plain_cell(c) for c in table.get_row_at(first - 1))
        db = open_db(fake)
        store.runs.add_event(db, fake.run_id, "resume", "resumed from step 5 (0 rows superseded)")
        db.conn.close()
        await wait_until(pilot, lambda: table.row_count == first + 1, what="the new event")
        assert "resumed from step 5" in " ".join(plain_cell(c) for c in table.get_row_at(first))
        assert table.cursor_row == first  # follows the newest
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))


def plain_cell(cell) -> str:
    return getattr(cell, "plain", str(cell))


def test_every_binding_has_an_id():
    from textual.binding import Binding

    from screens.evals_screen import EvalsScreen
    from screens.events_screen import EventsScreen
    from screens.filter_screen import FilterScreen
    from screens.modals import ConfirmScreen, PromptScreen, TextScreen
    from screens.trajectory_screen import TrajectoryScreen
    from screens.verifier_editor import VerifierEditorScreen

    ids = []
    for cls in (
        WorkbenchApp,
        DashboardScreen,
        TrajectoryScreen,
        VerifierEditorScreen,
        EvalsScreen,
        RunsScreen,
        HelpScreen,
        ConfirmScreen,
        PromptScreen,
        TextScreen,
        FilterScreen,
        EventsScreen,
    ):
        for b in cls.BINDINGS:
            assert isinstance(b, Binding) and b.id, f"{cls.__name__}: {b}"
            ids.append(b.id)
    assert len(ids) == len(set(ids))


def test_bad_database_path_is_a_clear_error(tmp_path):
    with pytest.raises(store.StoreError, match="no such database"):
        WorkbenchApp(tmp_path / "missing.db")


async def test_dashboard_follows_a_worker_that_took_the_run_over(fake):
    """kill -9 of the worker (the status still reads "running"), then `workbench train --resume` in another
    terminal: a new lock, the rows past the checkpoint superseded, the statuses in between never seen by a
    poll. The open dashboard says at once that no worker is live, then takes a fresh snapshot."""
    import subprocess
    import sys

    from workbench.view import STALE_AFTER_S

    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        dash = await open_dashboard(pilot)
        rollouts = dash.query_one(RolloutsPane)
        await wait_until(pilot, lambda: dash._last_lock is not None, what="a first poll")
        n_before, gen = rollouts.table.row_count, dash._generation
        assert dash.last_step == 5
        killed = subprocess.Popen([sys.executable, "-c", "pass"])
        killed.wait()
        db = open_db(fake)
        db.execute(
            "UPDATE runs SET worker_pid = ? WHERE id = ?", [killed.pid, fake.run_id]
        )  # its pid is gone
        banner = dash.query_one(Banner)
        await wait_until(
            pilot,
            lambda: banner.has_class("-shown") and "No live worker" in plain(banner),
            what="the banner, before 30 s",
        )
        assert app.check_action("resume", ()) is True  # r starts a worker
        # In one go between two polls (no await): the new worker's lock, starting, resume, running.
        runs.acquire_lock(db, fake.run_id, stale_after_s=STALE_AFTER_S)  # no "already has a live worker"
        runs.set_status(db, fake.run_id, "starting", "worker pid 1 loading the model")
        n = trajectories.mark_superseded(db, fake.run_id, after_step=2)
        runs.set_status(db, fake.run_id, "running", "resumed from step 2")
        db.conn.close()
        assert n > 0
        await wait_until(pilot, lambda: dash._generation > gen and dash.loaded, what="a reload")
        await wait_until(
            pilot,
            lambda: {k.value for k in rollouts.table.rows} == live_groups(fake),
            what="superseded groups gone",
        )
        assert rollouts.table.row_count < n_before
        assert dash.last_step == 2
        await wait_until(pilot, lambda: not banner.has_class("-shown"), what="the banner to go")


async def test_a_narrow_terminal_shows_one_pane_at_a_time(fake):
    """80x24: one pane at the full width (the focused one), keys 1-4 bring the others; the status one line."""
    from screens.widgets.scores_pane import ScoresPane

    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=(80, 24)) as pilot:
        dash = await open_dashboard(pilot)
        await pilot.pause(0.2)
        panes = {cls: dash.query_one(cls) for cls in (TasksPane, RolloutsPane, ScoresPane, CurvesPane)}
        assert dash.has_class("-narrow")
        shown = [cls for cls, p in panes.items() if p.display]
        assert len(shown) == 1 and app.focused in panes[shown[0]].query("*")
        await pilot.press("2")
        await pilot.pause(0.1)
        assert [cls for cls, p in panes.items() if p.display] == [RolloutsPane]
        assert panes[RolloutsPane].size.width >= 78 and panes[RolloutsPane].table.has_focus
        await pilot.press("1")
        await pilot.pause(0.1)
        assert [cls for cls, p in panes.items() if p.display] == [TasksPane]
        table = panes[TasksPane].query_one(DataTable)
        assert table.has_focus
        # The prompt comes first and is readable; the numbers fit beside it.
        assert [str(c.label) for c in table.columns.values()][:2] == ["prompt", "split"]
        first = table.get_row_at(0)
        assert len(first[0].plain) >= 30
        assert dash.query_one(StatusBar).size.height == 1
    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=(200, 50)) as pilot:  # wide: all four side by side
        dash = await open_dashboard(pilot)
        await pilot.pause(0.2)
        assert not dash.has_class("-narrow")
        assert all(dash.query_one(cls).display for cls in (TasksPane, RolloutsPane))


@pytest.mark.parametrize(
    "key, choice, queued", [("k", "keep", []), ("s", "stop", ["stop"]), ("escape", None, [])]
)
async def test_q_in_the_demo_asks_whether_the_worker_keeps_training(fake, key, choice, queued):
    from screens.modals import QuitScreen

    app = WorkbenchApp(fake.db_path, poll_s=0.1, ask_on_quit=True)
    async with app.run_test(size=SIZE) as pilot:
        await open_dashboard(pilot)
        await wait_until(pilot, lambda: app.state() is not None and app.state().alive)
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, QuitScreen))
        text = " ".join(plain(w) for w in app.screen.query(Static))
        assert "workbench tui --db" in text and f"workbench stop {fake.run_id}" in text
        await pilot.press(key)
        await pilot.pause(0.2)
        assert app.quit_choice == choice
        if choice is None:  # cancelled: still on the dashboard
            assert isinstance(app.screen, DashboardScreen)
    assert [c["kind"] for c in pending_commands(fake)] == queued
