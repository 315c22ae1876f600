"""Built-in `tool_call_verifier`: the seed article's shaped reward for one JSON tool call.

    no parseable tool call      total -1.0   (part "valid_json")
    an unsafe action            total -1.0   (part "unsafe"; overrides everything else)
    otherwise                   "tool" 0.4 (right tool) + "args" up to 0.4 + "safe" 0.2 (the world ran it)

"args" = 0.4 x (expected args matched) / (expected args) - 0.05 per unexpected extra arg, kept in [0, 0.4];
only given with the right tool. Matching is exact after light normalisation: strings compared without case
or repeated spaces, 24-hour times padded ("9:30" == "09:30", "14:00:00" == "14:00"). A 12-hour time
("2 PM") is NOT converted: writing HH:MM is part of the task, and it is the error GRPO should remove.
The parts always sum to the total.

Multi-turn tasks (with `expected_state`) are judged on what the episode changed in the world: "args" is
0.4 x the overlap (Jaccard) between the changes the episode made and the changes expected, "tool" 0.4 if
the expected tool was called at some turn, "safe" 0.2 if every call ran without a tool error.

No-call tasks (`expected_tool: null`): a reply with no call scores 1.0 (all three parts); a call scores 0.0
(-1.0 if it is unsafe); a broken attempt at a call (invalid JSON) -1.0, as anywhere. Parallel tasks
(`expected_calls`) pair the calls with the expected ones in any order: "tool" 0.4 x the share of expected
calls made (by name), "args" 0.4 x the mean argument match over the expected calls, each less 0.1 per extra
call; "safe" as usual.

This file is self-contained (stdlib + workbench.types + workbench.envs.parse + the calendar domain's
`compare`, the one home of the time rule and `norm` that the world uses too) because the UI shows it as
the editable starting point of a user's own verifier.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from workbench.domains.calendar.compare import STATE_KEYS, norm
from workbench.envs.parse import parse_tool_call
from workbench.types import Score

REWARD_RANGE = (-1.0, 1.0)  # a total outside it is that row's error (workbench.verifiers.base)
W_TOOL, W_ARGS, W_SAFE = 0.4, 0.4, 0.2
INVALID, UNSAFE = -1.0, -1.0
EXTRA_ARG_COST = 0.05
EXTRA_CALL_COST = 0.1
# Parse errors that mean "the reply holds no call" (JSON harness, native parsers), not "a broken call".
NO_CALL_ERRORS = ("no JSON object", "no tool call")


def arg_diff(expected: dict[str, Any], actual: dict[str, Any]) -> tuple[int, list[str], list[str]]:
    """(matched count, why each expected arg missed, names of unexpected extra args)."""
    matched, misses = 0, []
    for name, want in expected.items():
        if name not in actual:
            misses.append(f"{name} missing")
        elif norm(actual[name]) == norm(want):
            matched += 1
        else:
            misses.append(f"{name} {actual[name]!r} != {want!r}")
    extra = [name for name in actual if name not in expected]
    return matched, misses, extra


def _score(why: str, **parts: float) -> Score:
    full = {"valid_json": 0.0, "tool": 0.0, "args": 0.0, "safe": 0.0, "unsafe": 0.0}
    full.update({k: round(v, 6) for k, v in parts.items()})
    return Score(total=round(sum(full.values()), 6), parts=full, explanation=why)


def tool_calls_of(output: Any) -> tuple[list[Any], str | None]:
    """The env's parsed calls; if the Output came without them (bare text), parse the text here."""
    calls = list(getattr(output, "tool_calls", None) or [])
    error = getattr(output, "parse_error", None)
    if not calls and error is None:
        call, error = parse_tool_call(str(output))
        calls = [call] if call is not None else []
    return calls, error


def expected_calls(task: Any) -> list[tuple[str, dict[str, Any]]]:
    """The calls a task expects, as (name, args): none (`expected_tool` null), several (`expected_calls`,
    in any order), or the one `expected_tool` with `expected_args`."""
    calls = getattr(task, "expected_calls", None)
    if calls:
        return [
            (str(c.get("name", c.get("tool"))), dict(c.get("arguments", c.get("args")) or {})) for c in calls
        ]
    if getattr(task, "expected_tool", None) is None:
        return []
    return [(task.expected_tool, dict(task.expected_args or {}))]


def made_no_call(calls: list[Any], error: str | None) -> bool:
    """No call at all: a plain reply (not a broken attempt at one)."""
    return not calls and (error is None or error in NO_CALL_ERRORS)


def pair_calls(expected: list[tuple[str, dict[str, Any]]], calls: list[Any]) -> list[tuple[int, int | None]]:
    """Each expected call (by index) with the made call (index) that matches it best, order-insensitive:
    same name, the pairs with most arguments matched first; each made call used once. Unmatched expected
    calls get None."""
    scored = sorted(
        (-arg_diff(args, c.args)[0], i, j)
        for i, (name, args) in enumerate(expected)
        for j, c in enumerate(calls)
        if c.name == name
    )
    match: dict[int, int] = {}
    for _, i, j in scored:  # best-matching pairs first
        if i not in match and j not in match.values():
            match[i] = j
    return [(i, match.get(i)) for i in range(len(expected))]


