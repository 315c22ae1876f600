"""Tasks: load a JSONL task file strictly, or name a built-in source; `load_task_source` takes either.

The built-in tasks themselves (tools, world, generators) live in their domain package,
`workbench.domains.calendar`; this module only validates files and dispatches a source name.

Loading is strict on purpose: a task file is training data, and a line silently skipped or a typo'd field
silently ignored would change what the model learns without anyone noticing. Every problem is reported
with file:line and field, all at once (first 20), so the file can be fixed in one pass.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

from workbench.domains.calendar import (
    BUILTIN_TOOLS,
    builtin_agent_tasks,
    builtin_call_tasks,
    builtin_compound_tasks,
    builtin_look_tasks,
    builtin_multi_turn_tasks,
    builtin_tasks,
)
from workbench.errors import InputError
from workbench.types import Task

TASK_FIELDS = {
    "prompt",
    "expected_tool",
    "expected_args",
    "tools",
    "split",
    "id",
    "dataset",
    "initial_state",
    "expected_state",
    "messages",
    "expected_calls",
    "template",
}
# `prompt` may be left out when `messages` is given; `expected_tool`/`expected_args` when `expected_calls` is.
REQUIRED_FIELDS = ("prompt", "expected_tool", "expected_args")
MESSAGE_ROLES = ("system", "user", "assistant", "tool")
MAX_REPORTED = 20


class TaskFileError(InputError, ValueError):
    """Every problem found in a task file; `errors` holds (path, line, field, reason) tuples (line 0: the
    whole file)."""

    def __init__(self, errors: list[tuple[str, int, str, str]]):
        self.errors = errors
        lines = [f"{p}:{n}: {f}: {r}" if n else f"{p}: {f}: {r}" for p, n, f, r in errors[:MAX_REPORTED]]
        more = len(errors) - MAX_REPORTED
        if more > 0:
            lines.append(f"... and {more} more")
        super().__init__(f"{len(errors)} problem(s) in task file:\n" + "\n".join(lines))


def tool_name(spec: dict[str, Any]) -> str | None:
    """The name of a function spec, flat ({"name"}) or OpenAI-style ({"type": "function", "function": {...}})."""
    inner = spec.get("function") if isinstance(spec.get("function"), dict) else spec
    name = inner.get("name")
    return name if isinstance(name, str) else None


def normalize_tool_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """OpenAI-style specs are unwrapped to the flat form every other module reads."""
    return dict(spec["function"]) if isinstance(spec.get("function"), dict) else dict(spec)


def openai_tool_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `normalize_tool_spec`: the OpenAI form chat templates (`tools=`) and vLLM's API take.
    An already-wrapped spec comes back as it is. The one place the engine converts to that form."""
    if isinstance(spec.get("function"), dict):
        return {"type": "function", "function": dict(spec["function"])}
    fn = {"name": spec["name"], "description": spec.get("description", "")}
    fn["parameters"] = spec.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "function", "function": fn}


def expected_call_of(obj: Any) -> tuple[str | None, Any, str | None]:
    """(name, arguments, problem) of one `expected_calls` entry: {"name"|"tool": ..., "arguments"|"args": {...}}."""
    if not isinstance(obj, dict):
        return None, None, f"must be an object, got {type(obj).__name__}"
    name = obj.get("name", obj.get("tool"))
    if not isinstance(name, str) or not name.strip():
        return None, None, "needs a non-empty string 'name' (or 'tool')"
    args = obj.get("arguments", obj.get("args", {}))
    if not isinstance(args, dict):
        return name, None, "'arguments' must be an object"
    unknown = sorted(set(obj) - {"name", "tool", "arguments", "args"})
    if unknown:
        return name, args, f"unknown key(s) {unknown}"
    return name, args, None


