"""The step loop on a tiny random model: everything lands in the store, and resume reproduces a step."""

import re

import pytest

import store
from tests.trainer_helpers import tiny_cfg
from workbench.trainer import Trainer, task_row


# Tiny random models reply gibberish: the built-in verifier would give every sample -1 (no variance, no
# update). This one rewards reply length, so groups have variance and the update really runs.
def test_run_writes_everything_to_the_store(tiny_model, tmp_path, verifier_path):
    db = store.open_db(tmp_path / "wb.db")
    cfg = tiny_cfg(tiny_model, tmp_path, verifier_path, sft_steps=2)
    t = Trainer(cfg, db)
    t.run()
    rid = t.run_id
    steps = store.metrics.steps_since(db, rid)
    assert [s["step"] for s in steps] == [1, 2, 3]
    m = steps[0]["metrics"]
    for key in (
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "loss",
        "clip_ratio/low_mean",
        "entropy",
        "completions/mean_length",
        "clipped_ratio",
        "parts/len",
        "rollout_time_s",
        "update_time_s",
    ):
        assert key in m, key
    train = store.trajectories.page_trajectories(
        db, store.trajectories.TrajectoryFilter(run_id=rid, split="train"), limit=100
    ).rows
    assert len(train) == 3 * 2 * 4
    assert all(r["verifier_id"] == t.verifier_id and r["advantage"] is not None for r in train)
    # Each group's advantages are centred (GRPO's baseline is the group mean).
    full = store.trajectories.group_members(db, train[0]["id"])
    assert len(full) == 4 and abs(sum(r["advantage"] for r in full)) < 1e-6
    assert full[0]["messages"][0]["role"] == "system" and full[0]["messages"][-1]["role"] == "assistant"
    kinds = [c["kind"] for c in store.metrics.list_checkpoints(db, rid)]
    assert kinds == ["sft", "periodic", "final"]
    every = store.metrics.list_evals(db, rid)
    evals = [e for e in every if (e["tasks"] or {}).get("split") != "test"]
    assert [e["is_baseline"] for e in evals] == [1, 0, 0, 0]  # baseline, after SFT, step 2, step 3
    # the test split is evaluated beside validation each time (capped like it), and decides nothing
    tests = [e for e in every if (e["tasks"] or {}).get("split") == "test"]
    assert [(e["step"], e["is_baseline"]) for e in tests] == [(e["step"], e["is_baseline"]) for e in evals]
    assert all(e["tasks"]["n"] == 3 and "by_skill" in e["metrics"] for e in tests)
    tested = store.trajectories.page_trajectories(
        db, store.trajectories.TrajectoryFilter(run_id=rid, split="test"), limit=100
    ).rows
    assert len(tested) == 4 * 3
    eval_ids = {r[0] for r in db.execute("SELECT DISTINCT eval_id FROM trajectories WHERE split = 'test'")}
    assert eval_ids == {e["id"] for e in tests}
    promotions = [e["message"] for e in store.runs.events_since(db, rid) if e["kind"] == "promotion"]
    # sft, step 2, step 3: each decision is an event that says why
    assert len(promotions) == 3 and all(re.match(r"step \d+: (not )?promoted: \S", m) for m in promotions)
    assert {"valid_json_rate", "success_rate", "success_ci_low", "unsafe_rate"} <= evals[0]["metrics"].keys()
    held = store.trajectories.page_trajectories(
        db, store.trajectories.TrajectoryFilter(run_id=rid, split="held_out"), limit=100
    ).rows
    assert len(held) == 4 * 3
    sft_events = [e for e in store.runs.events_since(db, rid) if e["kind"] == "sft_step"]
    assert len(sft_events) == 2


