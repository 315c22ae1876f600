"""The verifier editor: code, history and diff, the real dry run, and apply through set_verifier."""

from __future__ import annotations

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
        assert table.row_count == 48  # all 48 training rows of the fake (fewer than 100)
        first = table.get_row_at(0)
        assert plain_cell(first[1]) != plain_cell(first[2])  # a changed reward leads
        summary = plain(screen.query_one("#dry-summary"))
        assert "changed" in summary and "label agreement" in summary
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
