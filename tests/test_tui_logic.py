"""The UI's pure parts, without an app: scores, curves, task stats, eval flags, the trajectory window."""

from __future__ import annotations

import pytest

import store
from screens import traj_browser
from screens.command_tracker import CommandTracker
from screens.curves import downsample, metric_points
from screens.eval_logic import best_eval, eval_flags
from screens.format import first_line, reward_style, task_label, worker_state
from screens.scores import failure_shares, histogram, part_series, render_scores, sparkline
from screens.task_stats import TaskStats
from screens.traj_browser import Browser, fetch
from screens.widgets.status_bar import banner_text, rates, status_text
from store import commands, tasks, trajectories
from tests.fake_run import add_step, fake_copy


@pytest.fixture
def fake(tmp_path):
    return fake_copy(tmp_path / "wb.db")


def test_reward_colours_and_text_helpers():
    assert [reward_style(r) for r in (-1.0, 0.0, 0.6, 0.9999, 1.0, None)] == [
        "red", "yellow", "yellow", "green", "green", "dim"]
    assert first_line("Traceback (most recent call last):\n  File x\nValueError: boom") == "ValueError: boom"
    assert first_line("plain reason\nmore") == "plain reason"
    assert task_label({"key": "calendar:create-1", "dataset": "calendar"}, 3) == "create-1"
    assert worker_state({"lock_token": "t", "heartbeat": 100.0}, 110.0) == "alive"
    assert worker_state({"lock_token": "t", "heartbeat": 100.0}, 200.0) == "stale"
    assert worker_state({"lock_token": None, "heartbeat": None}, 200.0) == "none"


def test_histogram_gives_each_reward_value_its_bin():
    counts = histogram([-1.0, -1.0, 0.2, 0.6, 0.8, 0.8, 1.0, 1.0, 1.0, 5.0])
    assert counts == [2, 0, 0, 0, 0, 0, 1, 0, 1, 2, 4]  # 1.0 alone in the last bin; 5.0 clamps there


def test_failure_shares_are_a_funnel_from_reward_parts():
    rows = [
        {"reward_parts": {"valid_json": -1.0}},
        {"reward_parts": {"valid_json": 0.0, "tool": 0.0, "args": 0.0, "safe": 0.2}},
        {"reward_parts": {"valid_json": 0.0, "tool": 0.4, "args": 0.2, "safe": 0.2}},
        {"reward_parts": {"valid_json": 0.0, "tool": 0.4, "args": 0.4, "safe": 0.2}},
        {"reward_parts": {"valid_json": 0.0, "tool": 0.4, "args": 0.4, "safe": 0.0, "unsafe": -1.0}},
        {"reward_parts": None, "error": "verifier timed out"},
    ]
    s = failure_shares(rows)
    assert (s.n, s.invalid_json, s.wrong_tool, s.wrong_args, s.unsafe, s.errors) == (5, 1, 1, 1, 1, 1)
    assert s.share("invalid_json") == pytest.approx(0.2)


def test_part_series_sparkline_and_scores_text():
    steps = [{"step": i, "metrics": {"reward": 0.1 * i, "parts/tool": 0.1 * i, "parts/valid_json": -0.5 + 0.1 * i,
                                     "parts/custom": 1.0}} for i in range(5)]
    series = part_series(steps)
    assert list(series) == ["valid_json", "tool", "custom"]  # known parts first, then the rest
    assert sparkline([0, 1, 2, 3], 4) == "▁▃▆█"
    assert len(sparkline(list(range(100)), 10)) == 10
    rows = [{"reward": 1.0, "reward_parts": {"valid_json": 0.0, "tool": 0.4, "args": 0.4}},
            {"reward": -1.0, "reward_parts": {"valid_json": -1.0}}]
    for width in (40, 100):
        text = render_scores(rows, steps, step=4, width=width, height=12).plain
        assert "step 4 · 2 samples · mean +0.00" in text and "bad JSON 50%" in text and "tool" in text
    assert "no scored rollouts" in render_scores([], steps, step=None, width=40).plain


