"""One reading of a run's inputs (`prepare`) for the preflight check and the trainer; one way to make a run
(`new_run`), which stores the harness whichever command made it."""

from __future__ import annotations

import pytest

import store
from workbench.config import ConfigError, config_from_dict
from workbench.run.inputs import new_run, prepare


def test_prepare_splits_caps_and_stages_as_the_trainer_reads_them():
    cfg = config_from_dict(
        {
            "tasks": "builtin:calendar",
            "held_out_eval": "validation_wide",
            "eval_max_tasks": 7,
            "grpo_holdout": 0.25,
            "sft_steps": 4,
        }
    )
    inputs = prepare(cfg)
    assert len(inputs.validation) == 7 and len(inputs.test) <= 7
    assert inputs.train and set(map(id, inputs.rl)) <= set(map(id, inputs.train))
    assert len(inputs.rl) < len(inputs.train)  # grpo_holdout kept a share out of SFT, for GRPO alone
    assert not {t.id for t in inputs.validation} & {t.id for t in inputs.train}


def test_a_split_rule_error_names_the_config_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("tasks: builtin:calendar\ngrpo_skills: [multi_step]\nsft_steps: 2\n")
    from workbench.config import load_config

    cfg = load_config(path)  # a known skill name: only reading the tasks shows that no train task has it
    with pytest.raises(ConfigError, match=str(path)):
        prepare(cfg, str(path))


def test_every_new_run_stores_its_harness(tmp_path):
    db = store.open_db(tmp_path / "wb.db")
    cfg = config_from_dict({"name": "h"})
    run = store.runs.get_run(db, new_run(db, cfg))
    assert run["harness"] and run["harness"]["system_prompt"]


def test_workbench_train_makes_its_run_with_the_harness(tmp_path):
    from workbench.preflight import run_for_args

    path = tmp_path / "c.yaml"
    path.write_text("name: cli\ntasks: builtin:calendar\nmax_steps: 1\n")
    run_id = run_for_args(str(tmp_path / "wb.db"), None, str(path))
    db = store.open_db(tmp_path / "wb.db")
    assert store.runs.get_run(db, run_id)["harness"]  # before, only a run the trainer made itself had it


def test_an_sft_warm_up_with_nothing_to_imitate_is_refused_before_a_run(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("tasks: builtin:calendar_agent\nenv: multi_turn\nsft_steps: 5\n")
    from workbench.config import load_config

    with pytest.raises(ConfigError, match=r"c\.yaml:3: sft_steps"):
        prepare(load_config(path), str(path))