def _surrogate_at(text: str) -> int | None:
    """None when `text` is valid Unicode text, else the index of its first lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def _unencodable(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, reason) for each string (a key or a value, at any depth) that is not valid Unicode text: JSON's
    `\\u` escapes allow a lone surrogate (`\\ud800`) that UTF-8 cannot encode, and the tokenizer would crash
    the run at its start on it (UnicodeEncodeError). Iterative: a line nested deeply must not overflow here."""
    found: list[tuple[str, str]] = []
    # Known fields only: an unknown one (a key with a surrogate included) is reported as unknown, once
    stack = [(k, v) for k, v in reversed(obj.items()) if k in TASK_FIELDS]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            bad_keys = [k for k in value if isinstance(k, str) and _surrogate_at(k) is not None]
            found.extend(
                (f"{where}.{ascii(k)}", "a key the tokenizer cannot encode (a lone surrogate)")
                for k in bad_keys
            )
            stack.extend(
                reversed([(f"{where}.{k if k not in bad_keys else ascii(k)}", v) for k, v in value.items()])
            )
        elif isinstance(value, list):
            stack.extend(reversed([(f"{where}[{i}]", v) for i, v in enumerate(value)]))
        elif isinstance(value, str) and (at := _surrogate_at(value)) is not None:
            found.append(
                (
                    where,
                    f"text the tokenizer cannot encode ({value[at]!r} at character {at}: a lone "
                    "surrogate; write the character itself, or a valid \\u pair)",
                )
            )
    return found


