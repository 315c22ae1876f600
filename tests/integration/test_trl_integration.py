"""Issue 19: TRL's GRPOTrainer streams into the store and obeys pause, set_verifier, set_lr, checkpoint, stop.

Real TRL GRPO steps on the tiny random fixture model (CPU, ~0.3 s a step). Needs the `trl` extra."""

from __future__ import annotations

import importlib.util
import math
import threading
import time

import pytest

pytestmark = [
    pytest.mark.trl,
    pytest.mark.skipif(
        importlib.util.find_spec("trl") is None,
        reason="trl is not installed (pip install agent-workbench[trl])",
    ),
]

# Rewards 0 to 7, declared: a total outside a verifier's range (default [-1, 1]) is that row's error.
FIRST = "REWARD_RANGE = (0, 7)\ndef reward(output, task):\n    return float(len(str(output)) % 7)\n"
SECOND = "REWARD_RANGE = (0, 7)\ndef reward(output, task):\n    return 7.0\n"


def _wait(pred, timeout=60.0, what="condition"):
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_trl_grpo_streams_and_obeys_commands(tmp_path):
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import store
    from workbench.envs import Harness
    from workbench.integrations.trl import WorkbenchCallback, task_columns, trl_advantages, workbench_reward
    from workbench.tasks import load_task_source
    from workbench.testing import tiny_model_dir
    from workbench.verifier_edit import dry_run

    db_path = str(tmp_path / "wb.db")
    model_dir = str(tiny_model_dir(tmp_path))
    tok = AutoTokenizer.from_pretrained(model_dir)
    harness = Harness()
    tasks = load_task_source("builtin:calendar", "train")[:4]
    ds = Dataset.from_list([task_columns(t, harness, tok) for t in tasks])
    vfile = tmp_path / "first.py"
    vfile.write_text(FIRST)

    cb = WorkbenchCallback(db_path, name="trl-test", model_name="tiny", verifier=str(vfile), harness=harness)

    class StopBeforeStep3(TrainerCallback):  # a UI pressing s while step 3 runs
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 2:
                db = store.open_db(db_path)
                store.commands.enqueue(db, cb.run_id, "stop")
                db.close()

    cfg = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=8,
        max_steps=5,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        learning_rate=1e-5,
        seed=0,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model_dir,
        args=cfg,
        train_dataset=ds,
        processing_class=tok,
        reward_funcs=[workbench_reward(cb)],
        callbacks=[cb, StopBeforeStep3()],
    )

    db = store.open_db(db_path)
    errors: list[BaseException] = []

    def train():
        try:
            with cb.watch():
                trainer.train()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    th = threading.Thread(target=train, daemon=True)
    th.start()
    _wait(lambda: cb.run_id is not None, what="the run")
    run_id = cb.run_id
    pause_id = store.commands.enqueue(db, run_id, "pause")  # queued before step 2: holds after step 1
    _wait(lambda: store.runs.get_run(db, run_id)["status"] == "paused", what="paused")
    assert store.runs.get_run(db, run_id)["lock_token"]  # the worker lock is held
    held = db.execute("SELECT COUNT(*), MAX(step) FROM trajectories WHERE run_id = ?", [run_id]).fetchone()
    assert held == (4, 1)
    time.sleep(1.5)  # held: no new rows, heartbeat alive
    assert db.execute("SELECT COUNT(*) FROM trajectories WHERE run_id = ?", [run_id]).fetchone()[0] == 4
    assert store.metrics.last_step(db, run_id) == 1
    beat = store.runs.get_run(db, run_id)["heartbeat"]
    assert beat is not None and time.time() - beat < 3
    assert store.commands.get_command(db, pause_id)["status"] == "done"

    # The verifier editor's path: dry run (stores the version) then apply, plus a new lr and a checkpoint.
    result = dry_run(db, run_id, SECOND)
    assert result.ok, result.error
    v2 = result.verifier_id
    cmds = [
        store.commands.enqueue(db, run_id, "set_verifier", {"verifier_id": v2}),
        store.commands.enqueue(db, run_id, "set_lr", {"lr": 1e-3}),
        store.commands.enqueue(db, run_id, "checkpoint"),
        store.commands.enqueue(db, run_id, "set_temperature", {"temperature": 0.5}),
        store.commands.enqueue(db, run_id, "resume"),
    ]
    th.join(timeout=60)
    assert not th.is_alive() and not errors, errors

    answers = [store.commands.get_command(db, c) for c in cmds]
    assert [a["status"] for a in answers] == ["done", "done", "done", "failed", "done"]
    assert all("message" in a["result"] or "error" in a["result"] for a in answers)
    run = store.runs.get_run(db, run_id)
    assert run["status"] == "stopped" and run["lock_token"] is None

    rows = store.trajectories.last_trajectories(db, run_id, 100)
    by_step: dict[int, list] = {}
    for r in rows:
        by_step.setdefault(r["step"], []).append(r)
    assert sorted(by_step) == [1, 2, 3]  # stopped after step 3 of 5
    s1 = sorted(by_step[1], key=lambda r: r["sample_idx"])
    v1 = s1[0]["verifier_id"]
    assert v1 != v2 and all(r["verifier_id"] == v1 for r in s1)
    expect = trl_advantages([r["reward"] for r in s1], 4, "group")
    assert all(math.isclose(r["advantage"], a, abs_tol=1e-6) for r, a in zip(s1, expect, strict=True))
    assert all(r["reward"] == float(len(r["completion"]) % 7) for r in s1)
    assert all(r["reward_parts"] is not None and r["messages"][-1]["role"] == "assistant" for r in s1)
    assert all(r["task_id"] is not None and r["outcome"] is not None for r in rows)
    for step in (2, 3):  # the applied version scores every step after the pause
        assert all(
            r["verifier_id"] == v2 and r["reward"] == 7.0 and r["advantage"] == 0.0 for r in by_step[step]
        )

    steps = {s["step"]: s["metrics"] for s in store.metrics.steps_since(db, run_id)}
    assert sorted(steps) == [1, 2, 3]
    for m in steps.values():
        for key in (
            "reward",
            "loss",
            "entropy",
            "completions/mean_length",
            "clip_ratio/low_mean",
            "learning_rate",
        ):
            assert key in m, key
    assert steps[2]["reward"] == 7.0 and steps[2]["verifier_id"] == v2
    assert steps[2]["learning_rate"] > 1e-4  # set_lr reached the optimizer and the schedule
    ckpts = store.metrics.list_checkpoints(db, run_id)
    assert [(c["step"], c["kind"]) for c in ckpts] == [(1, "trl")]
    db.close()
