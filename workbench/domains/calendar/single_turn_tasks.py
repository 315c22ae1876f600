"""The built-in single-turn calendar tasks: phrasing templates, entities and a seeded generator.

Three splits with distinct roles: `train` (rollouts, SFT), `held_out` (the validation split: promotion and
every recipe decision) and `test` (reported only; nothing is decided on it). Validation and test use
phrasing templates and entities never seen in train, and test's are disjoint from validation's too,
including its clock times (minutes :10 :20 :40 :50, never used elsewhere), so the test split measures
requests nobody tuned on. `validation_wide` is a second, wider validation family (opt-in; see SIZES).
Days are the label space: shared. Each split has its own RNG, seeded from SEED
and the split name: the tasks are identical on every call and machine, and changing one split's tables
never changes another split.
"""

from __future__ import annotations

import random
from typing import Any

from workbench.domains.calendar.tool_specs import WEEKDAYS
from workbench.types import Task

DATASET = "calendar"
NAMES = {
    "train": [
        "Alex",
        "Sam",
        "Jordan",
        "Taylor",
        "Morgan",
        "Casey",
        "Riley",
        "Jamie",
        "Chris",
        "Dana",
        "Lee",
        "Kim",
        "Max",
        "Nina",
        "Omar",
        "Priya",
        "Wei",
        "Zoe",
        "Liam",
        "Emma",
        # names of many origins and lengths: the skill is copying a name, not knowing twenty of them
        "Adaeze",
        "Bartholomew",
        "Camille",
        "Dariusz",
        "Elif",
        "Florian",
        "Gulnara",
        "Hamish",
        "Isabela",
        "Joaquin",
        "Kalani",
        "Ludmila",
        "Mohammed",
        "Njeri",
        "Oskar",
        "Paloma",
        "Quentin",
        "Rosalind",
        "Siddharth",
        "Thandiwe",
        "Ulrich",
        "Valentina",
        "Wojciech",
        "Ximena",
        "Yusuf",
        "Zainab",
        "Ana",
        "Bo",
        "Cyrus",
        "Delphine",
        "Emeka",
        "Freya",
        "Guillermo",
        "Hana",
        "Ignatius",
        "Juniper",
    ],
    "held_out": [
        "Beatrice",
        "Hiroshi",
        "Fatima",
        "Mateo",
        "Ingrid",
        "Kofi",
        "Anouk",
        "Dmitri",
        "Yara",
        "Tomasz",
        "Leilani",
        "Ravi",
    ],
    "test": [
        "Aurelio",
        "Sunniva",
        "Chidi",
        "Margarethe",
        "Tariq",
        "Xiomara",
        "Bjorn",
        "Esperanza",
        "Kenji",
        "Olamide",
        "Radka",
        "Eitan",
    ],
}
CITIES = {
    "train": [
        "Paris",
        "London",
        "Tokyo",
        "Berlin",
        "Madrid",
        "Rome",
        "Boston",
        "Chicago",
        "Sydney",
        "Toronto",
        "Seoul",
        "Dublin",
        "Cairo",
        "Mumbai",
        "Vancouver",
        "Prague",
        "Buenos Aires",
        "Manila",
        "Helsinki",
        "Cape Town",
        "San Diego",
        "Istanbul",
        "Auckland",
        "Marseille",
    ],
    "held_out": ["Lisbon", "Nairobi", "Oslo", "Lima", "Hanoi", "Denver"],
    "test": ["Reykjavik", "Montevideo", "Accra", "Krakow", "Wellington", "Kyoto"],
}
SUBJECTS = {
    "train": [
        "Budget review",
        "Project update",
        "Lunch plans",
        "Quarterly report",
        "Team offsite",
        "Invoice 42",
        "Weekly sync notes",
        "Travel plans",
        "Hiring update",
        "Design feedback",
        "Q3 roadmap",
        "Vendor quotes",
        "Re: your question",
        "Birthday party",
        "Launch checklist",
        "Expense report",
        "Interview schedule",
        "Lease renewal",
        "API outage postmortem",
        "Welcome aboard",
    ],
    "held_out": [
        "Contract renewal",
        "Board meeting agenda",
        "Server migration",
        "Holiday schedule",
        "Conference tickets",
    ],
    "test": [
        "Parking permits",
        "Offsite catering",
        "Security audit",
        "Printer lease",
        "Onboarding checklist",
    ],
}
REMINDERS = {
    "train": [
        "call the dentist",
        "water the plants",
        "pay rent",
        "buy milk",
        "submit the report",
        "book flights",
        "renew my passport",
        "pick up the laundry",
        "take out the trash",
        "send the invoice",
        "stretch",
        "file the taxes",
        "walk the dog",
        "call mom",
        "check the oven",
        "update the budget sheet",
        "buy a birthday gift for Sam",
        "move the car",
        "email the landlord",
        "start the backup",
    ],
    "held_out": [
        "feed the cat",
        "back up my laptop",
        "return the library books",
        "cancel the gym trial",
        "order printer ink",
    ],
    "test": [
        "renew the car insurance",
        "call grandma",
        "defrost the freezer",
        "charge the camera batteries",
        "sign the lease",
    ],
}
# Each tool's training phrasings include some without the tool's keyword ("cancel", "email", "remind"):
# with only keyword phrasings, GRPO learnt the keyword, not the intent, and sent every held-out cancel
# without the word "cancel" to create_event (docs/results.md). Held-out phrasings stay disjoint.
# {when} is a day phrase ("on Tuesday", "next Tuesday", "tomorrow"), {day} a bare weekday, {time} a time phrase.
TEMPLATES: dict[str, dict[str, list[str]]] = {
    "calendar.create_event": {
        "train": [
            "Schedule a meeting with {name} {when} at {time}.",
            "Book time with {name} {when} at {time}.",
            "Put a meeting with {name} on my calendar {when} at {time}.",
            "Set up a call with {name} {when}, {time}.",
            "Can you add an event with {name} at {time} {when}?",
            "Add {name} to my calendar {when} at {time}.",
            "Please schedule time with {name} {when} at {time}.",
            "Can we get a meeting with {name} on the calendar {when} at {time}?",
            "Meeting with {name}, {when} at {time}. Please book it.",
            "Set a meeting for me and {name} {when} at {time}.",
            "Hey, book me in with {name} {when} at {time}.",
            "Could you schedule a catch-up with {name} {when} at {time}?",
            "Put {name} in my diary {when} at {time}.",
            "Create a calendar event with {name} {when} at {time}.",
            "{name} and I need to talk {when} at {time}; add a meeting.",
            "Slot {name} into my calendar {when} at {time}.",
            "Line up a meeting with {name} {when} at {time}.",
            "I'd like to see {name} {when} at {time}. Can you set that up?",
            "Organise a chat with {name} {when} at {time}.",
            "Get a meeting with {name} in the diary, {when} at {time}.",
            "Fix a time with {name}: {when}, {time}.",
            "Reserve {time} {when} for a call with {name}.",
            "New meeting: {name}, {when}, {time}.",
            "Invite {name} to a meeting {when} at {time}.",
            "Schedule me a one-on-one with {name} {when} at {time}.",
            "Could you find me time with {name} {when} at {time}?",
            "Make an appointment with {name} {when} at {time}.",
            "I'm seeing {name} {when} at {time}, please log it in my calendar.",
        ],
        "held_out": [
            "I need to meet {name} {when} at {time}, please add it.",
            "Arrange a meeting with {name} for {time} {when}.",
            "Pencil in {name} {when} at {time}.",
        ],
        "test": [
            "Could you get {name} on the books {when} at {time}?",
            "Block off {time} {when} for a meeting with {name}.",
            "Let's sit down with {name} {when} at {time}; put it in the calendar.",
        ],
        "validation_wide": [
            "Could you fit in a meeting with {name} {when} at {time}?",
            "Get together with {name} {when} at {time}: put it on my calendar.",
            "Set up some time for {name} and me {when} at {time}.",
            "{name} wants to meet {when} at {time}; please schedule it.",
            "Can you get a meeting going with {name} {when} at {time}?",
            "Please enter a meeting with {name} {when} at {time}.",
        ],
    },
    "calendar.cancel_event": {
        "train": [
            "Cancel my meeting with {name} {when}.",
            "Please cancel the {day} meeting with {name}.",
            "Call off my appointment with {name} {when}.",
            "I can't make the meeting with {name} {when}, cancel it.",
            "Remove my meeting with {name} {when}.",
            "Take the {day} meeting with {name} off my schedule.",
            "Please delete my {day} meeting with {name}.",
            "Unschedule the meeting with {name} {when}.",
            "Get rid of the meeting with {name} {when}.",
            "Something came up: cancel {name}'s meeting {when}.",
            "Please take {name} off my calendar {when}.",
            "Can you cancel the appointment with {name} {when}?",
            "I won't be meeting {name} {when} after all; please cancel.",
            "Axe my meeting with {name} {when}.",
            "The meeting with {name} {when} isn't needed anymore; cancel it.",
            "Please nix the {day} call with {name}.",
            "Kill the appointment with {name} {when}.",
            "{name} cancelled on me {when}, so remove that meeting.",
            "Delete the event with {name} {when}.",
            "Pull my {day} meeting with {name} from the calendar.",
            "Cancel {name} {when}, please.",
            "Ditch the catch-up with {name} {when}.",
            "No more meeting with {name} {when}; take it out.",
        ],
        "held_out": [
            "Drop the meeting with {name} {when} from my calendar.",
            "Scrap my {day} appointment with {name}.",
        ],
        "test": [
            "The {day} meeting with {name} is off, please remove it.",
            "Clear my meeting with {name} {when}, it's not happening.",
        ],
        "validation_wide": [
            "I have to bail on the meeting with {name} {when}; please cancel it.",
            "Remove {name}'s meeting {when} from the calendar.",
            "Could you cancel my {day} meeting with {name}?",
            "Take down the meeting with {name} {when}.",
            "Forget the meeting with {name} {when}, cancel it please.",
            "Please wipe my appointment with {name} {when}.",
        ],
    },
    "email.send": {
        "train": [
            'Email {name} with the subject "{subject}".',
            "Send an email to {name}, subject: {subject}.",
            "Write an email to {name} titled '{subject}'.",
            'Send {name} a quick email, subject "{subject}".',
            'Message {name}; the subject is "{subject}".',
            'Please email {name} about "{subject}".',
            "Can you email {name}? Subject: {subject}.",
            'Email to {name}: subject "{subject}".',
            'I need to send {name} an email titled "{subject}".',
            "Start an email to {name} with the subject '{subject}' and send it.",
            'Get an email over to {name}, subject "{subject}".',
            'Mail {name} with the subject "{subject}".',
            'Reach out to {name} by email, subject "{subject}".',
            'Send a message to {name} by email titled "{subject}".',
            'Could you write to {name}? Use the subject "{subject}".',
            "New email to {name}. Subject: {subject}.",
            'Please send {name} an email with "{subject}" in the subject.',
            'Let {name} know by email; subject "{subject}".',
        ],
        "held_out": [
            'Drop {name} a note with the subject line "{subject}".',
            'Fire off an email to {name} called "{subject}".',
        ],
        "test": [
            'Shoot {name} an email, subject line "{subject}".',
            'Compose a mail to {name} with "{subject}" as the subject.',
        ],
        "validation_wide": [
            'Write to {name} by email with the subject "{subject}".',
            'Could you email {name} a message titled "{subject}"?',
            'Send over an email to {name}: subject "{subject}".',
            "Email {name}, and make the subject '{subject}'.",
            'I want {name} to get an email from me, subject "{subject}".',
            'Please send a short email to {name} with the subject "{subject}".',
        ],
    },
    "reminders.create": {
        "train": [
            "Remind me to {text} {when} at {time}.",
            "Set a reminder {when} at {time} to {text}.",
            "Don't let me forget to {text} {when} at {time}.",
            "Create a reminder to {text}, {when} at {time}.",
            "Make sure I {text} {when} at {time}.",
            "Remind me {when} at {time} to {text}.",
            "Set up a reminder: {text}, {when} at {time}.",
            "I need a reminder to {text} at {time} {when}.",
            "Please remind me at {time} {when} that I have to {text}.",
            "Can you remind me to {text} {when} at {time}?",
            "Alert me {when} at {time} to {text}.",
            "Give me a heads-up {when} at {time} to {text}.",
            "Jog my memory {when} at {time}: {text}.",
            "Prompt me to {text} {when} at {time}.",
            "Add a reminder at {time} {when}: {text}.",
            "Buzz me {when} at {time} to {text}.",
            "Note to self: {text}, {when} at {time}. Remind me.",
        ],
        "held_out": [
            "Ping me {when} at {time} so I remember to {text}.",
            "I have to {text} {when} at {time}; remind me.",
        ],
        "test": [
            "At {time} {when}, nudge me to {text}.",
            "Leave me a reminder for {when} at {time}: {text}.",
        ],
        "validation_wide": [
            "Could you set a reminder {when} at {time} to {text}?",
            "Remind me at {time} {when}: {text}.",
            "I want to be reminded {when} at {time} to {text}.",
            "Set me a reminder to {text} at {time} {when}.",
            "Make a note to remind me to {text} {when} at {time}.",
            "Please remind me, {when} at {time}, to {text}.",
        ],
    },
    "weather.get": {
        "train": [
            "What's the weather in {city} {when}?",
            "Will it rain in {city} {when}?",
            "Check the forecast for {city} {when}.",
            "How warm will it be in {city} {when}?",
            "Weather for {city} {when}, please.",
            "What's the forecast in {city} {when}?",
            "Tell me the weather in {city} {when}.",
            "How's the weather looking in {city} {when}?",
            "Any rain expected in {city} {when}?",
            "Look up the weather for {city} on {day}.",
            "Do I need a jacket in {city} {when}?",
            "How cold will {city} be {when}?",
            "Will it snow in {city} {when}?",
            "What's it going to be like outside in {city} {when}?",
            "Forecast for {city}, {day}?",
            "Will it be windy in {city} {when}?",
            "Get me the weather for {city} {when}.",
            "What conditions are expected in {city} {when}?",
        ],
        "held_out": [
            "Should I pack an umbrella for {city} {when}?",
            "Give me the {city} forecast for {day}.",
        ],
        "test": [
            "Is it going to be sunny in {city} {when}?",
            "What temperatures should I expect in {city} {when}?",
        ],
        "validation_wide": [
            "What will {city}'s weather be {when}?",
            "Can you check whether it will rain in {city} {when}?",
            "I'd like the forecast for {city} {when}.",
            "How is {city} looking weather-wise {when}?",
            "Will {city} be chilly {when}?",
            "Weather outlook for {city} on {day}, please.",
        ],
    },
}
SIZES = {"train": 2000, "held_out": 60, "test": 80, "validation_wide": 150}
# validation_wide: a second validation family, 6 phrasing templates a tool (the pinned held_out has 2-3): with
# 11 templates in 60 tasks one template flipping moves validation 0.05-0.08, the size of the effects a recipe
# decision weighs (docs/results.md, session 11). Its entities, hours and minutes are held_out's; its templates
# are its own. Opt-in (`held_out_eval: validation_wide`), so every run compared on held_out stays comparable.
_ENTITIES = {"validation_wide": "held_out"}
_BALANCED = ("validation_wide",)  # splits whose tasks go round-robin over the templates
SPLITS = tuple(SIZES)
# Minutes of the clock times each split asks for; test's never occur in train or validation.
_TEST_MINUTES = [10, 20, 40, 50]
# Train asks for every other minute (round ones more often): with eight minute values it learnt to pick one of
# eight, and copied an unseen ":40" badly; copying any minute is the skill.
MINUTES = {
    "train": [m for m in range(60) if m not in _TEST_MINUTES] + [0] * 8 + [30] * 4 + [15, 45] * 2,
    "held_out": [0, 0, 0, 30, 30, 15, 45],
    "test": _TEST_MINUTES,
}
# Hours asked for (inclusive); train's range is wider so every 12-hour PM hour it is tested on has neighbours.
HOURS = {"train": (7, 21), "held_out": (8, 19), "test": (8, 19)}
SEED = 20240611
_HOUR_WORDS = [
    "twelve",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
]


