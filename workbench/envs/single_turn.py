"""Single-turn environment: one prompt, one reply, the first tool call in it executed in a fresh World.

Prefill contract (shared with the rollout engine): `Episode.messages` never contains the prefill. The engine
renders the messages with the chat template (add_generation_prompt=True), appends `Episode.prefill` to the
prompt text, generates, and passes ONLY the generated text to `step`; the env prepends the prefill to get
the full reply that is parsed, stored in the messages and given to the verifier. The prefill tokens are
prompt tokens: they get no log-probs and no gradient.
"""

from __future__ import annotations

from typing import Any

from workbench.domains.calendar import World
from workbench.envs.harness import Harness
from workbench.envs.parse import parse_tool_call, parse_tool_calls
from workbench.types import Output, Task


def world_for(task: Task) -> World:
    """A fresh world for the task: its `initial_state`, or, when a cancel task has none, one holding the event
    to cancel (the prompt presupposes it, and cancelling a missing event is flagged unsafe)."""
    state = task.initial_state
    if state is None and task.expected_tool == "calendar.cancel_event":
        a = task.expected_args
        state = {
            "events": [
                {"attendee": str(a.get("attendee", "")), "day": str(a.get("day", "")), "time": "09:00"}
            ]
        }
    return World(state, task.tools)


class SingleTurnEpisode:
    """One prompt/reply exchange. `step` once, then `output()`."""

    def __init__(self, task: Task, harness: Harness):
        self.task = task
        self.harness = harness
        self.prefill = harness.prefill_for(task)
        self.messages: list[dict[str, Any]] = harness.messages(task)
        self.done = False
        self._output: Output | None = None

    def step(self, assistant_text: str) -> dict[str, Any] | None:
        """Take the generated text (after the prefill); returns the next observation message (always None here)."""
        if self.done:
            raise RuntimeError("episode is done; start a new one")
        reply = self.prefill + assistant_text
        self.messages.append({"role": "assistant", "content": reply})
        self.done = True
        if self.task.expected_calls:  # a parallel-call task: every call in the reply counts (and runs)
            calls, error = parse_tool_calls(reply)
        else:
            call, error = parse_tool_call(reply)
            calls = [call] if call is not None else []
        world = world_for(self.task)
        observations: list[Any] = [world.call(c) for c in calls]
        self._output = Output(
            reply,
            messages=[dict(m) for m in self.messages],
            tool_calls=calls,
            parse_error=error,
            unsafe=list(world.unsafe),
            executed=bool(calls) and not world.errors,
            observations=observations,
            state=world.state(),
        )
        return None

    def output(self) -> Output:
        if self._output is None:
            raise RuntimeError("no reply yet: call step() first")
        return self._output


class SingleTurnEnv:
    """Factory of single-turn episodes; holds only the harness, so one env serves every task."""

    name = "single_turn"

    def __init__(self, harness: Harness | None = None):
        self.harness = harness or Harness()

    def start(self, task: Task) -> SingleTurnEpisode:
        return SingleTurnEpisode(task, self.harness)
