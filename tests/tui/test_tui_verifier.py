"""The verifier editor: code, history and diff, the real dry run, and apply through set_verifier."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Button, DataTable, TextArea

import store
from screens.app import WorkbenchApp
from screens.verifier_editor import VerifierEditorScreen
from tests.conftest import open_screen, pending_commands
from tests.fake_run import VERIFIER_CODE, plain, wait_until

SIZE = (120, 34)


async def open_editor(pilot) -> VerifierEditorScreen:
    return await open_screen(pilot, "v", VerifierEditorScreen)


def pending(fake) -> list[dict]:
    return pending_commands(fake)


async def test_editor_shows_active_code_history_and_diff(fake):
    app = WorkbenchApp(fake.db_path, poll_s=0.2)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        editor = screen.query_one("#code", TextArea)
        assert editor.text == VERIFIER_CODE
        assert "active: tool_call_verifier v1" in plain(screen.query_one("#ve-status"))
        history = screen.query_one("#history-table", DataTable)
        assert history.row_count == 1
        await wait_until(pilot, lambda: "identical" in plain(screen.query_one("#diff")))
        editor.insert("# stricter about times\n", location=(0, 0))
        await wait_until(pilot, lambda: "+# stricter about times" in plain(screen.query_one("#diff")))
        # Apply stays off until a dry run passes; ctrl+a only explains why.
        assert screen.query_one("#apply", Button).disabled
        await pilot.press("ctrl+a")
        await pilot.pause()
        assert pending(fake) == []
        # ctrl+o puts the selected version back
        await pilot.press("ctrl+o")
        assert editor.text == VERIFIER_CODE


async def test_builtin_code_when_no_version_is_stored(tmp_path):
    from store import runs

    path = tmp_path / "bare.db"
    db = store.open_db(path)
    rid = runs.create_run(db, name="bare", model="m", config={"reward": "tool_call_verifier"})
    db.conn.close()
    app = WorkbenchApp(path, poll_s=0.2)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        assert app.run_id == rid
        text = screen.query_one("#code", TextArea).text
        assert "def reward" in text
        assert "built-in tool_call_verifier" in plain(screen.query_one("#ve-status"))


async def test_dry_run_then_apply_enqueues_set_verifier(fake):
    pytest.importorskip("workbench.verifier_edit")
    from workbench.verifiers import builtin_verifier_code

    app = WorkbenchApp(fake.db_path, poll_s=0.2)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        editor = screen.query_one("#code", TextArea)
        # A syntax error: the dry run says where, and Apply stays off.
        editor.load_text("def reward(output, task):\n    return 1.0 +\n")
        await pilot.press("ctrl+d")
        await wait_until(pilot, lambda: not screen.running, timeout=30, what="dry run of broken code")
        assert "line 2" in plain(screen.query_one("#ve-status"))
        assert screen.query_one("#apply", Button).disabled
        # The real built-in: re-scores the last 100 trajectories, changed rows first.
        editor.load_text(builtin_verifier_code("tool_call_verifier"))
        await pilot.press("ctrl+d")
        await wait_until(pilot, lambda: not screen.running, timeout=30, what="dry run")
        table = screen.query_one("#dry-table", DataTable)
        assert table.row_count == 52  # all 48 training rows of the fake (fewer than 100) and its 4 eval rows
        first = table.get_row_at(0)
        assert plain_cell(first[1]) != plain_cell(first[2])  # a changed reward leads
        summary = plain(screen.query_one("#dry-summary"))
        assert "re-scored 52 (train 48, eval 4)" in summary
        assert "changed" in summary and "label agreement" in summary
        assert "✓ dry run ok, 52 re-scored (48 train, 4 eval)" in plain(screen.query_one("#ve-status"))
        assert not screen.query_one("#apply", Button).disabled
        assert screen.query_one("#history-table", DataTable).row_count == 2  # the new version is stored
        await pilot.press("ctrl+a")
        await app.workers.wait_for_complete()
        cmds = pending(fake)
        assert [c["kind"] for c in cmds] == ["set_verifier"]
        assert cmds[0]["payload"] == {"verifier_id": screen.dry_verifier_id}
        # Editing after the dry run turns Apply off again.
        editor.insert("# x\n", location=(0, 0))
        await pilot.pause()
        assert screen.query_one("#apply", Button).disabled


def plain_cell(cell) -> str:
    return cell.plain if hasattr(cell, "plain") else str(cell)


async def test_a_dry_run_that_rescored_too_few_rows_is_not_ok(fake):
    """A run paused before its first step's rows: nothing to re-score, so nothing was checked: not ok, and
    Apply stays off (the worker refuses such a version too)."""
    from store import trajectories
    from workbench.verifiers import builtin_verifier_code

    db = store.open_db(fake.db_path)
    trajectories.mark_superseded(db, fake.run_id, after_step=-1)  # every row of every step hidden
    db.conn.close()
    app = WorkbenchApp(fake.db_path, poll_s=0.2)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        screen.query_one("#code", TextArea).load_text(builtin_verifier_code("tool_call_verifier"))
        await pilot.press("ctrl+d")
        await wait_until(pilot, lambda: not screen.running, timeout=30, what="dry run")
        status = plain(screen.query_one("#ve-status"))
        assert "✗ re-scored only 0 trajectories (train 0, eval 0)" in status and "at least 8" in status
        assert "ok" not in status.replace("not", "")
        assert "re-scored 0 (train 0, eval 0)" in plain(screen.query_one("#dry-summary"))
        assert screen.query_one("#apply", Button).disabled
        await pilot.press("ctrl+a")
        await pilot.pause()
        assert pending(fake) == []


async def test_leaving_an_unapplied_edit_asks_first(fake):
    from screens.dashboard import DashboardScreen
    from screens.modals import ConfirmScreen

    app = WorkbenchApp(fake.db_path, poll_s=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await open_editor(pilot)
        await pilot.press("escape", "escape")  # nothing edited: it just leaves
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen), what="the dashboard")
        screen = await open_screen(pilot, "v", VerifierEditorScreen)
        screen.query_one("#code", TextArea).insert("# stricter\n", location=(0, 0))
        await pilot.press("escape", "escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirm")
        assert "not applied" in app.screen.detail
        await pilot.press("n")  # stay: the edit is still there
        await wait_until(pilot, lambda: app.screen is screen)
        assert screen.code.startswith("# stricter")
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen), what="left, edit dropped")


async def test_the_editor_is_usable_at_80x24(fake):
    """80x24: the editor and the results take turns at the full height (more than 10 lines / 4 rows)."""
    from workbench.verifiers import builtin_verifier_code

    app = WorkbenchApp(fake.db_path, poll_s=0.2)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_editor(pilot)
        editor = screen.query_one("#code", TextArea)
        await pilot.pause(0.1)
        assert editor.size.height >= 20 and editor.has_focus
        editor.load_text(builtin_verifier_code("tool_call_verifier"))
        await pilot.press("ctrl+d")
        await wait_until(pilot, lambda: not screen.running, timeout=30, what="dry run")
        await pilot.pause(0.1)
        table = screen.query_one("#dry-table", DataTable)
        assert not editor.display and table.has_focus  # the results, in the editor's place
        assert table.size.height - 1 >= 12  # rows on screen under the header
        await pilot.press("ctrl+r")  # back to the editor
        await pilot.pause(0.1)
        assert editor.display and editor.has_focus and editor.size.height >= 20


# Scores two rows, then loops forever on the third (in its worker process): only a kill ends that row early.
HANGS_ON_THIRD = """
_rows = 0