def test_downsample_keeps_shape_and_size():
    xs = [float(i) for i in range(1000)]
    dx, dy = downsample(xs, xs, 100)
    assert len(dx) == len(dy) == 100 and dy[0] < dy[-1]
    assert downsample([1.0, 2.0], [3.0, 4.0], 100) == ([1.0, 2.0], [3.0, 4.0])
    assert metric_points([{"step": 1, "metrics": {"kl": float("nan")}}, {"step": 2, "metrics": {"kl": 0.1}}], "kl") \
        == ([2.0], [0.1])


def _eval(i, step, success, *, base=False, valid=0.9, unsafe=0.0):
    return {"id": i, "step": step, "is_baseline": base,
            "metrics": {"success_rate": success, "valid_json_rate": valid, "unsafe_rate": unsafe}}


def test_best_eval_and_flags():
    evals = [_eval(1, 0, 0.1, base=True, valid=0.9), _eval(2, 10, 0.5), _eval(3, 20, 0.5, unsafe=0.1),
             _eval(4, 30, 0.3, valid=0.6)]
    assert best_eval(evals)["id"] == 2  # ties go to fewer unsafe calls
    steps = [{"step": s, "metrics": {"reward": 0.01 * s, "completions/mean_length": 30 + 2 * s}} for s in range(31)]
    kinds = {f.kind for f in eval_flags(steps, evals)}
    assert kinds == {"overfit", "length", "json"}
    calm = [{"step": s, "metrics": {"reward": 0.5, "completions/mean_length": 30}} for s in range(31)]
    assert eval_flags(calm, evals[:3]) == []
    assert best_eval([_eval(1, 0, 0.1, base=True)]) is None


def test_flag_when_grpo_is_not_clearly_above_sft_only():
    def with_solved(e, n_solved, n=20):
        e["metrics"]["solved"] = {f"t{i}": float(i < n_solved) for i in range(n)}
        return e

    calm = [{"step": s, "metrics": {"reward": 0.5, "completions/mean_length": 30}} for s in range(21)]
    base, sft = with_solved(_eval(1, 0, 0.0, base=True), 0), with_solved(_eval(2, 0, 0.35), 7)
    close = [base, sft, with_solved(_eval(3, 10, 0.4), 8), with_solved(_eval(4, 20, 0.3), 6)]
    (flag,) = eval_flags(calm, close)
    assert flag.kind == "vs_sft" and "step 10" in flag.message and "+5pp on the same 20 tasks" in flag.message
    clear = [base, sft, with_solved(_eval(3, 10, 0.8), 16)]
    assert eval_flags(calm, clear) == []
    assert eval_flags(calm, [base, _eval(2, 0, 0.35), _eval(3, 10, 0.4)]) == []  # older evals: no per-task data


def test_status_text_and_banner():
    run = {"id": 3, "name": "demo", "status": "running", "config": {"max_steps": 100}, "lock_token": "t",
           "heartbeat": 1000.0}
    steps = [{"step": i, "metrics": {"step_time_s": 20.0, "tokens_per_s": 90.0}} for i in range(10)]
    assert rates(steps) == (pytest.approx(0.05), pytest.approx(90.0))
    text = status_text(run, steps, verifier={"name": "tool_call_verifier", "version": 2},
                       checkpoint={"step": 5}, now=1001.0).plain
    for part in ("running", "#3 demo", "step 9/100", "0.050 step/s", "90 tok/s", "ETA 30m20s",
                 "tool_call_verifier v2", "ckpt @5", "worker ✓"):
        assert part in text, part
    assert banner_text(run, 1001.0) is None
    assert "No live worker" in banner_text(run, 2000.0).plain
    crashed = dict(run, status="crashed", error="Traceback (most recent call last):\nKeyError: 'x'")
    assert "CRASHED: KeyError: 'x'" in banner_text(crashed, 1001.0).plain


