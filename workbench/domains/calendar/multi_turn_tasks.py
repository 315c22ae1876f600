"""The built-in multi-turn calendar tasks: each needs looking at the world before acting, or more than one
action. Hand-written and deterministic; the verifier judges the world's final state against
`expected_state`.
"""

from __future__ import annotations

from typing import Any

from workbench.domains.calendar.tool_specs import MULTI_TURN_TOOLS
from workbench.domains.calendar.world import weather_for
from workbench.types import Task

DATASET = "calendar_mt"

HELD_OUT_MT = frozenset({6, 9, 12, 13})  # one of each kind kept for the held-out eval


def _ev(attendee: str, day: str, time: str) -> dict[str, str]:
    return {"attendee": attendee, "day": day, "time": time}


def _mt(
    i: int,
    prompt: str,
    tool: str,
    args: dict[str, Any],
    events: list[dict[str, str]],
    end_events: list[dict[str, str]],
    outbox: list[dict[str, str]] | None = None,
    reminders: list[dict[str, str]] | None = None,
) -> Task:
    split = "held_out" if i in HELD_OUT_MT else "train"
    return Task(
        id=f"{DATASET}:{split}:{i:03d}",
        prompt=prompt,
        expected_tool=tool,
        expected_args=args,
        tools=MULTI_TURN_TOOLS,
        split=split,
        dataset=DATASET,
        initial_state={"events": events, "outbox": [], "reminders": []},
        expected_state={"events": end_events, "outbox": outbox or [], "reminders": reminders or []},
    )


def _rain_city(rain: bool, day: str) -> str:
    """The first city (fixed order) whose simulated forecast has rain on `day` (or not), for both branches."""
    for city in [
        "Paris",
        "London",
        "Tokyo",
        "Berlin",
        "Madrid",
        "Rome",
        "Boston",
        "Chicago",
        "Sydney",
        "Seoul",
    ]:
        if (weather_for(city, day)["condition"] == "rain") == rain:
            return city
    raise AssertionError("no city for this weather branch")  # pragma: no cover - table is fixed


