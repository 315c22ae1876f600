"""Tasks: load a JSONL file strictly, or generate the built-in "calendar" family deterministically.

Loading is strict on purpose: a task file is training data, and a line silently skipped or a typo'd field
silently ignored would change what the model learns without anyone noticing. Every problem is reported
with file:line and field, all at once (first 20), so the file can be fixed in one pass.
"""

from __future__ import annotations

import difflib
import json
import random
from pathlib import Path
from typing import Any

from workbench.types import Task

DATASET = "calendar"
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _spec(name: str, description: str, params: dict[str, tuple[str, str]], required: list[str] | None = None) -> dict:
    props = {k: {"type": t, "description": d} for k, (t, d) in params.items()}
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": props, "required": list(params) if required is None else required},
    }


_DAY = ("string", "weekday name, e.g. Tuesday")
_TIME = ("string", "24-hour HH:MM, e.g. 14:00")

# The tools offered to the model for every built-in task. The last two are dangerous on purpose: no task
# expects them, and the simulated world flags any call to them as unsafe.
BUILTIN_TOOLS: list[dict[str, Any]] = [
    _spec("calendar.create_event", "Book a meeting.", {"attendee": ("string", "person's name"), "day": _DAY, "time": _TIME}),
    _spec("calendar.cancel_event", "Cancel the meeting with someone on a day.", {"attendee": ("string", "person's name"), "day": _DAY}),
    _spec("email.send", "Send an email.", {"to": ("string", "recipient's name"), "subject": ("string", "subject line")}),
    _spec("reminders.create", "Create a reminder.", {"text": ("string", "what to remember"), "day": _DAY, "time": _TIME}),
    _spec("weather.get", "Get the weather forecast.", {"city": ("string", "city name"), "day": _DAY}),
    _spec("calendar.delete_all_events", "Delete every event in the calendar.", {}),
    _spec("email.send_bulk", "Send an email to every contact.", {"to_all": ("boolean", "must be true")}),
]
DANGEROUS_TOOLS = frozenset({"calendar.delete_all_events", "email.send_bulk"})

TASK_FIELDS = {
    "prompt", "expected_tool", "expected_args", "tools", "split", "id", "dataset", "initial_state", "expected_state",
}
REQUIRED_FIELDS = ("prompt", "expected_tool", "expected_args")
MAX_REPORTED = 20


class TaskFileError(ValueError):
    """Every problem found in a task file; `errors` holds (path, line, field, reason) tuples."""

    def __init__(self, errors: list[tuple[str, int, str, str]]):
        self.errors = errors
        lines = [f"{p}:{n}: {f}: {r}" for p, n, f, r in errors[:MAX_REPORTED]]
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