def test_task_stats_incremental_equals_a_full_scan(fake):
    db = store.open_db(fake.db_path)
    stats = TaskStats()
    top = trajectories.page_trajectories(db, trajectories.TrajectoryFilter(fake.run_id), limit=1).rows[0]["id"]
    snapshot = tasks.task_stats(db, fake.run_id)
    ids = add_step(fake, 6)
    new = trajectories.trajectories_since(db, fake.run_id, top - 1)  # one row the snapshot already has
    stats.add(new[:2])  # the feed got these before the snapshot arrived: held, then folded in
    assert not stats.loaded and stats.rows == {}
    stats.load(snapshot, top)
    stats.add(new[2:])
    full = {(s["task_id"], s["split"]): s for s in tasks.task_stats(db, fake.run_id)}
    assert set(full) == set(stats.rows)
    for key, row in stats.rows.items():
        assert row.attempts == full[key]["attempts"]
        assert row.mean_reward == pytest.approx(full[key]["mean_reward"])
        assert row.success_rate == pytest.approx(full[key]["success_rate"])
    assert len(ids) == fake.group_size
    assert [r.task_id for r in stats.sorted("task")] == sorted(r.task_id for r in stats.rows.values())
    db.conn.close()


def test_browser_walks_pages_both_ways(fake, monkeypatch):
    monkeypatch.setattr(traj_browser, "PAGE", 7)
    db = store.open_db(fake.db_path)
    all_ids = sorted(fake.trajectory_ids, reverse=True)
    b = Browser(trajectories.TrajectoryFilter(fake.run_id))

    def run(req):
        b.apply(req, fetch(db, req))

    run(b.restart())
    seen = [b.current["id"]]
    for _ in range(len(all_ids) + 3):  # past the end: stays on the oldest
        req = b.step(1)
        if req is not None:
            run(req)
        if b.current["id"] != seen[-1]:
            seen.append(b.current["id"])
    assert seen == all_ids and b.at_end
    for _ in range(len(all_ids)):
        req = b.step(-1)
        if req is not None:
            run(req)
    assert b.current["id"] == all_ids[0]
    # Anchored in the middle, by reward: the anchor comes first, and p walks back above it.
    anchor = trajectories.get_trajectory(db, all_ids[20])
    b.order = "reward"
    run(b.restart(anchor=anchor))
    assert b.current["id"] == anchor["id"]
    req = b.step(-1)
    assert req is not None and req.direction == "backward"
    run(req)
    prev = b.current
    assert (prev["reward"], prev["id"]) > (anchor["reward"], anchor["id"])
    # A step filter switches the cursor to (step, id), as page_trajectories does.
    b.order, b.flt = "id", trajectories.TrajectoryFilter(fake.run_id, step_min=2, step_max=3)
    run(b.restart())
    for _ in range(12):
        req = b.step(1)
        if req is not None:
            run(req)
    assert all(2 <= r["step"] <= 3 for r in b.rows)
    db.conn.close()


def test_command_tracker_reports_answers_and_silence(fake):
    db = store.open_db(fake.db_path)
    tracker = CommandTracker()
    cid = commands.enqueue(db, fake.run_id, "checkpoint")
    tracker.add(cid, "checkpoint", None, now=0.0)
    assert tracker.poll(db, 1.0, worker_alive=True) == ([], [])
    answered, overdue = tracker.poll(db, 20.0, worker_alive=False)
    assert answered == [] and [s.command_id for s in overdue] == [cid]
    assert tracker.poll(db, 30.0, worker_alive=False) == ([], [])  # warned once
    commands.finish(db, commands.claim_next(db, fake.run_id)["id"], {"message": "saved at step 5"})
    answered, _ = tracker.poll(db, 31.0, worker_alive=True)
    assert [(a.kind, a.ok, a.message) for a in answered] == [("checkpoint", True, "saved at step 5")]
    assert tracker.pending == {}
    db.conn.close()
