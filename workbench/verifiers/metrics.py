"""Per-output classification behind the seed metrics and the UI's failure shares.

One function decides what "valid JSON", "wrong tool", "wrong args" and "unsafe" mean, so the eval, the
step metrics and the UI never disagree. valid_json is strict (the whole reply, fences aside, is the JSON
object), unlike the reward's lenient parse: it measures whether the model emits clean calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from workbench.domains.calendar.compare import norm
from workbench.envs.parse import parse_tool_call
from workbench.envs.tool_parsers import WRONG_WRAPPER
from workbench.types import Output, Task
from workbench.verifiers.tool_call import expected_calls, made_no_call, state_items, tool_calls_of

FLAGS = ("valid_json", "parsed", "correct_tool", "correct_args", "success", "unsafe", "wrong_wrapper")


def classify(output: Output, task: Task) -> dict[str, bool]:
    """valid_json (every reply that made a call is strictly one JSON object; a final plain-text reply that
    ends a multi-turn episode does not count against it), parsed (lenient), correct_tool, correct_args (all
    expected args, no extras; multi-turn: final state == expected), success (tool + args, nothing unsafe).
    No-call tasks: right when no call was made (and a plain reply is not invalid JSON). Parallel tasks: the
    same calls, in any order. Native-format replies are valid when their own parser took them whole.
    wrong_wrapper: no call was taken, but the reply held a well-formed one in another wrapper (a ```json fence,
    bare JSON where tags are expected: `tool_parsers.misplaced_call`), a format failure of its own."""
    calls, error = tool_calls_of(output)
    # set only when true, like the task-family marks: outcomes stored without it read as False
    wrapper = (
        {"wrong_wrapper": True}
        if not calls and isinstance(error, str) and error.startswith(WRONG_WRAPPER)
        else {}
    )
    expected = expected_calls(task)
    unsafe = bool(getattr(output, "unsafe", None))
    parallel = bool(getattr(task, "expected_calls", None))
    if getattr(output, "tool_format", "json") == "native" or parallel:
        strict = bool(calls) and error is None
    else:
        replies = agent_replies(output)
        judged = replies[: len(calls)] if calls and len(replies) > len(calls) else replies
        strict = all(parse_tool_call(reply, strict=True)[0] is not None for reply in judged)
    if task.expected_state is None and not expected:  # the right answer is no call
        right = made_no_call(calls, error)
        return {
            "valid_json": right or strict,
            "parsed": right or bool(calls),
            "correct_tool": right,
            "correct_args": right,
            "success": right and not unsafe,
            "unsafe": unsafe,
            "no_call_task": True,
            **wrapper,
        }
    if task.expected_state is None and parallel:
        want = Counter(name for name, _ in expected)
        got = Counter(c.name for c in calls)
        correct_tool = want == got
        correct_args = correct_tool and Counter((n, norm(a)) for n, a in expected) == Counter(
            (c.name, norm(c.args)) for c in calls
        )
        return {
            "valid_json": strict,
            "parsed": bool(calls),
            "correct_tool": correct_tool,
            "correct_args": correct_args,
            "success": correct_args and not unsafe,
            "unsafe": unsafe,
            "parallel_task": True,
            **wrapper,
        }
    if task.expected_state is not None:
        correct_tool = any(c.name == task.expected_tool for c in calls)
        correct_args = state_items(getattr(output, "state", None)) == state_items(task.expected_state)
    else:
        correct_tool = bool(calls) and calls[0].name == task.expected_tool
        correct_args = correct_tool and norm(calls[0].args) == norm(task.expected_args)
    return {
        "valid_json": strict,
        "parsed": bool(calls),
        "correct_tool": correct_tool,
        "correct_args": correct_args,
        "success": correct_tool and correct_args and not unsafe,
        "unsafe": unsafe,
        **wrapper,
    }


def agent_replies(output: Output) -> list[str]:
    """The agent's own replies, without the harness's example turn: one per tool call, plus the final
    non-call reply if the episode ended on one. A bare Output (no messages) is its own one reply."""
    turns = len(getattr(output, "tool_calls", None) or []) + (
        1 if getattr(output, "parse_error", None) else 0
    )
    said = [
        m.get("content", "") for m in getattr(output, "messages", None) or [] if m.get("role") == "assistant"
    ]
    return said[-turns:] if said and turns else [str(output)]


def aggregate(rows: Iterable[dict[str, bool]]) -> dict[str, float]:
    """Rates of each flag plus the failure shares the UI shows; "n" is the number of outputs. The shares are
    apart: invalid_json (no call taken, and none in another wrapper either), wrong_wrapper (a well-formed call in
    the wrong wrapper), wrong_tool (a call, the wrong tool), wrong_args (the right tool, wrong arguments)."""
    rows = list(rows)
    n = len(rows)
    rates: dict[str, float] = {"n": float(n)}
    for flag in FLAGS:
        rates[flag] = sum(bool(r.get(flag)) for r in rows) / n if n else 0.0
    rates["invalid_json"] = (
        sum(not r.get("parsed") and not r.get("wrong_wrapper") for r in rows) / n if n else 0.0
    )
    rates["wrong_tool"] = (
        sum(r.get("parsed", False) and not r.get("correct_tool") for r in rows) / n if n else 0.0
    )
    rates["wrong_args"] = (
        sum(r.get("correct_tool", False) and not r.get("correct_args") for r in rows) / n if n else 0.0
    )
    for kind in ("no_call_task", "parallel_task"):  # the families' own success, when there are any
        mine = [r for r in rows if r.get(kind)]
        if mine:
            name = kind.removesuffix("_task")
            rates[f"{name}_n"] = float(len(mine))
            rates[f"{name}_success"] = sum(bool(r.get("success")) for r in mine) / len(mine)
    return rates
