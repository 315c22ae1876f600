"""The command line on bad input: a clear error naming file and line, exit 2, and no run left behind."""

import json

import pytest

import store
from workbench.cli import main


def test_unknown_config_key_is_reported_and_no_run_created(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: smollm2-135m\nlearning_rat: 1e-5\n")
    db = tmp_path / "wb.db"
    assert main(["train", str(cfg), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "c.yaml:2: unknown key 'learning_rat'; did you mean 'learning_rate'" in err
    assert store.runs.list_runs(store.open_db(db)) == []


def test_bad_tasks_file_is_reported_before_a_run_exists(tmp_path, capsys):
    tasks = tmp_path / "t.jsonl"
    good = {"prompt": "Weather in Oslo?", "expected_tool": "weather.get", "expected_args": {"city": "Oslo", "day": "Monday"}}
    tasks.write_text(json.dumps(good) + "\n" + '{"prompt": "x", "expected_tool": 3}\n')
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"tasks: {tasks}\n")
    db = tmp_path / "wb.db"
    assert main(["train", str(cfg), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "t.jsonl:2" in err and "expected_tool" in err
    assert store.runs.list_runs(store.open_db(db)) == []


def test_init_writes_a_starter_project_that_loads(tmp_path, capsys):
    d = tmp_path / "proj"
    assert main(["init", str(d)]) == 0
    assert {p.name for p in d.iterdir()} == {"tasks.jsonl", "held_out.jsonl", "verifier.py", "config.yaml"}
    import os

    from workbench.config import load_config
    from workbench.preflight import check_sources

    cwd = os.getcwd()
    os.chdir(d)  # the starter config's paths are relative to its folder
    try:
        cfg = load_config("config.yaml")
        check_sources(cfg)
    finally:
        os.chdir(cwd)
    # The starter trains on its own files and scores with the verifier.py it wrote: the demo's verifier.
    assert (cfg.tasks, cfg.held_out_eval, cfg.reward) == ("tasks.jsonl", "held_out.jsonl", "verifier.py")
    from workbench.cli import _demo_config_path
    from workbench.verifiers import builtin_verifier_code

    demo = load_config(str(_demo_config_path()))
    assert (d / "verifier.py").read_text() == builtin_verifier_code(demo.reward)
    from workbench.tasks import load_task_source

    ids = [t.id for t in load_task_source(d / "held_out.jsonl", "held_out")]  # the demo's validation split
    assert ids == [t.id for t in load_task_source(demo.held_out_eval, "held_out")]


def test_starter_config_replaces_keys_whatever_the_demos_values():
    from workbench.cli import starter_config

    text, reward, validation = starter_config('name: demo\ntasks: builtin:other\nheld_out_eval: validation_wide\n'
                                              'reward: "tool_call_gated"  # quoted\nlora:\n  reward: x\nseed: 0\n')
    assert (reward, validation) == ("tool_call_gated", "validation_wide")
    assert text == ("name: demo\ntasks: tasks.jsonl\nheld_out_eval: held_out.jsonl\nreward: verifier.py\n"
                    "lora:\n  reward: x\nseed: 0\n")  # only top-level keys are replaced
    with pytest.raises(ValueError, match="'reward:'"):
        starter_config("tasks: a\nheld_out_eval: b\nreward: x\nreward: y\n")
