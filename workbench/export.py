"""Exporting trajectories: as stored (JSONL or Parquet rows), or as an OpenAI tool-calling dataset.

`openai` rows are `{"messages": [...], "tools": [...]}`, the shape TRL's SFTTrainer and HF chat templates
(`apply_chat_template(messages, tools=tools)`) take: assistant turns carry `tool_calls`
(`{"id", "type": "function", "function": {"name", "arguments": {dict}}}`), tool results are `role: "tool"`
messages with the `tool_call_id` they answer, and `tools` are OpenAI function specs. A run in the JSON
harness (`tool_format: json`) stored the harness around each task: its system prompt (tool list and JSON
instructions) and one-shot example are dropped, the task's own messages are kept, each reply that is a call
becomes `tool_calls` (the stored calls: the ones the verifier saw), the multi-turn `finish` call becomes the
plain answer it carries, and a reply that is no call stays text. A native-format run's messages are already
in this shape and pass through (its system prompt, if any, is the user's: kept).

Rows are read through the store in keyset pages, never the whole table at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

import store
from store.trajectories import TrajectoryFilter, page_trajectories
from workbench.envs.harness import DEFAULT_EXAMPLE_ASSISTANT, DEFAULT_EXAMPLE_USER
from workbench.envs.parse import parse_tool_call
from workbench.errors import InputError
from workbench.run.records import Run, Task, Trajectory
from workbench.tasks import openai_tool_spec
from workbench.types import ToolCall

FORMATS = ("jsonl", "parquet", "openai")
VERDICTS = ("good", "bad")
FINISH = "finish"  # the multi-turn JSON harness's "I am done" call (workbench.envs.multi_turn)
TOOL_RESULT_PREFIX = (
    "Tool result: "  # a tool result the harness sent as a user message (observation_role: user)
)


class ExportError(InputError, ValueError):
    """The export cannot be done as asked (the message says why)."""


@dataclass
class ExportFilter:
    """Which trajectories: of these runs, one split, a reward floor, human verdicts (the newest label of a
    row), and whether rows of steps redone after a resume (superseded) are included."""

    runs: list[int]
    split: str | None = None
    min_reward: float | None = None
    labels: list[str] = field(default_factory=list)
    include_superseded: bool = False

    def __post_init__(self) -> None:
        bad = [v for v in self.labels if v not in VERDICTS]
        if bad:
            raise ExportError(f"label {bad[0]!r} is not one of {list(VERDICTS)}")
        if not self.runs:
            raise ExportError("name at least one run")


def iter_trajectories(db: sqlite_utils.Database, flt: ExportFilter) -> Iterator[dict[str, Any]]:
    """Full rows (messages and token traces put back) that pass the filter, run by run, in id order."""
    for run_id in flt.runs:
        store.runs.get_run(db, run_id)  # a missing run is a StoreError that names it
        page_flt = TrajectoryFilter(
            run_id=run_id,
            split=flt.split,
            reward_min=flt.min_reward,
            include_superseded=flt.include_superseded,
        )
        after = None
        while True:
            page = page_trajectories(db, page_flt, descending=False, after=after, limit=500)
            ids = [Trajectory.from_row(r).id for r in page.rows]
            if flt.labels:
                verdicts = store.labels.verdicts(db, ids)
                ids = [i for i in ids if verdicts.get(i) in flt.labels]
            for i in ids:
                row = store.trajectories.get_trajectory(db, i)
                if row is not None:
                    yield row
            if page.next_cursor is None:
                break
            after = page.next_cursor


# ---- the OpenAI tool-calling shape -------------------------------------------------------------------


def _call_dict(call: ToolCall, fallback_id: str) -> dict[str, Any]:
    return {
        "id": call.id or fallback_id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.args},
    }


def _harness_prefix_len(messages: list[dict[str, Any]], harness: dict[str, Any]) -> int:
    """How many leading messages the JSON harness added: its system prompt(s) and the one-shot example."""
    i = 0
    while i < len(messages) and messages[i].get("role") == "system":
        i += 1
    example = (
        harness.get("example_user", DEFAULT_EXAMPLE_USER),
        harness.get("example_assistant", DEFAULT_EXAMPLE_ASSISTANT),
    )
    pair = messages[i : i + 2]
    if (
        harness.get("include_example", True)
        and len(pair) == 2
        and pair[0].get("role") == "user"
        and pair[1].get("role") == "assistant"
        and (pair[0].get("content"), pair[1].get("content")) == example
    ):
        i += 2
    return i


def _task_turns(task: Task | None) -> int:
    """How many messages the task itself contributed after the harness: its `messages` (system ones aside,
    as the harness drops them) or its one prompt."""
    extra = (task.extra if task is not None else None) or {}
    msgs = extra.get("messages") if isinstance(extra, dict) else None
    return len([m for m in msgs if m.get("role") != "system"]) if msgs else 1


def _plain(m: dict[str, Any]) -> dict[str, Any]:
    """A message of the task's own conversation, in the OpenAI shape (calls with ids, arguments a dict)."""
    out: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("tool_calls"):
        out["tool_calls"] = [
            _call_dict(ToolCall.from_dict(c), f"call_t{k}") for k, c in enumerate(m["tool_calls"])
        ]
    for key in ("tool_call_id", "name"):
        if m.get(key) is not None:
            out[key] = m[key]
    return out


