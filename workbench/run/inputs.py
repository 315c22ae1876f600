"""What a run is made of, read once: its tasks in their stages and splits (`prepare`), and its row (`new_run`).

`prepare` is what both the preflight check (`workbench train --check`, before a run exists) and the trainer
read, so the two can never disagree about which tasks a run trains, validates and tests on. `new_run` is
the one place a config becomes a run row, with the harness the environment will use stored beside it (the
TRL callback makes its own kind of run, from TRL's config: workbench/integrations/trl.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

from workbench.types import Task


@dataclass(frozen=True)
class RunInputs:
    """The run's tasks: all of train, the SFT warm-up's and GRPO's shares of it, validation and test (each
    capped at `eval_max_tasks`), and the warnings resolving the splits raised."""

    train: list[Task]
    sft: list[Task]
    rl: list[Task]
    validation: list[Task]
    test: list[Task]
    warnings: list[str] = field(default_factory=list)


def prepare(cfg: Any, path: str | None = None) -> RunInputs:
    """Load and split the config's tasks. Errors name the file (task files: file:line:field; split rules: the
    config's line, when `path`, the config file, is given)."""
    from workbench import splits
    from workbench.config import ConfigError, key_line
    from workbench.tasks import load_task_source

    train = load_task_source(cfg.tasks, "train")
    try:  # grpo_skills or sft_skill_weights that no task of its stage exercises: a config error
        sft, rl = splits.stage_tasks(train, cfg.grpo_holdout, cfg.grpo_skills, cfg.sft_skill_weights)
    except ValueError as e:
        raise ConfigError(f"{path or '<config>'}: {e}") from None
    if cfg.sft_steps > 0 and not sft:  # else the run would fail inside the warm-up, after loading the model
        raise ConfigError(
            f"{key_line(path, 'sft_steps')}: sft_steps: {cfg.sft_steps} but no training task can be "
            "imitated (multi-step tasks have no gold reply): add single-call tasks or set sft_steps: 0"
        )
    held_out = load_task_source(cfg.held_out_eval, "held_out")
    try:
        validation, test, warnings = splits.resolve(cfg.held_out_eval, cfg.test_tasks, held_out)
    except ValueError as e:
        raise ConfigError(f"{key_line(path, 'test_tasks')}: {e}") from None
    if cfg.eval_max_tasks is not None:  # a cost cap on each split (the first N: deterministic)
        validation, test = validation[: cfg.eval_max_tasks], test[: cfg.eval_max_tasks]
    return RunInputs(train, sft, rl, validation, test, list(warnings))


def new_run(db: sqlite_utils.Database, cfg: Any) -> int:
    """A new run row for this config, with its harness (the system prompt, example and prefill the
    environment will put around every request: part of what was trained)."""
    import store
    from workbench.envs.harness import harness_from_config

    return store.runs.create_run(
        db,
        name=cfg.name,
        model=cfg.model,
        config=cfg.to_dict(),
        harness=harness_from_config(cfg.harness).to_dict(),
    )