def time_phrase(rng: random.Random, h: int, m: int, *, rich: bool = False) -> str:
    """A human way to say h:m; the expected arg is always f"{h:02d}:{m:02d}" (the format the tools take).
    `rich` (train only, so validation and test stay as they were) adds more ways: "2 p.m.", "2:05 in the
    afternoon", "quarter to three", "five past two"."""
    h12, ampm = h % 12 or 12, ("AM" if h < 12 else "PM")
    clock = f"{h12}:{m:02d}" if m else f"{h12}"
    options = [f"{h:02d}:{m:02d}", f"{clock} {ampm}", f"{clock}{ampm.lower()}"]
    if rich:
        part = "in the morning" if h < 12 else ("in the afternoon" if h < 18 else "in the evening")
        options += [f"{clock} {ampm[0].lower()}.m.", f"{clock} {part}", f"{clock} {ampm}"]
        if m == 45:
            options.append(f"quarter to {_HOUR_WORDS[(h12 + 1) % 12]} {part}")
        elif m in (5, 25):
            options.append(f"{'five' if m == 5 else 'twenty-five'} past {_HOUR_WORDS[h12 % 12]} {part}")
    part = "in the morning" if h < 12 else ("in the afternoon" if h < 18 else "in the evening")
    if (h, m) == (12, 0):
        options.append("noon")
    elif m == 30:
        options.append(f"half past {_HOUR_WORDS[h12 % 12]} {part}")
    elif m == 15:
        options.append(f"quarter past {_HOUR_WORDS[h12 % 12]} {part}")
    elif m == 0:
        options.append(f"{_HOUR_WORDS[h12 % 12]} o'clock {part}")
    elif m in (10, 20):
        options.append(f"{'ten' if m == 10 else 'twenty'} past {_HOUR_WORDS[h12 % 12]} {part}")
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


