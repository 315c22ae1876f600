"""The one command table (workbench.run.commands): the store, the UI's keys, palette and help, the payload
checks and the command loop's dispatch all follow it."""

from __future__ import annotations

import math
import time

import pytest

import store
from tests.conftest import open_dashboard
from workbench.run.commands import (
    COMMAND_BY_NAME,
    COMMANDS,
    NAMES,
    PayloadError,
    Sample,
    SetLr,
    SetTemperature,
    check_command,
    supported,
)
from workbench.run.loop import CommandLoop
from workbench.view import ACTIONS, View

SIZE = (120, 40)


def test_the_store_refuses_exactly_the_kinds_the_table_lacks():
    assert store.commands.KINDS == NAMES  # the store's copy (it may not import the engine)


@pytest.mark.parametrize(
    "bad", [math.nan, "nan", math.inf, "-inf", -1e-3, 0, 0.0, 5.0, "abc", True, None, [1e-3]]
)
def test_set_lr_refuses_what_would_wreck_a_run_and_names_the_range(bad):
    with pytest.raises(PayloadError, match=r"set_lr: lr must be a number with 0 < lr <= 1 \(got "):
        check_command("set_lr", {"lr": bad})


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0, -0.5, 11, "hot"])
def test_set_temperature_refuses_nan_inf_zero_negative_and_absurd(bad):
    with pytest.raises(PayloadError, match=r"0 < temperature <= 10"):
        check_command("set_temperature", {"temperature": bad})


def test_good_payloads_come_back_typed():
    assert check_command("set_lr", {"lr": 1e-3}) == SetLr(lr=1e-3)
    assert check_command("set_lr", {"lr": " 2e-5 "}) == SetLr(lr=2e-5)  # a prompt's text
    assert check_command("set_temperature", {"temperature": 1}) == SetTemperature(temperature=1.0)
    p = check_command("set_temperature", {"temperature": 0.7})
    assert (p.name, p.value) == ("temperature", 0.7)  # the trainer attribute it sets
    assert check_command("sample", {"task_id": 3}) == Sample(task_id=3, n=4)
    assert check_command("pause", None) is None
    assert check_command("stop", {"by": "launcher SIGTERM"}) is None  # a note on a payload-less command


def test_ids_and_counts_are_whole_positive_numbers():
    with pytest.raises(PayloadError, match="sample needs task_id"):
        check_command("sample", {"n": 8})
    for bad in ({"task_id": 1.5}, {"task_id": 0}, {"task_id": 1, "n": 0}, {"task_id": 1, "n": 10**9}):
        with pytest.raises(PayloadError):
            check_command("sample", bad)
    with pytest.raises(PayloadError, match="verifier_id must be an integer with 1 <= verifier_id"):
        check_command("set_verifier", {"verifier_id": -2})
    with pytest.raises(PayloadError, match="unknown command 'explode'"):
        check_command("explode", None)


def test_view_enqueue_checks_the_payload_before_writing(fake):
    with View.open(fake.db_path) as view:
        before = len(store.commands.pending(view.db, fake.run_id))
        with pytest.raises(PayloadError, match="0 < lr <= 1"):
            view.enqueue(fake.run_id, "set_lr", {"lr": math.nan})
        assert len(store.commands.pending(view.db, fake.run_id)) == before  # nothing written
        cid = view.enqueue(fake.run_id, "set_lr", {"lr": 1e-4})
        assert view.command(cid).payload == {"lr": 1e-4}


def test_drivers_obey_what_the_table_says():
    assert {c.name for c in supported("worker")} == set(NAMES)
    assert {c.name for c in COMMANDS if c.refusal("trl")} == {"eval", "sample", "set_temperature"}
    with pytest.raises(ValueError, match="not the commands the table says"):
        CommandLoop(None, 1, "trl", {c.name: lambda *a: {} for c in COMMANDS})  # a handler TRL cannot run
    with pytest.raises(ValueError, match="not the commands the table says"):
        CommandLoop(None, 1, "worker", {"pause": lambda *a: {}})  # a command without a handler


def test_the_loop_answers_bad_rows_without_calling_a_handler(tmp_path):
    """A row written past the checks (another tool, an older UI) is answered failed with the range; a command
    TRL does not obey is answered with the table's reason."""
    db = store.open_db(tmp_path / "wb.db")
    run_id = store.runs.create_run(db, name="r", model="m", config={})
    called: list[tuple[str, object]] = []
    handlers = {
        c.name: (lambda n: lambda ctx, p, where: called.append((n, p)) or {"ok": n})(c.name)
        for c in supported("trl")
    }
    loop = CommandLoop(db, run_id, "trl", handlers)
    bad = db.execute(
        "INSERT INTO commands (run_id, kind, payload, created) VALUES (?, 'set_lr', ?, ?)",
        [run_id, '{"lr": -1}', time.time()],
    ).lastrowid
    temp = store.commands.enqueue(db, run_id, "set_temperature", {"temperature": 0.5})
    good = store.commands.enqueue(db, run_id, "set_lr", {"lr": 0.01})
    assert loop.drain(None, "step_end") is True
    assert store.commands.get_command(db, bad)["status"] == "failed"
    assert "0 < lr <= 1" in store.commands.get_command(db, bad)["result"]["error"]
    assert "TRL owns sampling" in store.commands.get_command(db, temp)["result"]["error"]
    assert store.commands.get_command(db, good)["result"] == {"ok": "set_lr"}
    assert called == [("set_lr", SetLr(lr=0.01))]


