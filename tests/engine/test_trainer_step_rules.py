"""Issue 16, item 1: the KL reference of full fine-tuning across a resume, step-shaping parameters at step
boundaries, non-finite gradients, DAPO dynamic sampling refills and overlong handling, multi-turn episode
weighting, and top_p in the sampled eval."""

from __future__ import annotations

import pytest
import torch

import store
from tests.trainer_helpers import LENGTH_VERIFIER, tiny_cfg
from workbench.rollout.runner import Rollout, Segment
from workbench.trainer import Hooks, Scored, Trainer
from workbench.types import Completion, Output, Score


@pytest.fixture
def verifier_path(tmp_path):
    p = tmp_path / "length_verifier.py"
    p.write_text(LENGTH_VERIFIER)
    return str(p)


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([[1, 5, 9, 11, 12, 13, 40]])).logits


def params(t: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in t.policy.trainable_parameters()]


# ----- 1. full fine-tuning: the KL reference is the right policy, also after a resume -------------------------


@pytest.mark.parametrize(("reference", "sft_steps"), [("base", 0), ("base", 2), ("sft", 2)])
def test_full_finetuning_kl_reference_survives_a_resume(
    tiny_model, tmp_path, verifier_path, reference, sft_steps
):
    from transformers import AutoModelForCausalLM

    from workbench.models import load_policy

    db = store.open_db(tmp_path / "wb.db")
    kw = dict(
        adapter="full",
        beta=0.1,
        reference=reference,
        sft_steps=sft_steps,
        max_steps=2,
        eval_interval=2,
        learning_rate=1e-3,
    )
    first = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path, **kw), db)
    first.run()  # SFT steps + reference base used to raise at the first update (the weights had changed)
    if reference == "base":
        want = logits(load_policy(tiny_model, adapter="full").model)  # the initial policy
    else:
        sft = next(c for c in store.metrics.list_checkpoints(db, first.run_id) if c["kind"] == "sft")
        want = logits(AutoModelForCausalLM.from_pretrained(f"{sft['path']}/adapter"))
    with first.policy.reference() as ref:
        assert torch.allclose(logits(ref), want, atol=1e-6)
    resumed = Trainer(
        tiny_cfg(tiny_model, tmp_path, verifier_path, **kw | {"max_steps": 3}), db, run_id=first.run_id
    )
    assert resumed.resume() == 2
    live = logits(resumed.policy.model)
    assert not torch.allclose(
        live, want, atol=1e-4
    )  # training moved the weights: the test can tell them apart
    with resumed.policy.reference() as ref:
        assert torch.allclose(logits(ref), want, atol=1e-6)  # not the resumed step-2 weights
    resumed.run()  # and the step after the resume trains against it
    assert store.metrics.steps_since(db, resumed.run_id)[-1]["metrics"]["kl"] > 0


# ----- 2. temperature (and learning rate) change at step boundaries only --------------------------------------


class ChangeMidStep(Hooks):
    """Does what the worker's set_temperature / set_lr used to do at the first safe point inside a step."""

    def __init__(self) -> None:
        self.done = False

    def safe_point(self, trainer: Trainer, where: str) -> None:
        if where == "after_group" and not self.done:
            self.done = True
            trainer.temperature, trainer.lr = 0.5, 1e-3


def test_a_mid_step_temperature_change_leaves_the_step_alone(tiny_model, tmp_path, verifier_path):
    db = store.open_db(tmp_path / "wb.db")
    plain = Trainer(tiny_cfg(tiny_model, tmp_path / "a", verifier_path), db)
    changed = Trainer(tiny_cfg(tiny_model, tmp_path / "b", verifier_path), db, hooks=ChangeMidStep())
    m_plain, m_changed = plain.train_step(), changed.train_step()
    # the step's update used the temperature (and learning rate) it sampled with
    assert all(torch.equal(a, b) for a, b in zip(params(plain), params(changed), strict=True))
    for key in ("loss", "entropy", "grad_norm", "temperature", "learning_rate"):
        assert m_plain[key] == m_changed[key], key
    assert m_changed["temperature"] == 1.0 and m_changed["learning_rate"] == 1e-2
    nxt = changed.train_step()  # the change takes effect with the next step
    assert nxt["temperature"] == 0.5 and nxt["learning_rate"] == 1e-3


