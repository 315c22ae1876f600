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
    assert not db.exists()  # checked before the database is opened: no empty .db left behind


def test_bad_tasks_file_is_reported_before_a_run_exists(tmp_path, capsys):
    tasks = tmp_path / "t.jsonl"
    good = {
        "prompt": "Weather in Oslo?",
        "expected_tool": "weather.get",
        "expected_args": {"city": "Oslo", "day": "Monday"},
    }
    tasks.write_text(json.dumps(good) + "\n" + '{"prompt": "x", "expected_tool": 3}\n')
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"tasks: {tasks}\n")
    db = tmp_path / "wb.db"
    assert main(["train", str(cfg), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "t.jsonl:2" in err and "expected_tool" in err
    assert not db.exists()
    db.write_bytes(b"")  # an existing database gets no run either
    store.open_db(db).close()
    assert main(["train", str(cfg), "--db", str(db)]) == 2
    assert store.runs.list_runs(store.open_db(db)) == []


def test_missing_model_folder_and_resume_of_a_missing_database_leave_no_file(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: x\nmodel: ./no-such-model\n")
    db = tmp_path / "wb.db"
    assert main(["train", str(cfg), "--db", str(db)]) == 2
    assert f"{cfg}:2: model: './no-such-model': no such folder or file" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    cfg.write_text(f"name: x\nmodel: {tmp_path / 'empty'}\n")
    assert main(["train", str(cfg), "--db", str(db)]) == 2
    assert f"{cfg}:2: model: '{tmp_path / 'empty'}': a folder but not an HF model" in capsys.readouterr().err
    assert main(["train", "--resume", "1", "--db", str(db)]) == 2
    assert "no such database" in capsys.readouterr().err
    assert not db.exists()


def test_check_validates_config_tasks_and_verifier_then_exits_without_a_database(tmp_path, capsys):
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(
        json.dumps(
            {
                "prompt": "Weather in Oslo?",
                "expected_tool": "weather.get",
                "expected_args": {"city": "Oslo", "day": "Monday"},
            }
        )
        + "\n"
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"name: x\ntasks: {tasks}\nheld_out_eval: tool_call_eval\nreward: tool_call_gated\nsft_steps: 3\n"
    )
    db = tmp_path / "wb.db"
    assert main(["train", str(cfg), "--check", "--max-steps", "7", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "ok: 1 training tasks, 60 validation and 80 test tasks, verifier tool_call_gated" in out
    assert "3 SFT steps then 7 GRPO steps" in out and not db.exists()
    verifier = tmp_path / "v.py"
    verifier.write_text("def reward(output, task):\n    return 1.0 +\n")  # a syntax error
    cfg.write_text(f"tasks: {tasks}\nreward: {verifier}\n")
    assert main(["train", str(cfg), "--check", "--db", str(db)]) == 2
    assert f"{verifier}:2: SyntaxError" in capsys.readouterr().err and not db.exists()
    assert main(["train", "--check", "--resume", "1", "--db", str(db)]) == 2
    assert "not to --resume" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", str(cfg), "--check", "--max-steps", "0", "--db", str(db)])
    assert "--max-steps" in capsys.readouterr().err


def test_max_steps_replaces_the_configs_in_the_stored_run(tmp_path, monkeypatch, capsys):
    import workbench.worker

    seen = []
    monkeypatch.setattr(
        workbench.worker, "run_worker", lambda db, run_id, log: seen.append(run_id) or "finished"
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: x\nmax_steps: 60\n")
    db = tmp_path / "wb.db"
    assert main(["train", str(cfg), "--max-steps", "3", "--db", str(db)]) == 0
    (run,) = store.runs.list_runs(store.open_db(db))
    assert (
        seen == [run["id"]] and store.runs.get_run(store.open_db(db), run["id"])["config"]["max_steps"] == 3
    )
    assert main(["train", "--resume", str(run["id"]), "--max-steps", "5", "--db", str(db)]) == 2


def test_init_writes_a_small_starter_of_its_own_that_checks(tmp_path, capsys):
    import yaml

    d = tmp_path / "proj"
    assert main(["init", str(d)]) == 0
    assert {p.name for p in d.iterdir()} == {"tasks.jsonl", "held_out.jsonl", "verifier.py", "config.yaml"}
    out = capsys.readouterr().out
    assert "train --check config.yaml" in out.splitlines()[-1]
    text = (d / "config.yaml").read_text()
    raw = yaml.safe_load(text)
    assert raw["name"] == "proj" and "demo" not in text and "session" not in text
    assert raw["sft_steps"] <= 50 and raw["max_steps"] <= 8 and len(text.splitlines()) <= 40
    import os

    from workbench.config import load_config
    from workbench.preflight import check_sources

    cwd = os.getcwd()
    os.chdir(d)  # the starter config's paths are relative to its folder
    try:
        cfg = load_config("config.yaml")
        ok = check_sources(cfg)
        assert main(["train", "--check", "config.yaml"]) == 0 and not (d / "workbench.db").exists()
    finally:
        os.chdir(cwd)
    # The starter trains on its own files and scores with the verifier.py it wrote.
    assert (cfg.tasks, cfg.held_out_eval, cfg.reward) == ("tasks.jsonl", "held_out.jsonl", "verifier.py")
    from workbench.cli import STARTER_REWARD
    from workbench.verifiers import builtin_verifier_code

    assert (d / "verifier.py").read_text() == builtin_verifier_code(STARTER_REWARD)
    # Tens of tasks, not thousands: every train phrasing template a couple of times; validation one of each
    # validation_wide template; test the built-in test split's (phrasings neither of the others uses).
    from workbench.tasks import load_task_source

    train = load_task_source(d / "tasks.jsonl", "train")
    assert 100 <= ok.train == len(train) <= 300 and len(train) == len({t.id for t in train})
    assert {t.template for t in train} == {t.template for t in load_task_source("train", "train")}
    assert (ok.validation, ok.test) == (30, 20)
    held = [json.loads(line) for line in (d / "held_out.jsonl").read_text().splitlines()]
    assert {h["split"] for h in held} == {"held_out", "test"}
    test_templates = {h["template"] for h in held if h["split"] == "test"}
    assert not test_templates & {h["template"] for h in held if h["split"] == "held_out"}
    assert main(["init", str(d)]) == 0 and "nothing to do" in capsys.readouterr().out  # never overwrites


@pytest.mark.parametrize("name", ["proj", "my project", "yes", "123", "a: b", "#x"])
def test_starter_config_names_the_run_after_its_folder(name):
    import yaml

    from workbench.cli import starter_config

    assert yaml.safe_load(starter_config(name))["name"] == name


def test_printed_commands_use_the_workbench_that_works_from_where_they_are_typed(tmp_path, monkeypatch):
    import sysconfig
    from pathlib import Path

    from workbench.invocation import workbench_command

    scripts = Path(sysconfig.get_path("scripts"))
    assert (scripts / "workbench").exists()  # the installed console script (pip install -e)
    monkeypatch.setenv("PATH", str(scripts))
    assert workbench_command() == "workbench"  # the venv is active: the bare name is this installation
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # not active, as after `make demo` in a fresh shell
    assert workbench_command(tmp_path) == str((scripts / "workbench").absolute())
    assert workbench_command(scripts.parent.parent) == f"{scripts.parent.name}/{scripts.name}/workbench"


def test_demo_takes_a_model_with_a_packaged_recipe_and_names_the_choices_otherwise(tmp_path, capsys):
    from workbench.cli import main
    from workbench.cli.ui import DEMO_RECIPES, demo_config_path
    from workbench.config import load_config

    default = load_config(demo_config_path())
    assert (default.model, default.name) == ("smollm2-135m", "demo")
    qwen = load_config(demo_config_path("qwen2.5-coder-0.5b"))
    assert qwen.model == "qwen2.5-coder-0.5b" and qwen.tool_format == "native"
    assert qwen.name != default.name  # each model's demo re-attaches to its own run
    assert {load_config(demo_config_path(m)).model for m in DEMO_RECIPES} == set(DEMO_RECIPES)
    code = main(["demo", "--model", "llama-7b", "--db", str(tmp_path / "wb.db"), "--headless"])
    err = capsys.readouterr().err
    assert code != 0 and "llama-7b" in err and "qwen2.5-coder-0.5b" in err
    assert not (tmp_path / "wb.db").exists()  # refused before anything was created
