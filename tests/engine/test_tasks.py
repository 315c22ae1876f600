"""Task loading (strict, every bad line reported) and the built-in calendar family (deterministic, split)."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from workbench.domains.calendar import (
    BUILTIN_TOOLS,
    CITIES,
    DANGEROUS_TOOLS,
    NAMES,
    REMINDERS,
    SUBJECTS,
    TEMPLATES,
    WEEKDAYS,
    builtin_multi_turn_tasks,
    builtin_tasks,
)
from workbench.tasks import TaskFileError, load_task_source, load_tasks, task_to_line, write_builtin_jsonl

GOOD = {
    "prompt": "Book Sam on Monday at 14:00",
    "expected_tool": "calendar.create_event",
    "expected_args": {"attendee": "Sam", "day": "Monday", "time": "14:00"},
}


def _write(tmp_path, lines):
    p = tmp_path / "mytasks.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


def test_load_good_file_ids_split_and_blank_lines(tmp_path):
    custom_tools = [
        {
            "type": "function",
            "function": {
                "name": "shop.buy",
                "parameters": {
                    "type": "object",
                    "properties": {"item": {"type": "string"}},
                    "required": ["item"],
                },
            },
        }
    ]
    p = _write(
        tmp_path,
        [
            GOOD,
            "",
            "   ",
            {**GOOD, "id": "t-7", "split": "held_out"},
            {
                "prompt": "Buy milk",
                "expected_tool": "shop.buy",
                "expected_args": {"item": "milk"},
                "tools": custom_tools,
            },
        ],
    )
    tasks = load_tasks(p)
    assert [t.id for t in tasks] == ["mytasks:1", "t-7", "mytasks:5"]
    assert tasks[0].tools is None and tasks[0].dataset == "mytasks" and tasks[0].split == "train"
    assert tasks[2].tools == [custom_tools[0]["function"]]  # OpenAI-style spec unwrapped
    assert [t.id for t in load_tasks(p, split="held_out")] == ["t-7"]


def test_every_bad_line_reported_with_file_line_and_field(tmp_path):
    p = _write(
        tmp_path,
        [
            GOOD,
            "{not json",
            {"prompt": "x", "expected_args": {}},
            {**GOOD, "expected_args": ["Sam"]},
            {**GOOD, "expected_tool": "calendar.create_evnt"},
            {**GOOD, "expected_arg": {}},
            {**GOOD, "tools": [{"name": "a.b"}]},
            "[1, 2]",
            {**GOOD, "expected_args": {"attendee": "Sam", "day": "Monday", "time": "14:00", "room": "4"}},
            {**GOOD, "id": "dup"},
            {**GOOD, "id": "dup"},
        ],
    )
    with pytest.raises(TaskFileError) as ei:
        load_tasks(p)
    err = ei.value
    by_line = {}
    for path, line, field, reason in err.errors:
        assert path == str(p)
        by_line.setdefault(line, []).append((field, reason))
    assert 1 not in by_line and 10 not in by_line
    assert by_line[2][0][1].startswith("bad JSON")
    assert ("expected_tool", "missing field") in by_line[3]
    assert by_line[4][0][0] == "expected_args" and "must be an object" in by_line[4][0][1]
    assert "did you mean 'calendar.create_event'" in by_line[5][0][1]
    assert any(f == "expected_arg" and "did you mean 'expected_args'" in r for f, r in by_line[6])
    assert any(f == "expected_tool" and "this line's tools" in r for f, r in by_line[7])
    assert "expected an object" in by_line[8][0][1]
    assert "'room' is not a parameter" in by_line[9][0][1]
    assert "duplicate id 'dup' (first on line 10)" in by_line[11][0][1]
    text = str(err)
    assert f"{p}:2: -: bad JSON" in text and f"{p}:5: expected_tool:" in text


def test_text_the_tokenizer_cannot_encode_is_refused_at_load_with_file_line_and_field(tmp_path):
    # JSON's \\u escapes let a lone surrogate through json.loads; UTF-8 (and so every tokenizer) refuses it
    p = _write(
        tmp_path,
        [
            GOOD,
            {**GOOD, "prompt": "Book Sam \ud800 on Monday"},
            {**GOOD, "messages": [{"role": "user", "content": "ok"}, {"role": "tool", "content": "x\udfff"}]},
            {**GOOD, "expected_args": {"attendee": "S\udc00m", "day": "Monday", "time": "14:00"}},
        ],
    )
    with pytest.raises(TaskFileError) as ei:
        load_tasks(p)
    where = {(line, field) for _, line, field, reason in ei.value.errors if "cannot encode" in reason}
    assert where == {(2, "prompt"), (3, "messages[1].content"), (4, "expected_args.attendee")}
    text = str(ei.value)
    text.encode("utf-8")  # the message itself prints (the character is named escaped)
    assert f"{p}:2: prompt: text the tokenizer cannot encode ('\\ud800' at character 9" in text


def test_error_message_lists_first_20(tmp_path):
    p = _write(tmp_path, ["{"] * 25)
    with pytest.raises(TaskFileError) as ei:
        load_tasks(p)
    assert len(ei.value.errors) == 25
    assert (
        "... and 5 more" in str(ei.value) and f"{p}:20:" in str(ei.value) and f"{p}:21:" not in str(ei.value)
    )


def test_builtin_sizes_deterministic_and_well_formed():
    train, held = builtin_tasks("train"), builtin_tasks("held_out")
    assert len(train) == 2000 and len(held) == 60
    assert [t.to_dict() for t in builtin_tasks()] == [t.to_dict() for t in train + held]
    tool_names = {s["name"] for s in BUILTIN_TOOLS}
    assert tool_names >= DANGEROUS_TOOLS
    for t in train + held:
        assert t.dataset == "calendar" and t.expected_tool in tool_names - DANGEROUS_TOOLS
        if "day" in t.expected_args:
            assert t.expected_args["day"] in WEEKDAYS
        if "time" in t.expected_args:
            assert re.fullmatch(r"\d\d:\d\d", t.expected_args["time"])
        if "tomorrow" in t.prompt:
            today = WEEKDAYS.index(t.prompt.split()[2].rstrip("."))
            ahead = 2 if "day after tomorrow" in t.prompt else 1
            assert t.expected_args["day"] == WEEKDAYS[(today + ahead) % 7]
    assert len({t.prompt for t in train + held}) == 2060
    assert len({t.id for t in train + held}) == 2060
    with pytest.raises(ValueError):
        builtin_tasks("dev")


def _digest(tasks):
    # The content a model sees and is judged on; `template` (the cluster label added later) is metadata.
    lines = [{k: v for k, v in task_to_line(t).items() if k != "template"} for t in tasks]
    return hashlib.sha256(
        "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines).encode()
    ).hexdigest()


def test_held_out_tasks_are_pinned():
    # Every reported held-out number is on exactly these tasks: a change here makes old and new runs incomparable.
    held = builtin_tasks("held_out")
    assert (
        len(held) == 60
        and _digest(held) == "738de2f49036ca1ae4c7102c354c15c2d1990d203cc39f6896e96859129561ea"
    )
    mt_held = [t for t in builtin_multi_turn_tasks() if t.split == "held_out"]
    assert (
        len(mt_held) == 4
        and _digest(mt_held) == "a73edfd3c2691c2ba4295321a546bdf9ddce7aadf07138304bd56b285c9a1112"
    )


def test_builtin_splits_are_disjoint_in_prompts_entities_and_templates():
    train, held = builtin_tasks("train"), builtin_tasks("held_out")
    assert not {t.prompt for t in train} & {t.prompt for t in held}
    train_text = "\n".join(t.prompt for t in train)
    for table in (NAMES, CITIES, SUBJECTS, REMINDERS):
        assert not set(table["train"]) & set(table["held_out"])
        for entity in table["held_out"]:
            assert not re.search(rf"\b{re.escape(entity)}\b", train_text), entity
    for by_split in TEMPLATES.values():
        assert not set(by_split["train"]) & set(by_split["held_out"])
    assert not re.search(r"\bRobin\b", train_text + "".join(t.prompt for t in held))  # harness example name


def test_builtin_training_phrasings_do_not_all_carry_the_tools_keyword():
    # A keyword-only training set teaches the keyword: each tool also has phrasings without it.
    for tool, keyword in (
        ("calendar.cancel_event", "cancel"),
        ("email.send", "email"),
        ("reminders.create", "remind"),
        ("weather.get", "weather"),
    ):
        assert any(keyword not in t.lower() for t in TEMPLATES[tool]["train"]), tool


def test_write_builtin_jsonl_round_trips(tmp_path):
    p = tmp_path / "calendar.jsonl"
    assert write_builtin_jsonl(p) == 2060
    assert [t.to_dict() for t in load_tasks(p)] == [t.to_dict() for t in builtin_tasks()]


def test_load_task_source_builtins_and_files(tmp_path):
    assert len(load_task_source("builtin:calendar", "train")) == 2000
    assert [t.id for t in load_task_source("tool_call_eval", "train")] == [
        t.id for t in builtin_tasks("held_out")
    ]
    mt_train, mt_held = (
        load_task_source("builtin:calendar_mt", "train"),
        load_task_source("builtin:calendar_mt", "held_out"),
    )
    assert mt_train and mt_held and all(t.expected_state is not None for t in mt_train + mt_held)
    plain = _write(tmp_path, [GOOD, GOOD])  # no split fields: the file is used whole for any role
    assert len(load_task_source(str(plain), "held_out")) == 2
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        json.dumps({**GOOD, "split": "train"}) + "\n" + json.dumps({**GOOD, "split": "held_out"}) + "\n"
    )
    assert [t.split for t in load_task_source(mixed, "held_out")] == ["held_out"]
    with pytest.raises(ValueError, match="no tasks with split 'test'"):
        load_task_source(mixed, "test")
    with pytest.raises(FileNotFoundError, match="did you mean 'tool_call_eval'"):
        load_task_source("tool_call_evl", "held_out")
