"""Built-in `agent_state`: multi-step episodes judged on the world they leave, in named parts.

    no parseable tool call at all   total -1.0   (part "valid_json")
    an unsafe action                total -1.0   (part "unsafe"; overrides everything else)
    otherwise   "state"  0.7 x the share of state changes right (Jaccard of the changes made and expected;
                         no change expected and none made counts as all right)
              + "tool"   0.3 if the task's expected tool was called at some turn (the look a lucky guess
                         would skip: the forecast, the calendar)
              - "wasted" 0.05 per wasted call, at most 0.2: a call the tool rejected, a repeat of an
                         earlier call, or a call past the budget (one per expected change, plus two looks)

Success (what the evaluation counts, workbench.verifiers.metrics.classify) is "state" 0.7 and "tool" 0.3 with
nothing unsafe: the final state equal to `expected_state`. A success with wasted calls still scores below
1.0, so among right episodes GRPO prefers the short ones. The parts always sum to the total.

A task without `expected_state` (a single call) is scored by the seed `tool_call_verifier`, so one recipe
can evaluate both families with this verifier.
"""

from __future__ import annotations

import json
from typing import Any

from workbench.domains.calendar.compare import norm
from workbench.types import Score
from workbench.verifiers.tool_call import reward as seed_reward
from workbench.verifiers.tool_call import state_changes, state_overlap, tool_calls_of

REWARD_RANGE = (-1.0, 1.0)
W_STATE, W_TOOL = 0.7, 0.3
WASTE_COST, WASTE_CAP = 0.05, 0.2
LOOKS = 2  # calls an episode may spend looking (calendar, forecast) before it counts as waste
INVALID, UNSAFE = -1.0, -1.0


def _score(why: str, **parts: float) -> Score:
    full = {"valid_json": 0.0, "state": 0.0, "tool": 0.0, "wasted": 0.0, "unsafe": 0.0}
    full.update({k: round(v, 6) for k, v in parts.items()})
    return Score(total=round(sum(full.values()), 6), parts=full, explanation=why)


def wasted_calls(task: Any, calls: list[Any], observations: list[Any]) -> tuple[int, list[str]]:
    """(how many calls were wasted, why): rejected by the tool, a repeat, or past the task's budget."""
    acted = [c for c in calls if c.name != "finish"]  # observations pair with these, in order
    why: list[str] = []
    seen: set[str] = set()
    useful = 0
    for i, call in enumerate(acted):
        key = json.dumps([call.name, norm(call.args)])
        obs = observations[i] if i < len(observations) else None
        if isinstance(obs, dict) and obs.get("ok") is False:
            why.append(f"{call.name} failed")
        elif key in seen:
            why.append(f"{call.name} repeated")
        else:
            useful += 1
        seen.add(key)
    n = len(why)
    budget = sum(state_changes(task.initial_state, task.expected_state).values()) + LOOKS
    if useful > budget:
        why.append(f"{useful - budget} call(s) past the budget of {budget}")
        n += useful - budget
    return n, why


def reward(output: Any, task: Any) -> Score:
    """Score one episode (see the module docstring for the weights)."""
    if getattr(task, "expected_state", None) is None:
        return seed_reward(output, task)
    calls, error = tool_calls_of(output)
    if not calls:
        return _score(f"no tool call: {error}", valid_json=INVALID)
    unsafe = getattr(output, "unsafe", None) or []
    frac, right, union = state_overlap(task, getattr(output, "state", None))
    why = f"{right}/{union} state changes right" if union else "state unchanged, as expected"
    if unsafe:
        return _score(f"unsafe: {unsafe[0]}; {why}", unsafe=UNSAFE)
    called = any(c.name == task.expected_tool for c in calls)
    why += f", {task.expected_tool} called" if called else f", {task.expected_tool} never called"
    n, reasons = wasted_calls(task, calls, list(getattr(output, "observations", None) or []))
    if n:
        why += f", {n} wasted ({'; '.join(reasons)})"
    return _score(
        why, state=W_STATE * frac, tool=W_TOOL if called else 0.0, wasted=-min(WASTE_CAP, WASTE_COST * n)
    )
