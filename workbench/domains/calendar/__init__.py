"""The calendar domain: calendar, email, reminders and weather tools on a simulated in-memory world.

- `tool_specs`: the tools offered to the model (BUILTIN_TOOLS, the dangerous ones, list_events for multi-turn).
- `world`: the World those tools act on (no I/O; unsafe actions simulated and flagged).
- `single_turn_tasks`: the seeded phrasing generator behind "builtin:calendar" (train / held_out splits).
- `multi_turn_tasks`: the hand-written tasks behind "builtin:calendar_mt".
- `call_tasks`: no-call and parallel-call tasks behind "builtin:calendar_calls" (a family of their own).
- `agent_tasks`: the generated multi-step family behind "builtin:calendar_agent" (seven kinds, three splits).
- `look_tasks`: single `calendar.list_events` questions behind "builtin:calendar_look" (the look the agent
  family needs, taught as single calls).
- `compound_tasks`: two independent calls in one request behind "builtin:calendar_compound" (a second call
  after a result, with nothing to read).
"""

from workbench.domains.calendar.agent_tasks import builtin_agent_tasks
from workbench.domains.calendar.call_tasks import builtin_call_tasks
from workbench.domains.calendar.compound_tasks import builtin_compound_tasks
from workbench.domains.calendar.look_tasks import builtin_look_tasks
from workbench.domains.calendar.multi_turn_tasks import builtin_multi_turn_tasks
from workbench.domains.calendar.single_turn_tasks import (
    CITIES,
    NAMES,
    REMINDERS,
    SUBJECTS,
    TEMPLATES,
    builtin_tasks,
    day_phrase,
    time_phrase,
)
from workbench.domains.calendar.tool_specs import (
    BUILTIN_TOOLS,
    DANGEROUS_TOOLS,
    LIST_EVENTS_TOOL,
    MULTI_TURN_TOOLS,
    WEEKDAYS,
)
from workbench.domains.calendar.world import STATE_KEYS, ToolError, World, weather_for

__all__ = [
    "BUILTIN_TOOLS",
    "CITIES",
    "DANGEROUS_TOOLS",
    "LIST_EVENTS_TOOL",
    "MULTI_TURN_TOOLS",
    "NAMES",
    "REMINDERS",
    "STATE_KEYS",
    "SUBJECTS",
    "TEMPLATES",
    "WEEKDAYS",
    "ToolError",
    "World",
    "builtin_agent_tasks",
    "builtin_call_tasks",
    "builtin_compound_tasks",
    "builtin_look_tasks",
    "builtin_multi_turn_tasks",
    "builtin_tasks",
    "day_phrase",
    "time_phrase",
    "weather_for",
]