def test_worker_applies_set_temperature_and_set_lr_at_the_step_boundary(tiny_model, tmp_path, verifier_path):
    from workbench.worker import WorkerHooks

    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path), db)
    hooks = WorkerHooks(db, t.run_id, token="test")
    t.hooks = hooks
    ids = [
        store.commands.enqueue(db, t.run_id, "set_temperature", {"temperature": 0.5}),
        store.commands.enqueue(db, t.run_id, "set_lr", {"lr": 1e-3}),
    ]
    m = t.train_step()  # claimed at the first group's safe point, applied after the step
    assert m["temperature"] == 1.0 and m["learning_rate"] == 1e-2
    assert (t.temperature, t.lr) == (0.5, 1e-3)
    results = [store.commands.get_command(db, i)["result"] for i in ids]
    assert [r["applied"] for r in results] == [False, False]
    assert results[0]["temperature"] == 0.5 and results[1]["lr"] == 1e-3
    cid = store.commands.enqueue(db, t.run_id, "set_temperature", {"temperature": 0.7})
    hooks.safe_point(t, "after_step")  # between steps: at once
    assert t.temperature == 0.7 and store.commands.get_command(db, cid)["result"]["applied"] is True


# ----- 3. a non-finite gradient never reaches the optimizer -----------------------------------------------------


def test_nonfinite_gradient_skips_the_optimizer_step(tiny_model, tmp_path, verifier_path, monkeypatch):
    from workbench.learn import grpo

    db = store.open_db(tmp_path / "wb.db")
    logs: list[str] = []
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path), db, log=logs.append)
    real = grpo.policy_loss

    def nan_loss(*a, **k):
        loss, m = real(*a, **k)
        return loss * float("nan"), m

    monkeypatch.setattr(grpo, "policy_loss", nan_loss)
    before = params(t)
    m = t.train_step()
    assert m["skipped_nonfinite_grad"] == 1 and m["grad_norm"] == -1.0
    assert all(torch.equal(a, b) for a, b in zip(before, params(t), strict=True))
    assert not t.optimizer.state  # no optimizer step at all (Adam's moments untouched)
    assert all(p.grad is None for p in t.policy.trainable_parameters())
    assert any("non-finite" in line for line in logs)
    stored = store.metrics.steps_since(db, t.run_id)[-1]["metrics"]
    assert stored["skipped_nonfinite_grad"] == 1
    monkeypatch.setattr(grpo, "policy_loss", real)
    m = t.train_step()
    assert m["skipped_nonfinite_grad"] == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, params(t), strict=True))


# ----- 4. DAPO: dynamic sampling refills, overlong filtering, soft overlong penalty ------------------------------


def scripted_scores(t: Trainer, constant_calls: int | None) -> None:
    """The first `constant_calls` episodes (None: all) score 1.0 (a zero-variance group); later ones 0, 1, 0, 1."""
    calls = [0]

    def score(rollout):
        i = calls[0]
        calls[0] += 1
        total = 1.0 if constant_calls is None or i < constant_calls else float(i % 2)
        return Score(total=total)

    t.score = score
    t.score_many = lambda rollouts: [score(r) for r in rollouts]


def test_dynamic_sampling_refills_zero_variance_groups(tiny_model, tmp_path, verifier_path):
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path, algorithm="dapo"), db)
    scripted_scores(t, constant_calls=4)  # the step's first group has no variance
    m = t.train_step()
    assert m["groups_kept"] == 2  # the step's prompt count, refilled
    assert m["dynamic_sampling/extra_groups"] == 1 and m["dynamic_sampling/extra_generations"] == 4
    rows = store.trajectories.trajectories_since(db, t.run_id, 0)
    assert len(rows) == 3 * 4 and len({r["group_idx"] for r in rows}) == 3
    assert len({r["task_id"] for r in rows}) == 3  # a refill draws tasks the step has not used


