"""Realistic rows for store tests and the store benchmark (multi-turn JSON, about 2 KB each)."""

from __future__ import annotations

import random
from typing import Any

SYSTEM = (
    "You are a tool-calling assistant. Tools: calendar.create_event(attendee, day, time), "
    "calendar.cancel_event(attendee, day), email.send(to, subject), reminders.create(text, day, time), "
    'weather.get(city, day). Reply with one JSON object only: {"tool": name, "args": {...}}. '
) * 3


def trajectory_row(
    run_id: int, step: int, group: int, sample: int, rng: random.Random, task_id: int | None = None
) -> dict[str, Any]:
    reward = rng.choice([-1.0, 0.4, 0.6, 0.8, 1.0])
    call = {
        "tool": "calendar.create_event",
        "args": {"attendee": "Alex", "day": "Tuesday", "time": f"{rng.randint(8, 18)}:00"},
    }
    hour = rng.randint(1, 12)
    completion = f'{{"tool": "calendar.create_event", "args": {{"attendee": "Alex", "time": "{hour} PM"}}}}'
    return {
        "run_id": run_id,
        "step": step,
        "split": "train",
        "task_id": task_id,
        "group_idx": group,
        "sample_idx": sample,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": f"Create a calendar event for Alex next Tuesday at {rng.randint(1, 12)} PM.",
            },
            {"role": "assistant", "content": completion},
            {"role": "tool", "content": '{"ok": true, "event_id": 17}'},
            {"role": "assistant", "content": '{"tool": "finish", "args": {"answer": "done"}}'},
        ],
        "completion": completion,
        "tool_calls": [call],
        "reward": reward,
        "reward_parts": {"valid_json": 0.0, "tool": 0.4, "args": 0.2, "safe": 0.2},
        "explanation": "right tool, 2/3 args",
        "verifier_id": None,
        "advantage": rng.uniform(-1, 1),
        "prompt_tokens": 310,
        "tokens": 38,
        "truncated": 0,
        "latency": 0.41,
    }
