"""The worker as a real process on a tiny model: pause, verifier change while paused, resume, kill -9,
one worker per run, and a second process attached through the store."""

import os
import signal
import sys
import time
from pathlib import Path

import pytest

import store
from workbench.launch import start_worker
from workbench.verifier_edit import dry_run
from workbench.view import STALE_AFTER_S, Run, worker_state
from workbench.worker import STEP_BOUNDARIES


def alive(row: dict) -> bool:
    return worker_state(Run.from_row(row), time.time()) == "alive"


LENGTH_VERIFIER = "def reward(output, task):\n    return (len(output) % 5) / 4.0\n"
NEW_VERIFIER = "def reward(output, task):\n    return (len(output) % 3) / 2.0\n"


def wait_for(pred, timeout=120.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def run(tiny_model, tmp_path):
    vpath = tmp_path / "len.py"
    vpath.write_text(LENGTH_VERIFIER)
    db_path = str(tmp_path / "wb.db")
    db = store.open_db(db_path)
    config = dict(
        model=str(tiny_model),
        reward=str(vpath),
        num_generations_per_prompt=4,
        prompts_per_step=2,
        max_completion_length=8,
        max_steps=200,
        eval_interval=1000,
        checkpoint_interval=2,
        eval_max_tasks=2,
        learning_rate=1e-2,
        output_dir=str(tmp_path / "runs"),
        lora={"r": 4, "alpha": 8},
        seed=1,
    )
    run_id = store.runs.create_run(db, name="w", model=config["model"], config=config)
    procs = []
    yield db_path, db, run_id, procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def status(db, run_id):
    return store.runs.get_run(db, run_id)["status"]


def answered(db, cmd_id, timeout=60.0):
    return wait_for(
        lambda: (
            (c := store.commands.get_command(db, cmd_id))["status"] != "claimed"
            and c["status"] != "pending"
            and c
        ),
        timeout,
        f"command {cmd_id}",
    )


def test_pause_edit_verifier_resume_stop(run):
    db_path, db, run_id, procs = run
    procs.append(start_worker(db_path, run_id))
    wait_for(lambda: (store.metrics.last_step(db, run_id) or 0) >= 1, 180, "first step")
    assert alive(store.runs.get_run(db, run_id))  # attach: we read its progress from here

    t_pause = time.time()
    cmd = store.commands.enqueue(db, run_id, "pause")
    wait_for(lambda: status(db, run_id) == "paused", 60, "paused")
    pause = answered(db, cmd)
    assert pause["status"] == "done"
    # Where the pause landed is timing: between steps, after a step's groups, or inside a phase (decoding,
    # the update: the worker's inner safe points).
    between_steps = pause["result"]["paused_at"] in STEP_BOUNDARIES
    paused_for = time.time() - t_pause
    steps_at_pause = store.metrics.last_step(db, run_id)
    rows_at_pause = store.trajectories.count_trajectories(db, run_id)
    time.sleep(2.0)
    assert store.metrics.last_step(db, run_id) == steps_at_pause  # no progress while paused
    assert store.trajectories.count_trajectories(db, run_id) == rows_at_pause
    assert paused_for < 60

    # Probe the paused model: fresh samples for one task, stored as split "probe".
    task_id = store.trajectories.trajectories_since(db, run_id, 0, limit=1)[0]["task_id"]
    probe = answered(db, store.commands.enqueue(db, run_id, "sample", {"task_id": task_id, "n": 3}))
    assert probe["status"] == "done" and len(probe["result"]["trajectory_ids"]) == 3

    # A verifier that fails its dry run cannot be applied; a good one can, while paused.
    bad = dry_run(db, run_id, "def reward(output, task):\n    return output['x']\n")
    assert not bad.ok and "TypeError" in bad.error
    refused = answered(
        db, store.commands.enqueue(db, run_id, "set_verifier", {"verifier_id": bad.verifier_id})
    )
    assert refused["status"] == "failed" and "dry run" in refused["result"]["error"]
    good = dry_run(db, run_id, NEW_VERIFIER)
    assert good.ok and good.summary["n"] > 0
    applied = answered(
        db, store.commands.enqueue(db, run_id, "set_verifier", {"verifier_id": good.verifier_id})
    )
    # Applied now between steps; mid-step, after the step (its groups were scored by the old one).
    assert applied["status"] == "done" and applied["result"]["applied"] is between_steps
    if between_steps:
        assert store.verifiers.active_verifier(db, run_id)["id"] == good.verifier_id
    first_new = steps_at_pause + (1 if between_steps else 2)

    last_id = store.trajectories.trajectories_since(db, run_id, 0, limit=10**6)[-1]["id"]
    store.commands.enqueue(db, run_id, "resume")
    wait_for(lambda: (store.metrics.last_step(db, run_id) or 0) >= first_new, 180, "a step after resume")
    new_rows = [
        r
        for r in store.trajectories.trajectories_since(db, run_id, last_id, limit=10**6)
        if r["split"] == "train"
    ]
    # Continues where it stopped: paused before the update, that step's rows were already stored.
    stored_before = pause["result"]["paused_at"] in ("before_update", "update")
    assert min(r["step"] for r in new_rows) == steps_at_pause + (2 if stored_before else 1)
    assert all((r["verifier_id"] == good.verifier_id) == (r["step"] >= first_new) for r in new_rows)
    assert any(r["step"] >= first_new for r in new_rows)

    stop = answered(db, store.commands.enqueue(db, run_id, "stop"), timeout=120)
    assert stop["status"] == "done"
    procs[0].wait(timeout=120)
    assert status(db, run_id) == "stopped"
    assert not alive(store.runs.get_run(db, run_id))  # lock released


def test_second_worker_on_a_run_refuses(run):
    db_path, db, run_id, procs = run
    store.runs.acquire_lock(
        db, run_id, stale_after_s=STALE_AFTER_S
    )  # a live worker holds it (heartbeat fresh)
    p = start_worker(db_path, run_id, log_path=os.path.join(os.path.dirname(db_path), "second.log"))
    procs.append(p)
    assert p.wait(timeout=120) == 3
    log = Path(db_path).with_name("second.log").read_text()
    assert "already has a live worker" in log


def test_kill_9_mid_step_then_resume(run):
    db_path, db, run_id, procs = run
    procs.append(start_worker(db_path, run_id))
    wait_for(lambda: store.metrics.latest_checkpoint(db, run_id), 240, "first checkpoint")
    # Kill while a later step's groups are being written.
    wait_for(
        lambda: any(
            r["step"] > store.metrics.latest_checkpoint(db, run_id)["step"]
            for r in store.trajectories.trajectories_since(db, run_id, 0, limit=10**6)
        ),
        120,
        "rows past ck",
    )
    os.kill(procs[0].pid, signal.SIGKILL)
    procs[0].wait()
    assert store.integrity_ok(db)
    before = store.trajectories.count_trajectories(db, run_id)
    ck = store.metrics.latest_checkpoint(db, run_id)
    # The dead worker's heartbeat is fresh, but it ran on this host and its pid is gone: a resume takes
    # the lock at once (no 30 s wait).
    procs.append(start_worker(db_path, run_id))
    wait_for(lambda: (store.metrics.last_step(db, run_id) or 0) > ck["step"] + 1, 240, "steps after resume")
    store.commands.enqueue(db, run_id, "stop")
    procs[1].wait(timeout=120)
    assert store.trajectories.count_trajectories(db, run_id) >= before  # nothing committed was lost
    steps = [s["step"] for s in store.metrics.steps_since(db, run_id)]
    assert steps == sorted(set(steps)) and steps[0] == 1  # no step duplicated among live rows
    live = store.trajectories.page_trajectories(
        db, store.trajectories.TrajectoryFilter(run_id=run_id, split="train"), limit=10**6
    ).rows
    per_step = {}
    for r in live:
        per_step[r["step"]] = per_step.get(r["step"], 0) + 1
    assert set(per_step.values()) == {8}  # every live step has exactly G x prompts rows
    superseded = db.execute(
        "SELECT COUNT(*) FROM trajectories WHERE run_id = ? AND superseded = 1", [run_id]
    ).fetchone()[0]
    assert superseded > 0
    events = [e["message"] for e in store.runs.events_since(db, run_id)]
    assert any(m.startswith(f"resumed from step {ck['step']}") for m in events)
    assert any(f"from pid {procs[0].pid}" in m and "process is gone" in m for m in events)


NAN_VERIFIER = "def reward(output, task):\n    return float('nan')\n"
# One failing row in every 8 calls, whatever the phase: a step's 8 rows are 8 consecutive calls.
ONE_IN_EIGHT = (
    "calls = [0]\n"
    "def reward(output, task):\n"
    "    calls[0] += 1\n"
    "    if calls[0] % 8 == 1:\n"
    "        raise ValueError('boom')\n"
    "    return (len(output) % 5) / 4.0\n"
)


def with_verifier(db, run_id, path, code):
    path.write_text(code)
    cfg = store.runs.get_run(db, run_id)["config"]
    db.execute(
        "UPDATE runs SET config = ? WHERE id = ?", [store.db.dumps({**cfg, "reward": str(path)}), run_id]
    )


def test_verifier_error_budget_pauses_with_the_reason_then_resume_goes_on(run, tmp_path):
    from workbench.view import ERROR_BUDGET_PAUSE

    db_path, db, run_id, procs = run
    with_verifier(db, run_id, tmp_path / "nan.py", NAN_VERIFIER)
    log_path = tmp_path / "worker.log"
    procs.append(start_worker(db_path, run_id, log_path=log_path))
    wait_for(lambda: status(db, run_id) == "paused", 240, "the worker to pause itself")
    r = store.runs.get_run(db, run_id)
    assert r["status_reason"].startswith(ERROR_BUDGET_PAUSE)
    assert "step 1: 8/8 verifier errors (verifier returned nan)" in r["status_reason"]
    assert any(
        e["message"].startswith(f"paused: {ERROR_BUDGET_PAUSE}") for e in store.runs.events_since(db, run_id)
    )
    (step1,) = store.metrics.steps_since(db, run_id)
    assert step1["step"] == 1 and step1["metrics"]["update_skipped"] == 1.0
    assert step1["metrics"]["verifier_errors"] == 8
    time.sleep(2.0)
    assert (
        store.metrics.last_step(db, run_id) == 1 and status(db, run_id) == "paused"
    )  # it waits for a person
    log = wait_for(
        lambda: (t := log_path.read_text()) and "workbench train" in t and t, 30, "the resume hint"
    )
    assert (
        "step 1: 8/8 verifier errors (verifier returned nan) — paused: more than 50% of the step's rewards "
        "failed; fix the verifier (v in the UI) and resume"
    ) in log
    assert "reward nan" not in log and f"--resume {run_id}" in log

    # Fix it (edit, dry run, apply) and resume: the next step is step 2, scored by the fixed verifier.
    good = dry_run(db, run_id, LENGTH_VERIFIER)
    assert good.ok
    applied = answered(
        db, store.commands.enqueue(db, run_id, "set_verifier", {"verifier_id": good.verifier_id})
    )
    assert applied["status"] == "done" and applied["result"]["applied"] is True
    store.commands.enqueue(db, run_id, "resume")
    wait_for(lambda: (store.metrics.last_step(db, run_id) or 0) >= 2, 180, "step 2")
    step2 = store.metrics.steps_since(db, run_id, 1)[0]
    assert step2["step"] == 2 and step2["metrics"]["verifier_errors"] == 0
    assert status(db, run_id) == "running"
    store.commands.enqueue(db, run_id, "stop")
    procs[0].wait(timeout=120)


def test_verifier_errors_under_the_budget_are_counted_and_the_run_goes_on(run, tmp_path):
    db_path, db, run_id, procs = run
    with_verifier(db, run_id, tmp_path / "flaky.py", ONE_IN_EIGHT)
    log_path = tmp_path / "worker.log"
    procs.append(start_worker(db_path, run_id, log_path=log_path))
    wait_for(lambda: (store.metrics.last_step(db, run_id) or 0) >= 2, 240, "two steps")
    assert status(db, run_id) == "running"
    for s in store.metrics.steps_since(db, run_id)[:2]:
        assert s["metrics"]["verifier_errors"] == 1 and "update_skipped" not in s["metrics"]
    log = log_path.read_text()
    assert "step 1: reward " in log and "(1/8 verifier errors) loss" in log
    store.commands.enqueue(db, run_id, "stop")
    procs[0].wait(timeout=120)


def test_crash_is_recorded_with_traceback(run, tmp_path):
    db_path, db, run_id, procs = run
    cfg = store.runs.get_run(db, run_id)["config"]
    cfg["model"] = str(tmp_path / "no_such_model")
    db.execute("UPDATE runs SET config = ? WHERE id = ?", [store.db.dumps(cfg), run_id])
    p = start_worker(db_path, run_id)
    procs.append(p)
    assert p.wait(timeout=120) != 0
    r = store.runs.get_run(db, run_id)
    assert r["status"] == "crashed" and "Traceback" in r["error"]
    assert not alive(r)


if sys.platform != "linux":  # pragma: no cover
    pytestmark = pytest.mark.skip("process tests are written for Linux")


def test_eval_command_answers_with_a_message_and_scalar_metrics():
    from types import SimpleNamespace

    from workbench.worker import WorkerHooks

    trainer = SimpleNamespace(step=7, run_eval=lambda: {"success_rate": 0.4, "n": 60, "solved": {"t1": 1.0}})
    result = WorkerHooks(None, 1, "tok").loop.dispatch(trainer, "eval", {}, "after_step")
    assert result["message"] == "held-out success 0.400 at step 7"
    assert result["metrics"] == {"success_rate": 0.4, "n": 60}  # the per-task map stays in the evals table


def test_step_line_counts_verifier_errors_and_never_says_reward_nan():
    from types import SimpleNamespace

    from workbench.trainer import Hooks, Scored, Trainer
    from workbench.types import Score
    from workbench.worker import WorkerHooks

    def groups(errors: int, n: int = 8) -> list[list[Scored]]:
        rows = [
            Scored(None, Score(total=0.0, error="verifier returned nan") if i < errors else Score(total=0.5))
            for i in range(n)
        ]
        return [rows[:4], rows[4:]]

    def line(errors: int, frac: float = 0.5, hooks: Hooks | None = None):
        t = SimpleNamespace(
            cfg=SimpleNamespace(max_verifier_error_frac=frac), hooks=hooks or Hooks(), halted=None
        )
        metrics = {"reward": 0.5 if errors < 8 else float("nan"), "loss": 0.0, "step_time_s": 1.0}
        return Trainer._report_step(t, 3, groups(errors), metrics, errors > frac * 8), t

    assert line(0)[0] == "step 3: reward 0.500 loss 0.0000 (1.0 s)"
    assert line(2)[0] == "step 3: reward 0.500 (2/8 verifier errors) loss 0.0000 (1.0 s)"
    text, t = line(8)  # no driver that can pause: the run loop ends after the step
    assert text.startswith("step 3: 8/8 verifier errors (verifier returned nan) — stopped: more than 50%")
    assert t.halted and "reward nan" not in text
    paused = WorkerHooks(None, 1, "tok")
    text, t = line(5, hooks=paused)
    assert text == (
        "step 3: 5/8 verifier errors (verifier returned nan) — paused: more than 50% of the step's "
        "rewards failed; fix the verifier (v in the UI) and resume"
    )
    assert paused.paused and paused.pause_reason.startswith("verifier error budget exceeded: step 3: 5/8")
    assert t.halted is None
    assert "nan" not in line(8, frac=1.0)[0].replace(
        "returned nan", ""
    )  # a budget of 1.0: no reward, no "nan"