def reward(output, task):
    global _rows
    _rows += 1
    while _rows > 2:
        pass
    return 0.0
"""


async def test_esc_cancels_a_dry_run_in_flight_and_stores_nothing(fake):
    """The status line counts rows re-scored; Esc kills the looping row's worker within a second or two, the
    editor stays open, and no version is stored (so none can be applied)."""
    import time

    app = WorkbenchApp(fake.db_path, poll_s=0.2)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        screen.query_one("#code", TextArea).load_text(HANGS_ON_THIRD)
        await pilot.press("ctrl+d")
        await wait_until(
            pilot,
            lambda: "re-scored 2/52" in plain(screen.query_one("#ve-status")),
            timeout=30,
            what="the progress line",
        )
        control = screen._control
        assert control is not None and control.verifier is not None
        pids = list(control.verifier.pids)
        assert pids  # the worker is busy on the third row
        t0 = time.monotonic()
        await pilot.press("escape")  # the editor has the focus: Esc still reaches the cancel
        await wait_until(pilot, lambda: not screen.running, timeout=5, what="the cancelled dry run")
        assert time.monotonic() - t0 < 2.5
        assert app.screen is screen  # the Esc cancelled; it did not leave
        assert "cancelled after 2 of 52" in plain(screen.query_one("#ve-status"))
        assert screen.query_one("#apply", Button).disabled and screen.dry_verifier_id is None
        db = store.open_db(fake.db_path)
        try:
            versions = store.verifiers.verifier_history(db, fake.run_id)
        finally:
            db.conn.close()
        assert len(versions) == 1 and versions[0]["code"] != HANGS_ON_THIRD  # only the seed version
        for pid in pids:  # the looping worker is gone (reaped by the scoring thread)
            assert (
                not Path(f"/proc/{pid}").exists()
                or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
            )
        await pilot.press("escape", "escape")  # nothing runs now: Esc is Back again (from the editor: twice)
        await wait_until(pilot, lambda: app.screen is not screen, what="the leave prompt")
