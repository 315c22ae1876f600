"""Three built-in splits with distinct roles, kept apart: test shares no phrasing, name, city, subject,
reminder or clock time with train or validation, and its content is frozen (a change must be deliberate)."""

import hashlib
import json
import re
from collections import Counter

import pytest

from workbench.domains.calendar import single_turn_tasks as st
from workbench.domains.calendar.single_turn_tasks import builtin_tasks
from workbench.skills import breakdown, task_skills
from workbench.types import Task

# Changing the test split invalidates every number reported on it: update this only on purpose, and say so.
TEST_SPLIT_SHA256 = "9a746843be48207319d6deee3f9fc50cd5e45a026a683cfc0029b8231bdf0d39"
# Validation too: every recipe decision in docs/results.md compares runs on these 60 tasks; a train-generator
# change must leave them as they are.
VALIDATION_SPLIT_SHA256 = "4043b26e3870859102b87f31efb1d2ac836154ac46f9ba3c9cda03af1ca2e442"
# The wider validation family (30 templates, 150 tasks): decisions made on it compare runs on exactly these.
VALIDATION_WIDE_SHA256 = "44a5d93278218e163e243d7eef851d30ba57c5ef15376662149d76edbe12620b"


def content_hash(tasks):
    rows = [(t.id, t.prompt, t.expected_tool, t.expected_args, t.initial_state, t.template) for t in tasks]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def test_the_test_and_validation_splits_are_frozen():
    assert content_hash(builtin_tasks("test")) == TEST_SPLIT_SHA256
    assert content_hash(builtin_tasks("held_out")) == VALIDATION_SPLIT_SHA256
    assert content_hash(builtin_tasks("validation_wide")) == VALIDATION_WIDE_SHA256


def test_splits_share_no_phrasing_or_entity():
    for table in (st.TEMPLATES[t] for t in st.TEMPLATES):
        assert not set(table["test"]) & (
            set(table["train"]) | set(table["held_out"]) | set(table["validation_wide"])
        )
        assert not set(table["validation_wide"]) & (set(table["train"]) | set(table["held_out"]))
    for table in (st.NAMES, st.CITIES, st.SUBJECTS, st.REMINDERS):
        assert not set(table["test"]) & (set(table["train"]) | set(table["held_out"]))
    assert not set(st.MINUTES["test"]) & (set(st.MINUTES["train"]) | set(st.MINUTES["held_out"]))
    times = {sp: {t.expected_args.get("time") for t in builtin_tasks(sp)} - {None} for sp in st.SPLITS}
    assert not times["test"] & (times["train"] | times["held_out"] | times["validation_wide"])
    prompts = {sp: {t.prompt for t in builtin_tasks(sp)} for sp in st.SPLITS}
    assert not prompts["test"] & (prompts["train"] | prompts["held_out"] | prompts["validation_wide"])
    assert not prompts["validation_wide"] & (prompts["train"] | prompts["held_out"])


def test_validation_wide_has_six_templates_a_tool_and_validations_entities():
    wide = builtin_tasks("validation_wide")
    assert len(wide) == 150 and {t.split for t in wide} == {"validation_wide"}
    per_template = Counter(t.template for t in wide)
    assert len(per_template) == 30 and set(per_template.values()) == {
        5
    }  # round-robin: no template weighs more
    assert all(len(st.TEMPLATES[tool]["validation_wide"]) == 6 for tool in st.TEMPLATES)
    for key, table in (
        ("attendee", st.NAMES),
        ("to", st.NAMES),
        ("city", st.CITIES),
        ("subject", st.SUBJECTS),
        ("text", st.REMINDERS),
    ):
        values = {t.expected_args[key] for t in wide if key in t.expected_args}
        assert values and values <= set(table["held_out"]), key
    times = [t.expected_args["time"] for t in wide if "time" in t.expected_args]
    lo, hi = st.HOURS["held_out"]
    assert all(lo <= int(x[:2]) <= hi and int(x[3:]) in st.MINUTES["held_out"] for x in times)
    from workbench.tasks import load_task_source

    assert [t.id for t in load_task_source("validation_wide", "held_out")] == [t.id for t in wide]


def test_test_is_only_given_by_name():
    assert {t.split for t in builtin_tasks()} == {"train", "held_out"}
    assert [t.id for t in builtin_tasks("validation")] == [t.id for t in builtin_tasks("held_out")]
    assert len(builtin_tasks("test")) == st.SIZES["test"]


