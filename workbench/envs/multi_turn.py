"""Multi-turn environment: the agent calls one tool per turn against a stateful World and sees the results.

Tool results go back as a message with role `harness.observation_role` ("tool" by default: SmolLM2's
ChatML template renders any role as `<|im_start|>tool ...`; set "user" for templates that reject "tool").
The content is JSON: {"tool": name, "ok": ..., "result" | "error": ...}, prefixed "Tool result: " when
the role is "user" so the model can tell it from the person. Every assistant turn starts with the same
prefill as in single-turn (see single_turn.py for the prefill contract).

An episode ends when the agent calls {"tool": "finish", "args": {"answer": ...}}, replies with something
that is not a tool call, or uses up `max_turns` assistant turns. The verifier judges the World's final
state (`Output.state`) against `task.expected_state`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from workbench.domains.calendar import MULTI_TURN_TOOLS, World
from workbench.envs.harness import Harness
from workbench.envs.parse import parse_tool_call
from workbench.types import Output, Task, ToolCall

FINISH = "finish"


class MultiTurnEpisode:
    """A conversation with the World. Loop: generate from `messages` (+ `prefill`), `step(text)`, until `done`."""

    def __init__(self, task: Task, harness: Harness, max_turns: int):
        if task.tools is None:
            task = replace(task, tools=MULTI_TURN_TOOLS)
        self.task = task
        self.harness = harness
        self.prefill = harness.prefill_for(task)
        self.max_turns = max_turns
        self.messages: list[dict[str, Any]] = harness.messages(task, multi_turn=True)
        self.world = World(task.initial_state, task.tools)
        self.turns = 0
        self.done = False
        self.end_reason: str | None = None  # "finish" | "text" | "max_turns"
        self.calls: list[ToolCall] = []
        self.observations: list[Any] = []
        self.last_reply = ""
        self.last_error: str | None = None

    def step(self, assistant_text: str) -> dict[str, Any] | None:
        """Take the generated text (after the prefill); return the observation message, or None when done."""
        if self.done:
            raise RuntimeError("episode is done; start a new one")
        reply = self.prefill + assistant_text
        self.messages.append({"role": "assistant", "content": reply})
        self.last_reply = reply
        self.turns += 1
        call, self.last_error = parse_tool_call(reply)
        if call is None:
            return self._end("text")
        self.calls.append(call)
        if call.name == FINISH:
            return self._end("finish")
        obs = self.world.call(call)
        self.observations.append(obs)
        body = json.dumps({"tool": call.name, **obs})
        user_role = self.harness.observation_role == "user"
        msg = {
            "role": self.harness.observation_role,
            "content": f"Tool result: {body}" if user_role else body,
        }
        self.messages.append(msg)
        if self.turns >= self.max_turns:
            return self._end("max_turns")
        return msg

    def _end(self, reason: str) -> None:
        self.done, self.end_reason = True, reason
        return None

    def output(self) -> Output:
        """The last reply as text, with every call, observation, flag and the final state attached."""
        if not self.done:
            raise RuntimeError("episode not finished")
        acted = [c for c in self.calls if c.name != FINISH]
        return Output(
            self.last_reply,
            messages=[dict(m) for m in self.messages],
            tool_calls=list(self.calls),
            parse_error=self.last_error,
            unsafe=list(self.world.unsafe),
            executed=bool(acted) and not self.world.errors,
            observations=list(self.observations),
            state=self.world.state(),
        )


class MultiTurnEnv:
    """Factory of multi-turn episodes. Tasks without `tools` get the built-ins plus calendar.list_events."""

    name = "multi_turn"

    def __init__(self, harness: Harness | None = None, max_turns: int = 4):
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.harness = harness or Harness()
        self.max_turns = max_turns

    def start(self, task: Task) -> MultiTurnEpisode:
        return MultiTurnEpisode(task, self.harness, self.max_turns)
