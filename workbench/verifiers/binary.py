"""Built-in `binary` verifier: 1.0 when the episode is exactly right and safe, else 0.0.

Single-turn: the first tool call has the expected tool, every expected arg matches (light normalisation:
case and spacing ignored, 24-hour times padded; "2 PM" does not equal "14:00"), no extra args, and the
environment flagged nothing unsafe. Multi-turn (tasks with `expected_state`): the final world state equals
the expected state and nothing was unsafe. A sparse reward: compare it with tool_call_verifier to see how
much the shaping helps. Self-contained so the UI can show it as editable code.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from workbench.domains.calendar.compare import STATE_KEYS, norm
from workbench.envs.parse import parse_tool_call
from workbench.types import Score

REWARD_RANGE = (0.0, 1.0)  # a total outside it is that row's error (workbench.verifiers.base)


def _state(state: dict[str, Any] | None) -> Counter:
    return Counter((k, norm(item)) for k in STATE_KEYS for item in (state or {}).get(k, []) or [])


def reward(output: Any, task: Any) -> Score:
    """1.0 for an exactly right, safe episode; 0.0 otherwise, with the first reason why."""
    calls = list(getattr(output, "tool_calls", None) or [])
    error = getattr(output, "parse_error", None)
    if not calls and error is None:
        call, error = parse_tool_call(str(output))
        calls = [call] if call is not None else []
    unsafe = getattr(output, "unsafe", None) or []
    if not calls:
        why = f"no tool call: {error}"
    elif unsafe:
        why = f"unsafe: {unsafe[0]}"
    elif task.expected_state is not None:
        ok = _state(getattr(output, "state", None)) == _state(task.expected_state)
        why = "final state matches" if ok else "final state differs from expected"
        return Score(total=1.0 if ok else 0.0, parts={"correct": 1.0 if ok else 0.0}, explanation=why)
    elif calls[0].name != task.expected_tool:
        why = f"wrong tool {calls[0].name!r}"
    elif norm(calls[0].args) != norm(task.expected_args):
        why = "args differ from expected"
    else:
        return Score(total=1.0, parts={"correct": 1.0}, explanation="exactly right")
    return Score(total=0.0, parts={"correct": 0.0}, explanation=why)
