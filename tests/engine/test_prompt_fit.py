"""A prompt longer than the model's context is refused when the trainer starts (the first place with a
tokenizer), naming the task's file and line, before anything is trained on it."""

from __future__ import annotations

import json
import time

import pytest

import store
from workbench.config import config_from_dict
from workbench.envs import env_for_config
from workbench.prompt_fit import check_prompts_fit, model_context
from workbench.tasks import TaskFileError, load_task_source
from workbench.trainer import Trainer

GOOD = {
    "prompt": "Book Sam on Monday at 14:00",
    "expected_tool": "calendar.create_event",
    "expected_args": {"attendee": "Sam", "day": "Monday", "time": "14:00"},
}


def _cfg(tiny_model, tmp_path, tasks: str, **kw):
    return config_from_dict(
        dict(
            model=str(tiny_model),
            tasks=tasks,
            num_generations_per_prompt=2,
            prompts_per_step=1,
            max_completion_length=4,
            max_steps=1,
            eval_max_tasks=1,
            output_dir=str(tmp_path),
            lora={"r": 4, "alpha": 8},
            seed=1,
            **kw,
        )
    )


def test_a_prompt_longer_than_the_context_is_refused_at_the_trainers_start_with_file_and_line(
    tiny_model, tmp_path
):
    path = tmp_path / "long.jsonl"
    lines = [GOOD, {**GOOD, "id": "long", "prompt": "Book Sam on Monday at 14:00 " + "please " * 1000}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    db = store.open_db(tmp_path / "wb.db")
    cfg = _cfg(tiny_model, tmp_path, str(path))
    with pytest.raises(TaskFileError) as ei:
        Trainer(cfg, db)
    msg = str(ei.value)
    assert f"{path}:2: prompt: " in msg and "context is 4096 positions" in msg
    assert f"{path}:1:" not in msg  # the short one fits
    assert store.trajectories.count_trajectories(db, 1) == 0  # nothing was rolled out or trained


def test_prompts_that_fit_pass_and_a_cut_completion_is_a_warning(tiny_policy, tiny_model, tmp_path):
    cfg = _cfg(tiny_model, tmp_path, "builtin:calendar")
    env = env_for_config(cfg)
    tasks = load_task_source("builtin:calendar", "train")
    context = model_context(tiny_policy.model)
    assert context == 4096  # the tiny model's (workbench.testing)
    t0 = time.perf_counter()
    assert (
        check_prompts_fit(
            env, tiny_policy.tokenizer, tasks, context, sources=["builtin:calendar"], max_completion_length=4
        )
        == []
    )
    assert time.perf_counter() - t0 < 30  # every task rendered once: cheap next to loading a model
    warn = check_prompts_fit(
        env,
        tiny_policy.tokenizer,
        tasks[:3],
        context,
        sources=["builtin:calendar"],
        max_completion_length=4000,
    )
    assert len(warn) == 1 and warn[0].startswith("3 task(s) leave fewer than max_completion_length (4000)")
    assert (
        check_prompts_fit(env, tiny_policy.tokenizer, tasks, None, sources=[], max_completion_length=4) == []
    )