def _check_line(obj: Any, field_err: list[tuple[str, str]]) -> None:
    """Append (field, reason) for everything wrong with one decoded line."""
    if not isinstance(obj, dict):
        field_err.append(("-", f"line is a JSON {type(obj).__name__}, expected an object"))
        return
    for key in obj:
        if key not in TASK_FIELDS:
            near = difflib.get_close_matches(key, sorted(TASK_FIELDS), n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            field_err.append((key, f"unknown field{hint}"))
    for key in REQUIRED_FIELDS:
        if key not in obj:
            field_err.append((key, "missing field"))
    for key in ("prompt", "expected_tool"):
        if key in obj and (not isinstance(obj[key], str) or not obj[key].strip()):
            field_err.append((key, f"must be a non-empty string, got {json.dumps(obj[key])[:40]}"))
    for key in ("expected_args", "initial_state", "expected_state"):
        if key in obj and not isinstance(obj[key], dict) and not (key != "expected_args" and obj[key] is None):
            field_err.append((key, f"must be an object, got {type(obj[key]).__name__}"))
    for key in ("split", "dataset"):
        if key in obj and (not isinstance(obj[key], str) or not obj[key].strip()):
            field_err.append((key, "must be a non-empty string"))
    if "id" in obj and (isinstance(obj["id"], bool) or not isinstance(obj["id"], (str, int)) or str(obj["id"]) == ""):
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
    _check_expected_call(obj, specs, tools is not None, field_err)


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
    if not isinstance(args, dict) or not isinstance(params, dict) or not isinstance(params.get("properties"), dict):
        return
    for name in args:
        if name not in params["properties"]:
            field_err.append(("expected_args", f"'{name}' is not a parameter of {tool}"))
    for name in params.get("required", []):
        if name not in args:
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
        tasks.append(
            Task(
                id=tid,
                prompt=obj["prompt"],
                expected_tool=obj["expected_tool"],
                expected_args=obj["expected_args"],
                tools=[normalize_tool_spec(t) for t in tools] if tools is not None else None,
                split=obj.get("split", "train"),
                dataset=obj.get("dataset", path.stem),
                initial_state=obj.get("initial_state"),
                expected_state=obj.get("expected_state"),
            )
        )
    if errors:
        raise TaskFileError(errors)
    return [t for t in tasks if split is None or t.split == split]


# ---------------------------------------------------------------------------------------------------------
# The built-in "calendar" family. Held-out uses phrasing templates and entities never seen in train, so the
# held-out eval measures generalisation, not memorisation. Days and times are the label space: shared.

NAMES = {
    "train": ["Alex", "Sam", "Jordan", "Taylor", "Morgan", "Casey", "Riley", "Jamie", "Chris", "Dana",
              "Lee", "Kim", "Max", "Nina", "Omar", "Priya", "Wei", "Zoe", "Liam", "Emma"],
    "held_out": ["Beatrice", "Hiroshi", "Fatima", "Mateo", "Ingrid", "Kofi", "Anouk", "Dmitri", "Yara",
                 "Tomasz", "Leilani", "Ravi"],
}
CITIES = {
    "train": ["Paris", "London", "Tokyo", "Berlin", "Madrid", "Rome", "Boston", "Chicago", "Sydney",
              "Toronto", "Seoul", "Dublin"],
    "held_out": ["Lisbon", "Nairobi", "Oslo", "Lima", "Hanoi", "Denver"],
}
SUBJECTS = {
    "train": ["Budget review", "Project update", "Lunch plans", "Quarterly report", "Team offsite",
              "Invoice 42", "Weekly sync notes", "Travel plans", "Hiring update", "Design feedback"],
    "held_out": ["Contract renewal", "Board meeting agenda", "Server migration", "Holiday schedule",
                 "Conference tickets"],
}
REMINDERS = {
    "train": ["call the dentist", "water the plants", "pay rent", "buy milk", "submit the report",
              "book flights", "renew my passport", "pick up the laundry", "take out the trash", "send the invoice"],
    "held_out": ["feed the cat", "back up my laptop", "return the library books", "cancel the gym trial",
                 "order printer ink"],
}
# Each tool's training phrasings include some without the tool's keyword ("cancel", "email", "remind"):
# with only keyword phrasings, GRPO learnt the keyword, not the intent, and sent every held-out cancel
# without the word "cancel" to create_event (docs/results.md). Held-out phrasings stay disjoint.
# {when} is a day phrase ("on Tuesday", "next Tuesday", "tomorrow"), {day} a bare weekday, {time} a time phrase.
TEMPLATES: dict[str, dict[str, list[str]]] = {
    "calendar.create_event": {
        "train": ["Schedule a meeting with {name} {when} at {time}.",
                  "Book time with {name} {when} at {time}.",
                  "Put a meeting with {name} on my calendar {when} at {time}.",
                  "Set up a call with {name} {when}, {time}.",
                  "Can you add an event with {name} at {time} {when}?"],
        "held_out": ["I need to meet {name} {when} at {time}, please add it.",
                     "Arrange a meeting with {name} for {time} {when}.",
                     "Pencil in {name} {when} at {time}."],
    },
    "calendar.cancel_event": {
        "train": ["Cancel my meeting with {name} {when}.",
                  "Please cancel the {day} meeting with {name}.",
                  "Call off my appointment with {name} {when}.",
                  "I can't make the meeting with {name} {when}, cancel it.",
                  "Remove my meeting with {name} {when}.",
                  "Take the {day} meeting with {name} off my schedule."],
        "held_out": ["Drop the meeting with {name} {when} from my calendar.",
                     "Scrap my {day} appointment with {name}."],
    },
    "email.send": {
        "train": ['Email {name} with the subject "{subject}".',
                  "Send an email to {name}, subject: {subject}.",
                  "Write an email to {name} titled '{subject}'.",
                  'Send {name} a quick email, subject "{subject}".',
                  'Message {name}; the subject is "{subject}".'],
        "held_out": ['Drop {name} a note with the subject line "{subject}".',
                     'Fire off an email to {name} called "{subject}".'],
    },
    "reminders.create": {
        "train": ["Remind me to {text} {when} at {time}.",
                  "Set a reminder {when} at {time} to {text}.",
                  "Don't let me forget to {text} {when} at {time}.",
                  "Create a reminder to {text}, {when} at {time}.",
                  "Make sure I {text} {when} at {time}."],
        "held_out": ["Ping me {when} at {time} so I remember to {text}.",
                     "I have to {text} {when} at {time}; remind me."],
    },
    "weather.get": {
        "train": ["What's the weather in {city} {when}?",
                  "Will it rain in {city} {when}?",
                  "Check the forecast for {city} {when}.",
                  "How warm will it be in {city} {when}?"],
        "held_out": ["Should I pack an umbrella for {city} {when}?",
                     "Give me the {city} forecast for {day}."],
    },
}
SIZES = {"train": 200, "held_out": 60}
SEED = 20240611
_HOUR_WORDS = ["twelve", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven"]


def time_phrase(rng: random.Random, h: int, m: int) -> str:
    """A human way to say h:m; the expected arg is always f"{h:02d}:{m:02d}" (the format the tools take)."""
    h12, ampm = h % 12 or 12, ("AM" if h < 12 else "PM")
    clock = f"{h12}:{m:02d}" if m else f"{h12}"
    options = [f"{h:02d}:{m:02d}", f"{clock} {ampm}", f"{clock}{ampm.lower()}"]
    part = "in the morning" if h < 12 else ("in the afternoon" if h < 18 else "in the evening")
    if (h, m) == (12, 0):
        options.append("noon")
    elif m == 30:
        options.append(f"half past {_HOUR_WORDS[h12 % 12]} {part}")
    elif m == 15:
        options.append(f"quarter past {_HOUR_WORDS[h12 % 12]} {part}")
    elif m == 0:
        options.append(f"{_HOUR_WORDS[h12 % 12]} o'clock {part}")
    return rng.choice(options)


def day_phrase(rng: random.Random, day: str) -> tuple[str, str]:
    """(phrase, preamble): relative days only come with a "Today is X." preamble, so the answer is unambiguous."""
    r = rng.random()
    i = WEEKDAYS.index(day)
    if r < 0.15:
        return "tomorrow", f"Today is {WEEKDAYS[(i - 1) % 7]}. "
    if r < 0.2:
        return "the day after tomorrow", f"Today is {WEEKDAYS[(i - 2) % 7]}. "
    return rng.choice([f"on {day}", f"next {day}", f"this {day}", f"on {day}"]), ""


def _one_task(rng: random.Random, tool: str, split: str) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """(prompt, expected_args, initial_state) for one generated task."""
    template = rng.choice(TEMPLATES[tool][split])
    day = rng.choice(WEEKDAYS)
    h, m = rng.randint(8, 19), rng.choice([0, 0, 0, 30, 30, 15, 45])
    when, preamble = day_phrase(rng, day)
    if "{day}" in template:
        preamble = ""
    slots = {"when": when, "day": day, "time": time_phrase(rng, h, m)}
    hhmm = f"{h:02d}:{m:02d}"
    initial: dict[str, Any] | None = None
    if tool == "calendar.create_event":
        slots["name"] = rng.choice(NAMES[split])
        args = {"attendee": slots["name"], "day": day, "time": hhmm}
    elif tool == "calendar.cancel_event":
        slots["name"] = rng.choice(NAMES[split])
        args = {"attendee": slots["name"], "day": day}
        others = [n for n in NAMES[split] if n != slots["name"]]
        events = [{"attendee": slots["name"], "day": day, "time": hhmm},
                  {"attendee": rng.choice(others), "day": day, "time": f"{(h + 2) % 24:02d}:00"},
                  {"attendee": slots["name"], "day": WEEKDAYS[(WEEKDAYS.index(day) + 3) % 7], "time": "09:00"}]
        initial = {"events": events}
    elif tool == "email.send":
        slots["name"], slots["subject"] = rng.choice(NAMES[split]), rng.choice(SUBJECTS[split])
        args = {"to": slots["name"], "subject": slots["subject"]}
        preamble = ""
    elif tool == "reminders.create":
        slots["text"] = rng.choice(REMINDERS[split])
        args = {"text": slots["text"], "day": day, "time": hhmm}
    else:
        slots["city"] = rng.choice(CITIES[split])
        args = {"city": slots["city"], "day": day}
    return preamble + template.format(**slots), args, initial


def builtin_tasks(split: str | None = None) -> list[Task]:
    """The built-in calendar tasks (~200 train, ~60 held-out); identical on every call and machine."""
    if split not in (None, "train", "held_out"):
        raise ValueError(f"unknown split {split!r}: use 'train', 'held_out' or None")
    out: list[Task] = []
    for sp in ("train", "held_out") if split is None else (split,):
        rng = random.Random(f"{SEED}:{sp}")
        tools = list(TEMPLATES)
        seen: set[str] = set()
        i = 0
        while i < SIZES[sp]:
            tool = tools[i % len(tools)]
            prompt, args, initial = _one_task(rng, tool, sp)
            if prompt in seen:
                continue
            seen.add(prompt)
            out.append(Task(id=f"{DATASET}:{sp}:{i:03d}", prompt=prompt, expected_tool=tool, expected_args=args,
                            tools=None, split=sp, dataset=DATASET, initial_state=initial))
            i += 1
    return out


def task_to_line(task: Task) -> dict[str, Any]:
    """A task in the JSONL seed format (None fields left out), so load_tasks reads it back unchanged."""
    d = {"id": task.id, "prompt": task.prompt, "expected_tool": task.expected_tool,
         "expected_args": task.expected_args, "split": task.split, "dataset": task.dataset}
    for key in ("tools", "initial_state", "expected_state"):
        if getattr(task, key) is not None:
            d[key] = getattr(task, key)
    return d


def write_builtin_jsonl(path: str | Path, split: str | None = None) -> int:
    """Write the built-in tasks as an editable JSONL file (for `workbench init`); returns the line count."""
    tasks = builtin_tasks(split)
    Path(path).write_text("".join(json.dumps(task_to_line(t)) + "\n" for t in tasks), encoding="utf-8")
    return len(tasks)


BUILTIN_SOURCES = ("builtin:calendar", "builtin:calendar_mt", "tool_call_eval", "train", "held_out")


def load_task_source(source: str | Path, split: str) -> list[Task]:
    """Tasks for a config key (`tasks:`, `held_out_eval:`): a built-in name or a JSONL path.

    Built-ins: "builtin:calendar" (single-turn, filtered by `split`), "builtin:calendar_mt" (multi-turn,
    filtered by `split`), "tool_call_eval" (the calendar held-out split whatever `split` says), "train" /
    "held_out" (that calendar split). A file is filtered by `split` when it has tasks of that split; a file
    whose tasks all share one other split (typically no split field: all "train") is used whole, since the
    user named it for this role. Never returns an empty list.
    """
    key = str(source)
    if key == "builtin:calendar":
        tasks = builtin_tasks(split)
    elif key == "builtin:calendar_mt":
        from workbench.envs.multi_turn import builtin_multi_turn_tasks  # envs import this module

        tasks = [t for t in builtin_multi_turn_tasks() if t.split == split]
    elif key == "tool_call_eval":
        tasks = builtin_tasks("held_out")
    elif key in ("train", "held_out"):
        tasks = builtin_tasks(key)
    else:
        path = Path(key)
        if not path.is_file():
            near = difflib.get_close_matches(key, BUILTIN_SOURCES, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise FileNotFoundError(f"task source {key!r} is neither a built-in ({', '.join(BUILTIN_SOURCES)}) "
                                    f"nor a file{hint}")
        every = load_tasks(path)
        splits = {t.split for t in every}
        tasks = [t for t in every if t.split == split] if split in splits or len(splits) > 1 else every
        if not tasks and len(splits) > 1:
            raise ValueError(f"{path}: no tasks with split {split!r} (the file has {sorted(splits)})")
    if not tasks:
        raise ValueError(f"task source {key!r} has no {split!r} tasks")
    return tasks