def test_every_generated_task_names_its_template():
    for sp in st.SPLITS:
        tasks = builtin_tasks(sp)
        assert all(t.template and t.template.startswith(f"{t.expected_tool}:{sp}:") for t in tasks)


def test_skills_read_the_argument_kinds_off_the_prompt():
    def skills(prompt, tool="calendar.create_event", args=None):
        return set(task_skills(Task("x", prompt, tool, args or {})))

    assert {"time_12h"} <= skills("Meet Bo at 2:45 PM on Friday.")
    assert {"time_12h"} <= skills("Meet Bo at 8am.")
    assert "time_24h" in skills("Meet Bo at 14:00.") and "time_12h" not in skills("Meet Bo at 14:00.")
    assert "time_words" in skills("Meet Bo at half past four in the afternoon.")
    assert "relative_day" in skills("Today is Monday. Meet Bo tomorrow at 9.")
    assert "name" in skills("Meet Bo.", args={"attendee": "Bo"})
    assert "no_call" in skills("Tell me a joke.", tool=None)
    every = [s for t in builtin_tasks("test") for s in task_skills(t)]
    for kind in ("time_12h", "time_24h", "time_words", "relative_day", "name"):
        assert kind in every, kind  # the test split exercises every argument kind


def test_breakdown_counts_each_skill_over_the_tasks_it_appears_in():
    tasks = [
        Task("a", "Meet Bo at 2 PM.", "calendar.create_event", {"attendee": "Bo"}),
        Task("b", "Meet Al at 14:00.", "calendar.create_event", {"attendee": "Al"}),
        Task("c", "Weather in Oslo?", "weather.get", {"city": "Oslo"}),
    ]
    got = breakdown(tasks, {"a": 1.0, "b": 0.0, "c": 1.0})
    assert got["tool:calendar.create_event"] == {"n": 2, "success": 0.5}
    assert got["time_12h"] == {"n": 1, "success": 1.0} and got["time_24h"] == {"n": 1, "success": 0.0}
    assert got["name"]["n"] == 2 and "tool:weather.get" in got
    assert not re.search("no_call", json.dumps(got))


# ---- validation and test for a run's config (workbench.splits) -------------------------------------------


def _write(path, tasks):
    import json as _json

    path.write_text("\n".join(_json.dumps(t) for t in tasks) + "\n")
    return str(path)


def _line(i, split=None):
    row = {
        "id": f"u{i}",
        "prompt": f"Weather in Oslo on day {i}?",
        "expected_tool": "weather.get",
        "expected_args": {"city": "Oslo", "day": "Monday"},
    }
    return {**row, "split": split} if split else row


def test_builtin_validation_gets_the_builtin_test_split():
    from workbench.splits import resolve
    from workbench.tasks import load_task_source

    val, test, warnings = resolve("tool_call_eval", "auto", load_task_source("tool_call_eval", "held_out"))
    assert len(val) == 60 and [t.id for t in test] == [t.id for t in builtin_tasks("test")] and warnings == []
    assert resolve("tool_call_eval", "none", val)[1] == []


def test_one_user_file_is_split_by_task_hash_with_a_warning_that_states_the_ci(tmp_path):
    from workbench.splits import resolve
    from workbench.tasks import load_task_source

    path = _write(tmp_path / "mine.jsonl", [_line(i) for i in range(40)])
    every = load_task_source(path, "held_out")
    val, test, warnings = resolve(path, "auto", every)
    assert len(val) + len(test) == 40 and val and test
    assert not {t.id for t in val} & {t.id for t in test}
    # deterministic, whatever the file order
    again = resolve(
        _write(tmp_path / "rev.jsonl", [_line(i) for i in reversed(range(40))]),
        "auto",
        load_task_source(str(tmp_path / "rev.jsonl"), "held_out"),
    )
    assert {t.id for t in again[1]} == {t.id for t in test}
    assert any("split it by task hash" in w for w in warnings)
    assert any(f"validation split has {len(val)} tasks" in w and "95% CI is about ±" in w for w in warnings)


def test_tasks_marked_test_in_the_file_are_the_test_split(tmp_path):
    from workbench.splits import resolve
    from workbench.tasks import load_task_source

    path = _write(
        tmp_path / "mine.jsonl",
        [_line(i, "held_out") for i in range(60)] + [_line(100 + i, "test") for i in range(60)],
    )
    val, test, warnings = resolve(path, "auto", load_task_source(path, "held_out"))
    assert len(val) == 60 and {t.split for t in test} == {"test"} and len(test) == 60 and warnings == []