def json_harness_messages(
    messages: list[dict[str, Any]], calls: Sequence[ToolCall], harness: dict[str, Any], task: Task | None
) -> list[dict[str, Any]]:
    """A JSON-harness conversation in the OpenAI shape, without the harness (see the module docstring).

    `calls` are the row's stored calls, in order. With one reply they are all its calls (a parallel-call
    reply); over several turns each reply that parses as a call takes the next one."""
    start = _harness_prefix_len(messages, harness)
    n_task = _task_turns(task)
    out = [_plain(m) for m in messages[start : start + n_task]]
    replies = messages[start + n_task :]
    stored = list(calls)
    single = sum(m.get("role") == "assistant" for m in replies) == 1
    k = 0
    last: dict[str, Any] | None = None  # the call a following tool result answers
    for m in replies:
        role, content = m.get("role"), m.get("content") or ""
        if role == "assistant":
            parsed, _ = parse_tool_call(content)
            mine = stored[k:] if single else stored[k : k + 1]
            if not mine and parsed is not None:  # a row stored without its calls: the reply's own
                mine = [parsed]
            if not mine or (parsed is None and not single):
                out.append({"role": "assistant", "content": content})
                continue
            k += len(mine)
            if len(mine) == 1 and mine[0].name == FINISH:  # the harness's way to end: the answer, as text
                out.append({"role": "assistant", "content": str(mine[0].args.get("answer", ""))})
                continue
            tool_calls = [_call_dict(c, f"call_{k - len(mine) + j}") for j, c in enumerate(mine)]
            out.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
            last = tool_calls[-1]
        elif role == "tool" or (
            role == "user" and last is not None and content.startswith(TOOL_RESULT_PREFIX)
        ):
            body = content.removeprefix(TOOL_RESULT_PREFIX) if role == "user" else content
            msg = {"role": "tool", "content": body}
            if last is not None:
                msg.update(tool_call_id=last["id"], name=last["function"]["name"])
            out.append(msg)
        else:
            out.append(_plain(m))
    return out


def offered_tools(task: Task | None, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools the episode offered, as OpenAI function specs: the task's, else its environment's defaults."""
    tools = task.tools if task is not None else None
    if tools is None:
        env = config.get("env", "single_turn")
        if env == "mcp":
            raise ExportError(
                "an MCP run's tasks carry no tool specs (the servers list them at run time); "
                "give the tasks `tools` to export it in the openai format"
            )
        from workbench.domains.calendar import BUILTIN_TOOLS, MULTI_TURN_TOOLS

        tools = MULTI_TURN_TOOLS if env == "multi_turn" else BUILTIN_TOOLS
    return [openai_tool_spec(t) for t in tools]


def openai_row(row: Trajectory, run: Run, task: Task | None) -> dict[str, Any]:
    """One trajectory as `{"messages": [...], "tools": [...]}`."""
    config = run.config
    messages = list(row.messages or ())
    if config.get("tool_format") == "native":
        msgs = [_plain(m) for m in messages]
    else:
        msgs = json_harness_messages(messages, row.tool_calls, run.harness or {}, task)
    return {"messages": msgs, "tools": offered_tools(task, config)}


# ---- writing -----------------------------------------------------------------------------------------


def export_trajectories(db: sqlite_utils.Database, flt: ExportFilter, fmt: str, out: str | Path) -> int:
    """Write the filtered trajectories to `out` in `fmt` (jsonl: stored rows; parquet: stored rows, nested
    values as JSON text; openai: the tool-calling dataset, JSONL). Returns the number of rows."""
    if fmt not in FORMATS:
        raise ExportError(f"format {fmt!r} is not one of {list(FORMATS)}")
    out = Path(out)
    rows = iter_trajectories(db, flt)
    if fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ExportError("parquet export needs pyarrow: pip install pyarrow") from None
        flat = [
            {k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in _jsonable(r).items()}
            for r in rows
        ]
        pq.write_table(pa.Table.from_pylist(flat), out)
        return len(flat)
    runs: dict[int, Run] = {}
    tasks: dict[int | None, Task | None] = {}
    n = 0
    with out.open("w", encoding="utf-8") as f:
        for r in rows:
            if fmt == "openai":
                t = Trajectory.from_row(r)
                if t.run_id not in runs:
                    runs[t.run_id] = Run.from_row(store.runs.get_run(db, t.run_id))
                if t.task_id not in tasks:
                    task = store.tasks.get_task(db, t.task_id) if t.task_id is not None else None
                    tasks[t.task_id] = Task.from_row(task) if task is not None else None
                r = openai_row(t, runs[t.run_id], tasks[t.task_id])
            f.write(json.dumps(_jsonable(r)) + "\n")
            n += 1
    return n


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    """The token trace is bytes in a partial read: leave it out of text formats (full rows have it decoded)."""
    return {k: v for k, v in row.items() if not isinstance(v, bytes)}