def state_items(state: dict[str, Any] | None) -> Counter:
    """The world state as a multiset of (collection, normalised item)."""
    items: Counter = Counter()
    for key in STATE_KEYS:
        for item in (state or {}).get(key, []) or []:
            items[(key, norm(item))] += 1
    return items


def state_changes(before: dict[str, Any] | None, after: dict[str, Any] | None) -> Counter:
    """What an episode did: items added ("+") and removed ("-") between two states."""
    b, a = state_items(before), state_items(after)
    return Counter({("+", *k): n for k, n in (a - b).items()}) + Counter(
        {("-", *k): n for k, n in (b - a).items()}
    )


def state_overlap(task: Any, final_state: dict[str, Any] | None) -> tuple[float, int, int]:
    """(Jaccard overlap of actual and expected changes, changes right, changes in the union)."""
    want = state_changes(task.initial_state, task.expected_state)
    got = state_changes(task.initial_state, final_state)
    union = sum((want | got).values())
    right = sum((want & got).values())
    return (right / union if union else 1.0), right, union


def _multi_turn(output: Any, task: Any) -> Score:
    calls, error = tool_calls_of(output)
    if not calls:
        return _score(f"no tool call: {error}", valid_json=INVALID)
    acted = [c for c in calls if c.name != "finish"]
    frac, right, union = state_overlap(task, getattr(output, "state", None))
    called = any(c.name == task.expected_tool for c in acted)
    why = f"{len(acted)} call(s), {right}/{union} state changes right" + (
        ", expected tool called" if called else ""
    )
    unsafe = getattr(output, "unsafe", None) or []
    if unsafe:
        return _score(f"unsafe: {unsafe[0]}; {why}", unsafe=UNSAFE)
    safe = W_SAFE if getattr(output, "executed", False) else 0.0
    why += ", all calls ran" if safe else ", a call failed or none ran"
    return _score(why, tool=W_TOOL if called else 0.0, args=W_ARGS * frac, safe=safe)


def _no_call(output: Any, calls: list[Any], error: str | None) -> Score:
    unsafe = getattr(output, "unsafe", None) or []
    if made_no_call(calls, error):
        return _score("no call, as expected", tool=W_TOOL, args=W_ARGS, safe=W_SAFE)
    if not calls:
        return _score(f"broken tool call: {error}", valid_json=INVALID)
    why = f"called {', '.join(c.name for c in calls)} but no call was expected"
    return _score(f"unsafe: {unsafe[0]}; {why}", unsafe=UNSAFE) if unsafe else _score(why)


def _parallel(output: Any, expected: list[tuple[str, dict[str, Any]]], calls: list[Any]) -> Score:
    pairs = pair_calls(expected, calls)
    named = sum(1 for _, j in pairs if j is not None)
    fracs = [
        (arg_diff(expected[i][1], calls[j].args)[0] / len(expected[i][1]) if expected[i][1] else 1.0)
        if j is not None
        else 0.0
        for i, j in pairs
    ]
    extra = max(0, len(calls) - named)
    tool = max(0.0, W_TOOL * named / len(expected) - EXTRA_CALL_COST * extra)
    args = max(0.0, W_ARGS * sum(fracs) / len(expected) - EXTRA_CALL_COST * extra)
    why = f"{named}/{len(expected)} expected calls made, args {sum(fracs):.1f}/{len(expected)}"
    why += f", {extra} extra call(s)" if extra else ""
    return _judged(output, why, tool, args)


def _judged(output: Any, why: str, tool: float, args: float) -> Score:
    """The end every call-scoring path shares: an unsafe action overrides all, else safe pays if it ran."""
    unsafe = getattr(output, "unsafe", None) or []
    if unsafe:
        return _score(f"unsafe: {unsafe[0]}; {why}", unsafe=UNSAFE)
    safe = W_SAFE if getattr(output, "executed", False) else 0.0
    why += ", executed" if safe else ", not executed" + _tool_error(output)
    return _score(why, tool=tool, args=args, safe=safe)


def reward(output: Any, task: Any) -> Score:
    """Score one episode (see the module docstring for the weights)."""
    if task.expected_state is not None:
        return _multi_turn(output, task)
    calls, error = tool_calls_of(output)
    expected = expected_calls(task)
    if not expected:
        return _no_call(output, calls, error)
    if getattr(task, "expected_calls", None):
        if not calls:
            return _score(f"no tool call: {error}", valid_json=INVALID)
        return _parallel(output, expected, calls)
    if not calls:
        return _score(f"no tool call: {error}", valid_json=INVALID)
    call = calls[0]
    tool = args = 0.0
    if call.name == task.expected_tool:
        tool = W_TOOL
        matched, misses, extra = arg_diff(task.expected_args, call.args)
        n = len(task.expected_args)
        args = W_ARGS * (matched / n if n else 1.0) - EXTRA_ARG_COST * len(extra)
        args = min(W_ARGS, max(0.0, args))
        why = f"right tool, {matched}/{n} args"
        notes = misses + [f"extra {e!r}" for e in extra]
        if notes:
            why += f" ({'; '.join(notes)})"
    else:
        why = f"wrong tool {call.name!r} (expected {task.expected_tool!r})"
    return _judged(output, why, tool, args)


def _tool_error(output: Any) -> str:
    for obs in getattr(output, "observations", None) or []:
        if isinstance(obs, dict) and obs.get("error"):
            return f" ({obs['error']})"
    return ""
