"""How the calendar domain compares values: the one 24-hour time rule, the world's state keys, and the light
normalisation an argument gets before it is compared with the expected one.

The world (which accepts "9:30" and stores "09:30") and the verifiers (which count "9:30" == "09:30" as a
match) must agree on what a valid time is, so both read it here. Stdlib only: the built-in verifiers that
import this are shown in the UI as the editable starting point of a user's own verifier.
"""

from __future__ import annotations

import re
from typing import Any

# What a tool call's `time` may be: 24-hour H:MM or HH:MM, an optional ":00" seconds part. "2 PM" is not
# one: writing HH:MM is part of the task, and the error GRPO should remove.
TIME_24H = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)(?::00)?$")

# The collections of a world's state (what `expected_state` lists and what a tool can change).
STATE_KEYS = ("events", "outbox", "reminders")


def time_24h(text: str) -> str | None:
    """`text` as zero-padded HH:MM when it is a 24-hour time ("9:30" -> "09:30", "14:00:00" -> "14:00"),
    else None. `text` is matched as given: strip or casefold it first where that is wanted."""
    m = TIME_24H.match(text)
    return f"{int(m.group(1)):02d}:{m.group(2)}" if m else None


def norm(value: Any) -> Any:
    """Light normalisation for comparing an argument with the expected one: strings without case or repeated
    spaces, 24-hour times padded, numbers as floats (1 == 1.0), dicts order-free, lists as tuples (hashable,
    so a whole state item can be counted)."""
    if isinstance(value, str):
        s = " ".join(value.split()).casefold()
        t = time_24h(s)
        return t if t is not None else s
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), norm(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(norm(v) for v in value)
    return value
