"""`workbench export`: stored rows, filters, and the OpenAI tool-calling dataset read back through a chat template.

The stored rows are made by the real environments (the JSON harness, single- and multi-turn) and written with
the trainer's row shape, so the export sees what a run stores.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import store
from tests.hermes_template import hermes_tokenizer
from workbench.cli import main
from workbench.config import Config
from workbench.domains.calendar import BUILTIN_TOOLS, MULTI_TURN_TOOLS
from workbench.envs import MultiTurnEnv, SingleTurnEnv
from workbench.envs.harness import Harness
from workbench.export import ExportError, ExportFilter, export_trajectories
from workbench.tasks import load_task_source, openai_tool_spec
from workbench.trainer import task_row
from workbench.types import Task

HARNESS_TEXT = "Reply with one JSON object only"  # in the JSON harness's system prompt


def _row(run_id: int, task_id: int, out, *, reward: float, step: int = 1, split: str = "train") -> dict:
    """A trajectory row as the trainer writes it (workbench.trainer.Trainer._trajectory_row)."""
    calls = [dataclasses.replace(c, id=c.id or f"call_{i}").to_dict() for i, c in enumerate(out.tool_calls)]
    return {
        "run_id": run_id,
        "step": step,
        "split": split,
        "task_id": task_id,
        "messages": out.messages,
        "completion": out.text,
        "tool_calls": calls,
        "reward": reward,
    }


def _episode(env, task: Task, replies: list[str]):
    ep = env.start(task)
    for r in replies:
        ep.step(r.removeprefix(ep.prefill))  # the engine generates what follows the prefill
    return ep.output()


@pytest.fixture
def db_with_runs(tmp_path: Path):
    """Run 1: the JSON harness (a right call, a non-call, a multi-turn episode). Run 2: native format."""
    db = store.open_db(tmp_path / "wb.db")
    harness = Harness()
    json_run = store.runs.create_run(
        db, name="json", model="m", config=Config().to_dict(), harness=harness.to_dict()
    )
    task = load_task_source("builtin:calendar", "train")[0]
    multi = Task(
        id="m1",
        prompt="What is on Friday?",
        expected_tool="calendar.list_events",
        expected_args={"day": "Friday"},
        dataset="custom",
        tools=MULTI_TURN_TOOLS,
    )
    ids = store.tasks.add_tasks(db, [task_row(task), task_row(multi)])
    tid, mid = ids[task_row(task)["key"]], ids[task_row(multi)["key"]]
    right = json.dumps({"tool": task.expected_tool, "args": task.expected_args})
    rows = [
        _row(json_run, tid, _episode(SingleTurnEnv(harness), task, [right]), reward=1.0),
        _row(
            json_run,
            tid,
            _episode(SingleTurnEnv(harness), task, ['{"tool": "calendar.create_event", oops']),
            reward=-1.0,
        ),
        _row(
            json_run,
            mid,
            _episode(
                MultiTurnEnv(harness),
                multi,
                [
                    '{"tool": "calendar.list_events", "args": {"day": "Friday"}}',
                    '{"tool": "finish", "args": {"answer": "Nothing on Friday."}}',
                ],
            ),
            reward=0.8,
            split="held_out",
        ),
        _row(json_run, tid, _episode(SingleTurnEnv(harness), task, [right]), reward=1.0, step=2),
    ]
    traj = store.trajectories.insert_trajectories(db, rows)
    store.trajectories.mark_superseded(db, json_run, after_step=1)  # step 2 was redone after a resume
    store.labels.add_label(db, traj[0], "bad")
    store.labels.add_label(db, traj[0], "good")  # the newest verdict counts
    store.labels.add_label(db, traj[1], "bad")
    native_cfg = Config().to_dict() | {"tool_format": "native"}
    native_run = store.runs.create_run(
        db, name="native", model="m", config=native_cfg, harness=harness.to_dict()
    )
    call = {
        "id": "c00100000",
        "type": "function",
        "function": {"name": "weather.get", "arguments": {"city": "Paris"}},
    }
    native_msgs = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    store.trajectories.insert_trajectories(
        db,
        [
            {
                "run_id": native_run,
                "step": 1,
                "split": "train",
                "task_id": tid,
                "messages": native_msgs,
                "completion": "",
                "tool_calls": [call],
                "reward": 1.0,
            }
        ],
    )
    return db, json_run, native_run, task


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_openai_rows_drop_the_harness_and_carry_structured_calls(db_with_runs, tmp_path: Path) -> None:
    db, run, _, task = db_with_runs
    out = tmp_path / "train.jsonl"
    assert export_trajectories(db, ExportFilter(runs=[run], split="train"), "openai", out) == 2
    right, wrong = _read(out)
    assert set(right) == {"messages", "tools"}
    assert right["messages"] == [
        {"role": "user", "content": task.prompt},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": task.expected_tool, "arguments": task.expected_args},
                }
            ],
        },
    ]
    assert right["tools"] == [openai_tool_spec(t) for t in BUILTIN_TOOLS]
    assert HARNESS_TEXT not in out.read_text() and Harness().example_user not in out.read_text()
    # a reply that is no call stays what it was: text (the prefill included, as the verifier saw it)
    assert wrong["messages"][-1] == {"role": "assistant", "content": '{"tool": "calendar.create_event", oops'}


def test_multi_turn_calls_results_and_the_final_answer(db_with_runs, tmp_path: Path) -> None:
    db, run, _, _ = db_with_runs
    out = tmp_path / "held.jsonl"
    assert export_trajectories(db, ExportFilter(runs=[run], split="held_out"), "openai", out) == 1
    (row,) = _read(out)
    roles = [m["role"] for m in row["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    call = row["messages"][1]["tool_calls"][0]
    assert call["function"] == {"name": "calendar.list_events", "arguments": {"day": "Friday"}}
    assert (
        row["messages"][2]["tool_call_id"] == call["id"]
        and row["messages"][2]["name"] == "calendar.list_events"
    )
    assert json.loads(row["messages"][2]["content"])["tool"] == "calendar.list_events"
    assert row["messages"][3] == {
        "role": "assistant",
        "content": "Nothing on Friday.",
    }  # finish, as an answer
    assert row["tools"] == [openai_tool_spec(t) for t in MULTI_TURN_TOOLS]


def test_filters_reward_labels_runs_and_superseded(db_with_runs, tmp_path: Path) -> None:
    db, run, native, _ = db_with_runs
    out = tmp_path / "x.jsonl"
    count = lambda **kw: export_trajectories(db, ExportFilter(**kw), "jsonl", out)  # noqa: E731
    assert count(runs=[run]) == 3 and count(runs=[run], include_superseded=True) == 4
    assert count(runs=[run], min_reward=0.5) == 2
    assert count(runs=[run], labels=["good"]) == 1 and count(runs=[run], labels=["good", "bad"]) == 2
    assert count(runs=[run, native]) == 4
    rows = _read(out)
    assert [r["run_id"] for r in rows] == [run, run, run, native] and "messages" in rows[0]
    with pytest.raises(ExportError, match="'meh' is not one of"):
        ExportFilter(runs=[run], labels=["meh"])


def test_native_rows_pass_through_with_their_calls(db_with_runs, tmp_path: Path) -> None:
    db, _, native, _ = db_with_runs
    out = tmp_path / "n.jsonl"
    export_trajectories(db, ExportFilter(runs=[native]), "openai", out)
    (row,) = _read(out)
    assert row["messages"][0] == {"role": "user", "content": "Weather in Paris?"}
    assert row["messages"][1]["tool_calls"][0]["function"] == {
        "name": "weather.get",
        "arguments": {"city": "Paris"},
    }


def test_export_renders_through_a_hermes_chat_template(db_with_runs, tmp_path: Path) -> None:
    """What a user does next: `apply_chat_template(row["messages"], tools=row["tools"])`, as TRL's SFTTrainer."""
    db, run, _, task = db_with_runs
    out = tmp_path / "all.jsonl"
    export_trajectories(db, ExportFilter(runs=[run], min_reward=0.5), "openai", out)
    single, multi = _read(out)
    tok = hermes_tokenizer()
    text = tok.apply_chat_template(single["messages"], tools=single["tools"], tokenize=False)
    call = json.dumps({"name": task.expected_tool, "arguments": task.expected_args})
    assert f"<|im_start|>assistant\n<tool_call>\n{call}\n</tool_call><|im_end|>" in text
    assert f"<|im_start|>user\n{task.prompt}<|im_end|>" in text
    assert json.dumps(single["tools"][0]) in text  # the specs, in the template's <tools> block
    assert HARNESS_TEXT not in text
    text = tok.apply_chat_template(multi["messages"], tools=multi["tools"], tokenize=False)
    assert (
        '<tool_call>\n{"name": "calendar.list_events", "arguments": {"day": "Friday"}}\n</tool_call>' in text
    )
    assert "<|im_start|>user\n<tool_response>\n{" in text and "Nothing on Friday.<|im_end|>" in text
    ids = tok.apply_chat_template(multi["messages"], tools=multi["tools"], tokenize=True, return_dict=False)
    assert tok.decode(ids) == text  # and it tokenises: a training example as it stands


def test_cli_export(db_with_runs, tmp_path: Path, capsys) -> None:
    db, run, _, _ = db_with_runs
    path = str(tmp_path / "wb.db")
    out = tmp_path / "good.jsonl"
    assert (
        main(
            [
                "export",
                "--db",
                path,
                "--run",
                str(run),
                "--format",
                "openai",
                "--label",
                "good",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "wrote 1 trajectories" in capsys.readouterr().out and len(_read(out)) == 1
    assert main(["export", "--db", path, "--run", "99", "--format", "openai", "--out", str(out)]) == 2
    assert "run 99 does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", "--db", path, "--run", str(run), "--label", "fine"])