def builtin_multi_turn_tasks() -> list[Task]:
    """14 deterministic tasks (10 train, 4 held-out) that need observation before action (list, then cancel,
    then create...)."""
    t: list[Task] = []
    t.append(
        _mt(
            0,
            "Move my meeting with Sam from Monday to Wednesday.",
            "calendar.create_event",
            {"attendee": "Sam", "day": "Wednesday", "time": "10:00"},
            [_ev("Sam", "Monday", "10:00"), _ev("Alex", "Tuesday", "09:00")],
            [_ev("Alex", "Tuesday", "09:00"), _ev("Sam", "Wednesday", "10:00")],
        )
    )
    t.append(
        _mt(
            1,
            "Move my meeting with Priya from Thursday to Friday, same time.",
            "calendar.create_event",
            {"attendee": "Priya", "day": "Friday", "time": "15:30"},
            [_ev("Priya", "Thursday", "15:30"), _ev("Omar", "Friday", "11:00")],
            [_ev("Omar", "Friday", "11:00"), _ev("Priya", "Friday", "15:30")],
        )
    )
    t.append(
        _mt(
            2,
            "Push my Tuesday meeting with Jordan to 16:00 the same day.",
            "calendar.create_event",
            {"attendee": "Jordan", "day": "Tuesday", "time": "16:00"},
            [_ev("Jordan", "Tuesday", "11:00")],
            [_ev("Jordan", "Tuesday", "16:00")],
        )
    )
    t.append(
        _mt(
            3,
            "Cancel my meeting with Dana on Monday and email her with the subject 'Need to reschedule'.",
            "email.send",
            {"to": "Dana", "subject": "Need to reschedule"},
            [_ev("Dana", "Monday", "14:00"), _ev("Kim", "Monday", "09:00")],
            [_ev("Kim", "Monday", "09:00")],
            outbox=[{"to": "Dana", "subject": "Need to reschedule"}],
        )
    )
    t.append(
        _mt(
            4,
            "Email everyone I'm meeting on Thursday with the subject 'Running late'.",
            "email.send",
            {"to": "Nina", "subject": "Running late"},
            [
                _ev("Lee", "Thursday", "10:00"),
                _ev("Nina", "Thursday", "13:00"),
                _ev("Max", "Friday", "09:00"),
            ],
            [
                _ev("Lee", "Thursday", "10:00"),
                _ev("Nina", "Thursday", "13:00"),
                _ev("Max", "Friday", "09:00"),
            ],
            outbox=[{"to": "Lee", "subject": "Running late"}, {"to": "Nina", "subject": "Running late"}],
        )
    )
    t.append(
        _mt(
            5,
            "Book a meeting with Zoe on Tuesday at 15:00, or at 16:00 if I already have something at 15:00.",
            "calendar.create_event",
            {"attendee": "Zoe", "day": "Tuesday", "time": "16:00"},
            [_ev("Chris", "Tuesday", "15:00")],
            [_ev("Chris", "Tuesday", "15:00"), _ev("Zoe", "Tuesday", "16:00")],
        )
    )
    t.append(
        _mt(
            6,
            "Book a meeting with Wei on Friday at 10:00, or at 11:00 if 10:00 is taken.",
            "calendar.create_event",
            {"attendee": "Wei", "day": "Friday", "time": "10:00"},
            [_ev("Emma", "Friday", "14:00")],
            [_ev("Emma", "Friday", "14:00"), _ev("Wei", "Friday", "10:00")],
        )
    )
    t.append(
        _mt(
            7,
            "Remind me to prepare slides one hour before my meeting with Liam on Wednesday.",
            "reminders.create",
            {"text": "prepare slides", "day": "Wednesday", "time": "13:00"},
            [_ev("Liam", "Wednesday", "14:00")],
            [_ev("Liam", "Wednesday", "14:00")],
            reminders=[{"text": "prepare slides", "day": "Wednesday", "time": "13:00"}],
        )
    )
    for i, rain in ((8, True), (9, False)):
        city = _rain_city(rain, "Saturday")
        prompt = (
            f"If it will rain in {city} on Saturday, remind me to take an umbrella on Saturday at 08:00; "
            "if not, email Sam with the subject 'Picnic is on'."
        )
        if rain:
            rem = {"text": "take an umbrella", "day": "Saturday", "time": "08:00"}
            t.append(_mt(i, prompt, "reminders.create", rem, [], [], reminders=[rem]))
        else:
            mail = {"to": "Sam", "subject": "Picnic is on"}
            t.append(_mt(i, prompt, "email.send", mail, [], [], outbox=[mail]))
    t.append(
        _mt(
            10,
            "Check what I have on Monday and cancel whatever is with Taylor.",
            "calendar.cancel_event",
            {"attendee": "Taylor", "day": "Monday"},
            [_ev("Taylor", "Monday", "12:00"), _ev("Riley", "Monday", "15:00")],
            [_ev("Riley", "Monday", "15:00")],
        )
    )
    t.append(
        _mt(
            11,
            "I'm off on Friday: cancel each of my Friday meetings.",
            "calendar.cancel_event",
            {"attendee": "Casey", "day": "Friday"},
            [
                _ev("Jamie", "Friday", "09:00"),
                _ev("Casey", "Friday", "11:00"),
                _ev("Morgan", "Thursday", "10:00"),
            ],
            [_ev("Morgan", "Thursday", "10:00")],
        )
    )
    t.append(
        _mt(
            12,
            "Find the day of my meeting with Omar and set a reminder to print the agenda that day at 08:00.",
            "reminders.create",
            {"text": "print the agenda", "day": "Wednesday", "time": "08:00"},
            [_ev("Omar", "Wednesday", "11:00")],
            [_ev("Omar", "Wednesday", "11:00")],
            reminders=[{"text": "print the agenda", "day": "Wednesday", "time": "08:00"}],
        )
    )
    t.append(
        _mt(
            13,
            "Do I have anything with Kim on Tuesday? If not, book Kim on Tuesday at 09:00.",
            "calendar.create_event",
            {"attendee": "Kim", "day": "Tuesday", "time": "09:00"},
            [_ev("Kim", "Wednesday", "09:00")],
            [_ev("Kim", "Wednesday", "09:00"), _ev("Kim", "Tuesday", "09:00")],
        )
    )
    return t