def _one_task(
    rng: random.Random, tool: str, split: str, pick: int | None = None
) -> tuple[str, dict[str, Any], dict[str, Any] | None, int]:
    """(prompt, expected_args, initial_state, template index) for one generated task; `pick`: that template
    (round-robin), else a random one."""
    table = TEMPLATES[tool][split]
    template = table[pick % len(table)] if pick is not None else rng.choice(table)
    day = rng.choice(WEEKDAYS)
    ent = _ENTITIES.get(split, split)  # whose names, cities, subjects, reminders, hours and minutes
    h, m = rng.randint(*HOURS[ent]), rng.choice(MINUTES[ent])
    when, preamble = day_phrase(rng, day)
    if "{day}" in template:
        preamble = ""
    slots = {"when": when, "day": day, "time": time_phrase(rng, h, m, rich=split == "train")}
    hhmm = f"{h:02d}:{m:02d}"
    initial: dict[str, Any] | None = None
    if tool == "calendar.create_event":
        slots["name"] = rng.choice(NAMES[ent])
        args = {"attendee": slots["name"], "day": day, "time": hhmm}
    elif tool == "calendar.cancel_event":
        slots["name"] = rng.choice(NAMES[ent])
        args = {"attendee": slots["name"], "day": day}
        others = [n for n in NAMES[ent] if n != slots["name"]]
        events = [
            {"attendee": slots["name"], "day": day, "time": hhmm},
            {"attendee": rng.choice(others), "day": day, "time": f"{(h + 2) % 24:02d}:00"},
            {"attendee": slots["name"], "day": WEEKDAYS[(WEEKDAYS.index(day) + 3) % 7], "time": "09:00"},
        ]
        initial = {"events": events}
    elif tool == "email.send":
        slots["name"], slots["subject"] = rng.choice(NAMES[ent]), rng.choice(SUBJECTS[ent])
        args = {"to": slots["name"], "subject": slots["subject"]}
        preamble = ""
    elif tool == "reminders.create":
        slots["text"] = rng.choice(REMINDERS[ent])
        args = {"text": slots["text"], "day": day, "time": hhmm}
    else:
        slots["city"] = rng.choice(CITIES[ent])
        args = {"city": slots["city"], "day": day}
    return preamble + template.format(**slots), args, initial, table.index(template)


