"""An episode as a story (issue 35 item 4): a multi-step episode's turns with the call, the tool's result and
the world's diff, replayed from what is stored; the final state against the expected one; a group lined up
turn by turn with the turn they part; and the multi-step skill table in `workbench report` and on the
evaluations screen. The store is tests/agent_run.py's: calendar_agent episodes of the real env and verifier,
the replies scripted."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from screens.app import WorkbenchApp
from screens.evals_screen import EvalsScreen
from screens.trajectory_screen import TrajectoryScreen
from tests.agent_run import AgentRun, make_agent_run
from tests.conftest import open_dashboard, open_screen
from tests.fake_run import plain, wait_until
from workbench.cli import main
from workbench.view import Trajectory, View, eval_rows
from workbench.view.episode import align, story_for
from workbench.view.evaluations import multi_step_rows, skill_rows


@pytest.fixture(scope="module")
def agent_template(tmp_path_factory: pytest.TempPathFactory) -> AgentRun:
    return make_agent_run(tmp_path_factory.mktemp("agent") / "template.db")


@pytest.fixture
def agent(agent_template: AgentRun, tmp_path: Path) -> AgentRun:
    dst = tmp_path / "wb.db"
    shutil.copy(agent_template.db_path, dst)
    return dataclasses.replace(agent_template, db_path=str(dst))


def _rows(view: View, run: AgentRun) -> list[Trajectory]:
    return [r for i in run.trajectory_ids if (r := view.trajectory(i)) is not None]


def _group(run: AgentRun, rows: list[Trajectory], kind: str, step: int = 0) -> list[Trajectory]:
    """One training group of `kind` (its G members in sample order)."""
    keys = {tid: key for key, tid in run.task_ids.items()}
    return [r for r in rows if r.split == "train" and r.step == step and f":{kind}:" in keys[r.task_id]]


@pytest.fixture
def view(agent: AgentRun):
    with View.open(agent.db_path) as v:
        yield v


def test_a_right_episode_reads_turn_by_turn_and_ends_as_expected(agent, view):
    right, guess, *_ = _group(agent, _rows(view, agent), "reschedule")
    task = view.task(right.task_id)
    s = story_for(right, task)
    assert s is not None and [t.number for t in s.turns] == [1, 2, 3, 4]
    look, cancel, create, finish = s.turns
    assert [c.name for c in look.calls] == ["calendar.list_events"] and look.changes == ()
    assert (
        look.results[0]["ok"] is True and look.results[0]["result"]["events"]
    )  # the stored result, as the agent saw it
    assert [(c.sign, c.collection) for c in cancel.changes] == [("-", "events")]
    assert [(c.sign, c.collection) for c in create.changes] == [("+", "events")]
    # the time the agent read in turn 1 is the one it booked in turn 3
    assert create.changes[0].item["time"] == cancel.changes[0].item["time"]
    assert finish.ended == "finish" and not any(t.replay_differs for t in s.turns)
    assert s.check.matches and s.final != s.initial
    # a guess without looking: the wrong time is what differs from the expected state
    g = story_for(guess, task)
    assert g is not None and not g.check.matches
    statuses = {(st, item["time"]) for st, coll, item in g.check.items if st != "ok"}
    assert ("extra", "09:00") in statuses and any(st == "missing" for st, _ in statuses)


def test_the_final_state_names_a_leftover_apart_from_a_new_item(agent, view):
    from rich.console import Console

    from screens.trajectory_view import final_text

    no_cancel = _group(agent, _rows(view, agent), "reschedule")[
        2
    ]  # looked, booked the new day, never cancelled
    s = story_for(no_cancel, view.task(no_cancel.task_id))
    assert s is not None and s.check.differences == 1
    console = Console(width=120, record=True, color_system=None)
    console.print(final_text(s))
    text = console.export_text()
    assert "1 difference ✗" in text and "✗ still there (expected gone) event" in text


def test_a_recover_task_marks_the_call_it_came_with(agent, view):
    first, *_ = _group(agent, _rows(view, agent), "recover")
    s = story_for(first, view.task(first.task_id))
    assert s is not None
    given = s.turns[0]
    assert given.given and given.number == 0 and given.results[0]["ok"] is False
    assert [t.number for t in s.model_turns] == [1, 2, 3, 4] and s.check.matches


def test_a_single_call_episode_has_no_story(fake):
    with View.open(fake.db_path) as v:
        row = v.trajectory(fake.trajectory_ids[0])
        assert row is not None and story_for(row, v.task(row.task_id)) is None


def test_a_stored_result_the_replay_does_not_reproduce_is_marked(agent, view):
    right = _group(agent, _rows(view, agent), "reschedule")[0]
    messages = [dict(m) for m in right.messages or ()]
    k = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    messages[k]["content"] = json.dumps(
        {"tool": "calendar.list_events", "ok": True, "result": {"events": []}}
    )
    s = story_for(dataclasses.replace(right, messages=tuple(messages)), view.task(right.task_id))
    assert s is not None and s.turns[0].replay_differs and s.replay_differs
    assert not s.turns[1].replay_differs


def test_native_format_turns_replay_from_their_tool_calls(agent, view):
    right = _group(agent, _rows(view, agent), "reschedule")[0]
    s = story_for(right, view.task(right.task_id))
    assert s is not None
    native = [*s.lead]
    for t in s.turns:
        calls = [
            {"type": "function", "id": f"c{t.number}", "function": {"name": c.name, "arguments": c.args}}
            for c in t.calls
        ]
        native.append({"role": "assistant", "content": "", "tool_calls": calls})
        native += [
            {"role": "tool", "tool_call_id": f"c{t.number}", "content": json.dumps(r)} for r in t.results
        ]
    n = story_for(dataclasses.replace(right, messages=tuple(native)), view.task(right.task_id))
    assert n is not None and [t.changes for t in n.turns] == [t.changes for t in s.turns] and n.check.matches
    assert not n.replay_differs


def test_a_group_lines_up_and_names_the_turn_it_parts(agent, view):
    rows = _rows(view, agent)
    resched = _group(agent, rows, "reschedule")
    a = align([story_for(r, view.task(r.task_id)) for r in resched])
    assert a.diverge == 1  # one member cancels without looking first
    fan = _group(agent, rows, "fanout")
    b = align([story_for(r, view.task(r.task_id)) for r in fan])
    assert b.diverge == 2 and b.depth == max(len(story_for(r, view.task(r.task_id)).model_turns) for r in fan)
    same = story_for(resched[0], view.task(resched[0].task_id))
    assert align([same, same]).diverge is None


def test_multi_step_table_puts_single_calls_beside_each_kind(agent, view):
    rows = eval_rows(view.evals(agent.run_id), view.checkpoints(agent.run_id))
    header, lines = multi_step_rows(rows)
    assert header[0] == "multi-step" and header[-1].startswith("Δ vs SFT-only")
    names = [line[0] for line in lines]
    assert names[:2] == ["single call", "multi-step tasks"]
    assert {"multi-step: reschedule", "multi-step: recover", "multi-step: clear day"} <= set(names)
    by = {line[0]: line for line in lines}
    assert by["single call"][1] == "30" and by["multi-step tasks"][1] == "140"
    assert by["multi-step: reschedule"][-1].startswith("+")  # GRPO solved more reschedules than SFT-only
    # the general table leaves the multi-step skills to it on request
    _, general = skill_rows(rows, multi_step=False)
    assert not any(line[0].startswith("multi-step") for line in general)


def test_multi_step_table_is_absent_for_single_call_runs(fake):
    with View.open(fake.db_path) as v:
        assert multi_step_rows(eval_rows(v.evals(fake.run_id), v.checkpoints(fake.run_id))) == ([], [])


def test_report_prints_the_multi_step_table(agent, capsys):
    assert main(["report", "--db", agent.db_path, "--run", str(agent.run_id), "--events", "0"]) == 0
    out = capsys.readouterr().out
    assert "multi-step success per kind" in out
    for label in ("single call", "multi-step: reschedule", "multi-step: recover", "Δ vs SFT-only"):
        assert label in out
    general = out.split("success per skill")[1]
    assert "multi-step: recover" not in general


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_trajectory_screen_tells_the_story_and_lines_up_the_group(agent, size):
    with View.open(agent.db_path) as v:
        rows = _rows(v, agent)
        guess = _group(agent, rows, "reschedule", step=1)[1]
    app = WorkbenchApp(agent.db_path, poll_s=0.2)
    async with app.run_test(size=size) as pilot:
        await open_dashboard(pilot)
        screen = TrajectoryScreen(anchor_id=guess.id)
        await app.push_screen(screen)
        await wait_until(pilot, lambda: screen.shown is not None and screen.shown.id == guess.id)
        turns = [plain(w) for w in screen.query(".turn-msg") if w.display]
        text = "\n".join(turns)
        assert "request" in turns[1] and "harness example" in turns[0]
        assert "turn 1" in text and "call → calendar.cancel_event" in text and "world: − event" in text
        assert "world: + event" in text and "09:00" in text
        final = screen.query(".turn-final-bad")
        assert len(final) == 1 and "final state vs expected: 2 differences" in plain(final.first())
        assert "✗ not expected event" in plain(final.first()) and "✗ missing event" in plain(final.first())
        assert "✗ still there" not in plain(final.first())  # the 09:00 booking is new, not a leftover
        # g: the four members side by side, their turns on the same lines, the turn they part marked
        await pilot.press("g")
        await wait_until(pilot, lambda: len(screen.query(".member")) == 4)
        group = screen.query_one("#group")
        assert "part at turn 1" in str(group.border_title)
        columns = [plain(m.query_one("Static")).splitlines() for m in screen.query(".member")]
        marks = {next(i for i, line in enumerate(col) if line.lstrip().startswith("▶1")) for col in columns}
        assert len(marks) == 1  # turn 1 is on the same line in every column
        finals = {next(i for i, line in enumerate(col) if line.startswith("state ")) for col in columns}
        assert len(finals) == 1
        assert any("state ✓ as expected" in "\n".join(col) for col in columns)


async def test_evals_screen_shows_the_multi_step_kinds(agent):
    app = WorkbenchApp(agent.db_path, poll_s=0.2)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await open_screen(pilot, "E", EvalsScreen, lambda s: bool(s.evals))
        await wait_until(pilot, lambda: "multi-step" in plain(screen.query_one("#evals-skills")))
        text = plain(screen.query_one("#evals-skills"))
        assert "single call (n=30)" in text and "reschedule (n=20)" in text and "Δ +" in text
        assert "per skill" in text and "multi-step: reschedule" not in text.split("per skill")[1]