def test_update_changes_the_adapter(tiny_model, tmp_path, verifier_path):
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path, max_steps=1), db)
    before = [p.detach().clone() for p in t.policy.trainable_parameters()]
    t.train_step()
    after = t.policy.trainable_parameters()
    assert any(not (a == b).all() for a, b in zip(after, before, strict=True))


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
def test_zero_advantage_segments_are_skipped_without_changing_the_update(
    tiny_model, tmp_path, verifier_path, loss_type
):
    import copy

    import torch

    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path, max_steps=1, loss_type=loss_type), db)
    seen = {}
    real = t._update
    t._update = lambda groups, adv, keep: seen.update(args=(groups, adv, keep)) or real(groups, adv, keep)
    t.train_step()  # real rollouts and advantages; then make the first group a zero-variance one
    groups, adv, keep = seen["args"]
    adv = [[0.0] * len(adv[0])] + [list(a) for a in adv[1:]]
    assert any(a not in (0.0, None) for a in adv[1])
    start = (
        [p.detach().clone() for p in t.policy.trainable_parameters()],
        copy.deepcopy(t.optimizer.state_dict()),
    )
    after = []
    for skip in (False, True):
        for p, p0 in zip(t.policy.trainable_parameters(), start[0], strict=True):
            p.data.copy_(p0)
        t.optimizer.load_state_dict(copy.deepcopy(start[1]))
        m = real(groups, adv, keep, skip_zero_advantage=skip)
        after.append(([p.detach().clone() for p in t.policy.trainable_parameters()], m))
    (full, m_full), (skipped, m_skip) = after
    assert m_skip["update_tokens"] < m_full["update_tokens"] == m_full["num_tokens"] == m_skip["num_tokens"]
    assert (
        abs(m_skip["loss"] - m_full["loss"]) < 1e-6 and abs(m_skip["grad_norm"] - m_full["grad_norm"]) < 1e-5
    )
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(full, skipped, strict=True))


def test_kl_reference_is_the_sft_policy_unless_asked_for_the_base(tiny_model, tmp_path, verifier_path):
    db = store.open_db(tmp_path / "wb.db")
    kl = {}
    for reference in ("sft", "base"):
        t = Trainer(
            tiny_cfg(
                tiny_model,
                tmp_path / reference,
                verifier_path,
                max_steps=1,
                sft_steps=2,
                beta=0.1,
                reference=reference,
            ),
            db,
        )
        t.run()
        kl[reference] = store.metrics.steps_since(db, t.run_id)[0]["metrics"]["kl"]
    # Step 1 samples and scores the SFT policy itself: no divergence from an SFT reference, some from the base.
    assert kl["sft"] < 1e-6 < kl["base"]


@pytest.mark.parametrize("kl_to_sft", [False, True], ids=["beta0", "kl-to-sft"])
def test_resume_reproduces_the_next_step(tiny_model, tmp_path, verifier_path, kl_to_sft):
    db = store.open_db(tmp_path / "wb.db")
    kw = dict(max_steps=3, eval_interval=2) | (dict(beta=0.1, sft_steps=2) if kl_to_sft else {})
    straight = Trainer(tiny_cfg(tiny_model, tmp_path / "a", verifier_path, **kw), db)
    straight.run()
    # Same config, but "killed" after step 2's checkpoint, plus a half-written step 3 that must be hidden.
    # With a KL term, step 3's loss also proves the resumed run's reference is the SFT policy again.
    cut = Trainer(tiny_cfg(tiny_model, tmp_path / "b", verifier_path, **(kw | {"max_steps": 2})), db)
    cut.run()
    cut.train_step()  # step 3 rows past the checkpoint
    resumed = Trainer(tiny_cfg(tiny_model, tmp_path / "b", verifier_path, **kw), db, run_id=cut.run_id)
    assert resumed.resume() == 2
    resumed.run()

    def step3(run_id):
        flt = store.trajectories.TrajectoryFilter(run_id=run_id, split="train", step_min=3, step_max=3)
        rows = store.trajectories.page_trajectories(db, flt, limit=100, descending=False).rows
        return [(r["completion"], r["reward"], round(r["advantage"], 6)) for r in rows]

    assert step3(resumed.run_id) == step3(straight.run_id) and len(step3(straight.run_id)) == 8
    a = store.metrics.steps_since(db, straight.run_id)[-1]["metrics"]
    b = store.metrics.steps_since(db, resumed.run_id)[-1]["metrics"]
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6) and a["reward"] == b["reward"]
    if kl_to_sft:
        assert a["kl"] > 0 and a["kl"] == pytest.approx(b["kl"], rel=1e-5)
    # The superseded step-3 rows are still there, only hidden.
    assert store.trajectories.count_trajectories(db, resumed.run_id) > store.trajectories.count_trajectories(
        db, straight.run_id
    )