# ---- grpo_holdout: phrasings kept out of the SFT warm-up for GRPO ----------------------------------------


def test_grpo_holdout_keeps_a_share_of_each_tools_templates_out_of_sft():
    from workbench.splits import grpo_holdout

    train = builtin_tasks("train")
    sft, rl = grpo_holdout(train, 0.33)
    assert len(sft) + len(rl) == len(train) and not {t.id for t in sft} & {t.id for t in rl}
    for tool in st.TEMPLATES:
        held = {t.template for t in rl if t.expected_tool == tool}
        kept = {t.template for t in sft if t.expected_tool == tool}
        n = len(st.TEMPLATES[tool]["train"])
        assert held and kept and not held & kept  # every tool has phrasings on both sides, none on both
        assert len(held) == round(0.33 * n), tool
    # by hash, not by order: the same split from a shuffled list; share 0 gives everything to both stages
    assert {t.id for t in grpo_holdout(list(reversed(train)), 0.33)[1]} == {t.id for t in rl}
    assert grpo_holdout(train, 0.0) == (train, train)


def test_grpo_holdout_splits_tasks_without_templates_one_by_one():
    from workbench.splits import grpo_holdout

    tasks = [Task(f"t{i}", f"Weather in {i}?", "weather.get", {"city": str(i)}) for i in range(40)]
    sft, rl = grpo_holdout(tasks, 0.25)
    assert len(rl) == 10 and len(sft) == 30


@pytest.mark.parametrize("text", ["grpo_holdout: 1.0\nsft_steps: 10\n", "grpo_holdout: 0.3\n"])
def test_grpo_holdout_must_leave_sft_something_and_needs_a_warm_up(tmp_path, text):
    from workbench.config import ConfigError, load_config

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="grpo_holdout"):
        load_config(path)


# ---- grpo_skills: GRPO on the skills the warm-up left weakest ---------------------------------------------


def test_with_skills_keeps_the_tasks_exercising_a_skill_in_order():
    from workbench.skills import task_skills
    from workbench.splits import with_skills

    train = builtin_tasks("train")
    kept = with_skills(train, ["time_12h"])
    assert kept == [t for t in train if "time_12h" in task_skills(t)] and 0 < len(kept) < len(train)
    both = with_skills(train, ["time_12h", "tool:weather.get"])
    assert {t.expected_tool for t in both} == {"calendar.create_event", "reminders.create", "weather.get"}
    assert with_skills(train, []) == train
    with pytest.raises(ValueError, match="none of GRPO's 2000 training tasks exercises"):
        with_skills(train, ["tool:calendar.nope"])


@pytest.mark.parametrize(
    "text", ["grpo_skills: [time12h]\n", "grpo_skills: time_12h\n", "grpo_skills: ['tool:']\n"]
)
def test_grpo_skills_must_name_skills(tmp_path, text):
    from workbench.config import ConfigError, load_config

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="grpo_skills"):
        load_config(path)


def test_grpo_skills_round_trips_through_yaml(tmp_path):
    from workbench.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text("grpo_skills: [time_12h, 'tool:reminders.create']\n")
    cfg = load_config(path)
    assert cfg.grpo_skills == ["time_12h", "tool:reminders.create"]
    path.write_text(cfg.to_yaml())
    assert load_config(path).grpo_skills == cfg.grpo_skills


def test_train_refuses_grpo_skills_no_training_task_has_before_a_run_exists(tmp_path, capsys):
    from workbench.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("grpo_skills: [no_call]\n")  # the built-in train split always expects a call
    db = tmp_path / "wb.db"
    assert main(["train", str(cfg), "--db", str(db)]) != 0
    assert (
        "c.yaml: grpo_skills: none of GRPO's 2000 training tasks exercises any of ['no_call']"
        in capsys.readouterr().err
    )
    import store

    assert store.runs.list_runs(store.open_db(db)) == []  # refused before a run was made


