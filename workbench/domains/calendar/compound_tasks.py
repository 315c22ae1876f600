"""The built-in "calendar_compound" family behind "builtin:calendar_compound": two independent single-call
requests in one message ("Cancel my meeting with Hana on Sunday. Also: forecast for Oslo, Friday?"), answered
by their two calls, one a turn in the multi-turn env, then `finish`.

Why: the agent warm-up's single calls each end with `finish` after their one tool result, and that made the
policy finish after any result with probability 0.9999, a listing included (docs/results.md, session 18):
GRPO never sampled a second action, so it could not learn to act on what a look found. These requests show a
second call after a result, while needing no result to be read: each call is fixed by the request alone, as
in a user's logs of compound requests. No path of the multi-step family (look, then act on what was found)
is written down.

Built from the single-call family's tasks of the same split (train: its train requests; held_out: its
held_out ones), two of different tools a task; a cancel's meeting is put on the starting calendar so that
the gold episode's call succeeds. Deterministic (one RNG per split).
"""

from __future__ import annotations

import random
from typing import Any

from workbench.domains.calendar.single_turn_tasks import builtin_tasks
from workbench.domains.calendar.tool_specs import MULTI_TURN_TOOLS
from workbench.types import Task

DATASET = "calendar_compound"
SEED = 20261209
SPLITS = ("train", "held_out")
SIZES = {"train": 300, "held_out": 30}
CANCEL = "calendar.cancel_event"


def _state(first: Task, second: Task) -> dict[str, Any]:
    """A calendar holding the meeting each cancel removes (at a time the request does not need)."""
    events = [
        {"attendee": t.expected_args["attendee"], "day": t.expected_args["day"], "time": "12:00"}
        for t in (first, second)
        if t.expected_tool == CANCEL
    ]
    return {"events": events, "outbox": [], "reminders": []}


def builtin_compound_tasks(split: str | None = None) -> list[Task]:
    """The family's tasks of `split` (train / held_out, alias validation), or both; ids are stable."""
    if split == "validation":
        split = "held_out"
    if split is not None and split not in SPLITS:
        raise ValueError(f"builtin:calendar_compound has no {split!r} split (it has {', '.join(SPLITS)})")
    tasks: list[Task] = []
    for sp in SPLITS if split is None else (split,):
        rng = random.Random(f"{SEED}:{sp}")
        pool = builtin_tasks(sp)
        i = 0
        while i < SIZES[sp]:
            first, second = rng.sample(pool, 2)
            if first.expected_tool == second.expected_tool:
                continue
            tasks.append(
                Task(
                    id=f"{DATASET}:{sp}:{i:03d}",
                    prompt=f"{first.prompt} Also: {second.prompt}",
                    expected_tool=None,
                    expected_args={},
                    expected_calls=[
                        {"name": t.expected_tool, "arguments": dict(t.expected_args)} for t in (first, second)
                    ],
                    tools=MULTI_TURN_TOOLS,
                    split=sp,
                    dataset=DATASET,
                    initial_state=_state(first, second),
                    template=f"{DATASET}:{first.template}+{second.template}",
                )
            )
            i += 1
    return tasks