def _check_line(obj: Any, field_err: list[tuple[str, str]]) -> None:
    """Append (field, reason) for everything wrong with one decoded line."""
    if not isinstance(obj, dict):
        field_err.append(("-", f"line is a JSON {type(obj).__name__}, expected an object"))
        return
    field_err.extend(_unencodable(obj))
    for key in obj:
        if key not in TASK_FIELDS:
            near = difflib.get_close_matches(key, sorted(TASK_FIELDS), n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            # a key that is empty, "-" (no field), or has spaces, colons, newlines... is quoted
            field_err.append(
                (key if re.fullmatch(r"\w[\w.\-]*", key) else json.dumps(key), f"unknown field{hint}")
            )
    optional = ({"prompt"} if "messages" in obj else set()) | (
        {"expected_tool", "expected_args"} if obj.get("expected_calls") is not None else set()
    )
    for key in REQUIRED_FIELDS:
        if key not in obj and key not in optional:
            field_err.append((key, "missing field"))
    for key in ("prompt", "expected_tool"):
        if key == "expected_tool" and obj.get(key, "") is None:
            continue  # null: the right answer is no call
        if key in obj and (not isinstance(obj[key], str) or not obj[key].strip()):
            field_err.append((key, f"must be a non-empty string, got {json.dumps(obj[key])[:40]}"))
    if "messages" in obj:
        _check_messages(obj["messages"], field_err)
    for key in ("expected_args", "initial_state", "expected_state"):
        if (
            key in obj
            and not isinstance(obj[key], dict)
            and not (key != "expected_args" and obj[key] is None)
        ):
            field_err.append((key, f"must be an object, got {type(obj[key]).__name__}"))
    for key in ("split", "dataset", "template"):
        if key in obj and (not isinstance(obj[key], str) or not obj[key].strip()):
            field_err.append((key, "must be a non-empty string"))
    if "id" in obj and (
        isinstance(obj["id"], bool) or not isinstance(obj["id"], (str, int)) or str(obj["id"]) == ""
    ):
        field_err.append(("id", "must be a non-empty string or an integer"))
    tools = obj.get("tools")
    specs: list[dict[str, Any]] | None = None
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            field_err.append(("tools", "must be a non-empty list of function specs"))
        else:
            specs = []
            for i, spec in enumerate(tools):
                if not isinstance(spec, dict) or tool_name(spec) is None:
                    field_err.append((f"tools[{i}]", "must be an object with a string 'name'"))
                    continue
                specs.append(normalize_tool_spec(spec))
                params = specs[-1].get("parameters")
                if params is not None and not isinstance(params, dict):
                    field_err.append((f"tools[{i}].parameters", "must be a JSON-schema object"))
                elif params is not None:
                    _check_parameters(params, f"tools[{i}].parameters", field_err)
                if not isinstance(specs[-1].get("description", ""), str):
                    field_err.append((f"tools[{i}].description", "must be a string"))
    _check_expected_call(obj, specs, tools is not None, field_err)
    if obj.get("expected_calls") is not None:
        _check_expected_calls(obj["expected_calls"], specs, tools is not None, field_err)


def _check_messages(messages: Any, field_err: list[tuple[str, str]]) -> None:
    """A task's starting conversation: chat messages the template can render, ending where the model answers."""
    if not isinstance(messages, list) or not messages:
        field_err.append(("messages", "must be a non-empty list of chat messages"))
        return
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            field_err.append((where, f"must be an object, got {type(m).__name__}"))
            continue
        if m.get("role") not in MESSAGE_ROLES:
            field_err.append(
                (
                    f"{where}.role",
                    f"must be one of {list(MESSAGE_ROLES)}, got {json.dumps(m.get('role'))[:40]}",
                )
            )
        content, calls = m.get("content"), m.get("tool_calls")
        if calls is not None:
            if m.get("role") != "assistant" or not isinstance(calls, list):
                field_err.append((f"{where}.tool_calls", "must be a list, on an assistant message"))
            else:
                for j, c in enumerate(calls):
                    if (problem := _message_call_problem(c)) is not None:
                        field_err.append((f"{where}.tool_calls[{j}]", problem))
        if not isinstance(content, str) and not (content is None and calls):
            field_err.append(
                (f"{where}.content", "must be a string (or null on an assistant message with tool_calls)")
            )
    last = messages[-1]
    if isinstance(last, dict) and last.get("role") not in ("user", "tool"):
        field_err.append(
            (
                f"messages[{len(messages) - 1}].role",
                "the last message must be 'user' or 'tool' (the model answers it)",
            )
        )


def _message_call_problem(call: Any) -> str | None:
    """What is wrong with one assistant `tool_calls` entry (OpenAI shape, or flat name/arguments), or None."""
    fn = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else call
    if not isinstance(fn, dict):
        return "must be an object"
    if not isinstance(fn.get("name"), str) or not fn["name"].strip():
        return "needs a non-empty string 'name'"
    if not isinstance(fn.get("arguments", {}), (dict, str)):
        return "'arguments' must be an object (or JSON text)"
    return None


def _check_expected_calls(
    calls: Any, specs: list[dict[str, Any]] | None, has_tools: bool, field_err: list[tuple[str, str]]
) -> None:
    """Parallel calls: each entry a call of an offered tool, with that tool's parameters."""
    if not isinstance(calls, list) or not calls:
        field_err.append(("expected_calls", "must be a non-empty list of calls"))
        return
    for i, c in enumerate(calls):
        name, args, problem = expected_call_of(c)
        if problem is not None:
            field_err.append((f"expected_calls[{i}]", problem))
            continue
        sub: list[tuple[str, str]] = []
        _check_expected_call({"expected_tool": name, "expected_args": args}, specs, has_tools, sub)
        field_err.extend(
            (
                f"expected_calls[{i}]" + f[len("expected_tool") :]
                if f == "expected_tool"
                else f"expected_calls[{i}].arguments",
                r,
            )
            for f, r in sub
        )


def _check_parameters(params: dict[str, Any], where: str, field_err: list[tuple[str, str]]) -> None:
    """The parts of a tool's JSON schema that the loader and the harness read must have their JSON-schema types."""
    if not isinstance(params.get("properties", {}), dict):
        field_err.append((f"{where}.properties", "must be an object"))
    required = params.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        field_err.append((f"{where}.required", "must be a list of strings"))


def _check_expected_call(
    obj: dict[str, Any], specs: list[dict[str, Any]] | None, has_tools: bool, field_err: list[tuple[str, str]]
) -> None:
    """The expected tool must be one the model is offered, and its args must be that tool's parameters."""
    tool, args = obj.get("expected_tool"), obj.get("expected_args")
    if not isinstance(tool, str) or (has_tools and specs is None):
        return
    offered = {s["name"]: s for s in (specs if specs is not None else BUILTIN_TOOLS)}
    if tool not in offered:
        where = "this line's tools" if has_tools else "the built-in tools (add a 'tools' list)"
        near = difflib.get_close_matches(tool, list(offered), n=1)
        hint = f"; did you mean '{near[0]}'?" if near else ""
        field_err.append(("expected_tool", f"unknown tool '{tool}': not in {where}{hint}"))
        return
    params = offered[tool].get("parameters")
    if (
        not isinstance(args, dict)
        or not isinstance(params, dict)
        or not isinstance(params.get("properties"), dict)
    ):
        return
    for name in args:
        if name not in params["properties"]:
            field_err.append(("expected_args", f"'{name}' is not a parameter of {tool}"))
    required = params.get("required", [])
    for name in required if isinstance(required, list) else []:
        if isinstance(name, str) and name not in args:
            field_err.append(("expected_args", f"missing required parameter '{name}' of {tool}"))


def load_tasks(path: str | Path, split: str | None = None) -> list[Task]:
    """Read a JSONL task file; raise one TaskFileError listing every bad line. `split` filters the result."""
    path = Path(path)
    errors: list[tuple[str, int, str, str]] = []
    tasks: list[Task] = []
    seen_ids: dict[str, int] = {}
    for lineno, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            errors.append((str(path), lineno, "-", f"not UTF-8 ({e.reason} at byte {e.start})"))
            continue
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            errors.append((str(path), lineno, "-", f"bad JSON: {e.msg} (column {e.colno})"))
            continue
        except ValueError:  # an integer longer than sys.get_int_max_str_digits()
            errors.append((str(path), lineno, "-", "bad JSON: number too long"))
            continue
        except RecursionError:
            errors.append((str(path), lineno, "-", "bad JSON: nested too deeply"))
            continue
        problems: list[tuple[str, str]] = []
        _check_line(obj, problems)
        if not problems:
            tid = str(obj["id"]) if "id" in obj else f"{path.stem}:{lineno}"
            if tid in seen_ids:
                problems.append(("id", f"duplicate id '{tid}' (first on line {seen_ids[tid]})"))
            seen_ids.setdefault(tid, lineno)
        if problems:
            errors.extend((str(path), lineno, f, r) for f, r in problems)
            continue
        tools = obj.get("tools")
        calls = obj.get("expected_calls")
        tasks.append(
            Task(
                id=tid,
                prompt=obj["prompt"] if "prompt" in obj else _last_user_text(obj["messages"]),
                expected_tool=obj["expected_tool"]
                if "expected_tool" in obj
                else expected_call_of(calls[0])[0],
                expected_args=obj["expected_args"]
                if "expected_args" in obj
                else expected_call_of(calls[0])[1],
                tools=[normalize_tool_spec(t) for t in tools] if tools is not None else None,
                split=obj.get("split", "train"),
                dataset=obj.get("dataset", path.stem),
                initial_state=obj.get("initial_state"),
                template=obj.get("template"),
                expected_state=obj.get("expected_state"),
                messages=obj.get("messages"),
                expected_calls=[
                    dict(zip(("name", "arguments"), expected_call_of(c)[:2], strict=True)) for c in calls
                ]
                if calls is not None
                else None,
            )
        )
    if errors:
        raise TaskFileError(errors)
    return [t for t in tasks if split is None or t.split == split]


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    """A mid-conversation task's prompt (what the UI lists): its last user message."""
    users = [m.get("content") or "" for m in messages if m.get("role") == "user"]
    return users[-1] if users else ""


def task_to_line(task: Task) -> dict[str, Any]:
    """A task in the JSONL seed format (None fields left out), so load_tasks reads it back unchanged."""
    d = {
        "id": task.id,
        "prompt": task.prompt,
        "expected_tool": task.expected_tool,
        "expected_args": task.expected_args,
        "split": task.split,
        "dataset": task.dataset,
    }
    for key in ("tools", "initial_state", "expected_state", "messages", "expected_calls", "template"):
        if getattr(task, key) is not None:
            d[key] = getattr(task, key)
    return d


def write_tasks_jsonl(path: str | Path, tasks: list[Task]) -> int:
    """Write tasks as an editable JSONL file (for `workbench init`); returns the line count."""
    Path(path).write_text("".join(json.dumps(task_to_line(t)) + "\n" for t in tasks), encoding="utf-8")
    return len(tasks)


def write_builtin_jsonl(path: str | Path, split: str | None = None) -> int:
    """Write the built-in tasks (of one split, or train + validation) as an editable JSONL file."""
    return write_tasks_jsonl(path, builtin_tasks(split))


BUILTIN_SOURCES = (
    "builtin:calendar",
    "builtin:calendar_mt",
    "builtin:calendar_calls",
    "builtin:calendar_agent",
    "builtin:calendar_look",
    "builtin:calendar_compound",
    "tool_call_eval",
    "train",
    "held_out",
    "validation",
    "validation_wide",
    "test",
)


def load_task_source(source: str | Path, split: str) -> list[Task]:
    """Tasks for a config key (`tasks:`, `held_out_eval:`): a built-in name or a JSONL path.

    Built-ins: "builtin:calendar" (single-turn, filtered by `split`), "builtin:calendar_mt" (multi-turn,
    filtered by `split`), "tool_call_eval" (the calendar held-out split whatever `split` says), "train" /
    "held_out" (alias "validation") / "validation_wide" / "test" (that calendar split). A file is filtered by
    `split` when it has tasks of that split; a file whose tasks all share one other split (typically no split
    field: all "train") is used whole, since the user named it for this role. "builtin:calendar_agent": the
    generated multi-step family (train / held_out / test); "builtin:calendar_look": single
    `calendar.list_events` questions (train / held_out); "builtin:calendar_compound": two independent calls in
    one request (train / held_out). Sources joined by "+"
    ("builtin:calendar+builtin:calendar_agent") are each read for `split` and concatenated: one `tasks:` key
    then feeds the SFT warm-up (single-call tasks only, `splits.stage_tasks`)
    and GRPO (narrowed with `grpo_skills: [multi_step]`). Never returns an empty list.
    """
    key = str(source)
    if "+" in key and not Path(key).is_file():
        parts = [p.strip() for p in key.split("+")]
        if any(not p for p in parts):
            raise FileNotFoundError(f"task source {key!r}: an empty name between '+' signs")
        tasks = [t for p in parts for t in load_task_source(p, split)]
        if len({t.id for t in tasks}) < len(tasks):
            raise TaskFileError([(key, 0, "id", "the joined sources share task ids")])
        return tasks
    if key == "builtin:calendar":
        tasks = builtin_tasks(split)
    elif key == "builtin:calendar_mt":
        tasks = [t for t in builtin_multi_turn_tasks() if t.split == split]
    elif key == "builtin:calendar_agent":  # generated multi-step tasks (train / held_out / test)
        tasks = builtin_agent_tasks(split)
    elif key == "builtin:calendar_look":  # single calendar.list_events questions (train / held_out)
        tasks = builtin_look_tasks(split)
    elif key == "builtin:calendar_compound":  # two independent calls in one request (train / held_out)
        tasks = builtin_compound_tasks(split)
    elif key == "builtin:calendar_calls":  # no-call and parallel-call tasks (train / held_out)
        tasks = builtin_call_tasks("held_out" if split == "validation" else split)
    elif key == "tool_call_eval":
        tasks = builtin_tasks("held_out")
    elif key in ("train", "held_out", "validation", "validation_wide", "test"):
        tasks = builtin_tasks(key)
    else:
        path = Path(key)
        if not path.is_file():
            near = difflib.get_close_matches(key, BUILTIN_SOURCES, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise FileNotFoundError(
                f"task source {key!r} is neither a built-in ({', '.join(BUILTIN_SOURCES)}) nor a file{hint}"
            )
        every = load_tasks(path)
        if not every:
            raise TaskFileError([(str(path), 0, "-", "no tasks (the file has only blank lines)")])
        splits = {t.split for t in every}
        tasks = [t for t in every if t.split == split] if split in splits or len(splits) > 1 else every
        if not tasks:
            raise TaskFileError(
                [(str(path), 0, "split", f"no tasks with split {split!r} (the file has {sorted(splits)})")]
            )
    if not tasks:
        raise ValueError(f"task source {key!r} has no {split!r} tasks")
    return tasks