def test_preflight_checks_grpo_skills_on_what_grpo_holdout_leaves_grpo(tmp_path):
    from workbench.config import ConfigError, config_from_dict
    from workbench.preflight import check_sources
    from workbench.splits import grpo_holdout

    tasks = [
        Task(
            f"w{i}",
            f"Weather in C{i}?",
            "weather.get",
            {"city": f"C{i}", "day": "Monday"},
            template=f"t{i % 4}",
        )
        for i in range(8)
    ]
    sft, rl = grpo_holdout(tasks, 0.5)
    sft_only = next(t.template for t in sft)  # a template GRPO never samples
    path = tmp_path / "tasks.jsonl"
    lines = [
        {
            "id": t.id,
            "prompt": t.prompt + (" At 3 PM." if t.template == sft_only else ""),
            "expected_tool": t.expected_tool,
            "expected_args": t.expected_args,
            "template": t.template,
        }
        for t in tasks
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    cfg = config_from_dict(
        {"tasks": str(path), "grpo_holdout": 0.5, "sft_steps": 1, "grpo_skills": ["time_12h"]}
    )
    with pytest.raises(ConfigError, match="none of GRPO's 4 training tasks exercises any of"):
        check_sources(cfg, "c.yaml")  # train has 12-hour tasks, but only on the warm-up's side
    check_sources(
        config_from_dict({"tasks": str(path), "sft_steps": 1, "grpo_skills": ["time_12h"]}), "c.yaml"
    )


# ---- sft_skill_weights: the warm-up's draws tilted towards weak skills ----------------------------------------


def test_weighted_by_skills_repeats_a_task_by_its_heaviest_weighted_skill():
    from workbench.splits import weighted_by_skills

    train = builtin_tasks("train")
    out = weighted_by_skills(train, {"time_12h": 2, "relative_day": 3})
    count = Counter(t.id for t in out)
    for t in train:
        kinds = set(task_skills(t))
        want = 3 if "relative_day" in kinds else 2 if "time_12h" in kinds else 1
        assert count[t.id] == want, t.prompt
    assert {t.id for t in out} == {t.id for t in train}  # nothing dropped
    assert weighted_by_skills(train, {}) == train
    with pytest.raises(
        ValueError, match=r"none of the warm-up's 2000 training tasks exercises \['no_call'\]"
    ):
        weighted_by_skills(train, {"time_12h": 2, "no_call": 1})  # one missing skill is enough to refuse


@pytest.mark.parametrize(
    "text, match",
    [
        ("sft_steps: 4\nsft_skill_weights: {time12h: 2}\n", "not a skill"),
        ("sft_steps: 4\nsft_skill_weights: {time_12h: 0}\n", "whole numbers from 1 to 100"),
        ("sft_steps: 4\nsft_skill_weights: {time_12h: 1000000000}\n", "whole numbers from 1 to 100"),
        ("sft_steps: 4\nsft_skill_weights: {time_12h: 1.5}\n", "sft_skill_weights must be"),
        ("sft_steps: 4\nsft_skill_weights: [time_12h]\n", "sft_skill_weights must be"),
        ("sft_skill_weights: {time_12h: 2}\n", "set sft_steps > 0"),
    ],
)
def test_sft_skill_weights_are_checked_with_the_config(tmp_path, text, match):
    from workbench.config import ConfigError, load_config

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_config(path)


def test_sft_skill_weights_round_trip_and_a_weight_no_task_has_is_refused_before_a_run(tmp_path, capsys):
    from workbench.cli import main
    from workbench.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text("sft_steps: 4\nsft_skill_weights: {time_12h: 2, 'tool:weather.get': 3}\n")
    cfg = load_config(path)
    assert cfg.sft_skill_weights == {"time_12h": 2, "tool:weather.get": 3}
    path.write_text(cfg.to_yaml())
    assert load_config(path).sft_skill_weights == cfg.sft_skill_weights
    path.write_text("sft_steps: 4\nsft_skill_weights: {no_call: 2}\n")
    db = tmp_path / "wb.db"
    assert main(["train", str(path), "--db", str(db)]) != 0
    assert (
        "c.yaml: sft_skill_weights: none of the warm-up's 2000 training tasks exercises ['no_call']"
        in capsys.readouterr().err
    )
    import store

    assert store.runs.list_runs(store.open_db(db)) == []


def test_sft_skill_weights_built_directly_are_checked_too():
    from workbench.config import Config, ConfigError

    for bad, match in (
        ([("time_12h", 2)], "a mapping"),
        ({1: 2}, "not a skill"),
        ({"time_12h": True}, "whole numbers"),
    ):
        with pytest.raises(ConfigError, match=match):
            Config(sft_steps=4, sft_skill_weights=bad)