def test_verifier_errors_are_recorded_and_excluded(tiny_model, tmp_path):
    p = tmp_path / "flaky.py"
    p.write_text(
        "REWARD_RANGE = (0, 2)\n\ndef reward(output, task):\n    if len(output) % 2:\n"
        "        raise KeyError('boom')\n    return float(len(output) % 3)\n"
    )
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, str(p), max_steps=1), db)
    metrics = t.train_step()
    rows = store.trajectories.trajectories_since(db, t.run_id, 0)
    errored = [r for r in rows if r["error"]]
    assert errored and all(r["reward"] is None and r["advantage"] is None for r in errored)
    assert "KeyError" in errored[0]["error"]
    assert metrics["verifier_errors"] == len(errored)


def test_truncated_is_weights_by_hand():
    import torch

    from workbench.learn.update import truncated_is_weights

    trainer = torch.tensor([[-1.0, -2.0, -0.5]])
    engine = torch.tensor([[-1.0, -3.0, -0.1]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third token is padding
    w, m = truncated_is_weights(trainer, engine, mask, cap=2.0)
    # ratios exp(0) = 1 and exp(1) = 2.718 -> capped at 2; padding weighs 0
    assert torch.allclose(w, torch.tensor([[1.0, 2.0, 0.0]]))
    e = torch.e
    assert abs(m["mismatch_kl"] - ((e - 1 - 1) / 2)) < 1e-6
    assert abs(m["is_ratio/mean"] - (1 + e) / 2) < 1e-6 and m["is_ratio/clipped_frac"] == 0.5


def test_engine_mismatch_correction_in_the_update(tiny_model, tmp_path, verifier_path):
    """With another engine's log-probs the update weighs tokens by the capped ratio and logs the mismatch;
    with the trainer's own log-probs (HF) the mismatch is ~0 and every ratio ~1."""
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path, max_steps=1), db)
    t.is_correction = True  # as for rollout: vllm, but the HF engine samples with the trainer's own numbers
    m = t.train_step()
    assert (
        m["mismatch_kl"] < 1e-4 and abs(m["is_ratio/mean"] - 1.0) < 1e-3 and m["is_ratio/clipped_frac"] == 0.0
    )


@pytest.mark.vllm
@pytest.mark.skipif(
    __import__("importlib").util.find_spec("vllm") is None, reason="vllm is not installed here"
)
def test_grpo_trains_with_vllm_rollouts(tmp_path, verifier_path):
    from workbench.testing import tiny_model_dir

    # vLLM's CPU attention needs head size >= 32, and refuses prompts past the model's context (the harness is long)
    model = tiny_model_dir(tmp_path, hidden_size=128, num_heads=2, max_positions=2048)
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(tiny_cfg(model, tmp_path, verifier_path, rollout="vllm", max_steps=2, eval_max_tasks=2), db)
    before = [p.detach().clone() for p in t.policy.trainable_parameters()]
    t.run()
    steps = store.metrics.steps_since(db, t.run_id)
    assert [s["step"] for s in steps] == [1, 2]
    assert all("mismatch_kl" in s["metrics"] and s["metrics"]["mismatch_kl"] < 0.05 for s in steps)
    assert any(not (a == b).all() for a, b in zip(t.policy.trainable_parameters(), before, strict=True))
    t.engine.close()


def test_grpo_holdout_sft_imitates_one_part_of_train_and_grpo_samples_the_other(
    tiny_model, tmp_path, verifier_path, monkeypatch
):
    import workbench.trainer as trainer_mod

    seen: list = []
    real = trainer_mod.env_sft_examples
    monkeypatch.setattr(
        trainer_mod, "env_sft_examples", lambda env, tasks: seen.extend(tasks) or real(env, tasks)
    )
    t = Trainer(
        tiny_cfg(
            tiny_model,
            tmp_path,
            verifier_path,
            sft_steps=1,
            grpo_holdout=0.4,
            max_steps=2,
            dynamic_sampling=True,
        ),
        store.open_db(tmp_path / "wb.db"),
    )
    assert t.sft_tasks and t.rl_tasks and not {x.id for x in t.sft_tasks} & {x.id for x in t.rl_tasks}
    t.run()
    assert {x.id for x in seen} == {x.id for x in t.sft_tasks}
    rid = t.run_id
    rows = store.trajectories.page_trajectories(
        t.db, store.trajectories.TrajectoryFilter(run_id=rid, split="train"), limit=1000
    ).rows
    assert rows and {r["task_id"] for r in rows} <= {
        t.task_ids[task_row(x)["key"]] for x in t.rl_tasks
    }  # refills too