def builtin_tasks(split: str | None = None) -> list[Task]:
    """The built-in calendar tasks (2000 train, 60 validation, 150 validation_wide, 80 test); identical on
    every call and machine.
    `split`: "train", "held_out" (alias "validation"), "validation_wide", "test", or None for train +
    validation (test and validation_wide are only ever asked for by name)."""
    split = "held_out" if split == "validation" else split
    if split not in (None, *SPLITS):
        raise ValueError(
            f"unknown split {split!r}: use 'train', 'held_out' (validation), 'validation_wide', 'test' "
            "or None"
        )
    out: list[Task] = []
    for sp in ("train", "held_out") if split is None else (split,):
        rng = random.Random(f"{SEED}:{sp}")
        tools = list(TEMPLATES)
        seen: set[str] = set()
        i = 0
        while i < SIZES[sp]:
            tool = tools[i % len(tools)]
            # validation_wide: every template the same number of tasks (5), so no template weighs more than another
            pick = i // len(tools) if sp in _BALANCED else None
            prompt, args, initial, template = _one_task(rng, tool, sp, pick)
            if prompt in seen:
                continue
            seen.add(prompt)
            out.append(
                Task(
                    id=f"{DATASET}:{sp}:{i:03d}",
                    prompt=prompt,
                    expected_tool=tool,
                    expected_args=args,
                    tools=None,
                    split=sp,
                    dataset=DATASET,
                    initial_state=initial,
                    template=f"{tool}:{sp}:{template}",
                )
            )
            i += 1
    return out
