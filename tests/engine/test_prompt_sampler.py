"""`prompt_sampler: spread`: prompts drawn by their estimated chance of a group with reward spread."""

from __future__ import annotations

import random

import pytest

import store
from tests.trainer_helpers import tiny_cfg
from workbench.prompt_sampler import GroupSeen, SpreadSampler, spread_probability
from workbench.trainer import Trainer
from workbench.types import Task


def _task(i: int, template: str, tool: str = "calendar.create_event") -> Task:
    return Task(
        id=f"t{i}",
        prompt=f"Book Alex {i}",
        expected_tool=tool,
        expected_args={"attendee": "Alex"},
        template=template,
    )


def test_spread_probability_is_zero_for_a_sure_outcome_and_highest_at_even_odds():
    assert spread_probability(1.0, 8) == 0 and spread_probability(0.0, 8) == 0
    assert spread_probability(0.5, 8) == pytest.approx(1 - 2 * 0.5**8)
    assert spread_probability(0.5, 8) > spread_probability(0.9, 8) > spread_probability(0.99, 8)


def test_a_bimodal_prompt_spreads_less_than_independent_samples_say():
    # Beta(1, 1) success chance, two samples: E[q^2] = 1/3, so both outcomes with probability 1 - 2/3
    assert spread_probability(0.5, 2, concentration=2.0) == pytest.approx(1 / 3)
    for p in (0.3, 0.7, 0.9):
        bimodal, independent = spread_probability(p, 8, 2.0), spread_probability(p, 8)
        assert 0 < bimodal < independent
        assert spread_probability(p, 8, 1e7) == pytest.approx(independent, abs=1e-4)
    assert spread_probability(1.0, 8, 2.0) == 0 and spread_probability(0.0, 8, 2.0) == 0


def test_weights_follow_the_groups_seen_the_family_and_the_eval_prior():
    tasks = [_task(0, "A"), _task(1, "A"), _task(2, "B"), _task(3, "C", tool="email.send")]
    keys = [t.id for t in tasks]
    s = SpreadSampler(tasks, keys, group_size=8, floor=0.05)
    assert s.weights([], {}) == [0.5] * 4  # nothing known: even odds
    # t0 came back flat three times: it, its family member t1 (never drawn) and, less, t2 of the same tool
    # fall; t3, another tool, does not
    w = s.weights([GroupSeen("t0", False)] * 3, {})
    assert w[0] < w[1] < w[2] < w[3] == 0.5
    # a skill the policy always gets right (eval success 1.0) makes a flat group certain: down to the floor
    w = s.weights([], {"tool:email.send": 1.0})
    assert w[3] == 0.05 and w[:3] == [0.5] * 3
    # a family with spread every time is worth more than an unknown one
    w = s.weights([GroupSeen("t2", True)] * 4, {})
    assert w[2] > 0.5


def test_a_task_without_a_template_counts_its_tools_groups_once():
    plain = [
        Task(
            id=f"p{i}",
            prompt="Book Alex",
            expected_tool="calendar.create_event",
            expected_args={"attendee": "Alex"},
        )
        for i in range(2)
    ]
    s = SpreadSampler(plain, [t.id for t in plain], group_size=8, floor=0.0)
    # p0 flat four times; p1 (never drawn) inherits the tool's rate 0 as one count of at most 4 groups
    # (FAMILY_WEIGHT), not twice over (family and tool are the same label): 0.5 * 2 / (2 + 4)
    assert s.weights([GroupSeen("p0", False)] * 4, {})[1] == pytest.approx(1 / 6)


def test_the_draw_is_seeded_weighted_and_never_repeats_or_takes_excluded_tasks():
    tasks = [_task(i, f"T{i}") for i in range(10)]
    s = SpreadSampler(tasks, [t.id for t in tasks], group_size=8)
    weights = [1.0] + [0.05] * 9
    a = s.draw(random.Random(7), 4, weights)
    assert a == s.draw(random.Random(7), 4, weights) and len({t.id for t in a}) == 4
    firsts = sum(s.draw(random.Random(seed), 1, weights)[0].id == "t0" for seed in range(300))
    assert firsts > 270  # drawn on weight^2: 1 against nine of 0.0025, about 98% expected
    assert all(t.id != "t0" for t in s.draw(random.Random(1), 9, weights, exclude={0}))


def test_the_draw_favours_likely_spread_more_than_in_proportion():
    tasks = [_task(0, "A"), _task(1, "B")]
    s = SpreadSampler(tasks, [t.id for t in tasks], group_size=8)
    firsts = sum(s.draw(random.Random(seed), 1, [0.5, 0.25])[0].id == "t0" for seed in range(4000))
    # in proportion to the weights: 2/3; to their squares (SHARPNESS 2): 0.8
    assert 0.77 < firsts / 4000 < 0.83


def test_config_names_the_allowed_samplers():
    from workbench.config import ConfigError, config_from_dict

    assert config_from_dict({}).prompt_sampler == "uniform"
    with pytest.raises(ConfigError, match="prompt_sampler"):
        config_from_dict({"prompt_sampler": "smart"})


def test_a_spread_sampled_run_counts_flat_groups_and_a_resume_draws_the_same_prompts(
    tiny_model, tmp_path, verifier_path
):  # noqa: F811
    db = store.open_db(tmp_path / "wb.db")
    kw = dict(max_steps=3, eval_interval=2, prompt_sampler="spread")
    straight = Trainer(tiny_cfg(tiny_model, tmp_path / "a", verifier_path, **kw), db)
    straight.run()
    steps = store.metrics.steps_since(db, straight.run_id)
    assert all("sampler/zero_spread_generations" in s["metrics"] for s in steps)
    assert straight.groups_seen and len(straight.groups_seen) == 3 * 2
    cut = Trainer(tiny_cfg(tiny_model, tmp_path / "b", verifier_path, **(kw | {"max_steps": 2})), db)
    cut.run()
    resumed = Trainer(tiny_cfg(tiny_model, tmp_path / "b", verifier_path, **kw), db, run_id=cut.run_id)
    assert resumed.resume() == 2
    assert resumed.groups_seen == cut.groups_seen and resumed.eval_skills == cut.eval_skills
    resumed.run()

    def step3_tasks(run_id: int) -> list[int]:
        flt = store.trajectories.TrajectoryFilter(run_id=run_id, split="train", step_min=3, step_max=3)
        return [
            r["task_id"]
            for r in store.trajectories.page_trajectories(db, flt, limit=100, descending=False).rows
        ]

    assert step3_tasks(resumed.run_id) == step3_tasks(straight.run_id) and step3_tasks(straight.run_id)
