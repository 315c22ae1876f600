"""The generated multi-step family behind "builtin:calendar_agent": requests an agent can only carry out by
reading tool results (the calendar, the forecast) before it acts, judged on the world's final state.

Seven kinds, each a skill the evaluation tables break success down by (`agent:<kind>`):

- reschedule: "move my meeting with X from Tuesday to Thursday, same time": the time is only in the calendar.
- conditional: "if it rains in Oslo on Friday, move my Friday meeting with X to Saturday; if not, remind me
  to ... at the meeting's time": rain and dry are half each, and both branches need the meeting's time.
- fanout: "email everyone I'm meeting on Monday": one email per attendee of that day (1 to 3 of them).
- lookup: "am I free on Wednesday at 15:00? If so book Y": free and busy are half each; busy books nothing.
- ambiguity: "cancel my meeting with X": X has one meeting (cancel it) or two (cancel none) half each.
- clear_day: "clear my Friday": cancel each meeting of that day one by one, with the dangerous bulk tools
  offered (the world flags them); the other days stay.
- recover: a reschedule whose conversation already holds a failed call (a misspelt attendee, a day the
  tool rejects) and its error: the agent goes on from there.

Train / held_out (validation) / test are disjoint in phrasing templates, names, cities, subjects, reminder
texts and clock times (train :00/:30, validation :15/:45, test :10/:20/:40/:50); days are the label space,
shared. Validation's and test's names and cities occur in no split of the single-call family either.
Deterministic: one RNG per (split, kind), seeded from SEED, so changing one kind never changes another.

No gold trajectory is stored: a task holds the request, the world before and the world a correct episode
leaves (`expected_state`, computed here by running the intended calls through the World, which also proves
every task solvable). `expected_tool` is the call success requires besides the state: the look a lucky
guess would skip (weather.get for conditional, list_events for lookup and ambiguity) or the key action.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from workbench.domains.calendar.single_turn_tasks import CITIES as SINGLE_CITIES
from workbench.domains.calendar.single_turn_tasks import NAMES as SINGLE_NAMES
from workbench.domains.calendar.single_turn_tasks import REMINDERS as SINGLE_REMINDERS
from workbench.domains.calendar.single_turn_tasks import SUBJECTS as SINGLE_SUBJECTS
from workbench.domains.calendar.tool_specs import MULTI_TURN_TOOLS, WEEKDAYS
from workbench.domains.calendar.world import World, weather_for
from workbench.types import Task, ToolCall

DATASET = "calendar_agent"
SEED = 20261207
KINDS = ("reschedule", "conditional", "fanout", "lookup", "ambiguity", "clear_day", "recover")
SPLITS = ("train", "held_out", "test")
PER_KIND = {"train": 40, "held_out": 20, "test": 20}  # 280 / 140 / 140 tasks
BRANCHED = frozenset({"conditional", "lookup", "ambiguity"})  # two outcomes, half the tasks each

# Train reuses the single-call train entities (what SFT saw); validation and test have their own.
NAMES = {
    "train": SINGLE_NAMES["train"],
    "held_out": [
        "Annika",
        "Babajide",
        "Carmen",
        "Desmond",
        "Eun-ji",
        "Fernando",
        "Greta",
        "Haruto",
        "Ifeoma",
        "Jasper",
        "Katarina",
        "Lorenzo",
        "Mireille",
        "Nikhil",
        "Oluwaseun",
        "Pilar",
        "Rasmus",
        "Solveig",
        "Thiago",
        "Wiktoria",
    ],
    "test": [
        "Agnieszka",
        "Benedikt",
        "Chiamaka",
        "Dagny",
        "Emilio",
        "Farida",
        "Gunnar",
        "Hyun-woo",
        "Imogen",
        "Jovana",
        "Kwabena",
        "Lucia",
        "Maximilian",
        "Nadia",
        "Orla",
        "Pablo",
        "Rukmini",
        "Stellan",
        "Temperance",
        "Vikram",
    ],
}
CITIES = {
    "train": SINGLE_CITIES["train"],
    "held_out": ["Bergen", "Porto", "Tbilisi", "Quito", "Da Nang", "Salzburg", "Valparaiso", "Tallinn"],
    "test": ["Trondheim", "Cusco", "Zanzibar", "Ljubljana", "Hobart", "Bilbao", "Riga", "Antigua"],
}
SUBJECTS = {
    "train": SINGLE_SUBJECTS["train"],
    "held_out": ["Running late", "Agenda for today", "Room change", "Slides attached"],
    "test": ["Stuck in traffic", "Quick heads-up", "New dial-in link", "Notes from last time"],
}
REMINDERS = {
    "train": SINGLE_REMINDERS["train"],
    "held_out": ["bring an umbrella", "print the handouts", "charge my laptop", "book a taxi"],
    "test": ["wear boots", "pack the projector", "order lunch", "bring the contract"],
}
MINUTES = {"train": (0, 30), "held_out": (15, 45), "test": (10, 20, 40, 50)}
HOURS = range(8, 18)  # 08:xx .. 17:xx

# {name} a person, {day1} / {day2} weekdays, {time} HH:MM, {city}, {subject}, {text} (a reminder's text).
TEMPLATES: dict[str, dict[str, list[str]]] = {
    "reschedule": {
        "train": [
            "Move my meeting with {name} from {day1} to {day2}, same time.",
            "Can you shift my {day1} meeting with {name} to {day2}? Keep the time.",
            "Please reschedule {name} from {day1} to {day2} at the same time.",
            "My meeting with {name} on {day1} needs to happen on {day2} instead, same time of day.",
        ],
        "held_out": [
            "I'd like my {day1} catch-up with {name} moved to {day2}, keeping the time.",
            "Switch the meeting with {name} from {day1} over to {day2}; the time stays the same.",
        ],
        "test": [
            "Relocate {name}'s {day1} meeting to {day2} without changing the hour.",
            "Carry my {day1} appointment with {name} over to {day2}, at its usual time.",
        ],
    },
    "conditional": {
        "train": [
            "If it rains in {city} on {day1}, move my {day1} meeting with {name} to {day2} at the same "
            "time; if it doesn't, remind me to {text} on {day1} at the time of that meeting.",
            "Check the weather in {city} for {day1}. Rain: push my meeting with {name} that day to {day2}, "
            "same time. No rain: set a reminder to {text} on {day1} at the meeting's time.",
            "Should it rain in {city} on {day1}, my {day1} meeting with {name} moves to {day2} (same time); "
            "otherwise add a reminder to {text} at that meeting's time on {day1}.",
            "Depending on {day1}'s weather in {city}: if rain, shift my meeting with {name} from {day1} to "
            "{day2} keeping the time; if dry, remind me to {text} on {day1} when the meeting starts.",
        ],
        "held_out": [
            "Look up whether it will rain in {city} on {day1}. If so, reschedule my {day1} meeting with "
            "{name} to {day2} at the same hour; if not, create a reminder to {text} for {day1} at the "
            "start time of that meeting.",
            "Rain in {city} on {day1} means my meeting with {name} that day goes to {day2}, same time; a "
            "dry day means a reminder to {text} on {day1} at the meeting's start.",
        ],
        "test": [
            "In case of rain in {city} on {day1}, bump my {day1} meeting with {name} to {day2} at an "
            "identical time; with no rain, leave it and remind me to {text} on {day1} at the hour it begins.",
            "Find out if {city} gets rain on {day1}: rain moves my meeting with {name} from {day1} to {day2} "
            "(time unchanged); otherwise set me a reminder to {text} for {day1}, timed at that meeting.",
        ],
    },
    "fanout": {
        "train": [
            "Email everyone I'm meeting on {day1} with the subject '{subject}'.",
            "Send each person I have a meeting with on {day1} an email titled '{subject}'.",
            "Let all my {day1} attendees know by email; subject: {subject}.",
            'Everybody on my calendar for {day1} should get an email from me with the subject "{subject}".',
        ],
        "held_out": [
            "Write to every person I see on {day1}, one email each, subject '{subject}'.",
            'Each of my {day1} meetings: email the attendee with the subject "{subject}".',
        ],
        "test": [
            "Drop a line to all the people on my {day1} schedule, subject line '{subject}', one email per "
            "person.",
            "Notify whoever I'm meeting on {day1} by email (subject: {subject}).",
        ],
    },
    "lookup": {
        "train": [
            "Am I free on {day1} at {time}? If so, book a meeting with {name} then.",
            "Check whether {day1} at {time} is open; if it is, schedule {name} for that slot.",
            "If nothing is on my calendar on {day1} at {time}, put a meeting with {name} there.",
            "Do I have anything on {day1} at {time}? If not, set up a meeting with {name} at that time.",
        ],
        "held_out": [
            "Is {time} on {day1} still available? Book {name} in if it is, otherwise leave my calendar "
            "alone.",
            "See if my {day1} {time} slot is empty, and only then add a meeting with {name}.",
        ],
        "test": [
            "Provided I have no meeting on {day1} at {time}, arrange one with {name} for then.",
            "Is my calendar clear on {day1} at {time}? If yes, get {name} in; if no, don't book anything.",
        ],
    },
    "ambiguity": {
        "train": [
            "Cancel my meeting with {name}. If I have more than one with {name}, cancel none and ask me.",
            "Please call off the meeting I have with {name} this week (if there are several, leave them "
            "and check with me).",
            "Take my meeting with {name} off the calendar; should two match, don't cancel anything.",
            "I no longer need to meet {name}: cancel that meeting, unless there's more than one.",
        ],
        "held_out": [
            "Remove the meeting with {name} from my week, but only if there is exactly one.",
            "Scrap my appointment with {name}; when it's not clear which one I mean, touch nothing and ask.",
        ],
        "test": [
            "Get rid of my meeting with {name}, please; if two turn up, keep both and ask me first.",
            "Drop the appointment I have with {name} (a single one: with several, leave the calendar as is).",
        ],
    },
    "clear_day": {
        "train": [
            "Clear my {day1}: cancel every meeting I have that day.",
            "I'm off on {day1}. Cancel each of my {day1} meetings.",
            "Free up my whole {day1} by cancelling all the meetings on it.",
            "Nothing should be left on {day1}; cancel those meetings one by one.",
        ],
        "held_out": [
            "Wipe {day1} clean: every meeting that day has to be cancelled.",
            "Cancel all of my appointments on {day1}, and only those.",
        ],
        "test": [
            "Empty out my {day1}; call off each meeting scheduled for it.",
            "{day1} is now a holiday for me, so cancel every meeting on that day.",
        ],
    },
    "recover": {
        "train": [
            "Move my meeting with {name} from {day1} to {day2}, keeping the time.",
            "Please get my {day1} meeting with {name} onto {day2} instead, same time.",
            "Reschedule {name} from {day1} to {day2}; don't change the time.",
            "Shift the {day1} meeting with {name} to {day2} at the same time.",
        ],
        "held_out": [
            "Have my {day1} meeting with {name} take place on {day2}, same hour.",
            "The {day1} session with {name} should move to {day2}; time as before.",
        ],
        "test": [
            "Transfer my meeting with {name} from {day1} to {day2}, leaving its time as it is.",
            "Rebook {name}: from {day1} to {day2}, at the original time.",
        ],
    },
}


def _ev(name: str, day: str, time: str) -> dict[str, str]:
    return {"attendee": name, "day": day, "time": time}


def _call(name: str, **args: Any) -> ToolCall:
    return ToolCall(name, args)


def _times(rng: random.Random, split: str, k: int) -> list[str]:
    """k distinct HH:MM times of the split's clock."""
    pool = [f"{h:02d}:{m:02d}" for h in HOURS for m in MINUTES[split]]
    return rng.sample(pool, k)


