"""The built-in "calendar_look" family behind "builtin:calendar_look": single-call questions about the calendar,
each answered by one `calendar.list_events` call ("What's on my Friday?", "When am I meeting Ana?").

Why a family of its own: the multi-step agent family (`agent_tasks`) is only solvable by looking at the calendar
before acting, and a warm-up on the single-call calendar family never calls `calendar.list_events` (it is not
among that family's tools). GRPO cannot reinforce a call its policy never samples: after that warm-up, 0 of the
recipe's rollouts listed the calendar (docs/results.md, session 18). These questions are single calls, the kind
of example a user has; no multi-step path is written down.

Each task starts from a small calendar (`initial_state`) so the warm-up's gold episode sees a real listing
before it answers. No `expected_state`: a question changes nothing, and `splits.stage_tasks` keeps the family
in the SFT warm-up. Train and held_out (validation) are disjoint in phrasing templates and names (the agent
family's validation and test names occur in neither). Deterministic (one RNG per split).
"""

from __future__ import annotations

import random
from typing import Any

from workbench.domains.calendar.agent_tasks import NAMES as AGENT_NAMES
from workbench.domains.calendar.tool_specs import MULTI_TURN_TOOLS, WEEKDAYS
from workbench.types import Task

DATASET = "calendar_look"
SEED = 20261208
SPLITS = ("train", "held_out")
SIZES = {"train": 240, "held_out": 40}
LIST_EVENTS = "calendar.list_events"

# Train uses the single-call family's train names (what the warm-up sees elsewhere); held_out its own, found
# in no other split of either family.
NAMES = {
    "train": AGENT_NAMES["train"],
    "held_out": ["Dorota", "Finnegan", "Giedre", "Hamid", "Ingvild", "Jurgis", "Mehmet", "Noor"],
}
MINUTES = {"train": (0, 30), "held_out": (15, 45)}

# (template, whether the call names the day). {day} a weekday, {name} a person on the calendar.
TEMPLATES: dict[str, list[tuple[str, bool]]] = {
    "train": [
        ("What's on my calendar on {day}?", True),
        ("Do I have any meetings on {day}?", True),
        ("Show me my {day} schedule.", True),
        ("Who am I meeting on {day}?", True),
        ("What time is my meeting with {name} on {day}?", True),
        ("List everything I have on {day}.", True),
        ("When am I meeting {name} this week?", False),
        ("What's on my calendar this week?", False),
        ("Show me all my meetings.", False),
        ("At what time do I see {name}?", False),
    ],
    "held_out": [
        ("Anything booked for {day}?", True),
        ("Tell me what {day} looks like.", True),
        ("Which day is my meeting with {name}?", False),
        ("Give me an overview of my whole calendar.", False),
    ],
}


def _calendar(rng: random.Random, split: str, name: str) -> list[dict[str, str]]:
    """One to four meetings on distinct (person, day) pairs, `name`'s among them."""
    others = rng.sample([n for n in NAMES[split] if n != name], rng.randint(0, 3))
    times = [f"{h:02d}:{m:02d}" for h in range(8, 18) for m in MINUTES[split]]
    return [
        {"attendee": person, "day": rng.choice(WEEKDAYS), "time": rng.choice(times)}
        for person in [name, *others]
    ]


def builtin_look_tasks(split: str | None = None) -> list[Task]:
    """The family's tasks of `split` (train / held_out, alias validation), or both; ids are stable."""
    if split == "validation":
        split = "held_out"
    if split is not None and split not in SPLITS:
        raise ValueError(f"builtin:calendar_look has no {split!r} split (it has {', '.join(SPLITS)})")
    tasks: list[Task] = []
    for sp in SPLITS if split is None else (split,):
        rng = random.Random(f"{SEED}:{sp}")
        table = TEMPLATES[sp]
        for i in range(SIZES[sp]):
            pick = i % len(table)
            template, names_day = table[pick]
            name = rng.choice(NAMES[sp])
            events = _calendar(rng, sp, name)
            day = events[0]["day"] if "{name}" in template else rng.choice(WEEKDAYS)
            args: dict[str, Any] = {"day": day} if names_day else {}
            tasks.append(
                Task(
                    id=f"{DATASET}:{sp}:{i:03d}",
                    prompt=template.format(day=day, name=name),
                    expected_tool=LIST_EVENTS,
                    expected_args=args,
                    tools=MULTI_TURN_TOOLS,
                    split=sp,
                    dataset=DATASET,
                    initial_state={"events": events, "outbox": [], "reminders": []},
                    template=f"{DATASET}:{sp}:{pick}",
                )
            )
    return tasks
