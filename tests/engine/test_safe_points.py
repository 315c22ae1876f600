"""Safe points inside the long operations (issue 17): every few tokens of decoding, per layer in prefill,
SFT, the update and evals. A pause blocks there; a stop drops the phase's partial work cleanly (no rows of
a half-decoded step, no SFT step half-applied), except in the update, which finishes first."""

from __future__ import annotations

import pytest
import torch

import store
from tests.trainer_helpers import LENGTH_VERIFIER, tiny_cfg
from workbench.rollout.hf import HFEngine
from workbench.safe_points import DECODE_EVERY, Interrupted, Throttle, layer_safe_points
from workbench.trainer import Hooks, Trainer
from workbench.worker import WorkerHooks


@pytest.fixture
def verifier_path(tmp_path):
    p = tmp_path / "length_verifier.py"
    p.write_text(LENGTH_VERIFIER)
    return str(p)


class Recorder(Hooks):
    """Records the phases of the inner safe points; asks to stop at the first one in `stop_in`."""

    def __init__(self, stop_in: str | None = None) -> None:
        self.phases: list[str] = []
        self.stop_in = stop_in
        self.stop = False

    def inner_safe_point(self, trainer: Trainer, phase: str) -> None:
        self.phases.append(phase)
        if phase == self.stop_in:
            self.stop = True

    def should_stop(self, trainer: Trainer) -> bool:
        return self.stop


def test_decoding_calls_back_every_few_tokens_and_a_raise_abandons_it(tiny_policy):
    engine = HFEngine(tiny_policy)
    prompt = tiny_policy.tokenizer("hello there", add_special_tokens=False)["input_ids"]
    seen: list[int] = []
    out = engine.generate(
        [prompt], 2, max_new_tokens=13, temperature=1.0, stop_token_ids=[], seed=0, on_tokens=seen.append
    )
    assert seen == list(range(DECODE_EVERY, 13, DECODE_EVERY))  # 4, 8, 12: none after the last token
    assert all(len(c.token_ids) == 13 for c in out[0])

    def stop(done: int) -> None:
        raise Interrupted("decode")

    with pytest.raises(Interrupted):
        engine.generate(
            [prompt], 2, max_new_tokens=13, temperature=1.0, stop_token_ids=[], seed=0, on_tokens=stop
        )
    # The engine put everything back: the next call samples the very same tokens as the first.
    again = engine.generate([prompt], 2, max_new_tokens=13, temperature=1.0, stop_token_ids=[], seed=0)
    assert [c.token_ids for c in again[0]] == [c.token_ids for c in out[0]]


def test_layer_safe_points_fire_in_forward_and_backward(tiny_policy):
    model = tiny_policy.model
    calls = [0]

    def point() -> None:
        calls[0] += 1

    ids = torch.tensor([[1, 5, 9, 11]])
    with layer_safe_points(model, point) as n_layers:
        assert n_layers == 2
        with torch.no_grad():
            model(ids)
        assert calls[0] == n_layers  # one per layer, forward only
        calls[0] = 0
        model(ids).logits.sum().backward()
        assert calls[0] == 2 * n_layers  # and one per layer in the backward pass
    calls[0] = 0
    with torch.no_grad():
        model(ids)
    assert calls[0] == 0  # removed on exit


def test_throttle_is_ready_once_per_interval():
    now = [0.0]
    t = Throttle(0.1, clock=lambda: now[0])
    assert t.ready() and not t.ready()
    now[0] = 0.05
    assert not t.ready()
    now[0] = 0.11
    assert t.ready()
    t.reset()
    assert t.ready()


def test_a_step_visits_inner_safe_points_in_rollout_and_update(tiny_model, tmp_path, verifier_path):
    db = store.open_db(tmp_path / "wb.db")
    hooks = Recorder()
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path), db, hooks=hooks)
    assert t.train_step() is not None
    assert "rollout" in hooks.phases and "update" in hooks.phases
    assert hooks.phases.index("rollout") < hooks.phases.index("update")
    # All the step's groups decode together: the step still has prompts_per_step groups of G rows each.
    rows = store.trajectories.trajectories_since(db, t.run_id, 0, limit=100)
    groups = {(r["group_idx"], r["task_id"]) for r in rows}
    assert len(rows) == 8 and len(groups) == 2 and {r["group_idx"] for r in rows} == {0, 1}


def test_a_stop_mid_rollout_writes_nothing_of_the_step(tiny_model, tmp_path, verifier_path):
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path), db, hooks=Recorder(stop_in="rollout"))
    assert t.train_step() is None
    assert t.step == 0
    assert store.trajectories.count_trajectories(db, t.run_id) == 0
    assert store.metrics.steps_since(db, t.run_id) == []


def test_a_stop_inside_the_update_lets_it_finish(tiny_model, tmp_path, verifier_path):
    db = store.open_db(tmp_path / "wb.db")
    hooks = Recorder(stop_in="update")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path), db, hooks=hooks)
    before = [p.detach().clone() for p in t.policy.trainable_parameters()]
    metrics = t.train_step()
    assert hooks.stop and metrics is not None and t.step == 1  # the step completed, stored, then stops
    after = list(t.policy.trainable_parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_a_stop_inside_sft_or_the_baseline_eval_records_neither(tiny_model, tmp_path, verifier_path):
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path, sft_steps=3), db, hooks=Recorder(stop_in="sft"))
    t.run()
    assert not t.sft_done and store.metrics.list_checkpoints(db, t.run_id) == []
    assert {e["is_baseline"] for e in store.metrics.list_evals(db, t.run_id)} == {1}  # the baseline only
    t2 = Trainer(tiny_cfg(tiny_model, tmp_path / "b", verifier_path), db, hooks=Recorder(stop_in="eval"))
    t2.run()
    assert store.metrics.list_evals(db, t2.run_id) == []  # dropped, redone by the next run()
    assert store.trajectories.count_trajectories(db, t2.run_id) == 0


def test_the_worker_obeys_a_pause_inside_a_phase_and_defers_a_checkpoint(tiny_model, tmp_path, verifier_path):
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path), db)
    hooks = WorkerHooks(db, t.run_id, token="test")
    ck = store.commands.enqueue(db, t.run_id, "checkpoint")
    hooks.inner_safe_point(t, "update")  # mid-update, running: a checkpoint waits for an outer safe point
    assert store.commands.get_command(db, ck)["status"] == "claimed" and not store.metrics.list_checkpoints(
        db, t.run_id
    )
    store.commands.enqueue(db, t.run_id, "stop")
    hooks._inner_poll.reset()
    hooks.inner_safe_point(t, "rollout")  # a stop is obeyed mid-phase
    assert hooks.stop_requested
    hooks.safe_point(t, "after_group")  # the next outer safe point answers the checkpoint
    assert store.commands.get_command(db, ck)["status"] == "done"
    assert len(store.metrics.list_checkpoints(db, t.run_id)) == 1


def test_the_worker_reads_commands_at_most_every_inner_poll(tiny_model, tmp_path, verifier_path, monkeypatch):
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path), db)
    hooks = WorkerHooks(db, t.run_id, token="test")
    now = [0.0]
    hooks._inner_poll = Throttle(0.1, clock=lambda: now[0])
    reads = []
    real = store.commands.pending
    monkeypatch.setattr(store.commands, "pending", lambda *a: reads.append(1) or real(*a))
    for _ in range(50):  # fifty safe points within 100 ms: one read of the command table
        hooks.inner_safe_point(t, "rollout")
    now[0] = 0.2
    hooks.inner_safe_point(t, "rollout")
    assert len(reads) == 2