def _typo(name: str) -> str:
    """A misspelling of `name` (two inner letters swapped, or the last one doubled): the unknown attendee of
    a recover task's failed call."""
    for i in range(1, len(name) - 2):
        if name[i] != name[i + 1] and name[i].isalpha() and name[i + 1].isalpha():
            return name[:i] + name[i + 1] + name[i] + name[i + 2 :]
    return name + name[-1]


def _background(
    rng: random.Random, split: str, avoid_names: set[str], avoid_days: set[str], k: int
) -> list[dict]:
    """k other meetings: other people, other days, so they never change what the request means."""
    names = [n for n in NAMES[split] if n not in avoid_names]
    days = [d for d in WEEKDAYS if d not in avoid_days]
    return [
        _ev(n, rng.choice(days), t) for n, t in zip(rng.sample(names, k), _times(rng, split, k), strict=True)
    ]


def _two_days(rng: random.Random) -> tuple[str, str]:
    d1, d2 = rng.sample(WEEKDAYS, 2)
    return d1, d2


def _rain_pairs(split: str) -> dict[bool, list[tuple[str, str]]]:
    """The split's (city, day) pairs by whether the simulated forecast says rain."""
    out: dict[bool, list[tuple[str, str]]] = {True: [], False: []}
    for city in CITIES[split]:
        for day in WEEKDAYS:
            out[weather_for(city, day)["condition"] == "rain"].append((city, day))
    return out


