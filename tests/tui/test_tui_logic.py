"""The UI's pure parts, without an app: how scores, curves and the status line look, the trajectory window,
the command tracker. The rules they show are workbench.view's (tests/engine/test_view.py)."""

from __future__ import annotations

import dataclasses

import pytest

from screens import traj_browser
from screens.command_tracker import CommandTracker
from screens.curves import downsample
from screens.format import first_line, reward_style, task_label
from screens.scores import histogram, render_scores, sparkline
from screens.traj_browser import Browser, fetch
from screens.widgets.status_bar import banner_text, rates, status_text
from store import commands
from workbench.types import ToolCall
from workbench.view import Run, RunState, Step, Task, Trajectory, TrajectoryFilter, VerifierVersion, View
from workbench.view.records import Checkpoint


def test_reward_colours_and_text_helpers():
    assert [reward_style(r) for r in (-1.0, 0.0, 0.6, 0.9999, 1.0, None)] == [
        "red",
        "yellow",
        "yellow",
        "green",
        "green",
        "dim",
    ]
    assert first_line("Traceback (most recent call last):\n  File x\nValueError: boom") == "ValueError: boom"
    assert first_line("plain reason\nmore") == "plain reason"
    assert task_label(Task(3, "calendar:create-1", "calendar", "train", "p"), 3) == "create-1"
    assert task_label(None, 3) == "#3" and task_label(None, None) == "–"


def test_histogram_gives_each_reward_value_its_bin():
    counts = histogram([-1.0, -1.0, 0.2, 0.6, 0.8, 0.8, 1.0, 1.0, 1.0, 5.0])
    assert counts == [2, 0, 0, 0, 0, 0, 1, 0, 1, 2, 4]  # 1.0 alone in the last bin; 5.0 clamps there


def test_part_series_sparkline_and_scores_text():
    steps = [
        Step(
            i,
            {
                "reward": 0.1 * i,
                "parts/tool": 0.1 * i,
                "parts/valid_json": -0.5 + 0.1 * i,
                "parts/custom": 1.0,
            },
        )
        for i in range(5)
    ]
    assert sparkline([0, 1, 2, 3], 4) == "▁▃▆█"
    assert len(sparkline(list(range(100)), 10)) == 10
    right = {
        "valid_json": True,
        "parsed": True,
        "correct_tool": True,
        "correct_args": True,
        "success": True,
        "unsafe": False,
    }
    rows = [
        Trajectory(
            1,
            1,
            4,
            "train",
            "{}",
            reward=1.0,
            tool_calls=(ToolCall("t", {}),),
            outcome=right,
            reward_parts={"valid_json": 0.0, "tool": 0.4, "args": 0.4},
        ),
        Trajectory(
            2,
            1,
            4,
            "train",
            "no",
            reward=-1.0,
            reward_parts={"valid_json": -1.0},
            outcome={k: False for k in right},
        ),
    ]
    for width in (40, 100):
        text = render_scores(rows, steps, step=4, width=width, height=12).plain
        assert "step 4 · 2 samples · mean +0.00" in text and "bad JSON 50%" in text and "tool" in text
    assert "no scored rollouts" in render_scores([], steps, step=None, width=40).plain


def test_downsample_keeps_shape_and_size():
    xs = [float(i) for i in range(1000)]
    dx, dy = downsample(xs, xs, 100)
    assert len(dx) == len(dy) == 100 and dy[0] < dy[-1]
    assert downsample([1.0, 2.0], [3.0, 4.0], 100) == ([1.0, 2.0], [3.0, 4.0])


def test_status_text_and_banner():
    run = Run(3, "demo", "m", "running", {"max_steps": 100}, lock_held=True, heartbeat=1000.0)
    steps = [Step(i, {"step_time_s": 20.0, "tokens_per_s": 90.0}) for i in range(10)]
    assert rates(steps) == (pytest.approx(0.05), pytest.approx(90.0))
    text = status_text(
        run,
        RunState.of(run, 1001.0),
        steps,
        verifier=VerifierVersion(1, "tool_call_verifier", 2, ""),
        checkpoint=Checkpoint(1, 3, 5, "periodic", "/x"),
    ).plain
    for part in (
        "running",
        "#3 demo",
        "step 9/100",
        "0.050 step/s",
        "90 tok/s",
        "ETA 30m20s",
        "tool_call_verifier v2",
        "ckpt @5",
        "worker ✓",
    ):
        assert part in text, part
    assert banner_text(run, RunState.of(run, 1001.0), 1001.0) is None
    assert "No live worker" in banner_text(run, RunState.of(run, 2000.0), 2000.0).plain
    crashed = dataclasses.replace(
        run, status="crashed", error="Traceback (most recent call last):\nKeyError: 'x'"
    )
    assert "CRASHED: KeyError: 'x'" in banner_text(crashed, RunState.of(crashed, 1001.0), 1001.0).plain