def test_dynamic_sampling_refills_are_capped(tiny_model, tmp_path, verifier_path):
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(
        tiny_cfg(tiny_model, tmp_path, verifier_path, algorithm="dapo", dynamic_sampling_max_refills=2), db
    )
    scripted_scores(t, constant_calls=None)  # nothing ever has variance
    m = t.train_step()
    assert m["groups_kept"] == 0 and m["update_skipped"] == 1.0
    assert (
        m["dynamic_sampling/extra_groups"] == 4 and m["dynamic_sampling/extra_generations"] == 16
    )  # 2 rounds x 2


def test_no_refill_without_dynamic_sampling(tiny_model, tmp_path, verifier_path):
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path), db)
    scripted_scores(t, constant_calls=4)
    m = t.train_step()
    assert m["groups_kept"] == 2 and "dynamic_sampling/extra_groups" not in m
    assert len(store.trajectories.trajectories_since(db, t.run_id, 0)) == 2 * 4


def test_soft_overlong_penalty_at_the_boundaries():
    from workbench.learn.grpo import overlong_penalty

    # DAPO: 0 up to max - buffer, then linear down to -1 at max, -1 past it (TRL's soft_overlong_punishment)
    assert overlong_penalty(0, 8, 4) == 0.0
    assert overlong_penalty(4, 8, 4) == 0.0
    assert overlong_penalty(5, 8, 4) == pytest.approx(-0.25)
    assert overlong_penalty(7, 8, 4) == pytest.approx(-0.75)
    assert overlong_penalty(8, 8, 4) == pytest.approx(-1.0)
    assert overlong_penalty(9, 8, 4) == -1.0
    assert overlong_penalty(8, 8, 0) == 0.0  # no buffer: off


def test_soft_overlong_penalty_is_added_to_the_reward(tiny_model, tmp_path, verifier_path):
    from workbench.learn.grpo import overlong_penalty

    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path, overlong_buffer=4), db)
    t.score = lambda rollout: Score(total=0.5, parts={"v": 0.5})
    t.score_many = lambda rollouts: [t.score(r) for r in rollouts]
    t.train_step()
    rows = store.trajectories.trajectories_since(db, t.run_id, 0)
    assert {r["tokens"] for r in rows} & {5, 6, 7, 8}  # some completions reach into the buffer
    for r in rows:
        pen = overlong_penalty(r["tokens"], 8, 4)
        assert r["reward"] == pytest.approx(0.5 + pen) and r["reward_parts"]["overlong"] == pytest.approx(pen)


class FakeLogprobs:
    """Stands in for the log-prob pass: a leaf per micro-batch, so each token's weight in the loss is its grad."""

    def __init__(self) -> None:
        self.leaves: list[tuple[list[list[int]], torch.Tensor]] = []

    def __call__(self, model, prompts, comps, temperature, pad_token_id=0, return_entropy=False, prefix=None):
        # `prefix` (one micro-batch here, so always None) changes how the real pass runs, not what it returns
        width = max(len(c) for c in comps)
        mask = torch.tensor([[j < len(c) for j in range(width)] for c in comps])
        logps = torch.zeros(len(comps), width, requires_grad=True)
        if not return_entropy:
            return logps.detach(), mask
        self.leaves.append((comps, logps))
        return logps, mask, torch.zeros(len(comps), width)

    def weight(self, ids: list[int]) -> float:
        """Total loss weight of one completion's tokens: -grad / advantage (ratio 1, no KL, advantage 1)."""
        total = 0.0
        for comps, leaf in self.leaves:
            for row, c in enumerate(comps):
                if c == ids:
                    total += float(-leaf.grad[row, : len(c)].sum())
        return total


def episode(task, turns: list[list[int]], truncated: bool = False) -> Scored:
    segs = [
        Segment(
            [1, 5, 9],
            Completion(
                "x", ids, [-1.0] * len(ids), "length" if truncated and i == len(turns) - 1 else "stop"
            ),
        )
        for i, ids in enumerate(turns)
    ]
    return Scored(Rollout(task, Output("x"), segs), Score(total=0.0))