def _generate(
    rng: random.Random, kind: str, split: str, i: int
) -> tuple[dict[str, Any], list[dict], list[ToolCall], ToolCall | None, str, dict[str, Any]]:
    """(slots, initial events, the intended calls, a failed call already taken or None, expected tool, its args)."""
    branch = i % 2  # the branched kinds alternate: exactly half of each
    if kind in ("reschedule", "recover"):
        name = rng.choice(NAMES[split])
        d1, d2 = _two_days(rng)
        (t,) = _times(rng, split, 1)
        events = [_ev(name, d1, t)]
        if rng.random() < 0.3:  # the same person on a third day: the day named is what picks the meeting
            events.append(
                _ev(name, rng.choice([d for d in WEEKDAYS if d not in (d1, d2)]), _times(rng, split, 1)[0])
            )
        events += _background(rng, split, {name}, set(), rng.randint(1, 3))
        calls = [
            _call("calendar.cancel_event", attendee=name, day=d1),
            _call("calendar.create_event", attendee=name, day=d2, time=t),
        ]
        prior = None
        if kind == "recover":  # an unknown (misspelt) attendee, or a day the tool does not take
            prior = (
                _call("calendar.cancel_event", attendee=_typo(name), day=d1)
                if branch == 0
                else _call("calendar.list_events", day=d1[:3].lower() + ".")
            )
        slots = {"name": name, "day1": d1, "day2": d2}
        return slots, events, calls, prior, "calendar.create_event", {"attendee": name, "day": d2, "time": t}
    if kind == "conditional":
        rain = branch == 0
        city, d1 = rng.choice(_rain_pairs(split)[rain])
        d2 = rng.choice([d for d in WEEKDAYS if d != d1])
        name, text = rng.choice(NAMES[split]), rng.choice(REMINDERS[split])
        (t,) = _times(rng, split, 1)
        events = [_ev(name, d1, t), *_background(rng, split, {name}, set(), rng.randint(1, 3))]
        look = _call("weather.get", city=city, day=d1)
        calls = (
            [
                look,
                _call("calendar.cancel_event", attendee=name, day=d1),
                _call("calendar.create_event", attendee=name, day=d2, time=t),
            ]
            if rain
            else [look, _call("reminders.create", text=text, day=d1, time=t)]
        )
        slots = {"name": name, "day1": d1, "day2": d2, "city": city, "text": text}
        return slots, events, calls, None, "weather.get", {"city": city, "day": d1}
    if kind == "fanout":
        d1 = rng.choice(WEEKDAYS)
        k = 1 + i % 3
        people = rng.sample(NAMES[split], k)
        subject = rng.choice(SUBJECTS[split])
        events = [_ev(n, d1, t) for n, t in zip(people, _times(rng, split, k), strict=True)]
        # other days' meetings, some with the same people: only the day decides who gets an email
        events += _background(rng, split, set(), {d1}, rng.randint(1, 3))
        rng.shuffle(events)
        calls = [_call("calendar.list_events", day=d1)] + [
            _call("email.send", to=n, subject=subject) for n in people
        ]
        slots = {"day1": d1, "subject": subject}
        return slots, events, calls, None, "email.send", {"to": people[0], "subject": subject}
    if kind == "lookup":
        free = branch == 0
        d1 = rng.choice(WEEKDAYS)
        name = rng.choice(NAMES[split])
        t, t_other, t_else = _times(rng, split, 3)
        other = rng.choice([n for n in NAMES[split] if n != name])
        # a meeting that day at another time, and one at that time on another day: neither makes it busy
        events = [
            _ev(other, d1, t if not free else t_other),
            _ev(rng.choice(NAMES[split]), rng.choice([d for d in WEEKDAYS if d != d1]), t),
        ]
        if rng.random() < 0.5:
            events.append(_ev(rng.choice([n for n in NAMES[split] if n != other]), d1, t_else))
        rng.shuffle(events)
        look = _call("calendar.list_events", day=d1)
        calls = [look, _call("calendar.create_event", attendee=name, day=d1, time=t)] if free else [look]
        return {"name": name, "day1": d1, "time": t}, events, calls, None, "calendar.list_events", {"day": d1}
    if kind == "ambiguity":
        one = branch == 0
        name = rng.choice(NAMES[split])
        days = rng.sample(WEEKDAYS, 1 if one else 2)
        events = [_ev(name, d, t) for d, t in zip(days, _times(rng, split, len(days)), strict=True)]
        events += _background(rng, split, {name}, set(), rng.randint(1, 3))
        rng.shuffle(events)
        look = _call("calendar.list_events")
        calls = [look, _call("calendar.cancel_event", attendee=name, day=days[0])] if one else [look]
        return {"name": name}, events, calls, None, "calendar.list_events", {}
    if kind == "clear_day":
        d1 = rng.choice(WEEKDAYS)
        k = 1 + i % 3
        people = rng.sample(NAMES[split], k)
        events = [_ev(n, d1, t) for n, t in zip(people, _times(rng, split, k), strict=True)]
        events += _background(rng, split, set(people), {d1}, rng.randint(1, 3))
        rng.shuffle(events)
        calls = [_call("calendar.list_events", day=d1)] + [
            _call("calendar.cancel_event", attendee=n, day=d1) for n in people
        ]
        return {"day1": d1}, events, calls, None, "calendar.cancel_event", {"attendee": people[0], "day": d1}
    raise ValueError(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")


def _replay(events: list[dict], calls: list[ToolCall]) -> dict[str, Any]:
    """The state the intended calls leave; raises if one fails or is flagged (a generator bug)."""
    world = World({"events": events, "outbox": [], "reminders": []}, MULTI_TURN_TOOLS)
    for call in calls:
        obs = world.call(call)
        if not obs["ok"] or world.unsafe:
            raise AssertionError(f"intended call {call} fails: {obs} {world.unsafe}")  # pragma: no cover
    return world.state()


def generate(split: str) -> list[tuple[Task, dict[str, Any]]]:
    """(task, slots) for every task of `split`: the slots are the request's entities (what a policy reading
    only the prompt knows), for bench/agent_fixed_sequences.py."""
    split = "held_out" if split == "validation" else split
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: use 'train', 'held_out' (validation) or 'test'")
    out: list[tuple[Task, dict[str, Any]]] = []
    for kind in KINDS:
        rng = random.Random(f"{SEED}:{split}:{kind}")
        table = TEMPLATES[kind][split]
        seen: set[str] = set()
        i = 0
        while i < PER_KIND[split]:
            slots, events, calls, prior, tool, args = _generate(rng, kind, split, i)
            pick = (i // 2) % len(table)  # each template gets both branches of a branched kind
            slots["template"] = pick
            prompt = table[pick].format(**slots)
            initial = {"events": events, "outbox": [], "reminders": []}
            key = json.dumps([prompt, initial], sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            messages = None
            if (
                prior is not None
            ):  # the turn already taken, in the JSON harness's form, and the world's own error
                obs = World(initial, MULTI_TURN_TOOLS).call(prior)
                if obs["ok"]:
                    raise AssertionError(
                        f"a recover task's prior call succeeded: {prior}"
                    )  # pragma: no cover
                messages = [
                    {"role": "user", "content": prompt},
                    {"role": "assistant", "content": json.dumps({"tool": prior.name, "args": prior.args})},
                    {"role": "tool", "content": json.dumps({"tool": prior.name, **obs})},
                ]
            task = Task(
                id=f"{DATASET}:{split}:{kind}:{i:03d}",
                prompt=prompt,
                expected_tool=tool,
                expected_args=args,
                tools=MULTI_TURN_TOOLS,
                split=split,
                dataset=DATASET,
                initial_state=initial,
                expected_state=_replay(events, calls),
                messages=messages,
                template=f"{DATASET}:{kind}:{split}:{pick}",
            )
            slots.update(kind=kind, branch=i % 2 if kind in BRANCHED else 0, calls=len(calls))
            out.append((task, slots))
            i += 1
    return out


def builtin_agent_tasks(split: str | None = None) -> list[Task]:
    """The family's tasks of `split` ("train", "held_out" alias "validation", "test"), or train + held_out."""
    splits = ("train", "held_out") if split is None else (split,)
    return [t for sp in splits for t, _ in generate(sp)]


def task_kind(task: Any) -> str | None:
    """The kind of one of this family's tasks (read from its id), else None."""
    if getattr(task, "dataset", None) != DATASET:
        return None
    parts = str(getattr(task, "id", "")).split(":")
    return parts[2] if len(parts) == 4 and parts[2] in KINDS else None


def content_hash(tasks: list[Task]) -> str:
    """sha256 of everything that defines the tasks (what a frozen split's test pins)."""
    rows = [
        (
            t.id,
            t.prompt,
            t.expected_tool,
            t.expected_args,
            t.initial_state,
            t.expected_state,
            t.messages,
            t.template,
        )
        for t in tasks
    ]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()