def test_browser_walks_pages_both_ways(fake, monkeypatch):
    monkeypatch.setattr(traj_browser, "PAGE", 7)
    view = View.open(fake.db_path)
    all_ids = sorted(fake.trajectory_ids, reverse=True)
    b = Browser(TrajectoryFilter(fake.run_id))

    def run(req):
        b.apply(req, fetch(view, req))

    run(b.restart())
    seen = [b.current.id]
    for _ in range(len(all_ids) + 3):  # past the end: stays on the oldest
        req = b.step(1)
        if req is not None:
            run(req)
        if b.current.id != seen[-1]:
            seen.append(b.current.id)
    assert seen == all_ids and b.at_end
    for _ in range(len(all_ids)):
        req = b.step(-1)
        if req is not None:
            run(req)
    assert b.current.id == all_ids[0]
    # Anchored in the middle, by reward: the anchor comes first, and p walks back above it.
    anchor = view.trajectory(all_ids[20])
    b.order = "reward"
    run(b.restart(anchor=anchor))
    assert b.current.id == anchor.id
    req = b.step(-1)
    assert req is not None and req.direction == "backward"
    run(req)
    prev = b.current
    assert (prev.reward, prev.id) > (anchor.reward, anchor.id)
    # A step filter switches the cursor to (step, id), as page_trajectories does.
    b.order, b.flt = "id", TrajectoryFilter(fake.run_id, step_min=2, step_max=3)
    run(b.restart())
    for _ in range(12):
        req = b.step(1)
        if req is not None:
            run(req)
    assert all(2 <= r.step <= 3 for r in b.rows)
    view.close()


def test_command_tracker_reports_answers_and_silence(fake):
    view = View.open(fake.db_path)
    tracker = CommandTracker()
    cid = view.enqueue(fake.run_id, "checkpoint")
    tracker.add(cid, "checkpoint", None, now=0.0)
    assert tracker.poll(view, 1.0, worker_alive=True) == ([], [])
    answered, overdue = tracker.poll(view, 20.0, worker_alive=False)
    assert answered == [] and [s.command_id for s in overdue] == [cid]
    assert tracker.poll(view, 30.0, worker_alive=False) == ([], [])  # warned once
    commands.finish(view.db, commands.claim_next(view.db, fake.run_id)["id"], {"message": "saved at step 5"})
    answered, _ = tracker.poll(view, 31.0, worker_alive=True)
    assert [(a.kind, a.ok, a.message) for a in answered] == [("checkpoint", True, "saved at step 5")]
    assert tracker.pending == {}
    view.close()


def test_status_line_is_one_line_and_keeps_what_matters_when_narrow():
    from workbench.view import Progress

    run = Run(3, "demo", "m", "running", {"max_steps": 20}, lock_held=True, heartbeat=1000.0)
    steps = [
        Step(i, {"step_time_s": 40.0, "tokens_per_s": 90.0, "rollout_time_s": 25.0, "update_time_s": 15.0})
        for i in range(1, 4)
    ]
    sft = Progress(
        "sft", "SFT 3/15 loss 0.842", 1000.0, done=3, total=15, data={"phase": "sft", "loss": 0.8421}
    )
    kw = dict(
        verifier=VerifierVersion(1, "tool_call_verifier", 2, ""),
        checkpoint=Checkpoint(1, 3, 5, "periodic", "/x"),
    )
    wide = status_text(run, RunState.of(run, 1001.0), steps, progress=sft, width=200, **kw).plain
    for part in ("running", "step 3/20", "SFT 3/15 loss 0.842", "roll 25s upd 15s", "tool_call_verifier v2"):
        assert part in wide, part
    narrow = status_text(run, RunState.of(run, 1001.0), steps, progress=sft, width=60, **kw).plain
    assert "\n" not in narrow and len(narrow) <= 60
    for part in ("running", "step 3/20", "SFT 3/15 loss 0.842"):  # the least important items went first
        assert part in narrow, part
    assert "ckpt @5" not in narrow
    rollout = Progress(
        "rollout", "", 1000.0, done=24, total=48, step=4, eta_s=600.0, data={"phase": "rollout"}
    )
    line = status_text(run, RunState.of(run, 1001.0), steps, progress=rollout, width=80, **kw).plain
    assert "rollout 24/48 tok" in line and "ETA 10m" in line
    stopped = dataclasses.replace(run, status="stopped")  # a report of a worker that is gone is not shown
    assert "SFT" not in status_text(stopped, RunState.of(stopped, 1001.0), steps, progress=sft, **kw).plain
