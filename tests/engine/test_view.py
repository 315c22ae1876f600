"""workbench.view, the typed layer the screens and `workbench report` read: records, run state and the
allowed-actions table, evaluations (best / promoted / paired / flags), scores and task stats."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest

import store
from store import trajectories
from tests.fake_run import add_step, fake_copy
from workbench.cli import main
from workbench.types import ToolCall
from workbench.view import (
    ACTIONS,
    STALE_AFTER_S,
    STATUSES,
    Checkpoint,
    Eval,
    Run,
    RunState,
    Step,
    TaskStats,
    Trajectory,
    View,
    allowed,
    best_eval,
    eval_flags,
    eval_rows,
    failure_shares,
    key_action,
    metric_points,
    part_series,
    promotion,
    should_promote,
    started_again,
    turns,
    worker_state,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake(tmp_path):
    return fake_copy(tmp_path / "wb.db")


# ---- records -----------------------------------------------------------------------------------------


def test_tool_calls_are_openai_shaped_and_old_rows_still_read():
    call = ToolCall("calendar.create_event", {"day": "Tuesday"}, "call_0")
    assert call.to_dict() == {
        "type": "function",
        "id": "call_0",
        "function": {"name": "calendar.create_event", "arguments": {"day": "Tuesday"}},
    }
    assert ToolCall.from_dict(call.to_dict()) == call
    assert ToolCall.from_dict({"tool": "email.send", "args": {"to": "Bo"}}) == ToolCall(
        "email.send", {"to": "Bo"}
    )
    assert ToolCall.from_dict({"function": {"name": "x", "arguments": '{"a": 1}'}}) == ToolCall("x", {"a": 1})
    row = {
        "id": 1,
        "run_id": 1,
        "step": 0,
        "split": "train",
        "completion": "{}",
        "truncated": 1,
        "superseded": 0,
        "tool_calls": [{"tool": "email.send", "args": {"to": "Bo"}}],
        "reward_parts": None,
        "unknown_column": 3,
    }
    t = Trajectory.from_row(row)
    assert t.first_call == ToolCall("email.send", {"to": "Bo"}) and t.truncated and not t.superseded
    assert t.reward_parts == {} and t.success is None  # stored before outcomes were kept


def test_turns_parse_calls_with_the_engines_parser():
    t = Trajectory(
        1,
        1,
        0,
        "train",
        "",
        messages=(
            {"role": "system", "content": "tools..."},
            {"role": "user", "content": "Email Bo"},
            {"role": "assistant", "content": '{"tool": "email.send", "args": {"to": "Bo"}}'},
            {"role": "tool", "content": "ok"},
            {"role": "assistant", "content": "Done, sent."},
        ),
    )
    system, parts = turns(t)
    assert system == "tools..."
    assert [(p.role, p.tool_call.name if p.tool_call else None) for p in parts] == [
        ("user", None),
        ("assistant", "email.send"),
        ("tool", None),
        ("assistant", None),
    ]


# ---- run state: one table of allowed actions -----------------------------------------------------------


def test_worker_liveness():
    run = Run(1, "r", "m", "running", lock_held=True, heartbeat=100.0)
    assert worker_state(run, 110.0) == "alive" and worker_state(run, 200.0) == "stale"
    assert worker_state(Run(1, "r", "m", "stopped"), 200.0) == "none"
    # Its process is known gone (a local check the View fills in): no live worker, fresh heartbeat or not.
    gone = Run(1, "r", "m", "running", lock_held=True, heartbeat=100.0, worker_gone=True)
    assert worker_state(gone, 110.0) == "none" and RunState.of(gone, 110.0).live_without_worker


def test_view_reports_a_dead_local_worker_at_once(fake):
    import socket

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with View.open(fake.db_path) as view:
        now = time.time()
        assert worker_state(view.run(fake.run_id), now) == "alive"  # the fake's lock: this live process
        view.db.execute(
            "UPDATE runs SET worker_pid = ?, worker_host = ? WHERE id = ?",
            [proc.pid, socket.gethostname(), fake.run_id],
        )
        run = view.run(fake.run_id)
        assert run.worker_gone and worker_state(run, now) == "none"
        assert all(r.worker_gone for r in view.runs() if r.id == fake.run_id)
        # Another host: only the heartbeat can tell (fresh: alive; 30 s old: stale).
        view.db.execute("UPDATE runs SET worker_host = 'elsewhere' WHERE id = ?", [fake.run_id])
        assert worker_state(view.run(fake.run_id), now) == "alive"
        assert worker_state(view.run(fake.run_id), now + STALE_AFTER_S + 1) == "stale"


def test_started_again_sees_a_new_worker_even_when_the_statuses_in_between_were_missed():
    assert started_again("crashed", "running") and started_again("paused", "starting")
    assert started_again("starting", "running")  # rows were superseded between the two
    assert not started_again("running", "running") and not started_again("running", "running", "a", "a")
    assert not started_again("pausing", "running")  # a resume of a paused worker: nothing superseded
    # killed -9 while "running", resumed from another terminal: still "running", but another lock
    assert started_again("running", "running", "tok-a", "tok-b")
    assert not started_again("running", "running", None, "tok-b")  # the first look: nothing to compare
    assert not started_again("running", "stopped", "tok-a", None)


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("worker", ["alive", "stale", "none"])
def test_keys_and_palette_read_one_table(status, worker):
    s = RunState(status, worker)
    if status in ("running", "starting") and worker == "alive":
        assert allowed("pause", s)
    assert allowed("checkpoint", s) == allowed("eval", s) == (worker == "alive")
    # r: resume a live paused worker, else start one unless finished; never both, never neither when allowed
    r = key_action("resume", s)
    assert r in ("resume", "start_worker", None)
    if worker != "alive":
        assert r == (None if status == "finished" else "start_worker")
    assert not (allowed("resume", s) and allowed("start_worker", s))
    assert allowed("set_verifier", s) == (status not in ("finished", "stopping"))


def test_every_action_says_when_it_is_allowed():
    assert all(a.when and a.title for a in ACTIONS)
    assert len({a.name for a in ACTIONS}) == len(ACTIONS)


# ---- evaluations ---------------------------------------------------------------------------------------


def _eval(i, step, success, *, base=False, valid=0.9, unsafe=0.0, solved=None, ck=None, mode="greedy"):
    metrics = {"success_rate": success, "valid_json_rate": valid, "unsafe_rate": unsafe}
    if solved is not None:
        metrics["solved"] = {f"t{k}": float(k < solved) for k in range(20)}
    return Eval(i, 1, step, mode, base, metrics, checkpoint_id=ck)


def test_best_eval_and_flags():
    evals = [
        _eval(1, 0, 0.1, base=True, valid=0.9),
        _eval(2, 10, 0.5),
        _eval(3, 20, 0.5, unsafe=0.1),
        _eval(4, 30, 0.3, valid=0.6),
    ]
    assert best_eval(evals).id == 2  # ties go to fewer unsafe calls
    steps = [Step(s, {"reward": 0.01 * s, "completions/mean_length": 30 + 2 * s}) for s in range(31)]
    assert {f.kind for f in eval_flags(steps, evals)} == {"overfit", "length", "json"}
    calm = [Step(s, {"reward": 0.5, "completions/mean_length": 30}) for s in range(31)]
    assert eval_flags(calm, evals[:3]) == []
    assert best_eval([_eval(1, 0, 0.1, base=True)]) is None
    assert metric_points([Step(1, {"kl": float("nan")}), Step(2, {"kl": 0.1})], "kl") == ([2.0], [0.1])


def test_flag_when_grpo_is_not_clearly_above_sft_only():
    calm = [Step(s, {"reward": 0.5, "completions/mean_length": 30}) for s in range(21)]
    base, sft = _eval(1, 0, 0.0, base=True, solved=0), _eval(2, 0, 0.35, solved=7)
    close = [base, sft, _eval(3, 10, 0.4, solved=8), _eval(4, 20, 0.3, solved=6)]
    (flag,) = eval_flags(calm, close)
    assert flag.kind == "vs_sft" and "step 10" in flag.message and "+5pp on the same 20 tasks" in flag.message
    assert eval_flags(calm, [base, sft, _eval(3, 10, 0.8, solved=16)]) == []
    assert (
        eval_flags(calm, [base, _eval(2, 0, 0.35), _eval(3, 10, 0.4)]) == []
    )  # older evals: no per-task data


def test_promotion_rule_is_the_one_the_report_marks():
    """Promotion is decided on validation by paired differences: clearly above the baseline, and a GRPO
    checkpoint clearly above the SFT-only policy it started from."""
    ck = [
        Checkpoint(10, 1, 0, "sft", "/a"),
        Checkpoint(11, 1, 10, "periodic", "/b"),
        Checkpoint(12, 1, 20, "periodic", "/c"),
    ]
    base = _eval(1, 0, 0.2, base=True, solved=4)
    sft = _eval(2, 0, 0.6, solved=12, ck=10)
    step10 = _eval(3, 10, 0.95, solved=19, ck=11)
    step20 = _eval(4, 20, 0.9, solved=18, ck=12)
    evals = [base, sft, step10, step20]
    assert should_promote(sft, evals[:2], None)
    decision = promotion(step10, evals[:3], ck[0])
    assert decision.promote and "vs base +75pp" in decision.reason and "vs SFT-only +35pp" in decision.reason
    assert not should_promote(step20, evals, ck[1])  # below the promoted one
    assert not should_promote(_eval(5, 30, 0.9, unsafe=0.5, ck=12), evals, ck[1])  # more unsafe than base
    assert not should_promote(_eval(6, 30, 0.9, ck=12, mode="sampled"), [sft, step10], None)  # no baseline
    # a point estimate above the baseline is not enough: 2 more tasks of 20 is within the noise
    close = _eval(8, 0, 0.3, solved=6, ck=10)
    assert promotion(close, [base, close], None).reason.startswith("vs base +10pp")
    assert not should_promote(close, [base, close], None)
    # GRPO that does not clearly beat the warm-up it started from is not promoted, even far above base
    flat = _eval(9, 10, 0.65, solved=13, ck=11)
    got = promotion(flat, [base, sft, flat], ck[0])
    assert not got.promote and "not clearly better than the warm-up" in got.reason
    # a test-split eval never decides anything, and the rules ignore test evals
    test_eval = dataclasses.replace(_eval(10, 10, 1.0, solved=20, ck=11), tasks={"split": "test"})
    assert not should_promote(test_eval, [base, sft, test_eval], None)
    assert best_eval([base, sft, test_eval]).id == sft.id
    rows = eval_rows(evals + [_eval(7, 10, 0.6, mode="sampled", ck=11), test_eval], ck, "greedy")
    assert [r.label for r in rows] == ["base", "sft @ step 0", "periodic @ step 10", "periodic @ step 20"]
    assert [r.vs_base is None for r in rows] == [True, False, False, False]
    assert [r.vs_sft is None for r in rows] == [True, True, False, False]
    assert rows[2].vs_sft.delta == pytest.approx(0.35)
    assert [r.eval.id for r in eval_rows(evals + [test_eval], ck, "greedy", split="test")] == [test_eval.id]


# ---- scores and task stats -----------------------------------------------------------------------------


def _row(i, outcome=None, reward=0.0, error=None):
    return Trajectory(i, 1, 0, "train", "", reward=reward, outcome=outcome, error=error)


def test_failure_shares_come_from_the_engines_classification():
    def flags(parsed=True, tool=True, args=True, unsafe=False):
        return {
            "valid_json": parsed,
            "parsed": parsed,
            "correct_tool": tool,
            "correct_args": args,
            "success": tool and args and not unsafe,
            "unsafe": unsafe,
        }

    rows = [
        _row(1, flags(parsed=False, tool=False, args=False)),
        _row(2, flags(tool=False, args=False)),
        _row(3, flags(args=False)),
        _row(4, flags()),
        _row(5, flags(unsafe=True)),
        _row(6, None, None, error="verifier timed out"),
        _row(7, None),
    ]
    s = failure_shares(rows)
    assert (s.n, s.errors, s.unclassified) == (5, 1, 2)
    assert [s.share(k) for k in ("invalid_json", "wrong_tool", "wrong_args", "unsafe")] == [
        pytest.approx(0.2)
    ] * 4
    assert failure_shares([]).share("invalid_json") is None


def test_part_series_puts_known_parts_first():
    steps = [
        Step(i, {"parts/custom": 1.0, "parts/tool": 0.1 * i, "parts/valid_json": -0.5}) for i in range(3)
    ]
    assert list(part_series(steps)) == ["valid_json", "tool", "custom"]


def test_task_stats_incremental_equals_a_full_scan(fake):
    view = View.open(fake.db_path)
    stats = TaskStats()
    top = view.newest_id(fake.run_id)
    snapshot = view.task_stats(fake.run_id)
    add_step(fake, 6)
    new = view.trajectories_since(fake.run_id, top - 1)  # one row the snapshot already has
    stats.add(new[:2])  # the feed got these before the snapshot arrived: held, then folded in
    assert not stats.loaded and stats.rows == {}
    stats.load(snapshot, top)
    stats.add(new[2:])
    full = {s.key: s for s in view.task_stats(fake.run_id)}
    assert set(full) == set(stats.rows)
    for key, row in stats.rows.items():
        assert (row.attempts, row.classified, row.successes) == (
            full[key].attempts,
            full[key].classified,
            full[key].successes,
        )
        assert row.mean_reward == pytest.approx(full[key].mean_reward)
    assert any(r.successes for r in stats.rows.values())
    view.close()


# ---- the event log and the report ----------------------------------------------------------------------


def test_report_reads_the_view_and_prints_the_event_log(fake, capsys):
    db = store.open_db(fake.db_path)
    store.runs.add_event(db, fake.run_id, "resume", "resumed from step 3 (4 rows superseded)")
    trajectories.mark_superseded(db, fake.run_id, after_step=100)
    db.conn.close()
    assert main(["report", "--db", fake.db_path, "--run", str(fake.run_id), "--events", "3"]) == 0
    out = capsys.readouterr().out
    assert "validation (decides promotion), greedy" in out and "periodic @ step 2" in out
    assert "events (the last 3)" in out and "resumed from step 3" in out and "running" in out
    view = View.open(fake.db_path)
    assert [e.kind for e in view.events(fake.run_id)][:2] == ["status", "status"]
    assert view.last_events(fake.run_id, 1)[0].kind == "resume"
    view.close()


# ---- what the view layer may import ----------------------------------------------------------------------


def test_the_view_layer_and_pure_engine_modules_import_without_torch():
    """The UI process never loads torch to draw a table: these import with torch made unimportable."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import workbench.view, workbench.eval, workbench.verifiers, workbench.envs, workbench.types\n"
        "import workbench.config, workbench.tasks, workbench.verifier_edit, workbench.launch\n"
        "assert 'transformers' not in sys.modules and 'textual' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_skill_rows_add_the_no_call_and_parallel_rates_only_when_a_split_has_them():
    from workbench.view import Checkpoint, Eval, eval_rows, skill_rows

    skills = {"tool:weather.get": {"n": 4, "success": 0.5}}
    base = Eval(
        1,
        1,
        0,
        "greedy",
        True,
        {
            "success_rate": 0.1,
            "by_skill": skills,
            "no_call_accuracy": 0.25,
            "no_call_n": 4,
            "parallel_success": None,
            "parallel_n": 0,
        },
    )
    later = Eval(
        2,
        1,
        5,
        "greedy",
        False,
        {
            "success_rate": 0.6,
            "by_skill": skills,
            "no_call_accuracy": 0.75,
            "no_call_n": 4,
            "parallel_success": None,
            "parallel_n": 0,
        },
        checkpoint_id=7,
    )
    ck = Checkpoint(7, 1, 5, "periodic", "/x")
    header, lines = skill_rows(eval_rows([base, later], [ck]))
    assert header == ["skill", "n", "base", "periodic @ step 5"]
    assert lines[-1] == ["no call", "4", "0.25", "0.75"]
    assert not any(line[0] == "parallel calls" for line in lines)  # the split has no parallel tasks
    plain = [dataclasses.replace(e, metrics={"success_rate": 0.1, "by_skill": skills}) for e in (base, later)]
    assert [line[0] for line in skill_rows(eval_rows(plain, [ck]))[1]] == ["weather.get"]