def test_grpo_skills_points_grpo_at_one_skill_and_leaves_sft_all_of_train(
    tiny_model, tmp_path, verifier_path, monkeypatch
):
    import workbench.trainer as trainer_mod
    from workbench.skills import task_skills

    seen: list = []
    real = trainer_mod.env_sft_examples
    monkeypatch.setattr(
        trainer_mod, "env_sft_examples", lambda env, tasks: seen.extend(tasks) or real(env, tasks)
    )
    t = Trainer(
        tiny_cfg(
            tiny_model,
            tmp_path,
            verifier_path,
            sft_steps=1,
            grpo_skills=["time_12h"],
            max_steps=1,
            dynamic_sampling=True,
        ),
        store.open_db(tmp_path / "wb.db"),
    )
    assert 0 < len(t.rl_tasks) < len(t.train_tasks) and all("time_12h" in task_skills(x) for x in t.rl_tasks)
    t.run()
    assert {x.id for x in seen} == {x.id for x in t.train_tasks}  # the warm-up still imitates every request
    rows = store.trajectories.page_trajectories(
        t.db, store.trajectories.TrajectoryFilter(run_id=t.run_id, split="train"), limit=1000
    ).rows
    assert rows and {r["task_id"] for r in rows} <= {t.task_ids[task_row(x)["key"]] for x in t.rl_tasks}


def test_a_run_can_validate_on_the_wider_validation_family(tiny_model, tmp_path, verifier_path):
    t = Trainer(
        tiny_cfg(
            tiny_model, tmp_path, verifier_path, held_out_eval="validation_wide", max_steps=1, eval_interval=1
        ),
        store.open_db(tmp_path / "wb.db"),
    )
    assert t.eval_tasks and all(x.id.startswith("calendar:validation_wide:") for x in t.eval_tasks)
    assert t.test_tasks and all(
        x.id.startswith("calendar:test:") for x in t.test_tasks
    )  # test stays built-in test
    t.run()
    evals = store.metrics.list_evals(t.db, t.run_id)
    assert {e["step"] for e in evals} == {0, 1} and len(
        evals
    ) == 4  # baseline and step 1, validation and test each


def test_sft_skill_weights_repeat_the_weak_skills_examples_for_the_warm_up(
    tiny_model, tmp_path, verifier_path, monkeypatch
):
    import workbench.trainer as trainer_mod
    from workbench.skills import task_skills

    seen: list = []
    real = trainer_mod.env_sft_examples
    monkeypatch.setattr(
        trainer_mod, "env_sft_examples", lambda env, tasks: seen.extend(tasks) or real(env, tasks)
    )
    logs: list[str] = []
    t = Trainer(
        tiny_cfg(
            tiny_model, tmp_path, verifier_path, sft_steps=1, sft_skill_weights={"time_12h": 2}, max_steps=0
        ),
        store.open_db(tmp_path / "wb.db"),
        log=logs.append,
    )
    t.run()
    twelve = [x for x in t.train_tasks if "time_12h" in task_skills(x)]
    assert 0 < len(twelve) < len(t.train_tasks)
    assert len(seen) == len(t.train_tasks) + len(twelve)  # each 12-hour request twice, the others once
    assert {x.id for x in seen} == {x.id for x in t.train_tasks}
    assert t.rl_tasks == t.train_tasks  # GRPO's tasks are not weighted
    assert any(f"SFT draws from {len(seen)} examples of {len(t.train_tasks)} tasks" in m for m in logs)


def test_sft_autocast_reaches_the_warm_up(tiny_model, tmp_path, verifier_path, monkeypatch):
    import torch

    import workbench.trainer as trainer_mod

    seen: list = []
    real = trainer_mod.run_sft
    monkeypatch.setattr(
        trainer_mod, "run_sft", lambda *a, **kw: seen.append(kw["autocast"]) or real(*a, **kw)
    )
    for value in ("bfloat16", "none"):
        Trainer(
            tiny_cfg(tiny_model, tmp_path, verifier_path, sft_steps=1, max_steps=0, sft_autocast=value),
            store.open_db(tmp_path / f"{value}.db"),
        ).run()
    assert seen == [torch.bfloat16, None]