def test_where_a_command_may_run_follows_the_table():
    ck, pause, lr = COMMAND_BY_NAME["checkpoint"], COMMAND_BY_NAME["pause"], COMMAND_BY_NAME["set_lr"]
    assert pause.may_run("rollout", outer=False, paused=False) and lr.may_run(
        "update", outer=False, paused=False
    )
    assert not ck.may_run("rollout", outer=False, paused=False)  # waits for an outer safe point
    assert ck.may_run("rollout", outer=False, paused=True)  # paused: at once
    assert not ck.may_run("update", outer=False, paused=True)  # but never between two optimizer steps
    assert ck.may_run("after_step", outer=True, paused=False)


def test_actions_are_the_table_plus_start_worker():
    assert [a.name for a in ACTIONS if a.name != "start_worker"] == list(NAMES)
    by = {a.name: a for a in ACTIONS}
    assert by["start_worker"].key == by["resume"].key == COMMAND_BY_NAME["resume"].key
    assert all(by[c.name].key == c.key for c in COMMANDS)


def _display(key: str) -> str:
    from textual.app import App
    from textual.binding import Binding

    return App().get_key_display(Binding(key, "x"))


def check_keys_agree(bindings: list, palette: list[tuple[str, str, object]]) -> None:
    """Every run action's key is its binding's key (no other binding runs it), and its palette entry names
    that key; a palette-only action has neither."""
    by_title = {title: help_text for title, help_text, _ in palette}
    for a in ACTIONS:
        action = "resume" if a.name == "start_worker" else a.name
        keys = sorted(b.key for b in bindings if b.action == action)
        hint = f"({_display(a.key)})"
        if a.name == "set_verifier":  # the verifier editor's binding (checked below), not the app's
            continue
        assert keys == ([a.key] if a.key else []), (a.name, keys)
        if a.title in by_title:
            help_text = by_title[a.title]
            assert help_text.endswith(hint) if a.key else not help_text.endswith(")"), (a.name, help_text)


async def test_every_action_key_binding_and_palette_entry_agree(fake):
    from textual.binding import Binding

    from screens.app import WorkbenchApp
    from screens.verifier_editor import VerifierEditorScreen

    apply_keys = [b.key for b in VerifierEditorScreen.BINDINGS if b.action == "apply"]
    assert apply_keys == [COMMAND_BY_NAME["set_verifier"].key]
    seen: set[str] = set()
    for offset in (0.0, 120.0):  # a live worker (pause, checkpoint, ...) and none (start worker)
        app = WorkbenchApp(fake.db_path, poll_s=0.1, clock=lambda o=offset: time.time() + o)
        async with app.run_test(size=SIZE) as pilot:
            await open_dashboard(pilot)
            palette = app.palette_commands()
            check_keys_agree(list(app.BINDINGS), palette)
            seen |= {title for title, _, _ in palette}
            # Someone adds a binding with another key for a run control: the check fails.
            with pytest.raises(AssertionError):
                check_keys_agree([*app.BINDINGS, Binding("x", "pause", "Pause")], palette)
    assert {"Pause training", "Start worker", "Save checkpoint now", "Stop run", "Set learning rate…"} <= seen
    # The screens' own keys: the palette's hint is the binding's.
    helps = {title: h for title, h, _ in palette}
    for title, action in (("Trajectories", "trajectories"), ("Evaluations", "evaluations"), ("Keys", "help")):
        (key,) = [b.key for b in WorkbenchApp.BINDINGS if b.action == action]
        assert helps[title].endswith(f"({_display(key)})")


async def test_the_learning_rate_prompt_shows_the_range_and_sends_nothing_bad(fake):
    from textual.widgets import Input, Static

    from screens.app import WorkbenchApp
    from screens.modals import PromptScreen
    from tests.conftest import pending_commands
    from tests.fake_run import plain, wait_until

    app = WorkbenchApp(fake.db_path, poll_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        dash = await open_dashboard(pilot)
        (ask,) = [cb for title, _, cb in app.palette_commands() if title == "Set learning rate…"]
        ask()
        await wait_until(pilot, lambda: isinstance(app.screen, PromptScreen), what="the prompt")
        prompt = app.screen
        prompt.query_one(Input).value = "nan"
        await pilot.press("enter")
        await wait_until(pilot, lambda: prompt.query("#prompt-error"), what="the error")
        assert "0 < lr <= 1" in plain(prompt.query_one("#prompt-error", Static))
        assert app.screen is prompt and pending_commands(fake) == []  # still open; nothing sent
        prompt.query_one(Input).value = "1e-4"
        await pilot.press("enter")
        await wait_until(
            pilot, lambda: [c["kind"] for c in pending_commands(fake)] == ["set_lr"], what="sent"
        )
        assert pending_commands(fake)[0]["payload"] == {"lr": 1e-4}
        dash.task_filter = task_id = next(
            iter(fake.task_ids.values())
        )  # a task selected: the palette offers a probe of it
        (sample,) = [
            cb
            for title, _, cb in app.palette_commands()
            if title == f"Sample 8 completions of task {task_id}"
        ]
        sample()
        await wait_until(pilot, lambda: len(pending_commands(fake)) == 2, what="the sample command")
        assert pending_commands(fake)[1]["payload"] == {
            "task_id": task_id,
            "n": 8,
        }  # the typed Sample's fields