def test_truncated_completions_carry_no_gradient_with_the_filter_on(
    tiny_model, tmp_path, verifier_path, monkeypatch
):
    db = store.open_db(tmp_path / "wb.db")
    for on in (False, True):
        t = Trainer(
            tiny_cfg(
                tiny_model, tmp_path / str(on), verifier_path, loss_type="dapo", mask_truncated_completions=on
            ),
            db,
        )
        fake = FakeLogprobs()
        monkeypatch.setattr("workbench.learn.update.sequence_logprobs", fake)
        task = t.train_tasks[0]
        group = [episode(task, [[11, 12, 13]], truncated=True), episode(task, [[21, 22]])]
        m = t._update([group], [[1.0, 1.0]], [True])
        if on:
            assert fake.weight([11, 12, 13]) == 0.0 and all([11, 12, 13] not in c for c, _ in fake.leaves)
            assert fake.weight([21, 22]) == pytest.approx(1.0) and m["num_tokens"] == 2  # dapo: 2 / 2 tokens
        else:
            assert fake.weight([11, 12, 13]) == pytest.approx(3 / 5) and fake.weight(
                [21, 22]
            ) == pytest.approx(2 / 5)


@pytest.mark.parametrize("weighting", ["episode", "turn"])
@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo"])
def test_multi_turn_episodes_weigh_as_one_sequence(
    tiny_model, tmp_path, verifier_path, monkeypatch, weighting, loss_type
):
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(
        tiny_cfg(
            tiny_model,
            tmp_path,
            verifier_path,
            loss_type=loss_type,
            multi_turn_weighting=weighting,
            max_completion_length=8,
        ),
        db,
    )
    fake = FakeLogprobs()
    monkeypatch.setattr("workbench.learn.update.sequence_logprobs", fake)
    task = t.train_tasks[0]
    two_turns = episode(task, [[11, 12, 13], [14, 15]])
    one_turn = episode(task, [[21, 22, 23, 24]])
    t._update([[two_turns, one_turn]], [[1.0, 1.0]], [True])
    a = fake.weight([11, 12, 13]) + fake.weight([14, 15])
    b = fake.weight([21, 22, 23, 24])
    if loss_type == "grpo":  # mean over each sequence's tokens, then over sequences
        want = (1 / 2, 1 / 2) if weighting == "episode" else (2 / 3, 1 / 3)
    else:  # dr_grpo: token sum / (sequences * max_completion_length)
        want = (5 / 16, 4 / 16) if weighting == "episode" else (5 / 24, 4 / 24)
    assert (a, b) == pytest.approx(want)


# ----- 6. the sampled eval uses top_p -------------------------------------------------------------------------


class RecordingEngine:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def generate(self, prompts, n, **kw):
        self.calls.append(kw)
        return [
            [Completion('{"tool": "x"}', [11, 2], [-1.0, -1.0], "stop") for _ in range(n)] for _ in prompts
        ]

    def update_weights(self, policy) -> None:
        pass

    def close(self) -> None:
        pass


def test_sampled_eval_uses_top_p(tiny_model, tmp_path, verifier_path):
    from workbench.eval import evaluate

    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path, top_p=0.9, temperature=0.7), db)
    t.engine = RecordingEngine()
    t.evaluation.evaluate(t.engine, samples=2, step=t.step, temperature=t.temperature)
    assert {(c["temperature"], c["top_p"]) for c in t.engine.calls} == {(0.7, 0.9)}
    t.engine.calls.clear()
    # greedy: temperature 0, top_p left at 1
    t.evaluation.evaluate(t.engine, samples=0, step=t.step, temperature=t.temperature)
    assert {(c["temperature"], c["top_p"]) for c in t.engine.calls} == {(0.0, 1.0)}
    engine = RecordingEngine()
    evaluate(
        engine,
        t.policy.tokenizer,
        t.env,
        t.eval_tasks,
        max_new_tokens=8,
        samples=3,
        temperature=1.0,
        top_p=0.5,
    )
    assert {c["top_p"] for c in engine.calls} == {0.5}
