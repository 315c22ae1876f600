"""A small stateful MCP calendar server over stdio: create, list and delete events, clear all, reset.

    python examples/mcp_calendar/server.py

State lives in this process's memory, so every process is one calendar: the workbench gives each episode
its own process (or calls `reset` between episodes when the config names it as `reset_tool`). Errors a
caller should read (an unknown event, a bad time) are raised as ToolError, whose message reaches the
client; any other exception would reach it as a masked "Error executing tool".
"""

from __future__ import annotations

import re

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
TIME = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")

server = MCPServer("calendar")
events: dict[str, dict[str, str]] = {}
counter = {"next": 1}


def _check(day: str, time: str) -> None:
    if day not in DAYS:
        raise ToolError(f"day must be one of {', '.join(DAYS)}, got {day!r}")
    if not TIME.match(time):
        raise ToolError(f"time must be 24-hour HH:MM, got {time!r}")


@server.tool()
def create_event(attendee: str, day: str, time: str) -> dict[str, str]:
    """Add a meeting with a person. day: a weekday name like Monday; time: 24-hour HH:MM."""
    _check(day, time)
    event_id = f"evt_{counter['next']}"
    counter["next"] += 1
    events[event_id] = {"id": event_id, "attendee": attendee, "day": day, "time": time}
    return events[event_id]


@server.tool()
def list_events(day: str | None = None) -> list[dict[str, str]]:
    """The events on a day, or every event when no day is given."""
    return [e for e in events.values() if day is None or e["day"] == day]


@server.tool()
def delete_event(event_id: str) -> str:
    """Remove one event by its id (from list_events)."""
    if event_id not in events:
        raise ToolError(f"no event {event_id!r}")
    del events[event_id]
    return f"deleted {event_id}"


@server.tool()
def clear_calendar() -> str:
    """Delete every event (an example of a tool a config marks dangerous)."""
    n = len(events)
    events.clear()
    return f"deleted {n} events"


@server.tool()
def reset() -> str:
    """Empty the calendar and restart ids: the workbench calls it between episodes (reset_tool)."""
    events.clear()
    counter["next"] = 1
    return "ok"


if __name__ == "__main__":
    server.run()
