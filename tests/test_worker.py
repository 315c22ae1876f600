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

LENGTH_VERIFIER = (
    "def reward(output, task):\n"
    "    return (len(output) % 5) / 4.0\n"
)
NEW_VERIFIER = (
    "def reward(output, task):\n"
    "    return (len(output) % 3) / 2.0\n"
)


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
        model=str(tiny_model), reward=str(vpath), num_generations_per_prompt=4, prompts_per_step=2,
        max_completion_length=8, max_steps=200, eval_interval=1000, checkpoint_interval=2, eval_max_tasks=2,
        learning_rate=1e-2, output_dir=str(tmp_path / "runs"), lora={"r": 4, "alpha": 8}, seed=1,
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
    return wait_for(lambda: (c := store.commands.get_command(db, cmd_id))["status"] != "claimed"
                    and c["status"] != "pending" and c, timeout, f"command {cmd_id}")


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
    # Where the pause landed is timing: between steps, or between the groups of a step.
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
    refused = answered(db, store.commands.enqueue(db, run_id, "set_verifier", {"verifier_id": bad.verifier_id}))
    assert refused["status"] == "failed" and "dry run" in refused["result"]["error"]
    good = dry_run(db, run_id, NEW_VERIFIER)
    assert good.ok and good.summary["n"] > 0
    applied = answered(db, store.commands.enqueue(db, run_id, "set_verifier", {"verifier_id": good.verifier_id}))
    # Applied now between steps; mid-step, after the step (its groups were scored by the old one).
    assert applied["status"] == "done" and applied["result"]["applied"] is between_steps
    if between_steps:
        assert store.verifiers.active_verifier(db, run_id)["id"] == good.verifier_id
    first_new = steps_at_pause + (1 if between_steps else 2)

    last_id = store.trajectories.trajectories_since(db, run_id, 0, limit=10**6)[-1]["id"]
    store.commands.enqueue(db, run_id, "resume")
    wait_for(lambda: (store.metrics.last_step(db, run_id) or 0) >= first_new, 180, "a step after resume")
    new_rows = [r for r in store.trajectories.trajectories_since(db, run_id, last_id, limit=10**6) if r["split"] == "train"]
    # Continues where it stopped: paused before the update, that step's rows were already stored.
    stored_before = pause["result"]["paused_at"] == "before_update"
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
    store.runs.acquire_lock(db, run_id, stale_after_s=STALE_AFTER_S)  # a live worker holds it (heartbeat fresh)
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
    wait_for(lambda: any(r["step"] > store.metrics.latest_checkpoint(db, run_id)["step"]
                         for r in store.trajectories.trajectories_since(db, run_id, 0, limit=10**6)), 120, "rows past ck")
    os.kill(procs[0].pid, signal.SIGKILL)
    procs[0].wait()
    assert store.integrity_ok(db)
    before = store.trajectories.count_trajectories(db, run_id)
    ck = store.metrics.latest_checkpoint(db, run_id)
    # The dead worker's heartbeat goes stale; a resume steals the lock only then.
    db.execute("UPDATE runs SET heartbeat = heartbeat - 60 WHERE id = ?", [run_id])
    procs.append(start_worker(db_path, run_id))
    wait_for(lambda: (store.metrics.last_step(db, run_id) or 0) > ck["step"] + 1, 240, "steps after resume")
    store.commands.enqueue(db, run_id, "stop")
    procs[1].wait(timeout=120)
    assert store.trajectories.count_trajectories(db, run_id) >= before  # nothing committed was lost
    steps = [s["step"] for s in store.metrics.steps_since(db, run_id)]
    assert steps == sorted(set(steps)) and steps[0] == 1  # no step duplicated among live rows
    live = store.trajectories.page_trajectories(db, store.trajectories.TrajectoryFilter(run_id=run_id, split="train"),
                                                limit=10**6).rows
    per_step = {}
    for r in live:
        per_step[r["step"]] = per_step.get(r["step"], 0) + 1
    assert set(per_step.values()) == {8}  # every live step has exactly G x prompts rows
    superseded = db.execute("SELECT COUNT(*) FROM trajectories WHERE run_id = ? AND superseded = 1", [run_id]).fetchone()[0]
    assert superseded > 0
    events = [e["message"] for e in store.runs.events_since(db, run_id)]
    assert any(m.startswith(f"resumed from step {ck['step']}") for m in events)


def test_crash_is_recorded_with_traceback(run, tmp_path):
    db_path, db, run_id, procs = run
    cfg = store.runs.get_run(db, run_id)["config"]
    cfg["model"] = str(tmp_path / "no_such_model")
    store.runs.update_config(db, run_id, cfg)
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
    result = WorkerHooks(None, 1, "tok")._handle(trainer, "eval", {}, "after_step")
    assert result["message"] == "held-out success 0.400 at step 7"
    assert result["metrics"] == {"success_rate": 0.4, "n": 60}  # the per-task map stays in the evals table
