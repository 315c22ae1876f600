"""What a trajectory row keeps beyond the text: each turn's exact token ids and sampling log-probs, the parse
error, and the hints that let the store keep a step's shared prefix once.

The token trace is what makes a stored episode reusable without re-tokenising its text (export, the dry run,
a resume): one `{"prompt_ids", "completion_ids", "logprobs"}` per assistant turn, the ids the update
trained on (`workbench.rollout.turn_tokens` builds a later turn's prompt from the earlier ids).
"""

from __future__ import annotations

from typing import Any

from workbench.rollout.prompt import common_prefix_len
from workbench.rollout.runner import Rollout
from workbench.types import Output, Task
from workbench.verifiers.metrics import classify


def token_trace(rollout: Rollout) -> list[dict[str, list[Any]]]:
    """One entry per sampled assistant turn: its prompt ids, completion ids and sampling log-probs."""
    return [
        {
            "prompt_ids": list(seg.prompt_ids),
            "completion_ids": list(seg.completion.token_ids),
            "logprobs": [float(x) for x in seg.completion.logprobs],
        }
        for seg in rollout.segments
    ]


def outcome(output: Output, task: Task) -> dict[str, Any]:
    """The classification (workbench.verifiers.metrics.classify) plus why the reply was not a call, if it
    was not (the trajectory view shows it; the failure shares group by it)."""
    return {**classify(output, task), "parse_error": getattr(output, "parse_error", None)}


def _common_messages(rows: list[dict[str, Any]]) -> int:
    """How many leading messages every row shares (the harness: system prompt, example), each row keeping
    at least its last message."""
    msgs = [r["messages"] for r in rows]
    n = min(len(m) for m in msgs) - 1
    for i in range(max(0, n)):
        if any(m[i] != msgs[0][i] for m in msgs):
            return i
    return max(0, n)


def add_sharing_hints(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set `prefix_messages` and `token_prefix_len` on rows inserted together (a step, an eval batch): the
    leading messages and first-prompt ids they all share, which the store keeps once."""
    if not rows:
        return rows
    shared_msgs = _common_messages(rows)
    firsts = [r["token_trace"][0]["prompt_ids"] for r in rows if r.get("token_trace")]
    shared_ids = common_prefix_len(firsts) if len(firsts) == len(rows) else 0
    for r in rows:
        r["prefix_messages"] = shared_msgs
        if r.get("token_trace"):
            r["token_prefix_len"] = shared_ids
    return rows
