"""The evaluations screen: baseline vs checkpoints, the best one marked, warning flags."""

from __future__ import annotations

from textual.widgets import DataTable

from screens.app import WorkbenchApp
from screens.evals_screen import EvalsScreen
from tests.conftest import open_screen
from tests.fake_run import fake_copy, plain, wait_until


async def open_evals(pilot) -> EvalsScreen:
    return await open_screen(pilot, "E", EvalsScreen, ready=lambda s: s.query_one(DataTable).row_count)


def table_rows(table: DataTable) -> list[list[str]]:
    return [[getattr(c, "plain", str(c)) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_evaluations_mark_the_best_checkpoint_and_flag_drift(tmp_path):
    fake = fake_copy(tmp_path / "wb.db")
    app = WorkbenchApp(fake.db_path, poll_s=0.2)
    async with app.run_test(size=(110, 30)) as pilot:
        await open_evals(pilot)
        screen = app.screen
        table = screen.query_one(DataTable)
        rows = table_rows(table)
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
        await open_evals(pilot)
        table = app.screen.query_one(DataTable)
        rows = table_rows(table)
        assert [r[0] for r in rows] == ["base", "★ best", "promo"]
        assert "promoted: step 5" in plain(app.screen.query_one("#evals-title"))


async def test_test_split_is_shown_beside_validation_with_skills_and_why_promoted(tmp_path):
    import store

    fake = fake_copy(tmp_path / "wb.db")
    db = store.open_db(fake.db_path)
    skills = {"tool:calendar.create_event": {"n": 8, "success": 0.5}, "time_12h": {"n": 4, "success": 0.25}}
    test = {"split": "test", "n": 80}
    store.metrics.record_eval(
        db,
        fake.run_id,
        step=0,
        tasks=test,
        mode="greedy",
        is_baseline=True,
        metrics={"success_rate": 0.1, "by_skill": skills},
    )
    step2 = next(
        e for e in store.metrics.list_evals(db, fake.run_id) if e["checkpoint_id"] == fake.checkpoint_ids[0]
    )
    store.metrics.record_eval(
        db,
        fake.run_id,
        step=step2["step"],
        tasks=test,
        mode="greedy",
        checkpoint_id=fake.checkpoint_ids[0],
        metrics={"success_rate": 0.4, "by_skill": skills},
    )
    store.runs.add_event(
        db, fake.run_id, "promotion", f"step {step2['step']}: promoted: vs base +32pp [+15, +50]"
    )
    db.conn.close()
    app = WorkbenchApp(fake.db_path, poll_s=0.2)
    async with app.run_test(size=(110, 40)) as pilot:
        await open_evals(pilot)
        screen = app.screen
        table = screen.query_one(DataTable)
        rows = table_rows(table)
        assert [r[9] for r in rows] == ["10%", "40%", ""]  # the test column: base and step 2 were tested
        assert "Validation (decides promotion)" in plain(screen.query_one("#evals-title"))
        assert "promotion: step 2: promoted: vs base +32pp" in plain(screen.query_one("#evals-flags"))
        await pilot.press("s")
        await wait_until(pilot, lambda: screen.split == "test" and table.row_count == 2)
        assert "Test (reported only, decides nothing)" in plain(screen.query_one("#evals-title"))
        rows = table_rows(table)
        assert [r[0] for r in rows] == ["base", ""]  # no best or promoted mark on test rows
        skills_text = plain(screen.query_one("#evals-skills"))
        assert "12-hour times (n=4): 0.25 → 0.25" in skills_text and "calendar.create_event" in skills_text
